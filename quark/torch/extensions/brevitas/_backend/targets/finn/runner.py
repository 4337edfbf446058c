"""The package's runner of a FINN build: FINN's builder loop over the package's steps (:mod:`.steps`),
for where FINN's builder does not import (without Vivado: its simulator) and for the exporter.

From ``start_step`` (reading the model the step before it saved) to ``stop_step``, each step timed
and logged, the model saved after each with ``save_intermediate_models``; each step checks itself
against the build's verification files (:mod:`.checks`).
"""

from __future__ import annotations

import logging
import os
from typing import Any

from quark.torch.extensions.brevitas._backend.targets.finn.build_config import FinnBuildConfig
from quark.torch.extensions.brevitas._backend.targets.finn.checks import SOURCE
from quark.torch.extensions.brevitas._backend.targets.finn.errors import FinnConfigError

logger = logging.getLogger(__name__)


def load(path: str | os.PathLike):
    """A QONNX file as the steps take it, checked before qonnx reads it (``safe_graph``: standard ONNX
    and QONNX's ops only), its path recorded as the build's source."""
    from quark.torch.extensions.brevitas._backend.export.safe_graph import load_checked
    from quark.torch.extensions.brevitas._backend.targets.finn.sweeps import FinnModelWrapper

    model = FinnModelWrapper(load_checked(os.fspath(path)))
    model.set_metadata_prop(SOURCE, os.fspath(path))
    return model


def load_intermediate(path: str | os.PathLike):
    """A model a step of this build saved (FINN's hardware layers and partitions: not a QONNX file)."""
    from quark.torch.extensions.brevitas._backend.targets.finn.sweeps import FinnModelWrapper

    return FinnModelWrapper(os.fspath(path))


def run(model: Any, cfg: FinnBuildConfig) -> Any:
    """Run ``cfg``'s steps (from ``start_step`` to ``stop_step``) on ``model`` (a ``ModelWrapper``, or
    ``None`` with a ``start_step``: the model saved after the step before it is read); returns the last
    step's model."""
    from quark.torch.extensions.brevitas._backend.targets.finn.steps import DEFAULT_STEPS, STEPS, step_names

    names = step_names(cfg)
    every = DEFAULT_STEPS if cfg.steps is None else cfg.steps
    first = every.index(names[0]) if names else 0
    if first > 0:
        saved = cfg.intermediate_models_directory() / f"{every[first - 1]}.onnx"
        if not saved.is_file():
            raise FinnConfigError(
                f"start_step={cfg.start_step!r}: no model saved after {every[first - 1]!r} at {saved} "
                "(run the build before with save_intermediate_models=True)"
            )
        model = load_intermediate(saved)
    for name in names:
        model = STEPS[name](model, cfg)
        if cfg.save_intermediate_models:
            directory = cfg.intermediate_models_directory()
            directory.mkdir(parents=True, exist_ok=True)
            model.save(str(directory / f"{name}.onnx"))
    return model
