"""The FINN hand-off: QONNX exports of FINN-style networks pass qonnx cleanup, ConvertQONNXtoFINN
and Streamline with the outputs of the QONNX graph (which equals torch), on real digits."""

from __future__ import annotations

import copy

import numpy as np
import onnx
import pytest
import torch
from _shared.models import unit_batches
from _shared.quantize import quantized_on_unit_batches
from _shared.zoo import ZOO
from torch import nn

from quark.torch.extensions.brevitas._backend.targets.finn import interface as finn_interface
from quark.torch.extensions.brevitas.api import (
    FinnError,
    ModelExporter,
    ModelQuantizer,
    finn_handoff,
)
from quark.torch.extensions.brevitas.presets import finn
from quark.torch.quantization.config.config import Config, QuantizationConfig, QuantizationSpec
from quark.torch.quantization.config.type import (
    Dtype,
    QSchemeType,
    RoundType,
    ScaleType,
)
from quark.torch.quantization.observer import PerChannelMinMaxObserver, PerTensorMinMaxObserver

pytest.importorskip(
    "finn.transformation.qonnx.convert_qonnx_to_finn",
    reason="finn-plus is not installed (pip install --no-deps finn-plus==1.6.1; see docs/export.md)",
)


def _finn_config(
    weight_dtype: Dtype, act_dtype: Dtype, per_channel: bool, rounding: RoundType = RoundType.half_even
) -> Config:
    """FINN-friendly: unsigned activations (inputs in [0, 1], after ReLU), zero points 0, pof2 scales."""
    if per_channel:
        weight = QuantizationSpec(
            dtype=weight_dtype,
            observer_cls=PerChannelMinMaxObserver,
            qscheme=QSchemeType.per_channel,
            ch_axis=0,
        )
    else:
        weight = QuantizationSpec(
            dtype=weight_dtype, observer_cls=PerTensorMinMaxObserver, scale_type=ScaleType.pof2
        )
    act = QuantizationSpec(
        dtype=act_dtype,
        observer_cls=PerTensorMinMaxObserver,
        scale_type=ScaleType.pof2,
        round_method=rounding,
    )
    return Config(global_quant_config=QuantizationConfig(weight=weight, input_tensors=act))


CASES = {
    "tfc-w4a4": ("tfc", _finn_config(Dtype.int4, Dtype.uint4, per_channel=False)),
    "cnv-w4a4": ("cnv", _finn_config(Dtype.int4, Dtype.uint4, per_channel=True)),
    # on the 2-bit grid (step 1/4) digits pixels k/16 fall on rounding ties: round them as FINN does
    "tfc-w2a2": ("tfc", _finn_config(Dtype.int2, Dtype.uint2, per_channel=False, rounding=RoundType.round)),
}


@pytest.fixture(scope="module")
def digits():
    from quark.torch.examples import digits as data

    return data.load(seed=0)


def _quantized(case: str, digits):
    name, config = CASES[case]
    torch.manual_seed(0)
    calib = [x for x, _ in digits.loader("train", batch_size=64)][:4]
    qmodel = ModelQuantizer(config).quantize_model(ZOO[name].build().eval(), calib, progress=False)
    return qmodel, next(iter(digits.loader("test", batch_size=16)))[0]


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
def test_finn_convert_and_streamline_keep_the_outputs(tmp_path, digits, case):
    qmodel, x = _quantized(case, digits)
    path = tmp_path / f"{case}.onnx"
    report = ModelExporter(path).export_qonnx_model(qmodel, x)
    assert report.passed
    assert "Shape" not in {
        n.op_type for n in onnx.load(str(path)).graph.node
    }  # nn.Flatten, no dynamic shapes

    finn = finn_handoff(path, x)
    assert [s.name for s in finn.steps] == [
        "QONNX (cleaned, batch 1)", "ConvertQONNXtoFINN", "AbsorbClipIntoMultiThreshold", "streamline"
    ]  # fmt: skip
    converted, streamlined = finn.steps[1], finn.steps[3]
    assert "MultiThreshold" in converted.op_types and "Quant" not in converted.op_types
    assert {"MultiThreshold", "MatMul"} <= set(
        streamlined.op_types
    ) and "BatchNormalization" not in streamlined.op_types
    assert converted.max_abs_diff <= 1e-5 and streamlined.max_abs_diff <= 1e-5
    assert (tmp_path / f"{case}_finn.onnx").exists()


