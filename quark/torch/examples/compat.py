"""Keeping transformers importable beside an installed torchvision that cannot load.

transformers imports torchvision when it is installed. The registry's torchvision 0.28 is a CUDA
build: beside the CPU torch its C operators do not load, and its import then fails registering fake
kernels for two of them (``nms``, ``qnms``: "operator torchvision::nms does not exist"). Declaring
those two operators first lets it import (transformers, timm and the vision zoo then import
torchvision as usual); the model definitions used here (BERT, GPT-2, torchvision's and timm's CNNs)
use none of torchvision's compiled operators.
"""

from __future__ import annotations

import importlib.util

import torch

#: the operator library declared here, kept alive for the process
_DECLARED: list = []


def declare_missing_torchvision_ops() -> None:
    """Declare ``torchvision::nms`` / ``qnms`` if torchvision is installed and its C operators did not load."""
    if _DECLARED or importlib.util.find_spec("torchvision") is None:
        return
    try:
        torch.ops.torchvision.nms  # noqa: B018  (present when torchvision's C operators loaded)
    except (AttributeError, RuntimeError):
        library = torch.library.Library("torchvision", "DEF")
        library.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        library.define("qnms(Tensor qdets, Tensor qscores, float iou_threshold) -> Tensor")
        _DECLARED.append(library)
