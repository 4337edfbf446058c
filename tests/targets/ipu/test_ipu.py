"""The IPU hand-off: the XINT8 preset, a QDQ graph at opset 17 with static shapes, checked by the
exporter (and independently here); configs and graphs that cannot meet the target are named."""

from __future__ import annotations

import re

import brevitas.nn as qnn
import numpy as np
import onnx
import pytest
import torch
from _shared.configs import W8A8
from _shared.quantize import quantize, without_target
from _shared.zoo import ZOO, calibration
from onnx import numpy_helper

from quark.torch.extensions.brevitas._backend.targets import ipu
from quark.torch.extensions.brevitas.api import (
    ModelExporter,
    ModelQuantizer,
    TargetCheckError,
    UnsupportedExportError,
)
from quark.torch.extensions.brevitas.graph import QuantPoint
from quark.torch.extensions.brevitas.presets import xint8
from quark.torch.quantization.config.config import QuantizationConfig, QuantizationSpec
from quark.torch.quantization.config.type import DeviceType, Dtype, RoundType, ScaleType
from quark.torch.quantization.observer import PerTensorMinMaxObserver


def _xint8(name: str, graph: bool = False):
    entry = ZOO[name]
    torch.manual_seed(0)
    quantizer = ModelQuantizer(xint8(graph=graph))
    qmodel = quantizer.quantize_model(entry.build().eval(), calibration(entry), progress=False)
    return quantizer, qmodel, entry.sample(torch.Generator().manual_seed(1))


def _independent_checks(path) -> None:
    """The IPU requirements, re-read from the file without the exporter's code."""
    model = onnx.load(str(path))
    assert [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")] == [17]
    for value in [*model.graph.input, *model.graph.output]:
        assert all(d.HasField("dim_value") and d.dim_value > 0 for d in value.type.tensor_type.shape.dim)
    consts = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    producer = {o: n for n in model.graph.node for o in n.output}
    qdq = [n for n in model.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")]
    assert qdq
    for node in qdq:
        scale = consts[node.input[1]].astype(np.float64)
        assert np.all(np.exp2(np.round(np.log2(scale))) == scale), node.name
        assert np.all(consts[node.input[2]] == 0)
    layers = [n for n in model.graph.node if n.op_type in ("Conv", "Gemm")]
    assert layers
    for node in layers:
        x, w, b = (producer[i] for i in node.input)
        assert consts[w.input[0]].dtype == np.int8 and consts[b.input[0]].dtype == np.int32
        np.testing.assert_array_equal(consts[b.input[1]], consts[x.input[1]] * consts[w.input[1]])


@pytest.mark.parametrize(
    "name, graph", [("cnv", False), ("resnet", True), ("mobilenet", False), ("conv1d", False), ("two_inputs", True)]
)
def test_xint8_models_meet_the_ipu_target(onnx_path, name, graph):
    """Layer by layer where every float operation sits between a layer and the next quantizer; graph mode
    where a residual addition (resnet) or a sum of two branches (two_inputs) must be quantized too."""
    quantizer, qmodel, x = _xint8(name, graph)
    report = ModelExporter(onnx_path).export_onnx_model(qmodel, x, plans=quantizer.plans)
    assert report.passed and report.opset == ipu.OPSET and len(report.target_checks) == 5
    _independent_checks(onnx_path)


@pytest.mark.parametrize("name, node", [("resnet", r"Relu|Add"), ("two_inputs", r"Gemm|Add")])
def test_float_operations_outside_qdq_are_named(onnx_path, name, node):
    """Layer by layer, a residual addition runs on float values: the report names the node as running
    on the CPU (Ryzen AI partitions the graph), each layer is checked; graph mode, whose graph must be
    integer-only, refuses such a graph naming the node (an MLP of two branches quantized layerwise,
    checked as a graph-mode model)."""
    quantizer, qmodel, x = _xint8(name)
    report = ModelExporter(onnx_path).export_onnx_model(qmodel, x, plans=quantizer.plans)
    note = next(c for c in report.target_checks if "float operations run on the CPU" in c)
    assert re.search(rf"({node}) '[^']+': (input|output) '[^']+' is not (dequantized|quantized again)", note)
    assert not ipu.precisions.layerwise(_as_graph_mode(qmodel)) and ipu.precisions.layerwise(qmodel)
    with pytest.raises(
        TargetCheckError, match=rf"({node}) '[^']+': (input|output) '[^']+' is not (dequantized|quantized again)"
    ):
        ModelExporter(onnx_path).export_onnx_model(_as_graph_mode(qmodel), x, plans=quantizer.plans)


def _as_graph_mode(qmodel):
    """The same quantized model, recorded as quantized in graph mode (the IPU then requires integer-only)."""
    import copy

    from quark.torch.quantization.config.type import QuantizationMode

    config = copy.copy(qmodel.quant_config)
    config.quant_mode = QuantizationMode.fx_graph_mode
    marked = copy.copy(qmodel)
    marked.quant_config = config
    return marked


def test_layers_with_float_operands_are_named(onnx_path):
    quantizer, qmodel, x = _xint8("encoder")  # attention's activation x activation products stay float
    report = ModelExporter(onnx_path).export_onnx_model(qmodel, x, plans=quantizer.plans)
    note = next(c for c in report.target_checks if "float operations run on the CPU" in c)
    assert re.search(r"MatMul '[^']+': a product of two activations", note)
    with pytest.raises(
        TargetCheckError, match=r"MatMul .*: input 0 .* is not dequantized from an integer \(float operand\)"
    ):
        ModelExporter(onnx_path).export_onnx_model(_as_graph_mode(qmodel), x, plans=quantizer.plans)


def _config_with(**changes) -> object:
    """XINT8 with roles changed, without its target_device (a config with it is refused by
    quantize_model already: test_a_config_with_the_ipu_target_is_refused_at_quantize_time); the
    tests export it with ``target_device=DeviceType.IPU``."""
    return without_target(_targeted_config_with(**changes))


def _targeted_config_with(**changes) -> object:
    config = xint8()
    for role, spec in changes.items():
        setattr(config.global_quant_config, role, spec)
    return config


def test_a_config_with_the_ipu_target_is_refused_at_quantize_time():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 4))
    with pytest.raises(TargetCheckError, match=r"quantizer '0.input_quant' \(activation\): dtype=uint8; IPU allows int8"):
        ModelQuantizer(_targeted_config_with(input_tensors=U8_POF2)).quantize_model(model, [torch.randn(4, 8)], progress=False)