def test_finn_rounds_activation_ties_up_whatever_the_quant_node_says(tmp_path, digits):
    """FINN's ConvertQONNXtoFINN ignores Quant's rounding_mode: its thresholds sit at (k + 1/2) x step
    and MultiThreshold counts x >= threshold, i.e. ties round up. A half-even 2-bit activation on
    digits pixels (k/16 on a grid of step 1/4: ties at 2/16, 6/16, ...) then changes the outputs,
    and the hand-off names the step; RoundType.round (ties away from zero, up for x >= 0) matches."""
    config = _finn_config(Dtype.int2, Dtype.uint2, per_channel=False, rounding=RoundType.half_even)
    torch.manual_seed(0)
    calib = [x for x, _ in digits.loader("train", batch_size=64)][:4]
    qmodel = ModelQuantizer(config).quantize_model(ZOO["tfc"].build().eval(), calib, progress=False)
    assert qmodel[1].input_quant.scale().item() == 0.25
    x = next(iter(digits.loader("test", batch_size=16)))[0]
    assert ((x * 16) % 4 == 2).any()  # ties on the input grid
    path = tmp_path / "half_even.onnx"
    assert ModelExporter(path).export_qonnx_model(qmodel, x).passed
    with pytest.raises(
        FinnError, match=r"FINN step 'ConvertQONNXtoFINN' changed the outputs .*max \|diff\|"
    ):
        finn_handoff(path, x)


def test_finn_rejects_signed_relu_activations_and_names_the_step(tmp_path, digits):
    """FINN converts only unsigned Quant nodes after a ReLU (Xilinx/finn#1031): a signed config fails there."""
    config = _finn_config(Dtype.int2, Dtype.int2, per_channel=False)
    torch.manual_seed(0)
    calib = [x for x, _ in digits.loader("train", batch_size=64)][:2]
    qmodel = ModelQuantizer(config).quantize_model(ZOO["tfc"].build().eval(), calib, progress=False)
    x = next(iter(digits.loader("test", batch_size=4)))[0]
    path = tmp_path / "signed.onnx"
    assert ModelExporter(path).export_qonnx_model(qmodel, x).passed
    with pytest.raises(
        FinnError,
        match=r"FINN step 'ConvertQONNXtoFINN' failed .*unsigned and non-narrow Quant nodes for Relu",
    ):
        finn_handoff(path, x)


def test_the_handoff_absorbs_relu6_clips_into_thresholds(tmp_path):
    """ReLU6 + quantizer becomes Clip -> MultiThreshold in FINN; the hand-off folds the clip into
    the thresholds, so streamlining leaves an integer dataflow that computes what torch does."""
    pytest.importorskip("finn.transformation.qonnx.convert_qonnx_to_finn", reason="finn-plus is not installed")
    from qonnx.core.modelwrapper import ModelWrapper

    from quark.torch.extensions.brevitas._backend.export.verify import execute_qonnx
    from quark.torch.extensions.brevitas.api import finn_handoff

    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU6(), nn.Linear(8, 8), nn.ReLU6(), nn.Linear(8, 3))
    qmodel = quantized_on_unit_batches(finn(unsigned=("ReLU6",)), model)
    x = unit_batches(1)[0] * 8  # large enough to clip at 6
    ModelExporter(tmp_path / "m.onnx").export_qonnx_model(qmodel, x)
    integer = finn_interface.integer_input(tmp_path / "m.onnx", tmp_path / "int.onnx")
    x_int = np.clip(np.floor(x.numpy() / integer.scale + 0.5), 0, 255).astype(np.float32)
    report = finn_handoff(tmp_path / "int.onnx", torch.from_numpy(x_int))
    assert "Clip" in report.steps[1].op_types and "Clip" not in report.steps[2].op_types
    streamlined = ModelWrapper(report.path)
    assert finn_interface.float_operations(streamlined) == []
    out = execute_qonnx(streamlined, [x_int])[0]  # the hand-off's graph takes one sample at a time
    np.testing.assert_array_equal(out, qmodel(x).detach().numpy())


