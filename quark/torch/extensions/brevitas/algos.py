"""Algorithms of AMD Quark's Brevitas extension, by the names its scripts import.

Each has a ``name`` and ``apply(model, calib_loader=None) -> model``; put them in a ``Config``'s
``pre_quant_opt_config`` or ``algo_config``. The configs are pure data (defined in
:mod:`quark.torch.quantization.config.algorithms`, so configs serialise without Brevitas); their
Brevitas implementations live in ``_backend/algorithms`` and load on first use.

Subclass :class:`PreQuantOptConfig` (runs on the float model) or :class:`AlgoConfig` (runs after
calibration) and override ``apply`` to add an algorithm of your own.
"""

from quark.torch.quantization.config.algorithms import AlgoConfig, Preprocess, PreQuantOptConfig

__all__ = ["AlgoConfig", "PreQuantOptConfig", "Preprocess"]
