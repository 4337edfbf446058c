"""What the command line reads: models, data, ONNX files and quantized checkpoints.

Every reader fails with a one-line ``UsageError`` naming the option, the value and what is
allowed; nothing here prints. Configs: :mod:`.configs`.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from quark.torch.examples.compat import declare_missing_torchvision_ops
from quark.torch.extensions.brevitas import checkpoint as checkpoints
from quark.torch.extensions.brevitas.checkpoint import write_checkpoint
from quark.torch.extensions.brevitas.cli.configs import FLAVOURS, build, load_config
from quark.torch.extensions.brevitas.cli.errors import UsageError, one_line

__all__ = [
    "FLAVOURS",
    "UsageError",
    "check_model_spec",
    "float_model_of",
    "import_object",
    "load_checkpoint",
    "load_config",
    "load_data",
    "load_model",
    "load_onnx",
    "save_checkpoint",
]

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff")
EXAMPLE_SPEC = "model.py:build (a file) or quark.torch.examples.digits:pretrained_cnn (a module)"


def _read(path: str, option: str, reader: Callable[[str], Any]) -> Any:
    if not os.path.isfile(path):
        raise UsageError(f"{option} {path}: {'a folder, not a file' if os.path.isdir(path) else 'file not found'}")
    try:
        return reader(path)
    except (ValueError, TypeError, OSError) as error:
        raise UsageError(f"{option} {path}: {one_line(error)}") from error


# -- models: module:attribute or path/to/file.py:attribute ------------------------------------------


def _split(spec: str, option: str) -> tuple[str, str]:
    where, sep, attribute = spec.rpartition(":")
    if not sep or not where or not attribute or not attribute.isidentifier():
        raise UsageError(f"{option} {spec!r}: expected module:attribute or path/to/file.py:attribute, e.g. {EXAMPLE_SPEC}")
    return where, attribute


def _is_file_spec(where: str) -> bool:
    return where.endswith(".py") or os.sep in where or "/" in where


def _import_file(path: str, option: str, spec: str):
    """The module in the file ``path``, imported under its own name with its folder importable."""
    path = os.path.abspath(path)
    if not os.path.isfile(path):
        raise UsageError(f"{option} {spec!r}: no file {path}")
    name = Path(path).stem
    loaded = sys.modules.get(name)
    if loaded is not None and os.path.abspath(getattr(loaded, "__file__", "") or "") == path:
        return loaded
    if not name.isidentifier() or loaded is not None:
        name = f"_quark_cli_{abs(hash(path))}"
    folder = os.path.dirname(path)
    if folder not in sys.path:
        sys.path.insert(0, folder)  # as `python file.py` does: the file's neighbours import
    module_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    try:
        module_spec.loader.exec_module(module)
    except BaseException as error:
        del sys.modules[name]
        if isinstance(error, KeyboardInterrupt):
            raise
        raise UsageError(f"{option} {spec!r}: importing {path} failed: {type(error).__name__}: {one_line(error)}") from error
    return module


def _import_module(name: str, option: str, spec: str):
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.append(os.getcwd())  # module:attribute finds modules in the current directory
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as error:
        if error.name and name.startswith(error.name):
            raise UsageError(
                f"{option} {spec!r}: no module {error.name!r} (neither installed nor in {os.getcwd()}); "
                f"a file is named by its path: path/to/{name.rpartition('.')[2]}.py:attribute"
            ) from error
        raise UsageError(f"{option} {spec!r}: importing {name} failed: {one_line(error)}") from error
    except Exception as error:  # the user's module failed on import
        raise UsageError(f"{option} {spec!r}: importing {name} failed: {type(error).__name__}: {one_line(error)}") from error


def import_object(spec: str, option: str) -> Any:
    """``module:attribute`` (the current directory importable) or ``path/to/file.py:attribute``.

    torchvision's missing operators are declared first (``declare_missing_torchvision_ops``), so that a
    file importing torchvision, timm or transformers loads beside the CPU torch."""
    declare_missing_torchvision_ops()
    where, attribute = _split(spec, option)
    module = _import_file(where, option, spec) if _is_file_spec(where) else _import_module(where, option, spec)
    try:
        return getattr(module, attribute)
    except AttributeError:
        public = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))[:8]
        raise UsageError(
            f"{option} {spec!r}: {where} has no attribute {attribute!r} (it has: {', '.join(public) or 'nothing callable'})"
        ) from None


def check_model_spec(spec: str, option: str = "--model") -> None:
    """The cheap checks of a model spec (its form, its file), before any work."""
    if os.path.isdir(spec):
        return
    where, _ = _split(spec, option)
    if _is_file_spec(where) and not os.path.isfile(where):
        raise UsageError(f"{option} {spec!r}: no file {os.path.abspath(where)}")


def origin_of(spec: str) -> dict[str, Any]:
    """How to import ``spec`` again from anywhere: the spec, and the file it was found in."""
    if os.path.isdir(spec):
        return {"spec": spec, "directory": os.path.abspath(spec)}
    where, attribute = _split(spec, "--model")
    if _is_file_spec(where):
        return {"spec": spec, "file": os.path.abspath(where), "attribute": attribute}
    module = sys.modules.get(where)
    return {"spec": spec, "module": where, "attribute": attribute, "file": getattr(module, "__file__", None)}


def load_model(spec: str, option: str = "--model") -> nn.Module:
    """A float model: ``module:factory`` / ``file.py:factory`` (called with no arguments; a module
    instance is taken as it is) or a transformers model directory."""
    if os.path.isdir(spec):
        declare_missing_torchvision_ops()  # transformers imports torchvision where installed
        try:
            from transformers import AutoModel
        except ImportError as error:
            raise UsageError(f"{option} {spec}: a model directory needs transformers ({error})") from error
        try:
            return AutoModel.from_pretrained(spec, local_files_only=True).eval()
        except (OSError, ValueError) as error:
            raise UsageError(f"{option} {spec}: not a transformers model directory: {one_line(error)}") from error
    factory = import_object(spec, option)
    if callable(factory) and not isinstance(factory, nn.Module):
        try:
            model = factory()
        except Exception as error:
            raise UsageError(f"{option} {spec}: calling it failed: {type(error).__name__}: {one_line(error)}") from error
    else:
        model = factory
    if not isinstance(model, nn.Module):
        raise UsageError(f"{option} {spec}: expected a torch.nn.Module (or a factory returning one), got {type(model).__name__}")
    return model.eval()


def _rebuild_model(origin: dict[str, Any], checkpoint: str) -> nn.Module:
    """The float model of a checkpoint: by the module name, else from the file recorded."""
    spec = origin["spec"]
    option = f"--checkpoint {checkpoint} (model {spec})"
    if "directory" in origin:
        return load_model(origin["directory"], option)
    attribute = origin["attribute"]
    if "module" in origin:
        try:
            return load_model(spec, option)
        except UsageError:
            if not (origin.get("file") and os.path.isfile(origin["file"])):
                raise
    file = origin.get("file")
    if not file or not os.path.isfile(file):
        raise UsageError(
            f"--checkpoint {checkpoint}: the model's factory {spec} was in {file}, which is gone; the checkpoint rebuilds "
            "the model by calling it: pass --model to say where it is now"
        )
    return load_model(f"{file}:{attribute}", option)


# -- data ------------------------------------------------------------------------------------------


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
        tensors = _read(path, "--data", lambda f: _torch_load(f, "--data"))
    else:
        raise UsageError(f"--data {path}: expected a .npz or .pt file, or a folder of images")
    if isinstance(tensors, torch.Tensor):
        if tensors.ndim == 0 or len(tensors) == 0:
            raise UsageError(f"--data {path}: no samples (shape {tuple(tensors.shape)}); the first axis counts the samples")
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

    try:
        with np.load(path, allow_pickle=False) as arrays:
            tensors = {k: torch.from_numpy(arrays[k]) for k in arrays.files}
    except (zipfile.BadZipFile, EOFError) as error:
        raise ValueError(f"not a .npz file ({error})") from None
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
        try:
            with Image.open(f) as image:
                array = np.asarray(image, dtype=np.float32) / 255.0
        except OSError as error:
            raise UsageError(f"--data {folder}: cannot read {f.name}: {one_line(error)}") from error
        arrays.append(array[None] if array.ndim == 2 else array.transpose(2, 0, 1))
    shapes = {a.shape for a in arrays}
    if len(shapes) != 1:
        raise UsageError(f"--data {folder}: images of different sizes {sorted(shapes)}; resize them to one size")
    return torch.from_numpy(np.stack(arrays))


def _torch_load(path: str, option: str) -> Any:
    """``torch.load(weights_only=True)``; a file that is not a torch file is one line."""
    if not zipfile.is_zipfile(path):
        raise ValueError(f"not a file written by torch.save ({_what_file(path)})")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # torch's own errors are paragraphs
        first = one_line(str(error).split("\n\n")[0])[:200]
        raise ValueError(f"torch.load refused it: {first}") from error


def _what_file(path: str) -> str:
    with open(path, "rb") as f:
        head = f.read(256)
    if head.startswith(b"PK"):
        return "a zip archive"
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        return "binary data of another kind"
    if path.endswith((".yaml", ".yml", ".json")) or ":" in text.split("\n")[0]:
        return "a text file, a config? configs go to quantize --config"
    return "a text file"


# -- ONNX files ------------------------------------------------------------------------------------


def load_onnx(path: str, option: str = "--onnx") -> Any:
    """The ONNX model at ``path``, checked (``safe_graph``) before anything runs it."""
    from quark.torch.extensions.brevitas._backend.export.safe_graph import UnsafeGraphError, load_checked

    def read(f: str) -> Any:
        try:
            return load_checked(f)
        except UnsafeGraphError as error:
            raise ValueError(f"refused: {'; '.join(error.problems)}") from error
        except Exception as error:  # protobuf's DecodeError and friends: not an ONNX file
            if type(error).__name__ in ("DecodeError", "RuntimeWarning") or "protobuf" in type(error).__module__:
                raise ValueError(f"not an ONNX file ({_what_file(f)}; protobuf: {one_line(error)})") from error
            raise

    return _read(path, option, read)


# -- checkpoints ----------------------------------------------------------------------------------


def save_checkpoint(
    path: str, model_spec: str, config: Any, qmodel: nn.Module, origin: dict[str, Any] | None = None, **training: Any
) -> None:
    """The config, the model's origin and the quantized state: enough to rebuild the model, from
    any directory (the origin records the file the factory came from); ``training``: where
    ``train`` stands (for ``--resume``)."""
    write_checkpoint(path, config, qmodel, model=model_spec, model_origin=origin or origin_of(model_spec), **training)


def read_checkpoint(path: str) -> dict[str, Any]:
    """The checkpoint's contents, checked to be one."""
    state = _read(path, "--checkpoint", lambda f: _torch_load(f, "--checkpoint"))
    if not isinstance(state, dict) or state.get("format") != checkpoints.CHECKPOINT_FORMAT:
        raise UsageError(f"--checkpoint {path}: not a checkpoint written by quark-brevitas quantize / train")
    return state