class _Residual(nn.Module):
    """conv-bn-relu, conv-bn, the sum with the first's output, relu, pool, linear: the residual
    addition's operands and sum are signed FINN-preset quantizers (half-up, MultiThreshold in QONNX)."""

    def __init__(self):
        super().__init__()
        self.a = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.b = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8))
        self.head = nn.Sequential(nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4))

    def forward(self, x):
        y = self.a(x)
        return self.head(y + self.b(y))


def test_the_handoff_takes_the_thresholds_of_signed_half_up_quantizers(tmp_path):
    """A signed half-up quantizer is exported as a MultiThreshold (handlers._SpecRounding). The
    pipeline's batch size 1 drops the value_info of its thresholds, which qonnx's renaming then
    skipped: FINN's first new MultiThreshold took the same tensor name ('Found multiple
    get_by_name matches' in ConvertQONNXtoFINN's tidy-up). The hand-off keeps the outputs."""
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(1)
    qmodel = ModelQuantizer(finn()).quantize_model(
        _Residual().eval(), [torch.rand(8, 3, 8, 8, generator=generator) for _ in range(2)], progress=False
    )
    x = torch.rand(4, 3, 8, 8, generator=generator)
    ModelExporter(tmp_path / "m.onnx").export_qonnx_model(qmodel, x)
    exported = [n.op_type for n in onnx.load(str(tmp_path / "m.onnx")).graph.node]
    assert exported.count("MultiThreshold") == 3  # the addition's two operands and its sum
    report = finn_handoff(tmp_path / "m.onnx", x)
    assert [s.max_abs_diff for s in report.steps] == [0.0] * len(report.steps)
    assert "Quant" not in report.steps[-1].op_types


def test_thresholds_rounded_in_one_sweep_as_finns_pass_rounds_them():
    """The pipeline's threshold rounding gives FINN's ``RoundAndClipThresholds`` graph (thresholds,
    their datatypes, every tensor's datatype), MultiThresholds on signed, unsigned and float inputs,
    in one sweep instead of FINN's pass per node."""
    from finn.transformation.streamline.round_thresholds import RoundAndClipThresholds
    from onnx import TensorProto, helper
    from qonnx.core.datatype import DataType
    from qonnx.core.modelwrapper import ModelWrapper

    from quark.torch.extensions.brevitas._backend.targets.finn.passes import round_thresholds_in_one_sweep

    inputs = {"a": "INT4", "b": "UINT8", "c": "FLOAT32"}
    nodes, outputs = [], []
    for k, name in enumerate(inputs):
        outputs.append(helper.make_tensor_value_info(f"y{k}", TensorProto.FLOAT, [1, 3]))
        nodes.append(
            helper.make_node(
                "MultiThreshold", [name, f"t{k}"], [f"y{k}"], domain="qonnx.custom_op.general", out_dtype="UINT2"
            )
        )
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 3]) for n in inputs], outputs
    )
    model = ModelWrapper(helper.make_model(graph))
    rng = np.random.default_rng(0)
    for k, (name, dtype) in enumerate(inputs.items()):
        model.set_tensor_datatype(name, DataType[dtype])
        model.set_initializer(f"t{k}", (rng.normal(size=(3, 3)) * 200).astype(np.float32))  # some beyond the ranges
    ours = model.transform(round_thresholds_in_one_sweep())
    finns = model.transform(RoundAndClipThresholds())
    for k in range(3):
        assert np.array_equal(ours.get_initializer(f"t{k}"), finns.get_initializer(f"t{k}"))
        assert ours.get_tensor_datatype(f"t{k}") == finns.get_tensor_datatype(f"t{k}")
    assert not np.array_equal(ours.get_initializer("t0"), model.get_initializer("t0"))  # something was rounded
    assert np.array_equal(ours.get_initializer("t2"), model.get_initializer("t2"))  # float input: left as it was
    assert [ours.get_tensor_datatype(f"y{k}") for k in range(3)] == [finns.get_tensor_datatype(f"y{k}") for k in range(3)]