A8_FLOAT = QuantizationSpec(dtype=Dtype.int8, observer_cls=PerTensorMinMaxObserver)
A16 = QuantizationSpec(dtype=Dtype.int16, observer_cls=PerTensorMinMaxObserver)
W16 = QuantizationSpec(dtype=Dtype.int16, observer_cls=PerTensorMinMaxObserver)
U8_POF2 = QuantizationSpec(
    dtype=Dtype.uint8, observer_cls=PerTensorMinMaxObserver, symmetric=False, scale_type=ScaleType.pof2
)


@pytest.mark.parametrize(
    "changes, match",
    [
        (
            {"input_tensors": QuantizationSpec(dtype=Dtype.int4, observer_cls=PerTensorMinMaxObserver)},
            r"quantizer '0.input_quant' \(activation\): dtype=int4; IPU allows activations in one of: XINT8",
        ),
        (
            {"weight": W16, "input_tensors": A16},
            r"quantizer '0.weight_quant' \(weight\): dtype=int16; IPU \(A16W8\) allows int8",
        ),
        (
            {"input_tensors": U8_POF2},
            r"quantizer '0.input_quant' \(activation\): dtype=uint8; IPU allows int8",
        ),
        (
            {"bias": None},
            (r"module '0' \(QuantLinear\): bias not quantized; IPU allows its input, weight and bias quantized .*the IPU "
            r"runs a layer on the NPU only"),
        ),
        (
            {"bias": QuantizationSpec(dtype=Dtype.int8)},
            r"quantizer '0.bias_quant' \(bias\): dtype=int8; IPU allows int32",
        ),
    ],
)
def test_configs_that_cannot_meet_the_ipu_are_named_before_export(onnx_path, changes, match):
    torch.manual_seed(0)
    model = ModelQuantizer(_config_with(**changes)).quantize_model(
        torch.nn.Sequential(torch.nn.Linear(8, 4)), [torch.randn(4, 8)], progress=False
    )
    with pytest.raises(TargetCheckError, match=match):
        ModelExporter(onnx_path).export_onnx_model(model, torch.randn(2, 8), target_device=DeviceType.IPU)
    assert not onnx_path.exists()


def test_ipu_needs_opset_17_from_the_torchscript_exporter(onnx_path):
    _, qmodel, x = _xint8("conv1d")
    with pytest.raises(UnsupportedExportError, match=r"target_device=IPU takes opset 17 .*got opset 18"):
        ModelExporter(onnx_path, opset_version=18).export_onnx_model(qmodel, x, target_device="ipu")