def load_checkpoint(path: str, model: str | None = None, state: dict[str, Any] | None = None) -> tuple[nn.Module, Any, str]:
    """The quantized model rebuilt from a checkpoint: (model, config, model spec). ``model``
    overrides the factory the checkpoint names (``--model``)."""
    state = state or read_checkpoint(path)
    config = build(FLAVOURS[state["flavour"]], state["config"], f"--checkpoint {path}")
    origin = origin_of(model) if model else state.get("model_origin") or origin_of(state["model"])
    float_model = load_model(model) if model else _rebuild_model(origin, path)
    try:
        from quark.torch.extensions.brevitas.api import load_checkpoint as rebuild

        qmodel = rebuild(state, float_model, config)
    except RuntimeError as error:
        raise UsageError(
            f"--checkpoint {path}: its state does not fit the model {origin['spec']} builds now (was the factory "
            f"changed?): {one_line(error)[:300]}"
        ) from error
    return qmodel, config, origin["spec"]


def float_model_of(path: str, model: str | None, state: dict[str, Any]) -> nn.Module:
    """The float model a checkpoint was quantized from, built again by its factory (``--model``)."""
    origin = origin_of(model) if model else state.get("model_origin") or origin_of(state["model"])
    return (load_model(model) if model else _rebuild_model(origin, path)).eval()


@contextlib.contextmanager
def removed_on_failure(path: str):
    """``path`` (a file or folder the command creates) is removed if the block fails and it was
    not there before."""
    existed = os.path.exists(path)
    try:
        yield
    except BaseException:
        if not existed and os.path.exists(path):
            import shutil

            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    os.remove(path)
        raise
