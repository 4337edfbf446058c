"""Execute an exported graph on the example inputs and compare it with the torch model.

Runtimes (:data:`RUNNERS`): QCDQ graphs run in ONNX Runtime with graph optimizations off, so the
graph is computed as written (ORT's optimizer fuses Q/DQ around Conv/Gemm into integer kernels:
measured 17 LSB at the output of a small int4 CNN, 0 with optimizations off; the report also gives
that deployed difference, :func:`run_onnxruntime_optimized`); QONNX graphs run in
``qonnx.core.onnx_exec.execute_onnx`` after qonnx's cleanup (``qonnx_fold.cleanup_model``) and shape
inference, as FINN consumes them.

Tolerance: outputs produced by a quantizer are compared in units of its step (LSB). A graph is
*exact* (:func:`is_exact`) when every value it computes is identical in any IEEE float32 runtime:
power-of-two scales and only operations that are exact on such grids. Exact graphs must match
bit for bit (0 LSB, and 0 for float outputs); others within 1 LSB (QDQ rounding of values that
float summation order moves across a rounding boundary), float outputs within
``FLOAT_RTOL * max(1, max|ref|)``.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx

from quark.torch.extensions.brevitas._backend.export.formats import ExportFormat
from quark.torch.extensions.brevitas._backend.export.onnx_graph import (
    DATA_MOVEMENT,
    EXACT_ARITHMETIC,
    SCALE_INPUT,
    Graph,
    is_pof2,
)

logger = logging.getLogger(__name__)

#: tolerance (in output LSBs) of exact graphs and of the others
EXACT_TOLERANCE_LSB, DEFAULT_TOLERANCE_LSB = 0.0, 1.0
#: relative tolerance of float results, against max(1, max|reference|): float (not quantized) outputs of
#: graphs that are not exact, and each FINN step against the QONNX graph (FINN folds scales, biases and
#: batch norm into thresholds in float arithmetic)
FLOAT_RTOL = 1e-5

# -- runtimes -------------------------------------------------------------------------------------


def _run_onnxruntime(
    model: onnx.ModelProto, inputs: Sequence[np.ndarray], optimized: bool = False, disabled: Sequence[str] = ()
) -> list[np.ndarray]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    level = "ORT_ENABLE_ALL" if optimized else "ORT_DISABLE_ALL"
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    options.log_severity_level = 3
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"], disabled_optimizers=list(disabled)
    )
    feeds = {i.name: x for i, x in zip(session.get_inputs(), inputs)}
    return session.run(None, feeds)


def execute_qonnx(model, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The outputs of a QONNX or FINN graph (a qonnx ``ModelWrapper``, run as it is) on ``inputs``,
    with qonnx's ``execute_onnx``. A graph of batch size 1 (FINN's) runs one sample at a time and
    the outputs are stacked. The one qonnx runner of the package: export verification, the FINN
    hand-off and FINN's dataflow steps all execute through it."""
    from quark.torch.extensions.brevitas._backend.qonnx_passes.execution import execute

    return execute(model, inputs)