def test_plans_targeting_two_devices_are_refused(onnx_path):
    config = xint8()
    config.layer_quant_config["6"] = QuantizationConfig(target_device=DeviceType.CPU)
    entry = ZOO["conv1d"]
    quantizer = ModelQuantizer(config)
    qmodel = quantizer.quantize_model(entry.build(), calibration(entry), progress=False)
    with pytest.raises(ValueError, match=r"the layers target different devices \['CPU', 'IPU'\]"):
        ModelExporter(onnx_path).export_onnx_model(
            qmodel, entry.sample(torch.Generator()), plans=quantizer.plans
        )


def test_without_a_target_no_ipu_check_runs(onnx_path):
    torch.manual_seed(0)
    model = quantize(W8A8, torch.nn.Sequential(torch.nn.Linear(8, 4)), [torch.randn(4, 8)])
    report = ModelExporter(onnx_path).export_onnx_model(model, torch.randn(2, 8))
    assert report.passed and report.target_checks == ()


# -- the graph check on tampered graphs ----------------------------------------------------------


def _tamper(path, edit) -> onnx.ModelProto:
    model = onnx.load(str(path))
    edit(model)
    return model


def _set_init(model, predicate, fn):
    for init in model.graph.initializer:
        value = numpy_helper.to_array(init)
        if predicate(init.name, value):
            init.CopyFrom(numpy_helper.from_array(fn(value), init.name))
            return
    raise AssertionError("no initializer matched")


#: graph rule -> the tampered graphs it refuses: (edit of an exported conv1d graph, the problem)
GRAPH_CASES = {
    "Q/DQ scales that are not powers of two, non-zero zero points": [
        (
            lambda m: _set_init(
                m, lambda n, v: v.dtype == np.float32 and v.size == 1, lambda v: v * np.float32(1.1)
            ),
            r"scale \[.*\] is not an exact power of two",
        ),
        (
            lambda m: _set_init(m, lambda n, v: v.dtype == np.int8 and v.size == 1, lambda v: np.int8(3)),
            r"zero point \[3\]; IPU allows .*zero points 0",
        ),
    ],
    "float operands, weights other than int8, biases other than int32 of scale s_in * s_w": [
        (
            lambda m: _set_init(
                m, lambda n, v: v.dtype == np.int32 and np.any(v != 0), lambda v: v.astype(np.int8)
            ),
            r"bias .* is int8; IPU allows weights int8, biases int32",
        ),
    ],  # and test_graph_check_compares_the_bias_scale_with_the_product, test_layers_with_float_operands_are_named
    "dynamic shapes": [
        (
            lambda m: m.graph.input[0].type.tensor_type.shape.dim[0].__setattr__("dim_param", "batch"),
            r"graph input 'input' has dynamic shape \['batch', 4, 32\]",
        ),
    ],
    "another opset": [(lambda m: m.opset_import[0].__setattr__("version", 18), r"opset 18; IPU allows opset 17")],
    "float operations outside DequantizeLinear -> op -> QuantizeLinear": [
        (  # the first Relu (folded into the quantizer after it) made a Sigmoid: a float op on the conv's float output
            lambda m: next(n for n in m.graph.node if n.op_type == "Relu").__setattr__("op_type", "Sigmoid"),
            r"Sigmoid '[^']+': input '[^']+' is not dequantized \(a float operation outside Q/DQ\)",
        ),
    ],  # and test_float_operations_outside_qdq_are_named
}


def test_every_graph_rule_row_has_a_case():
    assert set(GRAPH_CASES) == {rule.refuses for rule in ipu.GRAPH_RULES}


@pytest.mark.parametrize("edit, match", [case for cases in GRAPH_CASES.values() for case in cases])
def test_graph_check_names_what_is_wrong(onnx_path, edit, match):
    _, qmodel, x = _xint8("conv1d")
    ModelExporter(onnx_path).export_onnx_model(qmodel, x, target_device=DeviceType.IPU)
    with pytest.raises(TargetCheckError, match=match):
        ipu.TARGET.check_graph(_tamper(onnx_path, edit))


def test_graph_check_compares_the_bias_scale_with_the_product(onnx_path):
    _, qmodel, x = _xint8("conv1d")
    ModelExporter(onnx_path).export_onnx_model(qmodel, x, target_device=DeviceType.IPU)
    model = onnx.load(str(onnx_path))
    producer = {o: n for n in model.graph.node for o in n.output}
    conv = next(n for n in model.graph.node if n.op_type == "Conv")
    bias_scale = producer[conv.input[2]].input[1]
    _set_init(model, lambda n, v: n == bias_scale, lambda v: v * np.float32(2))
    with pytest.raises(TargetCheckError, match=r"bias scale .* != input scale x weight scale"):
        ipu.TARGET.check_graph(model)


