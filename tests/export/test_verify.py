"""Verification as part of the API: the written graph is executed and compared with torch; the
report gives the largest difference in output LSBs; beyond the tolerance the export raises."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from _shared.configs import A8_POF2, W8A8, W8A8_POF2, layer_config
from _shared.quantize import quantized_mlp
from onnx import TensorProto, helper, numpy_helper

from quark.torch.extensions.brevitas._backend.export import handlers, verify
from quark.torch.extensions.brevitas.api import ExportFormat, ExportVerificationError, ModelExporter
from quark.torch.quantization.config.config import QuantizationConfig, QuantizationSpec
from quark.torch.quantization.config.type import Dtype, RoundType, ScaleType
from quark.torch.quantization.observer import PerTensorMinMaxObserver

FORMATS = {"export_onnx_model": ExportFormat.qcdq, "export_qonnx_model": ExportFormat.qonnx}
W8A8_POF2_OUT = layer_config(weight=W8A8_POF2.global_quant_config.weight, input_tensors=A8_POF2, bias=W8A8_POF2.global_quant_config.bias, output_tensors=A8_POF2)


@pytest.mark.parametrize("method", FORMATS)
def test_pof2_graph_is_exact_and_reports_zero_lsb(onnx_path, method):
    qmodel = quantized_mlp(W8A8_POF2_OUT)
    report = getattr(ModelExporter(onnx_path), method)(qmodel, torch.randn(5, 12))
    (out,) = report.outputs
    assert report.exact and report.tolerance_lsb == 0
    assert out.lsb == qmodel[2].output_quant.scale().item() and out.diff_lsb == 0 and out.max_abs_diff == 0
    assert "0 LSB of" in str(report) and "PASS" in str(report)


def test_float_scale_graph_gets_one_lsb_and_float_outputs_a_relative_tolerance(onnx_path):
    qmodel, x = quantized_mlp(W8A8), torch.randn(5, 12)
    report = ModelExporter(onnx_path).export_onnx_model(qmodel, x)
    (out,) = report.outputs
    assert not report.exact and report.tolerance_lsb == 1
    assert out.lsb is None and out.diff_lsb is None and "(float output)" in out.describe()
    assert out.allowed == pytest.approx(verify.FLOAT_RTOL * max(1.0, qmodel(x).abs().max().item()))


def _shift_outputs(monkeypatch, fmt, lsbs: float, lsb: float):
    run = verify.RUNNERS[fmt]
    monkeypatch.setitem(verify.RUNNERS, fmt, lambda model, feeds: [o + lsbs * lsb for o in run(model, feeds)])


@pytest.mark.parametrize("method", FORMATS)
def test_difference_beyond_tolerance_raises_with_the_report(onnx_path, monkeypatch, method):
    qmodel = quantized_mlp(W8A8_POF2_OUT)
    lsb = qmodel[2].output_quant.scale().item()
    _shift_outputs(monkeypatch, FORMATS[method], 2, lsb)
    with pytest.raises(
        ExportVerificationError,
        match=r"(?s)differs from the torch model beyond 0 LSB \(exact graph\).*= 2 LSB of",
    ) as info:
        getattr(ModelExporter(onnx_path), method)(qmodel, torch.randn(5, 12))
    assert info.value.report.max_diff_lsb == pytest.approx(2) and not info.value.report.passed


def test_tolerance_can_be_widened(onnx_path, monkeypatch):
    qmodel = quantized_mlp(W8A8_POF2_OUT)
    _shift_outputs(monkeypatch, ExportFormat.qcdq, 2, qmodel[2].output_quant.scale().item())
    report = ModelExporter(onnx_path).export_onnx_model(qmodel, torch.randn(5, 12), tolerance_lsb=3)
    assert report.passed and report.max_diff_lsb == pytest.approx(2)


def test_verification_catches_brevitas_stock_qonnx_rounding(onnx_path, monkeypatch):
    """Brevitas' own QONNX handlers export floor-rounded activations as ROUND: verification fails.
    Ours (the default) take the rounding from the spec and match exactly."""
    from brevitas.export.onnx.qonnx.manager import QONNXManager

    floor = QuantizationSpec(
        dtype=Dtype.int8,
        observer_cls=PerTensorMinMaxObserver,
        scale_type=ScaleType.pof2,
        round_method=RoundType.floor,
    )
    qmodel = quantized_mlp(layer_config(input_tensors=floor, output_tensors=A8_POF2))
    x = torch.randn(64, 12)
    assert ModelExporter(onnx_path).export_qonnx_model(qmodel, x).passed
    monkeypatch.setitem(handlers.MANAGERS, (ExportFormat.qonnx, False), QONNXManager)
    with pytest.raises(ExportVerificationError, match=r"output 'output' \[64, 4\]: max \|diff\|"):
        ModelExporter(onnx_path).export_qonnx_model(qmodel, x)


def test_a_graph_that_does_not_run_is_a_verification_error(onnx_path, monkeypatch):
    def broken(model, feeds):
        raise RuntimeError("kernel missing")

    monkeypatch.setitem(verify.RUNNERS, ExportFormat.qcdq, broken)
    with pytest.raises(
        ExportVerificationError, match=r"does not run in onnxruntime: RuntimeError: kernel missing"
    ):
        ModelExporter(onnx_path).export_onnx_model(quantized_mlp(), torch.randn(2, 12))


# -- exactness of a graph, on hand-made graphs ---------------------------------------------------


def _graph(nodes, inits, out="y") -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, [2, 2])],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _qdq(scale: float, tail: list) -> onnx.ModelProto:
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"]),
        helper.make_node("DequantizeLinear", ["w", "s", "z"], ["wd"]),
        *tail,
    ]
    inits = {
        "s": np.float32(scale),
        "z": np.int8(0),
        "w": np.ones((2, 2), np.int8),
        "b": np.full(2, 0.1, np.float32),
    }
    return _graph(nodes, inits)


@pytest.mark.parametrize(
    "model, exact",
    [
        (
            _qdq(
                0.25, [helper.make_node("MatMul", ["d", "wd"], ["m"]), helper.make_node("Relu", ["m"], ["y"])]
            ),
            True,
        ),
        (_qdq(0.3, [helper.make_node("MatMul", ["d", "wd"], ["y"])]), False),  # scale not a power of two
        (_qdq(0.25, [helper.make_node("Softmax", ["d"], ["y"])]), False),  # inexact op
        (_qdq(0.25, [helper.make_node("Add", ["d", "b"], ["y"])]), False),  # float constant operand
        (_qdq(0.25, [helper.make_node("MatMul", ["x", "wd"], ["y"])]), False),  # unquantized input operand
    ],
)
def test_is_exact(model, exact):
    assert verify.is_exact(model) is exact


@pytest.mark.parametrize(
    "values, pof2", [([0.25, 2.0, 1.0], True), ([0.3], False), ([0.0], False), ([-0.5], False), ([], False)]
)
def test_is_pof2(values, pof2):
    assert verify.is_pof2(np.asarray(values, np.float32)) is pof2


def test_output_lsb_walks_through_shape_ops():
    model = _qdq(
        0.25, [helper.make_node("Flatten", ["d"], ["f"]), helper.make_node("Reshape", ["f", "shape"], ["y"])]
    )
    model.graph.initializer.append(numpy_helper.from_array(np.asarray([2, 2], np.int64), "shape"))
    assert verify.Graph(model).output_lsb("y") == 0.25
    assert verify.Graph(_qdq(0.25, [helper.make_node("Softmax", ["d"], ["y"])])).output_lsb("y") is None


def test_report_gives_the_difference_of_onnxruntime_as_deployed(onnx_path, caplog):
    """ORT's default optimizations fuse Q/DQ into integer kernels: on int4 QCDQ (Clip patterns) the
    outputs move by many LSBs although the graph as written matches exactly; the report says so."""
    from torch import nn

    from quark.torch.quantization.config.config import Config

    int4 = QuantizationSpec(dtype=Dtype.int4, observer_cls=PerTensorMinMaxObserver, scale_type=ScaleType.pof2)
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Conv2d(8, 8, 3), nn.ReLU(), nn.Flatten(), nn.Linear(128, 10)
    )
    from _shared.quantize import quantize

    cfg = Config(
        global_quant_config=QuantizationConfig(weight=int4, input_tensors=int4),
        layer_quant_config={"5": QuantizationConfig(output_tensors=A8_POF2)},
    )
    qmodel = quantize(cfg, model, [torch.randn(4, 3, 8, 8) for _ in range(4)])
    report = ModelExporter(onnx_path).export_onnx_model(qmodel, torch.randn(16, 3, 8, 8))
    assert report.max_abs_diff == 0  # the graph as written
    assert report.optimized_runtime_diff > 1 and "default graph optimizations differs" in caplog.text
    assert "ONNX Runtime with its default optimizations: max |diff|" in str(report)
    # the hint beside the number: which session option makes it exact, and why it differs
    assert "SessionOptions.graph_optimization_level = ORT_DISABLE_ALL runs the graph as written" in str(report)
    assert "fuse QuantizeLinear / DequantizeLinear pairs into integer kernels" in str(report)


def test_a_known_onnxruntime_optimizer_bug_is_worked_around_and_named():
    """A requantization (Q -> DQ -> Q -> DQ, other scales) before an Add: ONNX Runtime 1.25's
    DoubleQDQPairsRemover rewrites the scales with shape [1] and the QLinearAdd fusion rejects them;
    the deployed run disables that one optimizer, says so, and still computes the written graph."""
    import onnxruntime as ort

    z = numpy_helper.from_array(np.array(0, np.int8), "z")
    scales = [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in [("s1", 0.05), ("s2", 0.1), ("s3", 0.2)]]

    def qdq(x, s, out):
        return [
            helper.make_node("QuantizeLinear", [x, s, "z"], [out + "_q"]),
            helper.make_node("DequantizeLinear", [out + "_q", s, "z"], [out]),
        ]

    nodes = [*qdq("a", "s1", "a1"), *qdq("a1", "s2", "a2"), *qdq("b", "s2", "b2")]
    nodes += [helper.make_node("Add", ["a2", "b2"], ["sum"]), *qdq("sum", "s3", "y")]
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 8]) for n in ("a", "b", "y")]
    model = helper.make_model(helper.make_graph(nodes, "g", io[:2], io[2:], [*scales, z]), opset_imports=[helper.make_opsetid("", 17)])
    a, b = np.random.default_rng(0).normal(size=(2, 2, 8)).astype(np.float32)

    (produced,), bug = verify.run_onnxruntime_optimized(model, [a, b])
    if tuple(int(p) for p in ort.__version__.split(".")[:2]) <= (1, 25):
        assert bug is not None and bug.optimizer == "DoubleQDQPairsRemover" and "onnxruntime#28030" in str(bug)
    q = lambda x, s: np.clip(np.rint(x / s), -128, 127) * s  # QuantizeLinear -> DequantizeLinear
    expected = q(q(q(a, 0.05), 0.1) + q(b, 0.1), 0.2).astype(np.float32)
    assert np.max(np.abs(produced - expected)) <= 0.2 + 1e-6  # the fused integer kernels: within one output LSB


def _cpu_flags() -> set[str] | None:
    try:
        with open("/proc/cpuinfo") as info:
            return next((set(line.split(":", 1)[1].split()) for line in info if line.startswith("flags")), None)
    except OSError:
        return None


def test_saturating_int8_kernels_are_found_where_the_cpu_lacks_vnni():
    """ONNX Runtime's x86 int8 kernels sum product pairs in saturating 16 bits (``vpmaddubsw``) unless
    the CPU has VNNI: the probe must agree with the CPU's flags (x86 Linux only)."""
    flags = _cpu_flags()
    if not flags or "avx2" not in flags:
        pytest.skip("needs an x86 CPU's flags in /proc/cpuinfo")
    vnni = bool(flags & {"avx512_vnni", "avx_vnni", "amx_int8"})
    assert verify.integer_kernels_saturate() is (not vnni)
