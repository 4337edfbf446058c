"""Activations between two quantizers as FINN's thresholds (``targets/finn/activations.py``): every
input level of each activation, alone after a convolution, reaches FINN's hardware layers equal to
torch; the pass on hand-built QONNX graphs against the activation computed from its formula; what it
leaves alone."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from onnx import TensorProto, helper
from torch import nn

from quark.torch.extensions.brevitas.api import ModelExporter, ModelQuantizer
from quark.torch.extensions.brevitas.presets import finn

pytest.importorskip("finn.transformation.qonnx.convert_qonnx_to_finn", reason="finn-plus is not installed")

#: the activations, and whether they never decrease (one threshold layer) on every grid
ACTIVATIONS = {
    "SiLU": False,
    "Hardswish": False,
    "GELU": False,
    "Mish": False,
    "Sigmoid": True,
    "Hardsigmoid": True,
    "Tanh": True,
    "ELU": True,
}


def _conv_then(activation: str) -> nn.Module:
    """A 2x2 convolution summing four pixels (x 3, minus 6: outputs in [-6, 6] for pixels in [0, 1]),
    the activation, and a per-channel identity (a depthwise 1x1 convolution of weight 1) after it, so
    that the hardware's output is the activation's own levels on the next layer's input."""
    conv, identity = nn.Conv2d(1, 2, 2), nn.Conv2d(2, 2, 1, groups=2, bias=False)
    with torch.no_grad():
        conv.weight.fill_(3.0)
        conv.bias.fill_(-6.0)
        identity.weight.fill_(1.0)
    return nn.Sequential(conv, getattr(nn, activation)(), identity).eval()


def _calibration() -> list[torch.Tensor]:
    """Pixels across [0, 1] (the input quantizer's scale 1/256) whose 2x2 sums stay within 2 +- 1: the
    activation's input is calibrated to about a third of the range the test images reach, so that
    every level of its quantizer, the saturated ends included, occurs on them."""
    generator = torch.Generator().manual_seed(1)
    v = torch.rand(32, 1, 1, 1, generator=generator)
    board = (torch.arange(8)[:, None] + torch.arange(8)[None, :]) % 2 == 0
    noise = (torch.rand(32, 1, 8, 8, generator=generator) - 0.5) / 2
    return [(torch.where(board, v, 1 - v) + noise).clamp(0, 1)]


@pytest.mark.parametrize("bits", [2, 4, 8])
@pytest.mark.parametrize("activation", list(ACTIVATIONS))
def test_each_activation_reaches_finn_hardware_equal_to_torch_on_every_input_level(tmp_path, activation, bits):
    torch.manual_seed(0)
    qmodel = ModelQuantizer(finn(act_bits=bits, unsigned=())).quantize_model(
        _conv_then(activation), _calibration(), progress=False
    )
    x = torch.rand(256, 1, 8, 8, generator=torch.Generator().manual_seed(2))
    seen = []
    hook = qmodel.get_submodule("1").input_quant.register_forward_hook(lambda m, i, out: seen.append(out))
    qmodel(x)
    hook.remove()
    levels = torch.round(seen[0].value / seen[0].scale).unique()
    assert len(levels) == 2**bits  # every input level occurs in x

    result = ModelExporter(tmp_path).export_finn_dataflow(qmodel, x, integer_input=True)

    assert result.verification.max_abs_diff == 0 and result.verification.samples == 256
    assert result.float_layers == ()
    hardware = result.steps[-1].op_types
    assert "Sigmoid" not in result.steps[1].op_types and "Erf" not in result.steps[1].op_types
    if ACTIVATIONS[activation]:
        assert hardware.get("Thresholding_rtl") == 1 and "ElementwiseSub_hls" not in hardware
    else:  # at 8 bits each dips on the grid: the rises minus the falls
        assert bits < 8 or ("ElementwiseSub_hls" in hardware and hardware.get("Thresholding_rtl") == 2)
    assert not any(op.startswith(("InnerShuffle", "OuterShuffle", "ElementwiseMul")) for op in hardware)


# -- the pass on hand-built graphs -----------------------------------------------------------------