def test_minifloat_config_cannot_meet_the_ipu(onnx_path):
    fp8 = QuantizationSpec(dtype=Dtype.fp8_e4m3, observer_cls=PerTensorMinMaxObserver)
    torch.manual_seed(0)
    model = ModelQuantizer(_config_with(input_tensors=fp8, bias=None)).quantize_model(
        torch.nn.Sequential(torch.nn.Linear(8, 4, bias=False)), [torch.randn(4, 8)], progress=False
    )
    with pytest.raises(
        TargetCheckError, match=r"'0.input_quant' \(activation\): dtype=fp8_e4m3; IPU allows activations in one of"
    ):
        ModelExporter(onnx_path).export_onnx_model(model, torch.randn(2, 8), target_device=DeviceType.IPU)


def test_config_target_device_is_checked_without_passing_plans(onnx_path):
    """quantize_model records its plans on the model: the exporter checks the config's IPU target."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(8 * 6 * 6, 4))
    qmodel = ModelQuantizer(xint8()).quantize_model(model, [torch.randn(4, 3, 8, 8) for _ in range(2)], progress=False)
    report = ModelExporter(onnx_path).export_onnx_model(qmodel, torch.randn(1, 3, 8, 8))
    assert report.passed and len(report.target_checks) == 5  # the IPU graph checks ran


# -- the quantizer and layer rules, row by row -------------------------------------------------------

_A8_POF2 = {"observer_cls": PerTensorMinMaxObserver, "scale_type": ScaleType.pof2}
#: rule -> (the preset's roles changed, the problem it names[, the Linear has a bias: default True]);
#: the activations stay in XINT8's form (int8, power-of-two scales) wherever the row allows, else the
#: model is in another precision (int16 activations: A16W8; float scales: A8W8) and meets its rules
RULE_CASES = {
    "a quantizer not built from a Quark spec": (None, r"quantizer '0.act_quant' \(activation\): not built from a Quark spec"),
    "activation/weight `dtype`": (
        {"weight": QuantizationSpec(dtype=Dtype.int16, **_A8_POF2)},
        r"quantizer '0.weight_quant' \(weight\): dtype=int16; IPU allows int8",
    ),
    "activation/weight `symmetric`": (
        {"input_tensors": QuantizationSpec(dtype=Dtype.int8, symmetric=False, **_A8_POF2)},
        r"quantizer '0.input_quant' \(activation\): symmetric=False; IPU allows True \(zero point 0\)",
    ),
    "activation/bias/weight `scale_type`": (
        {"weight": A8_FLOAT},
        r"quantizer '0.weight_quant' \(weight\): scale_type=float; IPU allows pof2",
    ),
    "activation/weight `round_method`": (
        {"input_tensors": QuantizationSpec(dtype=Dtype.int8, round_method=RoundType.floor, **_A8_POF2)},
        r"quantizer '0.input_quant' \(activation\): round_method=floor; IPU allows half_even",
    ),
    "activation/weight `is_dynamic`": (
        {"input_tensors": QuantizationSpec(dtype=Dtype.int8, is_dynamic=True, scale_type=ScaleType.pof2)},
        r"quantizer '0.input_quant' \(activation\): is_dynamic=True; IPU allows False",
        False,  # a product-scaled bias needs a static input (the layer rules refuse it first)
    ),
    "bias `dtype`": ({"bias": QuantizationSpec(dtype=Dtype.int8)}, r"quantizer '0.bias_quant' \(bias\): dtype=int8; IPU allows int32"),
    "bias `observer_cls`": (
        {"bias": QuantizationSpec(dtype=Dtype.int32, **_A8_POF2)},
        r"quantizer '0.bias_quant' \(bias\): observer_cls=PerTensorMinMaxObserver; IPU allows None",
    ),
    "a quantized layer with a float input, weight or bias": (
        {"bias": None},
        r"module '0' \(QuantLinear\): bias not quantized; IPU allows its input, weight and bias quantized",
    ),
}


def test_every_quantizer_and_layer_rule_row_has_a_case():
    assert set(RULE_CASES) == {rule.refuses for rule in (*ipu.QUANTIZER_RULES, *ipu.LAYER_RULES)}


@pytest.mark.parametrize("row", list(RULE_CASES))
def test_every_quantizer_and_layer_rule_refuses_its_case_alone_before_export(onnx_path, row):
    """The XINT8 preset with one role changed: that row's problem alone, before anything is written."""
    changes, match, *bias = RULE_CASES[row]
    (rule,) = [r for r in (*ipu.QUANTIZER_RULES, *ipu.LAYER_RULES) if r.refuses == row]
    torch.manual_seed(0)
    if changes is None:  # a stock Brevitas quantizer in front of a float layer
        model = torch.nn.Sequential(qnn.QuantIdentity(return_quant_tensor=False), torch.nn.Linear(8, 4))
    else:
        model = ModelQuantizer(_config_with(**changes)).quantize_model(
            torch.nn.Sequential(torch.nn.Linear(8, 4, bias=bias[0] if bias else True)), [torch.randn(4, 8)], progress=False
        )
    with pytest.raises(TargetCheckError, match=match) as caught:
        ModelExporter(onnx_path).export_onnx_model(model, torch.randn(2, 8), target_device=DeviceType.IPU)
    assert len(caught.value.problems) == 1 and caught.value.problems[0].endswith(f"({rule.reason})"), caught.value.problems
    assert not onnx_path.exists()


