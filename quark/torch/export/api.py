"""AMD Quark's export API for PyTorch, on the extension's exporter: ``export_onnx``,
``export_safetensors`` / ``import_model_from_safetensors``, ``save_params`` / ``load_params`` and
Quark's earlier ``ModelExporter``, with Quark's signatures and file names.

Orchestration only: the ONNX graph is the extension's verified QDQ export
(:class:`quark.torch.extensions.brevitas.api.ModelExporter`: executed in ONNX Runtime and compared
with torch, the target device's checks included), the tensors of the files come from
:mod:`quark.torch.extensions.brevitas._backend.export.checkpoints`. A file is reloaded into the model
the same config builds from the float model (``ModelQuantizer(config).quantize_model(model,
calibrate=False)``), which is why ``load_params`` and ``import_model_from_safetensors`` take the
float model. Every argument is honoured or refused, naming it, its value and what is allowed.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

from quark.common.utils.log import ScreenLogger
from quark.torch.export.config.config import ExporterConfig, JsonExporterConfig
from quark.torch.extensions.brevitas._backend.calibrate import require_calibrated
from quark.torch.extensions.brevitas._backend.export import checkpoints
from quark.torch.extensions.brevitas._backend.export.onnx_graph import printable
from quark.torch.extensions.brevitas._backend.rewrite.exported import copy_model
from quark.torch.extensions.brevitas.api import ModelExporter as _OnnxExporter
from quark.torch.extensions.brevitas.api import ModelQuantizer
from quark.torch.extensions.brevitas.cli.configs import FLAVOURS
from quark.torch.quantization.config.type import QuantizationMode
from quark.torch.quantization.files import atomic_path, write_text
from quark.torch.quantization.plan import CONFIG_ATTRIBUTE
from quark.torch.quantization.quark013_api import QuarkFeatureRefused, refuse, refused_function

__all__ = [
    "ExporterConfig",
    "JsonExporterConfig",
    "ModelExporter",
    "QuantizationMode",
    "ScreenLogger",
    "export_gguf",
    "export_onnx",
    "export_safetensors",
    "import_model_from_safetensors",
    "load_params",
    "save_params",
]

logger = logging.getLogger(__name__)

#: the file ``export_onnx`` writes in its ``output_dir``, as Quark names it
ONNX_FILE = "quark_model.onnx"
#: the files of ``export_safetensors``
SAFETENSORS_FILE, CONFIG_FILE = "model.safetensors", "config.json"
#: this package's marker in the files it writes (format and version)
FILE_FORMAT = {"writer": "quark-brevitas", "version": 1}

export_gguf = refused_function(__name__, "export_gguf")


def export_onnx(
    model: nn.Module,
    output_dir: str | Path,
    input_args: Any,
    opset_version: int | None = None,
    input_names: list[str] | None = None,
    output_names: list[str] | None = None,
    verbose: bool = False,
    do_constant_folding: bool = True,
    operator_export_type: Any = None,
    uint4_int4_flag: bool = False,
    dynamo: bool = False,
):
    """Write the quantized model's QDQ ONNX graph to ``<output_dir>/quark_model.onnx`` (Quark's file
    name), execute it in ONNX Runtime on ``input_args`` and compare it with the model; returns the
    export report (``print(report)``: the largest difference, in output LSBs).

    Args:
        model: the quantized model (from ``ModelQuantizer``, frozen or not); unchanged.
        output_dir: the directory (created when missing).
        input_args: example inputs: a tensor or a tuple of tensors (optionally ending with a dict of
            keyword inputs).
        opset_version: None for the default (17; the IPU target needs 17).
        input_names, output_names: the graph's names, one per input / output (default: the forward's
            parameter names; ``output``).
        verbose: True also logs the written graph's nodes (INFO).
        do_constant_folding: only True (the QDQ graph is written with its constants folded).
        operator_export_type: None or ``torch.onnx.OperatorExportTypes.ONNX`` (standard operators).
        uint4_int4_flag: only False: 4-bit tensors are written as int8 QuantizeLinear with a Clip to the
            4-bit range (QCDQ), which ONNX Runtime runs.
        dynamo: use torch's dynamo exporter.
    """
    _require_dir(output_dir, "export_onnx")
    _only("export_onnx", "do_constant_folding", do_constant_folding, (True,), "the QDQ graph is written with its constants folded")
    _only(
        "export_onnx",
        "uint4_int4_flag",
        uint4_int4_flag,
        (False,),
        "4-bit tensors are written as int8 QuantizeLinear with a Clip to the 4-bit range (QCDQ), which ONNX Runtime runs",
    )
    if operator_export_type not in (None, torch.onnx.OperatorExportTypes.ONNX):
        raise ValueError(
            f"export_onnx(operator_export_type={operator_export_type!r}): only torch.onnx.OperatorExportTypes.ONNX "
            "(standard operators, which the verification runs in ONNX Runtime)"
        )
    path = os.path.join(output_dir, ONNX_FILE)
    report = _OnnxExporter(path, opset_version=opset_version, dynamo=dynamo).export_onnx_model(
        model, input_args, input_names=input_names, output_names=output_names
    )
    if verbose:
        logger.info("%s", printable(path))
    return report


def export_safetensors(
    model: nn.Module,
    output_dir: str | Path,
    custom_mode: str = "quark",
    weight_format: str | None = None,
    pack_method: str = "reorder",
) -> None:
    """Export the quantized model in Quark's format: ``<output_dir>/model.safetensors`` (per quantized
    layer its weight's integers or dequantized values, ``weight_scale``, ``weight_zero_point``,
    ``input_scale`` / ``output_scale`` and their zero points; the rest of the model's state) and
    ``<output_dir>/config.json`` (the model's own config for a Hugging Face model, with
    ``quantization_config``: the quantization config, ``"quant_method": "quark"`` and the export
    options). Any ``nn.Module`` (Quark: Hugging Face models only). Integer weight formats; a model with
    block or minifloat weights is refused naming the layers (``save_params`` stores any format).
    :func:`import_model_from_safetensors` restores the model bit for bit.

    Args:
        custom_mode: only ``"quark"`` (Quark's ``"awq"`` / ``"fp8"`` layouts serve vLLM / AutoAWQ).
        weight_format: ``"real_quantized"`` (the default) or ``"fake_quantized"``.
        pack_method: ``"reorder"`` or ``"order"`` (4-bit weights packed in int32).
    """
    _require_dir(output_dir, "export_safetensors")
    _only("export_safetensors", "custom_mode", custom_mode, ("quark",), "Quark's awq / fp8 layouts serve vLLM and AutoAWQ")
    options = JsonExporterConfig(weight_format=weight_format or "real_quantized", pack_method=pack_method)
    config = _config_of(model, "export_safetensors")
    require_calibrated(model, "export_safetensors")
    refused = checkpoints.refused_layers(model)
    if refused:
        raise ValueError(
            f"export_safetensors: these layers' weights are not on an integer grid: {', '.join(refused)}; their scales come "
            "from the weight's blocks, which a dequantized weight does not reproduce. Save them with save_params "
            "(the quantized model's own state, any format, reloaded bit for bit)"
        )
    tensors = checkpoints.quark_tensors(copy_model(model), options.weight_format, options.pack_method)
    model_config = model.config.to_dict() if hasattr(getattr(model, "config", None), "to_dict") else {}
    quantization_config = {
        **config.to_dict(),
        "quant_method": "quark",
        "export": {**vars(options)},
        "config_flavour": _flavour(config),
        "format": FILE_FORMAT,
    }
    os.makedirs(output_dir, exist_ok=True)
    _save_tensors(tensors, os.path.join(output_dir, SAFETENSORS_FILE))
    write_text(os.path.join(output_dir, CONFIG_FILE), json.dumps({**model_config, "quantization_config": quantization_config}, indent=2))
    logger.info("exported %d tensors to %s", len(tensors), output_dir)


def import_model_from_safetensors(
    model: nn.Module | None,
    model_dir: str,
    multi_device: bool = False,
    trust_remote_code: bool = False,
    attn_implementation: str = "eager",
    device: str = "cuda",
    multi_gpu: str | bool | None = False,
) -> nn.Module:
    """The quantized model of :func:`export_safetensors`' files in ``model_dir``, built from ``model`` (the
    float model: any ``nn.Module``; its weights need not be loaded, the file's replace them) and
    returned in eval mode, bit for bit the exported one.

    ``model=None`` (Quark builds a Hugging Face skeleton from ``config.json``), ``multi_device`` and
    ``multi_gpu`` are refused; ``trust_remote_code``, ``attn_implementation`` and ``device`` serve only
    ``model=None`` in Quark and are not read here (the model stays on its device).
    """
    if model is None:
        raise QuarkFeatureRefused(
            "import_model_from_safetensors(model=None): building a Hugging Face model skeleton from config.json is not "
            "supported; pass the float model (e.g. AutoModelForCausalLM.from_config(config), or your nn.Module)"
        )
    if multi_device or multi_gpu:
        raise QuarkFeatureRefused(
            f"import_model_from_safetensors(multi_device={multi_device!r}, multi_gpu={multi_gpu!r}): spreading a model over "
            "several devices is not supported; load it on one device (False)"
        )
    from safetensors.torch import load_file

    with open(os.path.join(model_dir, CONFIG_FILE)) as file:
        quantization_config = json.load(file).get("quantization_config")
    if not isinstance(quantization_config, dict) or quantization_config.get("format") != FILE_FORMAT:
        raise ValueError(
            f"import_model_from_safetensors: {model_dir}/{CONFIG_FILE} has no quantization_config written by this package's "
            "export_safetensors (Quark's own files hold Quark's quantized layers, which are not Brevitas')"
        )
    options = JsonExporterConfig(**quantization_config["export"])
    config_data = {k: v for k, v in quantization_config.items() if k not in ("export", "config_flavour", "format")}
    qmodel = _rebuild(quantization_config["config_flavour"], config_data, model)
    checkpoints.load_quark_tensors(qmodel, load_file(os.path.join(model_dir, SAFETENSORS_FILE)), options.weight_format, options.pack_method)
    return qmodel.eval()


def save_params(
    model: nn.Module,
    model_type: str,
    args: tuple[Any, ...] | None = None,
    kwargs: dict[str, Any] | None = None,
    export_dir: Path | str = tempfile.gettempdir(),
    quant_mode: QuantizationMode = QuantizationMode.eager_mode,
    compressed: bool = False,
    reorder: bool = True,
) -> None:
    """Save the quantized model's config and parameters, as Quark names the files:
    ``<export_dir>/<model_type>.json`` and ``<model_type>.safetensors`` in eager mode,
    ``<export_dir>/<model_type>_quantized.pth`` in ``fx_graph_mode``. :func:`load_params` restores the
    model bit for bit.

    The files hold the config and the quantized model's whole state (any format), not a
    ``torch.export`` program (Brevitas' quantizers do not pass ``torch.export``: a data-dependent branch in
    ``brevitas.quant_tensor``); ``args`` / ``kwargs``, Quark's example inputs for that program, are run
    through the model and their outputs kept in the file, which ``load_params`` checks the reloaded
    model against.

    Args:
        compressed: only False (real-quantized weights: ``export_safetensors``).
        reorder: Quark's packing order of compressed weights; not used when ``compressed`` is False.
    """
    _only("save_params", "compressed", compressed, (False,), "real-quantized weights are written by export_safetensors")
    mode = _mode(quant_mode, "save_params")
    config = _config_of(model, "save_params")
    header = {
        "format": FILE_FORMAT,
        "model_type": model_type,
        "quant_mode": mode.name,
        "config_flavour": _flavour(config),
        "quantization_config": config.to_dict(),
        "frozen": not any(p.requires_grad for n, p in model.named_parameters() if "_quant." in n),
    }
    require_calibrated(model, "save_params")
    tensors = checkpoints.state_tensors(model) | _examples(model, args, kwargs)
    os.makedirs(export_dir, exist_ok=True)
    if mode is QuantizationMode.eager_mode:
        write_text(os.path.join(export_dir, f"{model_type}.json"), json.dumps(header, indent=2))
        _save_tensors(tensors, os.path.join(export_dir, f"{model_type}.safetensors"))
    else:
        with atomic_path(os.path.join(export_dir, f"{model_type}_quantized.pth")) as written:
            torch.save({"header": json.dumps(header), "tensors": tensors}, written)
    logger.info("saved the quantized model's parameters to %s", export_dir)


def load_params(
    model: nn.Module | None = None,
    json_path: str = "",
    safetensors_path: str = "",
    pth_path: str = "",
    quant_mode: QuantizationMode = QuantizationMode.eager_mode,
    compressed: bool = False,
    reorder: bool = True,
) -> nn.Module:
    """The quantized model :func:`save_params` saved, built from ``model`` (the float model given to
    ``quantize_model``: a module or the ``torch.export`` graph), bit for bit, in eval mode (frozen again
    if it was). When the file holds example outputs (``save_params(..., args=...)``), the reloaded
    model's outputs on the example inputs must equal them bit for bit (else ``ValueError``).

    ``model=None`` is refused: the files hold parameters, not a program (see :func:`save_params`).
    """
    _only("load_params", "compressed", compressed, (False,), "save_params writes no compressed files here")
    mode = _mode(quant_mode, "load_params")
    if model is None:
        raise QuarkFeatureRefused(
            "load_params(model=None): this package's files hold the config and the quantized parameters, not a "
            "torch.export program (Brevitas' quantizers do not pass torch.export); pass the float model: "
            "load_params(model, ...)"
        )
    if mode is QuantizationMode.eager_mode:
        if not (json_path and safetensors_path):
            raise ValueError("load_params(quant_mode=eager_mode): needs json_path and safetensors_path (save_params' two files)")
        from safetensors.torch import load_file

        with open(json_path) as file:
            header = json.load(file)
        tensors = load_file(safetensors_path)
    else:
        if not pth_path:
            raise ValueError("load_params(quant_mode=fx_graph_mode): needs pth_path (save_params' <model_type>_quantized.pth)")
        saved = torch.load(pth_path, weights_only=True)
        header, tensors = json.loads(saved["header"]), saved["tensors"]
    if header.get("format") != FILE_FORMAT:
        raise ValueError(f"load_params: {json_path or pth_path} was not written by this package's save_params")
    examples = {k: tensors.pop(k) for k in [k for k in tensors if k.startswith(EXAMPLE)]}
    qmodel = _rebuild(header["config_flavour"], header["quantization_config"], model)
    qmodel.load_state_dict(tensors)
    if header.get("frozen"):
        ModelQuantizer.freeze(qmodel)
    _check_examples(qmodel.eval(), examples)
    return qmodel


class ModelExporter:
    """AMD Quark's earlier exporter: ``ModelExporter(config=ExporterConfig(...), export_dir=...)``, whose
    methods write into ``export_dir`` with the functions of this module.

    Not the extension's ``ModelExporter(export_path)`` (``quark.torch.extensions.brevitas.api``), which
    this one uses for ONNX."""

    def __init__(self, config: ExporterConfig, export_dir: str | Path = tempfile.gettempdir()) -> None:
        if not isinstance(config, ExporterConfig):
            raise TypeError(f"ModelExporter(config={config!r}): expected a quark.torch.export.config.config.ExporterConfig")
        self.config = config
        self.export_dir = export_dir

    def export_onnx_model(
        self,
        model: nn.Module,
        input_args: Any,
        input_names: list[str] | None = None,
        output_names: list[str] | None = None,
        uint4_int4_flag: bool = False,
    ):
        """``export_onnx(model, export_dir, input_args, ...)``."""
        return export_onnx(
            model, self.export_dir, input_args, input_names=input_names, output_names=output_names, uint4_int4_flag=uint4_int4_flag
        )

    def export_safetensors_model(self, model: nn.Module, quant_config: Any = None, custom_mode: str = "quark", **kwargs: Any) -> None:
        """``export_safetensors`` into ``export_dir`` with the config's ``weight_format`` and ``pack_method``;
        ``quant_config``, when given, must be the config the model was quantized with."""
        if kwargs:
            raise TypeError(f"ModelExporter.export_safetensors_model: unexpected arguments {sorted(kwargs)}")
        if quant_config is not None and quant_config != _config_of(model, "export_safetensors_model"):
            raise ValueError("ModelExporter.export_safetensors_model(quant_config=...): not the config the model was quantized with")
        json_config = self.config.json_export_config
        export_safetensors(model, self.export_dir, custom_mode, json_config.weight_format, json_config.pack_method)

    def export_quark_model(self, model: nn.Module, quant_config: Any = None, custom_mode: str = "quark") -> None:
        """Quark's json + pth format: refused (Quark replaced it by its safetensors format)."""
        raise QuarkFeatureRefused(
            "ModelExporter.export_quark_model: Quark's json + pth format is superseded, in Quark too, by its safetensors "
            "format; use export_safetensors_model (or save_params for any format)"
        )

    def export_gguf_model(self, model: nn.Module, tokenizer_path: str | Path, model_type: str) -> None:
        """GGUF: refused (llama.cpp's LLM format)."""
        export_gguf(model, self.export_dir, model_type, tokenizer_path)


def __getattr__(name: str) -> Any:
    refuse(__name__, name)


# -- helpers ------------------------------------------------------------------------------------------


def _only(function: str, field: str, value: Any, allowed: tuple[Any, ...], why: str) -> None:
    if value not in allowed:
        raise ValueError(f"{function}({field}={value!r}) is not supported ({why}); allowed: {', '.join(map(repr, allowed))}")


def _require_dir(output_dir: Any, function: str) -> None:
    if not isinstance(output_dir, (str, os.PathLike)):
        raise TypeError(f"{function}(output_dir={output_dir!r}): expected a directory path")
    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
        raise NotADirectoryError(f"{function}(output_dir={os.fspath(output_dir)!r}): exists and is not a directory")


def _mode(quant_mode: Any, function: str) -> QuantizationMode:
    if not isinstance(quant_mode, QuantizationMode):
        raise TypeError(f"{function}(quant_mode={quant_mode!r}): expected {[f'QuantizationMode.{m.name}' for m in QuantizationMode]}")
    return quant_mode


def _config_of(model: nn.Module, function: str) -> Any:
    config = getattr(model, CONFIG_ATTRIBUTE, None)
    if config is None:
        raise ValueError(f"{function}(model=...): not a model ModelQuantizer.quantize_model returned (it records its config)")
    return config


def _flavour(config: Any) -> str:
    return next(name for name, cls in FLAVOURS.items() if isinstance(config, cls))


def _rebuild(flavour: str, config_data: dict[str, Any], model: nn.Module) -> nn.Module:
    """The quantized model the file's config builds from ``model``, uncalibrated (the file's state follows)."""
    config = FLAVOURS[flavour].from_dict(config_data)
    quark_logger = logging.getLogger("quark")
    level = quark_logger.level
    quark_logger.setLevel(logging.ERROR)  # what quantizing said, it said when the model was made
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ModelQuantizer(config).quantize_model(model, calibrate=False, progress=False, check_algorithms=False)
    finally:
        quark_logger.setLevel(level)


def _save_tensors(tensors: dict[str, torch.Tensor], path: str) -> None:
    from safetensors.torch import save_file

    with atomic_path(path) as written:
        save_file(tensors, written)


def _flat(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in _flat(item)]
    if isinstance(value, dict):
        return [t for item in value.values() for t in _flat(item)]
    return []


#: keys of the example inputs and outputs in save_params' files
EXAMPLE = "__example__."


def _examples(model: nn.Module, args: Any, kwargs: dict[str, Any] | None) -> dict[str, torch.Tensor]:
    """The example inputs (tensors only) and the model's outputs on them, under :data:`EXAMPLE` keys."""
    if args is None and not kwargs:
        return {}
    positional = args if isinstance(args, (tuple, list)) else () if args is None else (args,)
    if not all(isinstance(a, torch.Tensor) for a in positional) or not all(isinstance(v, torch.Tensor) for v in (kwargs or {}).values()):
        raise TypeError("save_params(args=..., kwargs=...): example inputs must be tensors (a tuple, and a dict of keyword tensors)")
    training = model.training
    with torch.no_grad():
        output = model.eval()(*positional, **(kwargs or {}))
    model.train(training)
    named = {f"{EXAMPLE}arg.{i}": t for i, t in enumerate(positional)}
    named |= {f"{EXAMPLE}kwarg.{k}": v for k, v in (kwargs or {}).items()}
    named |= {f"{EXAMPLE}output.{i}": t for i, t in enumerate(_flat(output))}
    return {k: v.detach().cpu().contiguous().clone() for k, v in named.items()}


def _check_examples(model: nn.Module, examples: dict[str, torch.Tensor]) -> None:
    """The reloaded model's outputs on the saved example inputs equal the saved outputs, bit for bit."""
    def part(kind: str) -> dict[str, torch.Tensor]:
        return {k[len(EXAMPLE) + len(kind) + 1 :]: v for k, v in examples.items() if k.startswith(f"{EXAMPLE}{kind}.")}

    args, kwargs, outputs = part("arg"), part("kwarg"), part("output")
    if not outputs:
        return
    with torch.no_grad():
        got = _flat(model(*(args[str(i)] for i in range(len(args))), **kwargs))
    expected = [outputs[str(i)] for i in range(len(outputs))]
    if len(got) != len(expected) or not all(torch.equal(g.cpu(), e) for g, e in zip(got, expected, strict=False)):
        raise ValueError("load_params: the reloaded model's outputs on the saved example inputs differ from the saved ones")
