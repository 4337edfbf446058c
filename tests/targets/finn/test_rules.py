"""The FINN target: one refused case per requirement row (quantizers and graph sites), each error
naming the quantizer or site, the value and the config field that fixes it; the graph checks;
the integer network input; the preset's arguments."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _shared import REPO
from _shared.models import mlp, unit_batches
from _shared.quantize import assert_unchanged, quantized_on_unit_batches, snapshot, without_target
from torch import nn

from quark.torch.extensions.brevitas._backend.rules import FROM_A_SPEC
from quark.torch.extensions.brevitas._backend.targets.finn import TARGET as FINN_TARGET
from quark.torch.extensions.brevitas._backend.targets.finn import rules as finn_rules
from quark.torch.extensions.brevitas.api import (
    ModelExporter,
    ModelQuantizer,
    TargetCheckError,
    UnsupportedExportError,
)
from quark.torch.extensions.brevitas.presets import finn
from quark.torch.quantization.config.config import Config, QuantizationConfig, QuantizationSpec
from quark.torch.quantization.config.type import DeviceType, Dtype, QuantizationMode, RoundType, ScaleType
from quark.torch.quantization.observer import PerTensorMinMaxObserver


def preset_with(**changes) -> Config:
    """The FINN preset with the network input's spec (or ReLU's, ``relu=...``) changed."""
    config = finn()
    relu = changes.pop("relu", None)
    if relu is not None:
        config.layer_type_quant_config["ReLU"] = QuantizationConfig(output_tensors=relu)
    if changes:
        old = config.layer_type_quant_config["GraphInput"].input_tensors
        fields = {f: getattr(old, f) for f in ("dtype", "observer_cls", "symmetric", "scale_type", "round_method")}
        config.layer_type_quant_config["GraphInput"] = QuantizationConfig(input_tensors=QuantizationSpec(**{**fields, **changes}))
    return config


def _act(**kw) -> QuantizationSpec:
    return QuantizationSpec(
        **{"dtype": Dtype.int4, "observer_cls": PerTensorMinMaxObserver, "scale_type": ScaleType.pof2,
           "round_method": RoundType.half_up, **kw}
    )  # fmt: skip


#: requirement (quantizer field or site rule) -> (config, expected message fragment)
CASES = {
    "activation/weight `dtype`": (
        preset_with(dtype=Dtype.int16),
        r"quantizer 'input_quant.act_quant' \(activation\): dtype=int16; FINN allows integers of 2..8 bits, bipolar",
    ),
    "activation/weight `symmetric`": (
        preset_with(symmetric=False),
        r"quantizer '.*' \(activation\): symmetric=False; FINN allows True \(zero point 0\)",
    ),
    "activation `is_dynamic`": (
        preset_with(observer_cls=None, is_dynamic=True, scale_type=None),
        r"quantizer '.*' \(activation\): is_dynamic=True; FINN allows False",
    ),
    "activation `observer_cls`": (
        preset_with(relu=QuantizationSpec(dtype=Dtype.bipolar)),  # a learned scale (mean |x|), not 1
        (
            r"quantizer '.*' \(activation\): observer_cls=MeanAbsObserver; FINN allows UnitScaleObserver \(bipolar "
            r"activations of scale 1\) \(ConvertQONNXtoFINN: 'FINN only supports Bipolar identity activations"
        ),
    ),
    "a model quantized layer by layer": (
        Config(
            global_quant_config=QuantizationConfig(
                input_tensors=_act(), weight=_act(), target_device=DeviceType.FINN
            )
        ),
        (
            r"site 'model': quantized layer by layer: the tensors between layers stay float; FINN allows "
            r"Config.quant_mode=QuantizationMode.fx_graph_mode"
        ),
    ),
    "a float network input": (
        Config(
            global_quant_config=QuantizationConfig(weight=_act(), target_device=DeviceType.FINN),
            layer_type_quant_config={"ReLU": QuantizationConfig(output_tensors=_act(dtype=Dtype.uint4))},
            quant_mode=QuantizationMode.fx_graph_mode,
        ),
        r"site 'input': network input not quantized; FINN allows input_tensors of layer_type_quant_config\['GraphInput'\]",
    ),
    "a signed quantizer after ReLU": (
        preset_with(relu=_act()),
        (
            r"site '1': ReLU output quantized signed \(int4\); FINN allows an unsigned dtype \(uint4\) for "
            r"layer_type_quant_config\['ReLU'\].output_tensors \(ConvertQONNXtoFINN: 'FINN only supports unsigned"
        ),
    ),
}


def test_every_requirement_row_has_a_case():
    rows = {r.refuses for r in (*finn_rules.QUANTIZER_RULES, *finn_rules.SITE_RULES) if r is not FROM_A_SPEC}
    assert rows == set(CASES)  # FROM_A_SPEC, shared by the targets: tests/targets/test_targets.py, one case per target


@pytest.mark.parametrize("row", CASES)
def test_each_requirement_is_refused_before_export_with_the_fix(tmp_path, row):
    config, message = CASES[row]
    model = quantized_on_unit_batches(without_target(config))
    path = tmp_path / "model.onnx"
    with pytest.raises(TargetCheckError, match=message):
        ModelExporter(path).export_qonnx_model(model, unit_batches(1)[0], target_device=DeviceType.FINN)
    assert not path.exists()  # refused before anything was written


@pytest.mark.parametrize("row", CASES)
def test_a_config_with_the_finn_target_is_refused_at_quantize_time(row):
    """The config's own target_device: its rules run once the quantized copy is calibrated (before
    the algorithms and any training), not at export; the user's model is left as it was."""
    config, message = CASES[row]
    model = mlp((8, 8, 3)).eval()
    before = snapshot(model)
    with pytest.raises(TargetCheckError, match=message):
        ModelQuantizer(config).quantize_model(model, unit_batches(), progress=False)
    assert_unchanged(before, model)