class _ConvActs(torch.nn.Module):
    """Conv -> Hardswish (the NPU runs it only between DQ and Q), Conv -> ReLU (fused into the Conv),
    an addition, then SiLU on the addition's quantized output."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.act1 = torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.Hardswish()
        self.conv2, self.act2 = torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.ReLU()
        self.act3 = torch.nn.SiLU()
        self.head = torch.nn.Conv2d(8, 4, 1)

    def forward(self, x):
        y = self.act1(self.conv1(x))
        return self.head(self.act3(self.act2(self.conv2(y)) + y))


def _op_before(model: onnx.ModelProto, op_type: str) -> list[str]:
    producer = {o: n for n in model.graph.node for o in n.output}
    return [producer[n.input[0]].op_type for n in model.graph.node if n.op_type == op_type]


@pytest.mark.parametrize("target", ["ipu", "none"])
def test_graph_mode_quantizes_an_activation_input_where_the_target_needs_it(onnx_path, target):
    """IPU: an activation the runtime does not fuse into the layer before it (Hardswish) gets its
    float input quantized (DQ -> HardSwish -> Q), a fused one (ReLU) does not, nor one whose input
    arrives quantized (SiLU after the addition); without a target nothing is added."""
    torch.manual_seed(0)
    config = xint8(graph=True)
    if target == "none":
        config.global_quant_config.target_device = None
    quantizer = ModelQuantizer(config)
    calib = [torch.rand(4, 3, 8, 8, generator=torch.Generator().manual_seed(i)) for i in range(3)]
    qmodel = quantizer.quantize_model(_ConvActs().eval(), calib, progress=False)
    assert hasattr(qmodel.act1, "input_quant") == (target == "ipu")
    assert not hasattr(qmodel.act2, "input_quant") and not hasattr(qmodel.act3, "input_quant")
    report = ModelExporter(onnx_path).export_onnx_model(qmodel, calib[0], plans=quantizer.plans)
    assert report.passed and report.max_abs_diff == 0.0
    model = onnx.load(str(onnx_path))
    assert _op_before(model, "HardSwish") == ["DequantizeLinear" if target == "ipu" else "Conv"]
    assert _op_before(model, "Relu") == ["Conv"]
    if target == "ipu":
        assert len(report.target_checks) == 5


class _Normalised(torch.nn.Module):
    """Linear -> QuantPoint, Linear -> Softmax, Linear -> LayerNorm: their inputs are a layer's float
    output, but none computes element by element (a QuantPoint is the quantizer itself)."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c = (torch.nn.Linear(6, 6) for _ in range(3))
        self.point, self.softmax, self.norm = QuantPoint(), torch.nn.Softmax(dim=-1), torch.nn.LayerNorm(6)

    def forward(self, x):
        return self.point(self.a(x)) + self.softmax(self.b(x)) + self.norm(self.c(x))


def test_graph_mode_adds_no_input_quantizer_to_normalisations_or_quant_points():
    """Only element-by-element activations get the IPU's input quantizer: quantizing what a Softmax
    takes (attention scores with the mask's large negatives) on an int8 grid ruined MiniLM."""
    calib = [torch.randn(4, 6, generator=torch.Generator().manual_seed(i)) for i in range(2)]
    qmodel = ModelQuantizer(xint8(graph=True)).quantize_model(_Normalised().eval(), calib, progress=False)
    assert not [n for n in ("point", "softmax", "norm") if hasattr(qmodel.get_submodule(n), "input_quant")]