def test_transposes_past_eltwise_in_one_sweep_rewrite_as_finns_pass():
    """Transposes before chains of Add / Mul with constants (channel-wise, scalar) moved in one call:
    the nodes FINN's ``MoveTransposePastEltwise`` leaves (in another order) and the same function."""
    from finn.transformation.streamline.reorder import MoveTransposePastEltwise
    from onnx import TensorProto, helper
    from qonnx.core.modelwrapper import ModelWrapper
    from qonnx.core.onnx_exec import execute_onnx
    from qonnx.transformation.infer_shapes import InferShapes

    from quark.torch.extensions.brevitas._backend.targets.finn.passes import (
        transposes_past_eltwise_in_one_sweep,
    )

    nodes, outputs = [], []
    for branch in range(2):
        x, prev = f"r{branch}", f"t{branch}"  # the pass drops its input's shape: not a graph input's
        nodes.append(helper.make_node("Relu", [f"x{branch}"], [x]))
        nodes.append(helper.make_node("Transpose", [x], [prev], perm=[0, 2, 3, 1]))
        for k, op in enumerate(("Mul", "Add", "Mul")[: 2 + branch]):
            out = f"y{branch}_{k}"
            nodes.append(helper.make_node(op, [prev, f"c{branch}_{k}"], [out]))
            prev = out
        outputs.append(helper.make_tensor_value_info(prev, TensorProto.FLOAT, [1, 4, 4, 3]))
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(f"x{b}", TensorProto.FLOAT, [1, 3, 4, 4]) for b in range(2)], outputs
    )
    model = ModelWrapper(helper.make_model(graph))
    rng = np.random.default_rng(0)
    for branch in range(2):
        for k in range(2 + branch):
            shape = (1, 1, 1, 3) if k != 1 else (1,)  # channel-wise (NHWC) and scalar constants
            model.set_initializer(f"c{branch}_{k}", rng.normal(size=shape).astype(np.float32))
    model = model.transform(InferShapes())
    inputs = {f"x{b}": rng.normal(size=(1, 3, 4, 4)).astype(np.float32) for b in range(2)}
    expected = execute_onnx(model, inputs)
    one_call, changed = transposes_past_eltwise_in_one_sweep().apply(copy.deepcopy(model))
    assert changed and [n.op_type for n in one_call.graph.node].count("Transpose") == 2
    assert all(one_call.find_direct_successors(n) is None for n in one_call.get_nodes_by_op_type("Transpose"))
    ours = model.transform(transposes_past_eltwise_in_one_sweep())
    finns = model.transform(MoveTransposePastEltwise())
    assert [n.op_type for n in ours.graph.node][-1] == "Transpose"  # something moved
    assert sorted(n.SerializeToString() for n in ours.graph.node) == sorted(n.SerializeToString() for n in finns.graph.node)
    assert all(np.array_equal(ours.get_initializer(t), finns.get_initializer(t)) for t in ours.get_all_tensor_names()
               if finns.get_initializer(t) is not None)
    got = execute_onnx(ours, inputs)
    assert all(np.allclose(got[k], v, rtol=1e-6) for k, v in expected.items())


