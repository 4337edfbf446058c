"""An hls4ml project from the package's QONNX file, compiled and checked against torch.

The QONNX graph is prepared as hls4ml's own QONNX tests prepare it (qonnx's cleanup, channels last,
Gemm to MatMul), every layer's accumulator and result types are set exactly (:mod:`.precision`),
hls4ml's frontend writes the HLS C++ project, ``compile()`` builds it with g++ and ``predict()`` runs
it on every input given; the outputs are compared with torch's. The firmware takes the network
input's quantized values (the input quantizer's grid, ``ap_ufixed<8,0>`` for pixels in [0, 1) at
8 bits): a float input converted to a fixed-point type is truncated, not rounded as the quantizer
rounds, so the host quantizes (:attr:`Hls4mlProject.input_type` says to which grid).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from quark.common.errors import FailedError
from quark.torch.extensions.brevitas._backend.export.errors import TargetCheckError
from quark.torch.extensions.brevitas._backend.targets.hls4ml.build_config import Hls4mlBuildConfig, IOType
from quark.torch.extensions.brevitas._backend.targets.hls4ml.precision import (
    Fixed,
    PrecisionError,
    Precisions,
    apply_quant,
    fused_products,
    input_quant,
    layer_precisions,
)

logger = logging.getLogger(__name__)

#: the files of a project directory
FILES = {
    "qonnx": "model.qonnx.onnx",  # the package's QONNX export, verified against torch
    "prepared": "model.hls4ml.onnx",  # what hls4ml's frontend reads (channels last, MatMul)
    "config": "hls4ml_config.json",  # the hls_config given to hls4ml, precisions included
    "project": "hls4ml_prj",  # hls4ml's HLS C++ project
    "input": "input.npy",  # the quantized inputs (channels last) the firmware was run on
    "expected": "expected_output.npy",  # torch's outputs on them
    "readme": "README.md",
}


class Hls4mlError(FailedError):
    """hls4ml refused the graph, its C++ did not compile, or the firmware differs from torch."""


@dataclass
class Hls4mlProject:
    """What :func:`build` made: the directory, the firmware's agreement with torch and its timings."""

    directory: str
    input_type: str  # the fixed-point type the firmware takes (the network input's quantizer)
    input_scale: float  # its grid: the host feeds the input quantizer's values (x / scale, rounded, clipped, x scale)
    samples: int
    max_abs_diff: float
    agreement: float  # fraction of samples whose arg max equals torch's (classification outputs)
    convert_s: float
    compile_s: float
    predict_s: float
    precisions: dict[str, dict[str, str]] = field(default_factory=dict)

    @property
    def exact(self) -> bool:
        return self.max_abs_diff == 0.0

    def to_json(self) -> dict:
        """The command line's ``--json`` of an hls4ml export."""
        return {**asdict(self), "exact": self.exact}

    def __str__(self) -> str:
        return (
            f"hls4ml project {self.directory}: {self.samples} samples, max |firmware - torch| {self.max_abs_diff:g}, "
            f"arg max agreement {self.agreement:.2%}; input {self.input_type}; "
            f"convert {self.convert_s:.1f} s, compile {self.compile_s:.1f} s, predict {self.predict_s:.1f} s"
        )


def require_hls4ml() -> None:
    try:
        import hls4ml  # noqa: F401
    except ImportError as error:
        raise Hls4mlError(
            "the hls4ml target needs hls4ml (pip install hls4ml==1.3.0; `make` installs it): " f"{error}"
        ) from error


