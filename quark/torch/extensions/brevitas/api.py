"""``ModelQuantizer`` and ``ModelExporter``: the entry points of AMD Quark's Brevitas extension.

Orchestration only: resolve the config into a plan, build Brevitas layers from the plan, swap
them in, calibrate, run algorithms. The numerics live in ``_backend``.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterable
from typing import Any

from torch import nn

import quark.torch.extensions.brevitas._backend  # noqa: F401  (version check)
from quark.torch.extensions.brevitas import config as ext
from quark.torch.extensions.brevitas._backend.calibrate import add_calibrated_flags, static_act_proxies
from quark.torch.extensions.brevitas._backend.calibrate import calibrate as run_calibration
from quark.torch.extensions.brevitas._backend.export.exporter import PLANS_ATTRIBUTE
from quark.torch.extensions.brevitas._backend.export import (
    ExportFailedError,
    ExportFormat,
    ExportVerificationError,
    ModelExporter,
    TargetCheckError,
    UnsupportedExportError,
)
from quark.torch.extensions.brevitas._backend.mapping import SUPPORTED_LAYERS, build_layer, check_layer
from quark.torch.quantization import plan as planning
from quark.torch.quantization.config import config as main

__all__ = [
    "ModelQuantizer",
    "ModelExporter",
    "ExportFormat",
    "UnsupportedExportError",
    "TargetCheckError",
    "ExportFailedError",
    "ExportVerificationError",
]

logger = logging.getLogger(__name__)


class ModelQuantizer:
    """Quantize a PyTorch model as a Quark config says, with Brevitas.

    Accepts the main Quark config (``quark.torch.quantization.config.config.Config``) or the
    Brevitas extension's (``quark.torch.extensions.brevitas.config.Config``).

    Example::

        quant_model = ModelQuantizer(config).quantize_model(model, calib_loader)
        print(quantizer.summary())
    """

    def __init__(self, config: main.Config | ext.Config) -> None:
        if not isinstance(config, (main.Config, ext.Config)):
            raise TypeError(
                "ModelQuantizer(config): expected quark.torch.quantization.config.config.Config or "
                f"quark.torch.extensions.brevitas.config.Config, got {type(config).__name__}"
            )
        if isinstance(config, main.Config) and config.algo_config:
            names = [a.name for a in config.algo_config]
            raise NotImplementedError(
                f"Config.algo_config={names}: these algorithms are not available in this backend yet; "
                "remove them from algo_config"
            )
        if isinstance(config, main.Config) and config.quant_mode is not main.QuantizationMode.eager_mode:
            raise NotImplementedError(f"Config.quant_mode={config.quant_mode.name}: only eager_mode is available")
        self.config = config
        self.plans: list[planning.LayerPlan] = []

    def quantize_model(
        self,
        model: nn.Module,
        calib_loader: Iterable[Any] | None = None,
        *,
        num_calib_batches: int | None = None,
        progress: bool = True,
        inplace: bool = False,
        calibrate: bool = True,
    ) -> nn.Module:
        """Return the quantized model, calibrated and in eval mode.

        Args:
            model: the float model; left unchanged unless ``inplace``.
            calib_loader: a DataLoader or any iterable of tensors, tuples/lists (leading elements are
                the positional inputs) or dicts (keyword inputs). Needed when a static activation is
                quantized.
            num_calib_batches: use at most this many calibration batches.
            progress: show a progress bar during calibration.
            inplace: modify ``model`` itself instead of a copy.
            calibrate: False builds the quantized model without calibrating (no data needed), to
                load a quantized checkpoint into it; ``qat.uncalibrated_quantizers`` lists what
                is still uncalibrated.
        """
        if num_calib_batches is not None and num_calib_batches <= 0:
            raise ValueError(f"num_calib_batches={num_calib_batches}: must be a positive integer or None")
        plans = self._plan(model)  # validates everything before the model is touched
        if calibrate and calib_loader is None and _needs_calibration(plans):
            raise ValueError(
                "quantize_model: the config quantizes activations statically, which needs calibration data; "
                "pass calib_loader (or calibrate=False to load a quantized checkpoint afterwards)"
            )

        work = model if inplace else copy.deepcopy(model)
        pre_steps = self.config.pre_quant_opt_config
        for step in pre_steps:
            logger.info("applying %s", step.name)
            work = step.apply(work, calib_loader=calib_loader)
        if pre_steps:  # pre-processing may merge or add modules: plan the model it produced
            plans = self._plan(work)
        modules = dict(work.named_modules())
        replacements = {p.name: build_layer(p, modules[p.name]) for p in plans if p.quantized}
        for name, new in replacements.items():
            _set_submodule(work, name, new)
        self.plans = plans
        setattr(work, PLANS_ATTRIBUTE, plans)  # the exporter reads target_device from them

        add_calibrated_flags(work)
        if calibrate and static_act_proxies(work):
            run_calibration(work, calib_loader, num_batches=num_calib_batches, progress=progress)
        for step in getattr(self.config, "algo_config", None) or []:
            logger.info("applying %s", step.name)
            work = step.apply(work, calib_loader=calib_loader)
        logger.info("quantized %d layers", len(replacements))
        return work.eval()

    def _plan(self, model: nn.Module) -> list[planning.LayerPlan]:
        plans = planning.resolve(model, self.config, SUPPORTED_LAYERS)
        modules = dict(model.named_modules())
        for p in plans:
            check_layer(p, modules[p.name])
        return plans

    def summary(self) -> str:
        """Table of what each layer got, from the last ``quantize_model`` call."""
        return planning.format_plan(self.plans)


def _needs_calibration(plans: list[planning.LayerPlan]) -> bool:
    return any(p.specs[role] is not None and p.specs[role].needs_calibration for p in plans for role in planning.ACTIVATION_ROLES)


def _set_submodule(root: nn.Module, name: str, module: nn.Module) -> None:
    parent_name, _, child = name.rpartition(".")
    setattr(root.get_submodule(parent_name) if parent_name else root, child, module)