def test_the_preset_passes_and_the_graph_checks_run(tmp_path):
    model = quantized_on_unit_batches(finn())
    report = ModelExporter(tmp_path / "model.onnx").export_qonnx_model(model, unit_batches(1)[0])
    assert report.passed
    assert report.target_checks == (
        "FINN: static input/output shapes",
        f"FINN: {finn_rules.GRAPH_RULES[1].allowed}",  # shape computations on static shapes
    )


def _shape_refusal(node: str) -> str:
    rule = finn_rules.GRAPH_RULES[1]
    return (
        f"shape-computing nodes [{node!r}] on shapes known only at run time (e.g. x.view(x.size(0), -1) on a "
        f"dynamic batch); FINN allows {rule.allowed} ({rule.reason})"
    )


#: graph rule -> what it names in the graph of the test below (which holds a case of each)
GRAPH_CASES = {
    "dynamic shapes": "has dynamic shape ['batch', 4]; FINN allows static input/output shapes",
    "shape computations on shapes known only at run time": "shape-computing nodes ['shape_of_x']",
}


def test_every_graph_rule_row_has_a_case():
    assert set(GRAPH_CASES) == {r.refuses for r in finn_rules.GRAPH_RULES}


def test_shape_computing_nodes_and_dynamic_shapes_are_refused_in_the_written_graph():
    """The TorchScript exporter folds x.size(0) of a static input; a graph that still computes
    shapes (or has a dynamic batch) is refused, naming the nodes."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Shape", ["x"], ["s"], name="shape_of_x"), helper.make_node("Reshape", ["x", "s"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
    )
    with pytest.raises(TargetCheckError) as caught:
        FINN_TARGET.check_graph(helper.make_model(graph))
    assert caught.value.problems == [
        ("graph input 'x' has dynamic shape ['batch', 4]; FINN allows static input/output shapes (FINN's dataflow has "
        "fixed stream sizes)"),
        ("graph output 'y' has dynamic shape ['batch', 4]; FINN allows static input/output shapes (FINN's dataflow has "
        "fixed stream sizes)"),
        _shape_refusal("shape_of_x"),
    ]
    for rule in finn_rules.GRAPH_RULES:  # each row: its problem, with its reason
        assert any(GRAPH_CASES[rule.refuses] in p and p.endswith(f"({rule.reason})") for p in caught.value.problems), rule


def _shape_graph(nodes, constants, x_shape, y_shape):
    """x (float, ``x_shape``) -> nodes -> y (float, ``y_shape``; None: a 2-element int64 shape)."""
    from onnx import TensorProto, helper, numpy_helper

    y_type, y_shape = (TensorProto.INT64, [2]) if y_shape is None else (TensorProto.FLOAT, y_shape)
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", y_type, y_shape)],
        initializer=[numpy_helper.from_array(np.asarray(v), k) for k, v in constants.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_shape_computations_on_static_shapes_pass_the_graph_rules():
    """torchvision's channel_shuffle as the TorchScript exporter writes it when it cannot fold x.size()
    (Shape -> Gather -> arithmetic -> Reshape), torch.chunk's bounds likewise: with a static input
    every value is known before run time and qonnx's cleanup folds them (ShuffleNetV2's 13 Shape
    nodes were refused before)."""
    from onnx import helper

    nodes = [
        helper.make_node("Shape", ["x"], ["size"], name="size"),
        helper.make_node("Gather", ["size", "zero"], ["n"], axis=0),
        helper.make_node("Gather", ["size", "one"], ["c"], axis=0),
        helper.make_node("Div", ["c", "two"], ["half"]),  # ONNX's data propagation has no Div: folded
        helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
        helper.make_node("Unsqueeze", ["half", "axes"], ["half1"]),
        helper.make_node("Concat", ["n1", "two1", "half1", "minus1"], ["grouped"], axis=0),
        helper.make_node("Reshape", ["x", "grouped"], ["g"]),
        helper.make_node("Transpose", ["g"], ["t"], perm=[0, 2, 1, 3]),
        helper.make_node("Shape", ["t"], ["t_size"], name="size_of_shuffled"),
        helper.make_node("Slice", ["t_size", "zero1", "one1"], ["batch"]),
        helper.make_node("Concat", ["batch", "minus1"], ["flat"], axis=0),
        helper.make_node("Reshape", ["t", "flat"], ["y"]),  # x.view(x.size(0), -1) of the shuffled tensor
    ]
    constants = {
        "zero": np.int64(0), "one": np.int64(1), "two": np.int64(2), "axes": np.int64([0]),
        "two1": np.int64([2]), "minus1": np.int64([-1]), "zero1": np.int64([0]), "one1": np.int64([1]),
    }  # fmt: skip
    model = _shape_graph(nodes, constants, [1, 8, 3, 3], [1, 72])
    assert FINN_TARGET.check_graph(model) == [
        "FINN: static input/output shapes", f"FINN: {finn_rules.GRAPH_RULES[1].allowed}"
    ]


def test_a_shape_known_only_at_run_time_is_refused_with_static_inputs():
    """The shape of NonZero's output depends on the data: its Shape cannot be folded (qonnx's own
    shape inference takes the unknown dimension for 0 and would fold it to [2, 0])."""
    from onnx import helper

    nodes = [
        helper.make_node("NonZero", ["x"], ["nz"]),
        helper.make_node("Shape", ["nz"], ["y"], name="nz_size"),
    ]
    with pytest.raises(TargetCheckError) as caught:
        FINN_TARGET.check_graph(_shape_graph(nodes, {}, [2, 3], None))
    assert caught.value.problems == [_shape_refusal("nz_size")]


def test_a_finn_target_refuses_the_qdq_exporter(tmp_path):
    with pytest.raises(UnsupportedExportError, match=r"target_device=FINN takes qonnx: use ModelExporter.export_qonnx_model"):
        ModelExporter(tmp_path / "model.onnx").export_onnx_model(
            quantized_on_unit_batches(finn()), unit_batches(1)[0], target_device=DeviceType.FINN
        )


class _Residual(nn.Module):
    """Linear, a residual addition, ReLU, Linear: the first and last layer and an addition."""

    def __init__(self):
        super().__init__()
        self.first, self.inner, self.last = nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.first(x))
        return self.last(torch.relu(h + self.inner(h)))


def _codes(quant_tensor) -> torch.Tensor:
    """Integer codes of a QuantTensor, from its value and scale (the formula, not Brevitas' int())."""
    return torch.round(quant_tensor.value / quant_tensor.scale).unique()


def test_the_preset_widens_the_named_layers_and_the_addition_and_nothing_else(tmp_path):
    """W2A2 with 8-bit first/last weights and an 8-bit addition (FINN's bnn_pynq ResNet recipe):
    the named weights and the addition's operands are on 8-bit grids, every other quantizer on a
    2-bit one, and the export passes the FINN target's checks."""
    config = finn(2, 2, add_bits=8, layer_weight_bits={"first": 8, "last": 8})
    assert finn(2, 2, add_bits=2).layer_type_quant_config.keys() == finn(2, 2).layer_type_quant_config.keys()
    torch.manual_seed(0)
    qmodel = quantized_on_unit_batches(config, _Residual())
    bits = {
        name: int(module.quant_weight().bit_width) for name, module in qmodel.named_modules() if hasattr(module, "quant_weight")
    }
    assert bits == {"first": 8, "inner": 2, "last": 8}
    assert len(_codes(qmodel.first.quant_weight())) > 4  # more levels than int2 has
    assert set(_codes(qmodel.inner.quant_weight()).tolist()) <= {-2.0, -1.0, 0.0, 1.0}
    seen: dict[str, torch.Tensor] = {}
    hooks = [
        module.register_forward_hook(lambda m, i, o, name=name: seen.__setitem__(name, o))
        for name, module in qmodel.named_modules()
        if type(module).__name__ in ("ActQuantProxyFromInjector",) and module.is_quant_enabled
    ]
    x = unit_batches(1)[0]
    qmodel(x)
    for hook in hooks:
        hook.remove()
    widths = {name: int(out.bit_width) for name, out in seen.items()}
    add_inputs = [name for name in widths if name.startswith("add") and "input_quant" in name]
    assert add_inputs and all(widths[name] == 8 for name in add_inputs), widths
    relus = [name for name in widths if "relu" in name]
    assert len(relus) == 2 and all(widths[name] == 2 for name in relus), widths
    report = ModelExporter(tmp_path / "m.onnx").export_qonnx_model(qmodel, x)
    assert report.passed and report.target_checks


def test_docs_embed_the_current_finn_requirements():

    docs = (REPO / "docs" / "export.md").read_text()
    assert finn_rules.markdown() in docs, "docs/export.md: paste the output of finn_rules.markdown()"


