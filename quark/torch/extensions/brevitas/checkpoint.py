"""The quantized checkpoints ``quark-brevitas quantize`` and ``train`` write, read from Python.

A checkpoint holds the config (either flavour, as ``to_dict`` writes it), where the float model's
factory is, the quantized ``state_dict`` and, from ``train``, where training stands (epoch,
optimizer and schedule, for ``--resume``)::

    from quark.torch.extensions.brevitas.api import load_checkpoint

    qmodel = load_checkpoint("q.pt", build())   # build(): the float model, as --model gave it

(``load_checkpoint`` is in ``api``: it quantizes ``build()`` with the checkpoint's config.)
"""

from __future__ import annotations

import zipfile
from typing import Any

import torch
from torch import nn

from quark.torch.extensions.brevitas.cli.configs import FLAVOURS
from quark.torch.quantization.files import atomic_path

__all__ = ["CHECKPOINT_FORMAT", "FLAVOURS", "checkpoint_config", "read_checkpoint", "write_checkpoint"]

CHECKPOINT_FORMAT = "quark-brevitas-checkpoint/1"


def write_checkpoint(path: str, config: Any, qmodel: nn.Module, **extra: Any) -> None:
    """``config`` and ``qmodel``'s state at ``path`` (atomically: a failed save leaves no truncated
    file); ``extra`` entries (the model's origin, training state) are stored beside them."""
    flavour = next((name for name, cls in FLAVOURS.items() if isinstance(config, cls)), None)
    if flavour is None:
        raise TypeError(f"write_checkpoint: config of type {type(config).__name__}; expected one of {list(FLAVOURS.values())}")
    state = {
        "format": CHECKPOINT_FORMAT,
        "flavour": flavour,
        "config": config.to_dict(),
        "state_dict": {k: v.detach().cpu() for k, v in qmodel.state_dict().items()},
        **extra,
    }
    with atomic_path(path) as temporary:
        torch.save(state, temporary)


def read_checkpoint(path: str) -> dict[str, Any]:
    """The checkpoint's contents (``torch.load(weights_only=True)``), checked to be one."""
    if not zipfile.is_zipfile(path):
        raise ValueError(f"{path}: not a file written by torch.save")
    state = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"{path}: not a checkpoint written by quark-brevitas quantize / train")
    return state


def checkpoint_config(state: dict[str, Any]) -> Any:
    """The config a checkpoint's contents record."""
    return FLAVOURS[state["flavour"]].from_dict(state["config"])