def _graph(nodes, shape, initializers):
    from qonnx.core.modelwrapper import ModelWrapper
    from qonnx.transformation.infer_shapes import InferShapes

    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
    )
    model = ModelWrapper(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    for name, value in initializers.items():
        model.set_initializer(name, np.asarray(value, dtype=np.float32))
    return model.transform(InferShapes())


def _quant(name, source, out, scale, bits, signed=1):
    inputs = [source, f"{name}_scale", f"{name}_zero", f"{name}_bits"]
    node = helper.make_node(
        "Quant", inputs, [out], name, domain="qonnx.custom_op.general", signed=signed, narrow=0, rounding_mode="ROUND"
    )
    return node, {f"{name}_scale": scale, f"{name}_zero": 0.0, f"{name}_bits": float(bits)}


def _run(model, x):
    from quark.torch.extensions.brevitas._backend.export.verify import execute_qonnx

    return execute_qonnx(model, [x])[0]


@pytest.mark.parametrize(
    ("op", "formula", "monotonic"),
    [
        ("Sigmoid", lambda v: 1 / (1 + np.exp(-v)), True),
        ("Tanh", np.tanh, True),
        ("Softplus", lambda v: np.log1p(np.exp(v)), True),
        ("Abs", np.abs, False),
        ("Cos", np.cos, False),
    ],
)
def test_quant_op_quant_becomes_thresholds_that_compute_the_formula_on_every_level(op, formula, monotonic):
    """Quant (int5, per-channel scales) -> op -> Quant (int4): the thresholds, executed on every input
    level, give the output quantizer applied to the formula (round half even, clipped, as Quant)."""
    from quark.torch.extensions.brevitas._backend.targets.finn.activations import ActivationsAsThresholds

    scales_in = np.array([0.25, 0.125, 0.5], dtype=np.float32).reshape(1, 3, 1, 1)
    first, first_init = _quant("qi", "x", "xq", scales_in, 5)
    last, last_init = _quant("qo", "f", "y", 0.125, 4)
    model = _graph([first, helper.make_node(op, ["xq"], ["f"]), last], [32, 3, 1, 1], {**first_init, **last_init})

    converted = model.transform(ActivationsAsThresholds())

    ops = [n.op_type for n in converted.graph.node]
    assert op not in ops and ops.count("MultiThreshold") == (1 if monotonic else 2) and ("Sub" in ops) != monotonic
    levels = np.arange(-16, 16, dtype=np.float32).reshape(32, 1, 1, 1) * scales_in  # every int5 level, per channel
    expected = np.clip(np.round(formula(levels.astype(np.float64)) / 0.125), -8, 7) * 0.125
    np.testing.assert_array_equal(_run(converted, levels), expected.astype(np.float32))
    np.testing.assert_array_equal(_run(model, levels), expected.astype(np.float32))


def test_a_float_input_or_a_value_read_elsewhere_is_left_as_it_is():
    """No quantizer before the activation (its input has no levels), or the activation's value also
    feeds another node (it must stay): the graph is unchanged."""
    from quark.torch.extensions.brevitas._backend.targets.finn.activations import ActivationsAsThresholds

    last, last_init = _quant("qo", "f", "y", 0.125, 4)
    unquantized = _graph([helper.make_node("Sigmoid", ["x"], ["f"]), last], [4, 3], last_init)
    first, first_init = _quant("qi", "x", "xq", 0.25, 4)
    shared = _graph(
        [first, helper.make_node("Sigmoid", ["xq"], ["s"]), helper.make_node("Mul", ["xq", "s"], ["f"]), last,
         helper.make_node("Add", ["s", "y"], ["z"])],
        [4, 3],
        {**first_init, **last_init},
    )  # fmt: skip
    for model in (unquantized, shared):
        before = [n.op_type for n in model.graph.node]
        assert [n.op_type for n in model.transform(ActivationsAsThresholds()).graph.node] == before


def test_an_input_wider_than_eight_bits_is_left_to_the_refusal():
    """A 9-bit input (512 levels) is not tabulated: FINN's thresholds take at most 8-bit inputs."""
    from quark.torch.extensions.brevitas._backend.targets.finn.activations import ActivationsAsThresholds

    first, first_init = _quant("qi", "x", "xq", 0.25, 9)
    last, last_init = _quant("qo", "f", "y", 0.125, 4)
    model = _graph([first, helper.make_node("Sigmoid", ["xq"], ["f"]), last], [4, 3], {**first_init, **last_init})
    assert "Sigmoid" in [n.op_type for n in model.transform(ActivationsAsThresholds()).graph.node]


def test_activations_back_to_back_and_a_rank_three_tensor_compute_the_formula():
    """Quant -> Sigmoid -> Quant -> Tanh -> Quant on an (N, C, W) tensor with per-channel input scales:
    both activations become thresholds (the second reads the first's new tensors), channels on axis 1."""
    from quark.torch.extensions.brevitas._backend.targets.finn.activations import ActivationsAsThresholds

    scales = np.array([0.25, 0.5], dtype=np.float32).reshape(1, 2, 1)
    first, first_init = _quant("qi", "x", "xq", scales, 4)
    middle, middle_init = _quant("qm", "s", "sq", 0.125, 4)
    last, last_init = _quant("qo", "t", "y", 0.0625, 4)
    nodes = [first, helper.make_node("Sigmoid", ["xq"], ["s"]), middle, helper.make_node("Tanh", ["sq"], ["t"]), last]
    model = _graph(nodes, [16, 2, 3], {**first_init, **middle_init, **last_init})

    converted = model.transform(ActivationsAsThresholds())

    assert [n.op_type for n in converted.graph.node].count("MultiThreshold") == 2
    levels = np.arange(-8, 8, dtype=np.float32).reshape(16, 1, 1) * scales
    levels = np.repeat(levels, 3, axis=2)
    q = lambda v, s: np.clip(np.round(v / s), -8, 7) * s  # Quant: zero point 0, int4
    expected = q(np.tanh(q(1 / (1 + np.exp(-levels.astype(np.float64))), 0.125)), 0.0625)
    np.testing.assert_array_equal(_run(converted, levels), expected.astype(np.float32))


@pytest.mark.parametrize(
    "case",
    ["spatial constant", "zero point", "wide output", "FINN's own"],
)
def test_what_thresholds_cannot_take_or_finn_takes_itself_is_left_as_it_is(case):
    """A constant varying along H / W inside the activation, an output quantizer with a zero point or
    wider than 8 bits: not tabulated (FINN's rules refuse the last two); a Relu-and-scale region:
    FINN's own conversion."""
    from quark.torch.extensions.brevitas._backend.targets.finn.activations import ActivationsAsThresholds

    first, first_init = _quant("qi", "x", "xq", 0.25, 4)
    last, last_init = _quant("qo", "f", "y", 0.125, 9 if case == "wide output" else 4)
    if case == "zero point":
        last_init["qo_zero"] = 1.0
    body = {
        "spatial constant": [helper.make_node("Sigmoid", ["xq"], ["s"]), helper.make_node("Add", ["s", "c"], ["f"])],
        "FINN's own": [helper.make_node("Relu", ["xq"], ["s"]), helper.make_node("Mul", ["s", "c"], ["f"])],
    }.get(case, [helper.make_node("Sigmoid", ["xq"], ["f"])])
    constant = np.arange(9, dtype=np.float32).reshape(1, 1, 3, 3) if case == "spatial constant" else 2.0
    model = _graph([first, *body, last], [4, 1, 3, 3], {**first_init, **last_init, "c": constant})
    before = [n.op_type for n in model.graph.node]
    assert [n.op_type for n in model.transform(ActivationsAsThresholds()).graph.node] == before


def test_a_product_of_two_computed_tensors_is_an_activation_too():
    """relu(x) * relu(x) (a square on the positive side): FINN takes neither the product of two streams
    nor a Quant after it as thresholds; the pass does."""
    from quark.torch.extensions.brevitas._backend.targets.finn.activations import ActivationsAsThresholds

    first, first_init = _quant("qi", "x", "xq", 0.25, 4)
    last, last_init = _quant("qo", "f", "y", 0.5, 4)
    nodes = [first, helper.make_node("Relu", ["xq"], ["r"]), helper.make_node("Mul", ["r", "r"], ["f"]), last]
    model = _graph(nodes, [16, 1], {**first_init, **last_init})
    converted = model.transform(ActivationsAsThresholds())
    assert [n.op_type for n in converted.graph.node] == ["Quant", "MultiThreshold", "Mul"]
    levels = np.arange(-8, 8, dtype=np.float32).reshape(16, 1) * 0.25
    expected = np.clip(np.round(np.maximum(levels, 0) ** 2 / 0.5), -8, 7) * 0.5
    np.testing.assert_array_equal(_run(converted, levels), expected.astype(np.float32))