def _run_qonnx(model: onnx.ModelProto, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """An exported QONNX file as FINN consumes it: after qonnx's cleanup and shape inference."""
    from qonnx.transformation.infer_shapes import InferShapes

    from quark.torch.extensions.brevitas._backend.qonnx_passes.wrapper import FastModelWrapper, cleanup_model

    return execute_qonnx(cleanup_model(FastModelWrapper(model)).transform(InferShapes()), inputs)


RUNNERS: dict[ExportFormat, Callable[[onnx.ModelProto, Sequence[np.ndarray]], list[np.ndarray]]] = {
    ExportFormat.qcdq: _run_onnxruntime,
    ExportFormat.qonnx: _run_qonnx,
}


def run(fmt: ExportFormat, model: onnx.ModelProto, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The graph's outputs on ``inputs`` in the format's runtime (:data:`RUNNERS`). A graph written for a
    fixed batch of B samples (a FINN graph's one, an export's example batch) runs on ``inputs`` of
    another batch B at a time, the last window filled up with its last sample, whose extra outputs are
    dropped (inference: each sample's outputs are its own)."""
    dims = model.graph.input[0].type.tensor_type.shape.dim if model.graph.input else ()
    fixed = dims[0].dim_value if dims and dims[0].HasField("dim_value") else 0
    count = len(inputs[0]) if inputs and np.ndim(inputs[0]) else 0
    if fixed < 1 or count == fixed or any(len(x) != count for x in inputs) or fixed == 1 and fmt is ExportFormat.qonnx:
        return RUNNERS[fmt](model, inputs)  # qonnx's runner takes a batch-1 graph sample by sample itself
    windows = []
    for start in range(0, count, fixed):
        window = [x[start : start + fixed] for x in inputs]
        short = fixed - len(window[0])
        if short:
            window = [np.concatenate([w, np.repeat(w[-1:], short, axis=0)]) for w in window]
        windows.append([out[: fixed - short] for out in RUNNERS[fmt](model, window)])
    return [np.concatenate(parts) for parts in zip(*windows)]


def max_diff(produced: np.ndarray, reference: np.ndarray) -> float:
    """Largest absolute difference in float64 (infinite where the shapes differ)."""
    if produced.shape != reference.shape:
        return math.inf
    return float(np.max(np.abs(produced.astype(np.float64) - reference.astype(np.float64)))) if reference.size else 0.0


def float_tolerance(reference: Sequence[np.ndarray], rtol: float = FLOAT_RTOL) -> float:
    """What a float result may differ from ``reference`` by: ``rtol * max(1, max|reference|)``."""
    largest = max((float(np.max(np.abs(r))) for r in reference if r.size), default=0.0)
    return rtol * max(1.0, largest)


@dataclass(frozen=True)
class RuntimeBug:
    """A known ONNX Runtime optimizer bug: the error it raises, the optimizer to disable, where it is fixed."""

    message: str
    optimizer: str
    reference: str

    def __str__(self) -> str:
        return f"ONNX Runtime's {self.optimizer} disabled (it fails with \"{self.message}\": {self.reference})"


#: ONNX Runtime optimizer bugs that stop a valid graph from loading with the default optimizations
ORT_OPTIMIZER_BUGS = (
    # a requantization (Q -> DQ -> Q -> DQ with other scales, e.g. an addition's output requantized to the next
    # addition's common input scale) is merged with its scale and zero point rewritten with shape [1], which the
    # QLinearAdd / QLinearAveragePool fusion that follows rejects
    RuntimeBug(
        "Scale and Zero-point must be a scalar",
        "DoubleQDQPairsRemover",
        "onnxruntime#28030, fixed by onnxruntime#28057 after 1.25",
    ),
)


def run_onnxruntime_optimized(
    model: onnx.ModelProto, inputs: Sequence[np.ndarray]
) -> tuple[list[np.ndarray], RuntimeBug | None]:
    """ONNX Runtime as deployed (default optimizations: Q/DQ fused into integer kernels); informative.

    Where the graph fails to load on a known optimizer bug (:data:`ORT_OPTIMIZER_BUGS`), it runs again
    with that one optimizer disabled; returns the outputs and the bug worked around (or None)."""
    try:
        return _run_onnxruntime(model, inputs, optimized=True), None
    except Exception as error:  # onnxruntime raises its own Fail / InvalidArgument types
        bug = next((b for b in ORT_OPTIMIZER_BUGS if b.message in str(error)), None)
        if bug is None:
            raise
        return _run_onnxruntime(model, inputs, optimized=True, disabled=[bug.optimizer]), bug


@functools.cache
def integer_kernels_saturate() -> bool:
    """Whether this machine's ONNX Runtime computes int8 convolutions with saturating 16-bit sums of
    product pairs (x86 CPUs with AVX2 but no VNNI: ``vpmaddubsw``; onnxruntime's quantization guide
    recommends ``reduce_range`` there). Measured, not read from CPU flags: a one-layer QDQ Conv whose
    pair sums (2 * 127 * 127) exceed int16, run with and without the graph optimizations that fuse it."""
    from onnx import TensorProto, helper, numpy_helper

    channels = 64
    constants = {
        "one": np.array(1.0, np.float32),
        "zero": np.array(0, np.int8),
        "w": np.full((1, channels, 1, 1), 127, np.int8),
        "out_scale": np.array(2.0**14, np.float32),  # 64 * 127 * 127 / 2^14 = 63: within int8
    }
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "one", "zero"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "one", "zero"], ["xd"]),
        helper.make_node("DequantizeLinear", ["w", "one", "zero"], ["wd"]),
        helper.make_node("Conv", ["xd", "wd"], ["c"]),
        helper.make_node("QuantizeLinear", ["c", "out_scale", "zero"], ["cq"]),
        helper.make_node("DequantizeLinear", ["cq", "out_scale", "zero"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "saturation_probe",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in constants.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)
    x = [np.full((1, channels, 4, 4), 127, np.float32)]
    return not np.array_equal(_run_onnxruntime(model, x)[0], _run_onnxruntime(model, x, optimized=True)[0])


def is_exact(model: onnx.ModelProto) -> bool:
    """Whether every graph output is computed identically by any float32 runtime.

    A value is *exact* when it is the same everywhere, and *on a grid* when it is an integer
    multiple of a power of two (so sums and products of such values do not round, barring
    overflow of float32's 24-bit mantissa). Graph inputs and initializers are exact; integer
    tensors and quantizer outputs with power-of-two scales are on a grid; arithmetic is exact
    only on grid values; data movement keeps both properties; anything else is neither.
    """
    graph = Graph(model)
    exact = {i.name for i in model.graph.input} | set(graph.constants) | {""}
    on_grid = {n for n, v in graph.constants.items() if np.issubdtype(v.dtype, np.integer)} | {""}
    for node in model.graph.node:
        inputs = list(node.input)
        if not all(i in exact for i in inputs):
            continue
        if node.op_type in SCALE_INPUT:
            scale = graph.scale(node)
            if scale is not None and is_pof2(scale):
                exact.update(node.output)
                on_grid.update(node.output)
        elif node.op_type == "MultiThreshold":  # integers: comparisons of exact values
            exact.update(node.output)
            on_grid.update(node.output)
        elif node.op_type == "Div" and is_pof2(np.abs(graph.constants.get(inputs[1], np.zeros(1)))):
            exact.update(node.output)  # a division by a power of two does not round
            if inputs[0] in on_grid:
                on_grid.update(node.output)
        elif node.op_type in EXACT_ARITHMETIC:
            scaled = node.op_type == "Mul" and all(  # a grid value times powers of two: a dequantization
                i in on_grid or (i in graph.constants and is_pof2(np.abs(graph.constants[i]))) for i in inputs
            )
            if scaled or all(i in on_grid for i in inputs):
                exact.update(node.output)
                on_grid.update(node.output)
        elif node.op_type in DATA_MOVEMENT:
            exact.update(node.output)
            if node.op_type == "Shape" or all(i in on_grid for i in inputs):
                on_grid.update(node.output)
            constant = graph.constants.get(node.output[0]) if node.op_type == "Constant" else None
            if constant is not None and np.issubdtype(constant.dtype, np.integer):
                on_grid.update(node.output)
    return all(o.name in exact for o in model.graph.output)


# -- the report -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class OutputCheck:
    """One graph output against the torch model's."""

    name: str
    shape: tuple[int, ...]
    max_abs_diff: float
    lsb: float | None  # step of the output quantizer; None when the output is not quantized
    allowed: float  # largest allowed |difference|

    @property
    def diff_lsb(self) -> float | None:
        # to 1e-4 LSB: a whole number of steps measured on float32 values is off by their rounding
        return None if self.lsb is None else round(self.max_abs_diff / self.lsb, 4)

    @property
    def passed(self) -> bool:
        return self.max_abs_diff <= self.allowed

    def describe(self) -> str:
        lsb = f" = {self.diff_lsb:.3g} LSB of {self.lsb:.6g}" if self.lsb is not None else " (float output)"
        return f"output {self.name!r} {list(self.shape)}: max |diff| {self.max_abs_diff:.6g}{lsb}, allowed {self.allowed:.6g}"


@dataclass(frozen=True)
class ExportReport:
    """What was written and how it compares with the torch model.

    ``verified`` is False when verification was switched off; ``passed`` then says nothing.
    """

    path: str
    format: ExportFormat
    exporter: str
    opset: int
    runtime: str
    verified: bool
    exact: bool = False
    tolerance_lsb: float = DEFAULT_TOLERANCE_LSB
    outputs: tuple[OutputCheck, ...] = field(default_factory=tuple)
    target_checks: tuple[str, ...] = ()  # checks of the target device the graph passed
    #: QCDQ: largest difference (in output LSBs, or absolute for float outputs) when ONNX Runtime
    #: runs the graph with its default optimizations, as deployed; informative, not checked
    optimized_runtime_diff: float | None = None
    #: the ONNX Runtime optimizer disabled to measure it, and why (:data:`ORT_OPTIMIZER_BUGS`), or None
    optimized_runtime_workaround: str | None = None
    #: this machine's ONNX Runtime saturates int8 products' pair sums (:func:`integer_kernels_saturate`), so a
    #: difference under its default optimizations is this machine's, not the graph's
    optimized_runtime_saturates: bool = False
    #: the quantizer-by-quantizer comparison (float operations between quantizers, rounded differently by
    #: torch and ONNX Runtime: ``replay.py``): quantizers replayed (0: none), (values one LSB apart, values),
    #: the largest quantizer difference in its LSBs (at most 1 to pass)
    replayed_quantizers: int = 0
    replay_flips: tuple[int, int] = (0, 0)
    replay_worst_lsb: float = 0.0

    @property
    def passed(self) -> bool:
        return self.verified and all(o.passed for o in self.outputs) and self.replay_worst_lsb <= 1

    @property
    def max_abs_diff(self) -> float:
        return max((o.max_abs_diff for o in self.outputs), default=0.0)

    @property
    def max_diff_lsb(self) -> float | None:
        lsbs = [o.diff_lsb for o in self.outputs if o.diff_lsb is not None]
        return max(lsbs) if lsbs else None

    def __str__(self) -> str:
        head = (
            f"{self.format.value} export {self.path} (opset {self.opset}, {self.exporter}); executed with "
            f"{self.runtime}: {'exact graph, ' if self.exact else ''}tolerance {self.tolerance_lsb:g} LSB -> "
            f"{'PASS' if self.passed else 'FAIL' if self.verified else 'not verified'}"
        )
        lines = [
            head,
            *("  " + o.describe() for o in self.outputs),
            *("  " + c for c in self.target_checks),
        ]
        if self.replayed_quantizers:
            flipped, values = self.replay_flips
            lines.append(
                f"  compared quantizer by quantizer (float operations between quantizers round differently in torch and "
                f"ONNX Runtime): {self.replayed_quantizers} activation quantizers fed the graph's inputs gave its values "
                f"within {self.replay_worst_lsb:g} LSB ({flipped:,} of {values:,} one LSB apart), each segment between "
                "them compared on the graph's integers"
            )
        if self.optimized_runtime_diff is not None:
            lines.append(
                f"  ONNX Runtime with its default optimizations: max |diff| {self.optimized_runtime_diff:.3g} "
                f"{'LSB' if any(o.lsb for o in self.outputs) else '(float output)'}"
                + (f"; {OPTIMIZED_RUNTIME_HINT}" if self.optimized_runtime_diff > 0 else "")
                + (f"; {SATURATION_HINT}" if self.optimized_runtime_saturates else "")
                + (f"; measured with {self.optimized_runtime_workaround}" if self.optimized_runtime_workaround else "")
            )
        return "\n".join(lines)


#: beside that difference where this machine's ONNX Runtime saturates (:func:`integer_kernels_saturate`)
SATURATION_HINT = (
    "on this machine ONNX Runtime's int8 kernels saturate 16-bit sums of product pairs (an x86 CPU without "
    "VNNI), so this difference is the machine's; a CPU with VNNI or the NPU computes the fused graph without it"
)

#: beside a difference under ONNX Runtime's default optimizations: why, and the option that removes it
OPTIMIZED_RUNTIME_HINT = (
    "informative, not a failure: ONNX Runtime's graph optimizations fuse QuantizeLinear / DequantizeLinear "
    "pairs into integer kernels that round differently (as an NPU runtime does); "
    "SessionOptions.graph_optimization_level = ORT_DISABLE_ALL runs the graph as written, which is what "
    "was verified above"
)


def compare(
    graph: Graph,
    produced: Sequence[np.ndarray],
    expected: Sequence[np.ndarray],
    names: Sequence[str],
    exact: bool,
    tolerance_lsb: float,
) -> tuple[OutputCheck, ...]:
    if len(produced) != len(expected):
        raise RuntimeError(f"the exported graph has {len(produced)} outputs, the torch model {len(expected)}")
    checks = []
    for name, got, ref in zip(names, produced, expected):
        if got.shape != ref.shape:
            raise RuntimeError(
                f"output {name!r}: the exported graph gives shape {got.shape}, torch {ref.shape}"
            )
        diff = float(np.max(np.abs(got.astype(np.float64) - ref.astype(np.float64)))) if ref.size else 0.0
        if math.isnan(diff):
            diff = math.inf
        lsb = graph.output_lsb(name)
        if lsb is not None:
            # a difference of whole LSBs carries the float32 rounding of both values: one ulp of the
            # largest output each (1e-6 of an LSB is less than an ulp once outputs exceed ~16 LSBs)
            ulps = 2 * float(np.spacing(np.float32(np.max(np.abs(ref))))) if ref.size else 0.0
            allowed = tolerance_lsb * lsb + (ulps if tolerance_lsb else 0.0)
        else:
            allowed = 0.0 if exact else FLOAT_RTOL * max(1.0, float(np.max(np.abs(ref))) if ref.size else 1.0)
        checks.append(OutputCheck(name, tuple(ref.shape), diff, lsb, allowed))
    return tuple(checks)