def prepare(qonnx_path: str, hls4ml_pools: bool = True):
    """The QONNX graph as hls4ml's frontend reads it: cleaned, channels last (average pools too, unless
    ``hls4ml_pools`` is False: qonnx then still executes it), Gemm as MatMul."""
    import warnings

    from qonnx.core.modelwrapper import ModelWrapper
    from qonnx.transformation.channels_last import ConvertToChannelsLastAndClean
    from qonnx.transformation.gemm_to_matmul import GemmToMatMul
    from qonnx.util.cleanup import cleanup_model

    from quark.torch.extensions.brevitas._backend.targets.finn.origins import run_transform, tag_origins
    from quark.torch.extensions.brevitas._backend.targets.hls4ml.layout import (
        AveragePoolsChannelsLast,
        StaleTransposes,
    )

    model = ModelWrapper(qonnx_path)
    tag_origins(model)  # the torch module of each node, for the refusals (cleanup renames the nodes)
    model = cleanup_model(model)
    model = run_transform(model, ConvertToChannelsLastAndClean(make_input_channels_last=True))
    with warnings.catch_warnings():  # "only explicit support for version 9 of the Gemm node": opset 17's is alike
        warnings.filterwarnings("ignore", message="The GemmToMatMul transformation", category=UserWarning)
        model = model.transform(GemmToMatMul())
    model = cleanup_model(model).transform(StaleTransposes())
    if not hls4ml_pools:
        return model
    # last: qonnx has no channels-last AveragePool op to infer shapes with (hls4ml only parses it)
    return model.transform(AveragePoolsChannelsLast(), make_deepcopy=False, cleanup=False)


def hls_config(model, types: dict[str, dict[str, str]], fused: dict[str, Fixed], config: Hls4mlBuildConfig) -> dict:
    """hls4ml's ``hls_config`` for ``model``: its defaults per layer, the exact precisions on top."""
    import hls4ml

    with contextlib.redirect_stdout(io.StringIO()):  # hls4ml prints every layer it parses
        settings = hls4ml.utils.config.config_from_onnx_model(
            model, granularity="name", backend=config.backend, default_reuse_factor=config.reuse_factor
        )
    settings["Model"]["Strategy"] = config.strategy.value
    for name, layer in types.items():
        given = {"accum": layer["accum"]} if name in fused else layer  # a set result type stops the fusion
        settings["LayerName"].setdefault(name, {}).setdefault("Precision", {}).update(given)
    return settings


def _set_fused_results(firmware, fused: dict[str, Fixed]) -> None:
    """The exact result type of each Dense layer hls4ml fused from a product and its bias (it infers
    one from the bias's width otherwise: 33 bits for an int32 bias)."""
    from hls4ml.backends.fpga.fpga_types import APTypeConverter
    from hls4ml.model.types import FixedPrecisionType

    for name, fixed in fused.items():
        layer = firmware.graph.get(f"Dense_{name}")
        if layer is None:
            raise Hls4mlError(f"hls4ml did not make {name} and its bias one Dense layer (Dense_{name})")
        output = layer.get_output_variable().type  # already in the backend's ap_ types: convert the new one too
        output.precision = FixedPrecisionType(fixed.width, fixed.width - fixed.frac, fixed.signed)
        output.convert_precision(APTypeConverter())


def _typed(model) -> tuple[object, Precisions]:
    """``model`` with its padded max pools on unsigned inputs zero-padded (:mod:`.layout`), and its types."""
    from quark.torch.extensions.brevitas._backend.targets.hls4ml.layout import ZeroPaddedMaxPools

    try:
        precisions = Precisions(model)
        nodes = len(model.graph.node)
        unsigned = ZeroPaddedMaxPools(lambda tensor: not precisions.types[tensor].signed)
        model = model.transform(unsigned, make_deepcopy=False, cleanup=False)
        return model, precisions if len(model.graph.node) == nodes else Precisions(model)  # a Pad added: again
    except PrecisionError as error:
        raise TargetCheckError(f"the graph does not meet the hls4ml target:\n  {error}", [str(error)]) from error


def _streamed_pools(model, config: Hls4mlBuildConfig) -> list[str]:
    """The pools hls4ml's streamed pooling cannot compute: padded ones (max pools on unsigned inputs are
    zero-padded before) and overlapping windows; its C++ asserts against both, which aborts the whole
    process in ``predict()``."""
    from quark.torch.extensions.brevitas._backend.targets.finn.origins import named

    found = []
    for node in model.graph.node if config.io_type is IOType.io_stream else ():
        if node.op_type not in ("MaxPool", "AveragePool"):
            continue
        attributes = {a.name: list(a.ints) for a in node.attribute}
        kernel = attributes["kernel_shape"]
        strides = attributes.get("strides", [1] * len(kernel))  # ONNX's default
        if any(attributes.get("pads", ())):
            found.append(f"{named(model, node)}: padded on a signed input; io_type=io_stream")
        elif kernel != strides:
            found.append(f"{named(model, node)}: window {kernel} with stride {strides}; io_type=io_stream")
    return found


