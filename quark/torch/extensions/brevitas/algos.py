"""Algorithms of AMD Quark's Brevitas extension, by the names its scripts import.

Each has a ``name`` (Quark's display name) and ``apply(model, calib_loader=None) -> model``; put
them in a ``Config``'s ``pre_quant_opt_config`` (``Preprocess``, ``ActivationEqualization``) or
``algo_config`` (``GPTQ``, ``GPFQ``, ``GPFA2Q``, ``BiasCorrection``, ``CalibrateBatchNorm``).
Beyond AMD Quark, from Brevitas: ``HadamardRotation`` and ``MergeBatchNorm`` (``pre_quant_opt_config``) and ``Qronos``
(``algo_config``).
Those that need data raise ``ValueError`` without it. The configs are pure data (defined in
:mod:`quark.torch.quantization.config.algorithms`, so configs serialise without Brevitas); their
Brevitas implementations live in ``_backend/algorithms`` and load on first use.

Subclass :class:`PreQuantOptConfig` (runs on the float model) or :class:`AlgoConfig` (runs after
calibration) and override ``apply`` to add an algorithm of your own; the bases' own ``apply``
raises ``NotImplementedError``.
"""

from quark.torch.quantization.config.algorithms import (
    GPFA2Q,
    GPFQ,
    GPTQ,
    ActivationEqualization,
    AlgoConfig,
    BiasCorrection,
    CalibrateBatchNorm,
    HadamardRotation,
    MergeBatchNorm,
    Preprocess,
    PreQuantOptConfig,
    Qronos,
)

__all__ = [
    "GPFA2Q",
    "GPFQ",
    "GPTQ",
    "ActivationEqualization",
    "AlgoConfig",
    "BiasCorrection",
    "CalibrateBatchNorm",
    "HadamardRotation",
    "MergeBatchNorm",
    "PreQuantOptConfig",
    "Preprocess",
    "Qronos",
]