def test_quant_weights_folded_in_one_sweep_as_finns_pass_folds_them():
    """Constant quantizers before MatMul / Add (scaled: FINN moves the scale behind them) and one of
    unit scale, folded in one call: the nodes, integer weights and datatypes FINN's
    ``FoldQuantWeights`` leaves, and the same function."""
    from finn.transformation.qonnx.fold_quant_weights import FoldQuantWeights
    from onnx import TensorProto, helper
    from qonnx.core.modelwrapper import ModelWrapper
    from qonnx.core.onnx_exec import execute_onnx
    from qonnx.transformation.infer_datatypes import InferDataTypes
    from qonnx.transformation.infer_shapes import InferShapes

    from quark.torch.extensions.brevitas._backend.targets.finn.passes import fold_quant_weights_in_one_sweep

    rng = np.random.default_rng(0)
    nodes, prev, constants = [], "x", {}
    for k, (op, scale) in enumerate([("MatMul", 0.05), ("Add", 0.25), ("MatMul", 1.0), ("MatMul", 0.125)]):
        shape = (4, 4) if op == "MatMul" else (1, 4)
        constants.update({f"w{k}": rng.normal(size=shape) * 4 * scale, f"s{k}": scale, f"z{k}": 0.0, f"b{k}": 4.0})
        quant = helper.make_node("Quant", [f"w{k}", f"s{k}", f"z{k}", f"b{k}"], [f"q{k}"], domain="qonnx.custom_op.general",
                                 signed=1, narrow=0, rounding_mode="ROUND")  # fmt: skip
        nodes += [quant, helper.make_node(op, [prev, f"q{k}"], [f"y{k}"])]
        prev = f"y{k}"
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [2, 4])],
    )  # fmt: skip
    model = ModelWrapper(helper.make_model(graph))
    for name, value in constants.items():
        model.set_initializer(name, np.asarray(value, dtype=np.float32))
    model = model.transform(InferShapes()).transform(InferDataTypes())
    x = {"x": rng.normal(size=(2, 4)).astype(np.float32)}
    expected = execute_onnx(model, x)[prev]
    one_call, changed = fold_quant_weights_in_one_sweep().apply(copy.deepcopy(model))
    assert changed and not one_call.get_nodes_by_op_type("Quant")  # FINN's pass: one per call
    ours = model.transform(fold_quant_weights_in_one_sweep())
    finns = model.transform(FoldQuantWeights())
    assert not ours.get_nodes_by_op_type("Quant") and len(ours.get_nodes_by_op_type("Mul")) == 3  # folded, scales moved
    assert [n.op_type for n in ours.graph.node] == [n.op_type for n in finns.graph.node]
    for mine, theirs in zip(ours.graph.node, finns.graph.node, strict=True):  # FINN names new tensors at random
        for a, b in zip(mine.input, theirs.input, strict=True):
            value = finns.get_initializer(b)
            assert (ours.get_initializer(a) is None) == (value is None)
            if value is not None:
                assert np.array_equal(ours.get_initializer(a), value)
                assert ours.get_tensor_datatype(a) == finns.get_tensor_datatype(b)
    assert np.allclose(execute_onnx(ours, x)[prev], expected, rtol=1e-5, atol=1e-6)


def test_quant_weights_folded_in_one_sweep_through_a_debug_marker_as_finns_pass():
    """FINN's pass removes a DebugMarker behind a weight quantizer by rebuilding the model (a deep copy
    through ``ModelWrapper.transform``): the sweep goes on with that model and ends where FINN's does."""
    from finn.transformation.qonnx.fold_quant_weights import FoldQuantWeights
    from onnx import TensorProto, helper
    from qonnx.core.modelwrapper import ModelWrapper
    from qonnx.core.onnx_exec import execute_onnx
    from qonnx.transformation.infer_shapes import InferShapes

    from quark.torch.extensions.brevitas._backend.targets.finn.passes import fold_quant_weights_in_one_sweep

    nodes = [
        helper.make_node("Quant", ["w", "s", "z", "b"], ["q"], domain="qonnx.custom_op.general", signed=1, narrow=0,
                         rounding_mode="ROUND"),
        helper.make_node("DebugMarker", ["q"], ["qd"], domain="qonnx.custom_op.general", export_debug_name="dbg"),
        helper.make_node("Transpose", ["qd"], ["qt"], perm=[1, 0]),
        helper.make_node("MatMul", ["x", "qt"], ["y"]),
    ]  # fmt: skip
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )  # fmt: skip
    model = ModelWrapper(helper.make_model(graph))
    rng = np.random.default_rng(0)
    for name, value in {"w": rng.normal(size=(3, 4)), "s": 0.25, "z": 0.0, "b": 4.0}.items():
        model.set_initializer(name, np.asarray(value, dtype=np.float32))
    model = model.transform(InferShapes())
    x = {"x": rng.normal(size=(2, 4)).astype(np.float32)}
    ours = model.transform(fold_quant_weights_in_one_sweep())
    finns = model.transform(FoldQuantWeights())
    assert [n.op_type for n in ours.graph.node] == [n.op_type for n in finns.graph.node] == ["MatMul", "Mul"]
    assert "transform" not in vars(ours) and "make_empty_exec_context" not in vars(ours)
    assert np.allclose(execute_onnx(ours, x)["y"], execute_onnx(model, x)["y"], rtol=1e-5, atol=1e-6)