def _input_quant(model):
    quant = input_quant(model)
    if quant is None:
        raise Hls4mlError("the network input is not quantized: the hls4ml target needs input_tensors of GraphInput")
    return quant


def quantized_input(model, channels_last: np.ndarray) -> np.ndarray:
    """What the firmware is fed: the inputs through the graph's input Quant node, as qonnx executes it."""
    node = _input_quant(model)
    return apply_quant(node, channels_last, *(model.get_initializer(name) for name in node.input[1:4]))


def build(
    qonnx_path: str,
    inputs: np.ndarray,
    output_dir: str,
    config: Hls4mlBuildConfig,
    *,
    expected: np.ndarray,
) -> Hls4mlProject:
    """The hls4ml project of ``qonnx_path`` in ``output_dir``, compiled and run on ``inputs`` (network
    inputs as torch takes them, channels first; fed through the input quantizer) against torch's
    ``expected`` outputs on them."""
    require_hls4ml()
    import hls4ml

    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    model, precisions = _typed(prepare(qonnx_path))
    model.save(str(out / FILES["prepared"]))
    input_type = precisions.types[_input_quant(model).output[0]]  # the graph input's, fed quantized
    pools = _streamed_pools(model, config)
    if pools:
        raise TargetCheckError(
            "the graph does not meet the hls4ml target:\n  " + "\n  ".join(pools) + "\n  (hls4ml's streamed pooling "
            "takes windows equal to their stride, unpadded but after ReLU; io_type=io_parallel takes both)",
            pools,
        )
    fused = fused_products(model, precisions)
    types = layer_precisions(model, precisions, fused)
    project_dir = out / FILES["project"]
    try:
        settings = hls_config(model, types, fused, config)
        (out / FILES["config"]).write_text(json.dumps(settings, indent=1, default=str))
        with contextlib.redirect_stdout(io.StringIO()):
            firmware = hls4ml.converters.convert_from_onnx_model(
                model.model,
                output_dir=str(project_dir),
                project_name=config.project_name,
                backend=config.backend,
                io_type=config.io_type.value,
                part=config.part,
                clock_period=config.clock_period_ns,
                hls_config=settings,
            )
    except Exception as error:  # hls4ml's own refusals are plain Exceptions
        raise Hls4mlError(f"hls4ml's frontend refused {FILES['prepared']}: {type(error).__name__}: {error}") from error
    _set_fused_results(firmware, fused)
    converted = time.perf_counter()
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            firmware.compile()
    except Exception as error:
        raise Hls4mlError(f"the HLS C++ in {project_dir} did not compile: {type(error).__name__}: {error}") from error
    compiled = time.perf_counter()
    channels_last = np.ascontiguousarray(np.moveaxis(inputs, 1, -1) if inputs.ndim > 2 else inputs)
    channels_last = np.ascontiguousarray(quantized_input(model, channels_last).astype(np.float32))
    produced = np.asarray(firmware.predict(channels_last)).reshape(expected.shape)
    predicted = time.perf_counter()
    np.save(out / FILES["input"], channels_last)
    np.save(out / FILES["expected"], expected)
    diff = float(np.max(np.abs(produced.astype(np.float64) - expected.astype(np.float64)))) if expected.size else 0.0
    agreement = float(np.mean(produced.argmax(-1) == expected.argmax(-1))) if expected.ndim == 2 else float(diff == 0)
    project = Hls4mlProject(
        directory=str(out),
        input_type=input_type.hls(),
        input_scale=2.0**-input_type.frac,
        samples=len(inputs),
        max_abs_diff=diff,
        agreement=agreement,
        convert_s=converted - start,
        compile_s=compiled - converted,
        predict_s=predicted - compiled,
        precisions=types,
    )
    if not project.exact:
        from quark.torch.extensions.brevitas._backend.targets.hls4ml.trace import first_difference

        differing = produced.reshape(len(inputs), -1) != expected.reshape(len(inputs), -1)
        index = int(np.flatnonzero(differing.any(axis=1))[0])
        where = first_difference(firmware, prepare(qonnx_path, hls4ml_pools=False), channels_last[index])
        raise Hls4mlError(
            f"the compiled firmware in {project_dir} differs from torch: max |diff| {diff:g} over {len(inputs)} "
            f"samples (arg max agreement {agreement:.2%}); on sample {index} it "
            f"{where or 'agrees with qonnx layer by layer (the difference is between qonnx and torch)'}; "
            f"the precisions given to hls4ml are in {FILES['config']}"
        )
    (out / FILES["readme"]).write_text(readme(project, config))  # only for a firmware that equals torch
    logger.info("%s", project)
    return project


