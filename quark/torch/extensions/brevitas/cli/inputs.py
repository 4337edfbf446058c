"""What the command line reads: configs, models, data and quantized checkpoints.

Every reader fails with a one-line ``UsageError`` naming the option, the value and what is
allowed; nothing here prints.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from quark.torch.extensions.brevitas import config as ext
from quark.torch.quantization.config import config as main
from quark.torch.quantization.files import atomic_path

#: checkpoint format written by ``quantize`` / ``train`` and read by ``train`` / ``export`` / ``verify``
CHECKPOINT_FORMAT = "quark-brevitas-checkpoint/1"
#: config flavour -> its Config class
FLAVOURS: dict[str, type] = {"quark": main.Config, "brevitas": ext.Config}
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff")


class UsageError(Exception):
    """A mistake in the command line or its files: reported in one line, exit status 2."""


def load_config(path: str, flavour: str = "auto") -> main.Config | ext.Config:
    """A config of either flavour from a YAML or JSON file (``flavour`` auto: the extension's when
    the file has a ``backend`` key or its specs a ``bit_width``, else the main API's)."""
    from quark.torch.quantization.config._fields import read_file

    data = _read(path, "--config", read_file)
    flavour = _flavour_of(data) if flavour == "auto" else flavour
    try:
        return FLAVOURS[flavour].from_dict(data)
    except (ValueError, TypeError) as error:
        raise UsageError(f"--config {path}: {' '.join(str(error).split())}") from error


def _flavour_of(data: dict[str, Any]) -> str:
    """The extension's when the file has its ``backend`` key, or has none of the main API's keys and
    its specs use ``bit_width``; else the main API's."""
    if "backend" in data:
        return "brevitas"
    if data.keys() & {"quant_mode", "layer_quant_config", "layer_type_quant_config", "exclude"}:
        return "quark"
    layer = data.get("global_quant_config")
    specs = [v for v in layer.values() if isinstance(v, dict)] if isinstance(layer, dict) else []
    return "brevitas" if any("bit_width" in spec for spec in specs) else "quark"


def _read(path: str, option: str, reader: Callable[[str], Any]) -> Any:
    if not os.path.isfile(path):
        raise UsageError(f"{option} {path}: file not found")
    try:
        return reader(path)
    except (ValueError, TypeError, OSError) as error:
        raise UsageError(f"{option} {path}: {' '.join(str(error).split())}") from error
    except Exception as error:  # the YAML / JSON parsers' own errors
        raise UsageError(f"{option} {path}: cannot parse: {' '.join(str(error).split())}") from error


def import_object(spec: str, option: str) -> Any:
    """``package.module:attribute`` -> the attribute (code the user names on the command line)."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise UsageError(f"{option} {spec!r}: expected module:attribute, e.g. quark.torch.examples.digits:pretrained_cnn")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise UsageError(f"{option} {spec!r}: cannot import {module_name}: {error}") from error
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise UsageError(f"{option} {spec!r}: {module_name} has no attribute {attribute!r}") from None


def load_model(spec: str) -> nn.Module:
    """A float model: ``module:factory`` (called with no arguments) or a transformers model directory."""
    if os.path.isdir(spec):
        try:
            from transformers import AutoModel
        except ImportError as error:
            raise UsageError(f"--model {spec}: a model directory needs transformers ({error})") from error
        try:
            return AutoModel.from_pretrained(spec, local_files_only=True).eval()
        except (OSError, ValueError) as error:
            raise UsageError(f"--model {spec}: not a transformers model directory: {error}") from error
    factory = import_object(spec, "--model")
    model = factory() if callable(factory) and not isinstance(factory, nn.Module) else factory
    if not isinstance(model, nn.Module):
        raise UsageError(f"--model {spec}: expected a torch.nn.Module (or a factory returning one), got {type(model).__name__}")
    return model.eval()


def load_data(path: str, batch_size: int) -> list[Any]:
    """Batches from a ``.npz`` / ``.pt`` file or a folder of images.

    ``.npz``: one array gives tensor batches; several named arrays give dict batches (keyword
    inputs such as ``input_ids`` and ``attention_mask``). ``.pt``: a tensor or a dict of tensors
    (loaded with ``weights_only=True``). A folder: its images, as float tensors in [0, 1] of shape
    (C, H, W) (they must share one size).
    """
    if batch_size <= 0:
        raise UsageError(f"--batch-size {batch_size}: must be a positive integer")
    p = Path(path)
    if p.is_dir():
        tensors: Any = _images(p)
    elif not p.is_file():
        raise UsageError(f"--data {path}: no such file or folder")
    elif p.suffix == ".npz":
        tensors = _read(path, "--data", _npz)
    elif p.suffix in (".pt", ".pth"):
        tensors = _read(path, "--data", lambda f: torch.load(f, map_location="cpu", weights_only=True))
    else:
        raise UsageError(f"--data {path}: expected a .npz or .pt file, or a folder of images")
    if isinstance(tensors, torch.Tensor):
        return list(torch.split(tensors, batch_size))
    if isinstance(tensors, dict) and tensors and all(isinstance(v, torch.Tensor) for v in tensors.values()):
        lengths = {len(v) for v in tensors.values()}
        if len(lengths) != 1:
            raise UsageError(f"--data {path}: arrays of different lengths {sorted(lengths)}; they must share the first axis")
        n = lengths.pop()
        return [{k: v[i : i + batch_size] for k, v in tensors.items()} for i in range(0, n, batch_size)]
    raise UsageError(f"--data {path}: expected a tensor or a dict of tensors, got {type(tensors).__name__}")


def _npz(path: str) -> Any:
    import numpy as np

    with np.load(path, allow_pickle=False) as arrays:
        tensors = {k: torch.from_numpy(arrays[k]) for k in arrays.files}
    if not tensors:
        raise ValueError("the file holds no arrays")
    return next(iter(tensors.values())) if len(tensors) == 1 else tensors


def _images(folder: Path) -> torch.Tensor:
    try:
        from PIL import Image
    except ImportError as error:
        raise UsageError(f"--data {folder}: reading images needs Pillow (pip install 'quark-brevitas[cli]')") from error
    import numpy as np

    files = sorted(f for f in folder.iterdir() if f.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        raise UsageError(f"--data {folder}: no images ({', '.join(IMAGE_SUFFIXES)}) in the folder")
    arrays = []
    for f in files:
        with Image.open(f) as image:
            array = np.asarray(image, dtype=np.float32) / 255.0
        arrays.append(array[None] if array.ndim == 2 else array.transpose(2, 0, 1))
    shapes = {a.shape for a in arrays}
    if len(shapes) != 1:
        raise UsageError(f"--data {folder}: images of different sizes {sorted(shapes)}; resize them to one size")
    return torch.from_numpy(np.stack(arrays))


# -- checkpoints ----------------------------------------------------------------------------------


def save_checkpoint(path: str, model_spec: str, config: Any, qmodel: nn.Module) -> None:
    """The config, the model's origin and the quantized state: enough to rebuild the model."""
    flavour = next(name for name, cls in FLAVOURS.items() if isinstance(config, cls))
    state = {
        "format": CHECKPOINT_FORMAT,
        "model": model_spec,
        "flavour": flavour,
        "config": config.to_dict(),
        "state_dict": qmodel.state_dict(),
    }
    with atomic_path(path) as temporary:  # a failed save never leaves a truncated checkpoint
        torch.save(state, temporary)


def load_checkpoint(path: str) -> tuple[nn.Module, Any, str]:
    """The quantized model rebuilt from a checkpoint: (model, config, model spec)."""
    from quark.torch.extensions.brevitas.api import ModelQuantizer

    state = _read(path, "--checkpoint", lambda f: torch.load(f, map_location="cpu", weights_only=True))
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        raise UsageError(f"--checkpoint {path}: not a checkpoint written by quark-brevitas quantize / train")
    config = FLAVOURS[state["flavour"]].from_dict(state["config"])
    qmodel = ModelQuantizer(config).quantize_model(load_model(state["model"]), calibrate=False, progress=False)
    qmodel.load_state_dict(state["state_dict"])
    return qmodel.eval(), config, state["model"]