def readme(project: Hls4mlProject, config: Hls4mlBuildConfig) -> str:
    rows = "\n".join(f"| {name} | {types.get('accum', '')} | {types['result']} |" for name, types in project.precisions.items())
    stream = " (streams)" if config.io_type is IOType.io_stream else ""
    return f"""# hls4ml project

Written by quark-brevitas from `{FILES['qonnx']}` (the QONNX export, verified against torch).
`{FILES['project']}/` is hls4ml's HLS C++ project ({config.backend} backend, `{config.io_type.value}`{stream},
strategy {config.strategy.value}, reuse factor {config.reuse_factor}, part {config.part},
{config.clock_period_ns} ns clock).

## Checked here

The C++ was compiled with g++ (hls4ml's `compile()`) and run (`predict()`) on the {project.samples}
inputs in `{FILES['input']}`: max |firmware - torch| = {project.max_abs_diff:g} against
`{FILES['expected']}` (torch's outputs), arg max agreement {project.agreement:.2%}.

## The input

The firmware takes the network input's quantized values, type `{project.input_type}` (grid
{project.input_scale:g}): feed the input as the model's input quantizer makes it (`model.qonnx.onnx`'s
first Quant node: x / {project.input_scale:g} rounded by its rounding mode, clipped to the type's
range, times {project.input_scale:g}), channels last; `{FILES['input']}` holds such inputs. (A float
converted to a fixed-point type is truncated, not rounded as the quantizer rounds.)

## Synthesis (needs Vitis HLS)

```python
import hls4ml
model = hls4ml.converters.link_existing_project("{FILES['project']}")
model.build(csim=False, synth=True)
```

or in `{FILES['project']}/`: write `build_opt.tcl` as hls4ml's `build()` does, then
`vitis-run --tcl build_prj.tcl --mode hls`.

## Precisions (from the quantizers, exact)

| layer | accumulator | result |
|---|---|---|
{rows}
"""


@contextlib.contextmanager
def project_directory(path: str):
    """``path`` for a project: the files of a previous project there removed first (no stale firmware
    or README beside the new ones), and everything this build wrote removed if it fails (the directory
    too when it did not exist before)."""
    directory = Path(path)
    existed = directory.exists()

    def clear() -> None:
        for name in FILES.values():
            target = directory / name
            if target.is_dir():
                shutil.rmtree(target)
            elif target.exists():
                target.unlink()
        for rejected in directory.glob("*.rejected.onnx"):
            rejected.unlink()

    if existed:
        clear()
    try:
        yield
    except BaseException:
        if existed:
            clear()
        else:
            shutil.rmtree(directory, ignore_errors=True)
        raise


def as_inputs(values, name: str) -> np.ndarray:
    """A batch of inputs as a float32 array (from a tensor or array)."""
    array = values.detach().cpu().numpy() if hasattr(values, "detach") else np.asarray(values)
    if array.ndim < 2:
        raise ValueError(f"{name}: a batch of inputs, batch first; got shape {tuple(array.shape)}")
    return array.astype(np.float32)
