"""Graph mode (QuantizationMode.fx_graph_mode / Backend.fx): which site takes which config role,
numerics against the plain-torch reference, functional forms, per-type / per-name configs and
exclude, the summary, QAT, checkpoints, and the errors of untraceable models."""

from __future__ import annotations

import logging

import brevitas.nn as qnn
import pytest
import torch
import torch.nn.functional as F
from _reference import quant as ref
from _shared.models import batches, unit_batches
from _shared.quantize import quantize_with
from torch import fx, nn

from quark.torch.extensions.brevitas import config as ext
from quark.torch.extensions.brevitas._backend.rewrite.tracing import UntraceableModelError
from quark.torch.extensions.brevitas.graph import Add, GraphInput
from quark.torch.quantization.config.config import Config, QuantizationConfig, QuantizationSpec, TQTSpec
from quark.torch.quantization.config.type import DeviceType, Dtype, QuantizationMode, RoundType, ScaleType
from quark.torch.quantization.observer import PerTensorMinMaxObserver

GRAPH = QuantizationMode.fx_graph_mode


def spec(dtype: Dtype, **kw) -> QuantizationSpec:
    return QuantizationSpec(dtype=dtype, observer_cls=PerTensorMinMaxObserver, scale_type=ScaleType.pof2, **kw)


A8, U8, W8 = spec(Dtype.int8), spec(Dtype.uint8), spec(Dtype.int8)


def graph_config(**kw) -> Config:
    layer = kw.pop("layer", QuantizationConfig(weight=W8, input_tensors=A8))
    return Config(global_quant_config=layer, quant_mode=GRAPH, **kw)


class Residual(nn.Module):
    """y = relu(linear(x)) + x, with a functional relu."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(6, 6)

    def forward(self, x):
        return F.relu(self.linear(x)) + x


# -- numerics ---------------------------------------------------------------------------------------


def test_residual_graph_computes_the_reference_formulas_exactly():
    """Input quantizer, a linear layer taking the quantized input, the ReLU's output quantized unsigned,
    both inputs of the addition requantized to one scale, the sum requantized: written from the formulas."""
    torch.manual_seed(0)
    model = Residual().eval()
    data = batches(3, (8, 6))
    config = graph_config(layer_type_quant_config={"ReLU": QuantizationConfig(output_tensors=U8)})
    _, qmodel = quantize_with(config, model, data)

    def pof2_int8(lo, hi, signed=True):
        return ref.qparams(lo, hi, 8, signed, True, "pof2")

    w = model.linear.weight.detach()
    _, wq, _, _ = ref.fake_quant(w, 8, True, True, scale_type="pof2")
    xs = torch.cat(data)
    # calibration sees float activations (weights quantized): ranges of x, relu(h), the add's inputs and sum
    h = F.linear(xs, wq, model.linear.bias.detach())
    s_x, _, lo_x, hi_x = pof2_int8(*ref.minmax(xs))
    s_r, _, lo_r, hi_r = pof2_int8(*ref.minmax(F.relu(h)), signed=False)
    s_a, _, lo_a, hi_a = pof2_int8(*ref.minmax(torch.cat([xs, F.relu(h)])))
    s_o, _, lo_o, hi_o = pof2_int8(*ref.minmax(xs + F.relu(h)))

    x = batches(1, (8, 6), seed=7)[0]
    _, xq = ref.quantize(x, s_x, 0, lo_x, hi_x)
    _, r = ref.quantize(F.relu(F.linear(xq, wq, model.linear.bias.detach())), s_r, 0, lo_r, hi_r)
    _, a = ref.quantize(xq, s_a, 0, lo_a, hi_a)
    _, c = ref.quantize(r, s_a, 0, lo_a, hi_a)
    _, expected = ref.quantize(a + c, s_o, 0, lo_o, hi_o)
    torch.testing.assert_close(qmodel(x), expected, atol=0, rtol=0)


def test_activation_quantizers_are_calibrated_on_the_activation_output():
    """A signed quantizer after ReLU takes its range from relu(x) (max), not from the negative inputs."""
    model = nn.Sequential(nn.ReLU()).eval()
    data = [torch.linspace(-64, 4, 69).reshape(1, -1)]
    _, qmodel = quantize_with(graph_config(layer=QuantizationConfig(output_tensors=A8)), model, data)
    relu = qmodel.get_submodule("0")
    assert relu.quant.act_quant.scale().item() == 2.0**-5  # pof2 of 4 / 127.5, not of 64 / 127.5


@pytest.mark.parametrize(
    "call, cls",
    [
        (torch.relu, nn.ReLU),
        (lambda x: x.relu(), nn.ReLU),
        (lambda x: F.leaky_relu(x, 0.25), nn.LeakyReLU),
        (lambda x: F.hardtanh(x, -0.5, 0.5), nn.Hardtanh),
        (torch.sigmoid, nn.Sigmoid),
        (torch.tanh, nn.Tanh),
        (lambda x: F.gelu(x, approximate="tanh"), nn.GELU),
        (F.silu, nn.SiLU),
        (F.relu6, nn.ReLU6),
    ],
    ids=["torch.relu", "Tensor.relu", "leaky_relu", "hardtanh", "sigmoid", "tanh", "gelu", "silu", "relu6"],
)
def test_functional_activations_become_quantized_activations_with_their_arguments(call, cls):
    class Functional(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(6, 6)

        def forward(self, x):
            return call(self.linear(x))

    torch.manual_seed(0)
    model = Functional().eval()
    config = graph_config(layer=QuantizationConfig(), layer_type_quant_config={cls: QuantizationConfig(output_tensors=A8)})
    quantizer, qmodel = quantize_with(config, model, batches(3, (8, 6)))
    (plan,) = [p for p in quantizer.plans if p.quantized]
    site = qmodel.get_submodule(plan.name)
    assert plan.specs["output_tensors"] is not None and isinstance(site.quant, qnn.QuantIdentity)
    x = batches(1, (8, 6), seed=3)[0]
    scale = site.quant.act_quant.scale()
    expected = torch.clamp(torch.round(call(model.linear(x)) / scale), -128, 127) * scale
    torch.testing.assert_close(qmodel(x), expected, atol=0, rtol=0)


@pytest.fixture
def rules_off(monkeypatch):
    """The rewrite for a target is under test, not the target's rules, which quantize_model checks
    on the calibrated model (a config here leaves the network input float, as FINN refuses)."""
    from quark.torch.extensions.brevitas import api

    monkeypatch.setattr(api, "_check_target", lambda model, plans: None)


def test_average_pooling_for_finn_truncates_the_sum_on_the_input_grid(rules_off):
    """For the FINN target, a windowed average pool without output_tensors is Brevitas'
    TruncAvgPool2d: floor(sum / 4) of the input's integers, on the input's grid (FINN's
    QuantAvgPool2d, its Pool layer)."""
    model = nn.Sequential(nn.ReLU(), nn.AvgPool2d(2)).eval()
    data = [torch.randn(2, 3, 4, 4, generator=torch.Generator().manual_seed(s)) for s in range(2)]
    config = graph_config(
        layer=QuantizationConfig(target_device=DeviceType.FINN),
        layer_type_quant_config={"ReLU": QuantizationConfig(output_tensors=U8)},
    )
    _, qmodel = quantize_with(config, model, data)
    assert isinstance(qmodel.get_submodule("1"), qnn.TruncAvgPool2d)
    x = data[0]
    scale = qmodel.get_submodule("0").quant.act_quant.scale()
    codes = torch.clamp(torch.round(F.relu(x) / scale), 0, 255)
    expected = torch.floor(F.avg_pool2d(codes, 2, divisor_override=1) / 4) * scale  # the sum, shifted right by 2
    torch.testing.assert_close(qmodel(x), expected, atol=0, rtol=0)


@pytest.mark.parametrize(
    "pool, target",
    [(nn.AvgPool2d(2), None), (nn.AdaptiveAvgPool2d(1), None), (nn.AdaptiveAvgPool2d(1), DeviceType.FINN)],
    ids=["windowed", "global", "global-finn"],
)
def test_average_pooling_is_requantized_with_the_input_spec_where_the_target_does_not_truncate(pool, target, rules_off):
    """Without output_tensors, QDQ targets (and no target) take the float average requantized with the
    input's spec: round(mean / s) * s on a grid of its own (calibrated on the averages); FINN takes a
    global mean so (its GlobalAccPool sums, the 1/N folds into the next thresholds)."""
    model = nn.Sequential(nn.ReLU(), pool).eval()
    data = [torch.rand(4, 3, 4, 4, generator=torch.Generator().manual_seed(s)) for s in range(2)]
    config = graph_config(
        layer=QuantizationConfig(target_device=target),
        layer_type_quant_config={"ReLU": QuantizationConfig(output_tensors=U8)},
    )
    _, qmodel = quantize_with(config, model, data)
    quantized = qmodel.get_submodule("1")
    assert type(quantized.pool) is type(pool) and isinstance(quantized.output_quant, qnn.QuantIdentity)
    x = data[0]
    s_in = qmodel.get_submodule("0").quant.act_quant.scale()
    s_out = quantized.output_quant.act_quant.scale()
    assert s_out <= s_in  # calibrated on the averages, whose range is not larger than the input's
    codes_in = torch.clamp(torch.round(F.relu(x) / s_in), 0, 255)
    mean = pool(codes_in * s_in)
    expected = torch.clamp(torch.round(mean / s_out), 0, 255) * s_out
    torch.testing.assert_close(qmodel(x), expected, atol=0, rtol=0)


def test_average_pooling_with_an_output_spec_is_requantized():
    model = nn.Sequential(nn.ReLU(), nn.AdaptiveAvgPool2d(1)).eval()
    data = [torch.rand(2, 3, 4, 4) for _ in range(2)]
    config = graph_config(
        layer=QuantizationConfig(),
        layer_type_quant_config={
            "ReLU": QuantizationConfig(output_tensors=U8),
            nn.AdaptiveAvgPool2d: QuantizationConfig(output_tensors=U8),
        },
    )
    _, qmodel = quantize_with(config, model, data)
    pool = qmodel.get_submodule("1")
    assert isinstance(pool.pool, nn.AdaptiveAvgPool2d) and isinstance(pool.output_quant, qnn.QuantIdentity)


def test_a_spatial_mean_becomes_global_average_pooling():
    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 2)

        def forward(self, x):
            return self.fc(torch.relu(x).mean((2, 3)))

    quantizer, qmodel = quantize_with(graph_config(), Head().eval(), [torch.randn(2, 3, 4, 4) for _ in range(2)])
    assert isinstance(qmodel.get_submodule("mean").pool, nn.AdaptiveAvgPool2d)  # requantized, see above
    assert next(p for p in quantizer.plans if p.name == "fc").upstream == {"input_tensors": "mean"}
    assert qmodel(torch.randn(2, 3, 4, 4)).shape == (2, 2)


# -- sites, roles, summary ------------------------------------------------------------------------


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(4, 4, 3, padding=1)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x):
        return torch.relu(x + self.conv2(self.relu(self.conv1(x))))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 4, 3, padding=1)
        self.act = nn.ReLU()
        self.block = Block()
        self.pool = nn.MaxPool2d(2)
        self.head = nn.Linear(4 * 2 * 2, 3)

    def forward(self, x):
        return self.head(torch.flatten(self.pool(self.block(self.act(self.stem(x)))), 1))


def test_sites_are_named_by_the_module_path_and_the_summary_shows_what_is_quantized_upstream():
    torch.manual_seed(0)
    quantizer, _ = quantize_with(graph_config(), Net().eval(), unit_batches(2, (2, 3, 4, 4), seed=0))
    plans = {p.name: p for p in quantizer.plans}
    assert list(plans) == [
        "x", "stem", "act", "block.conv1", "block.relu", "block.conv2", "block.add", "block.relu_1", "head"
    ]  # fmt: skip
    assert plans["x"].module_type is GraphInput and plans["block.add"].module_type is Add
    assert plans["head"].upstream == {"input_tensors": "block.relu_1"}  # through max pooling and flatten
    assert plans["block.conv1"].upstream == {"input_tensors": "act"}
    summary = quantizer.summary().splitlines()
    assert "= block.relu_1" in next(line for line in summary if line.startswith("head "))
    act = next(line for line in summary if line.startswith("act "))
    assert act.split()[2:4] == ["-", "int8"]  # input_tensors '-', output_tensors from input_tensors


def test_a_compute_layer_after_a_float_operation_quantizes_its_own_input():
    model = nn.Sequential(nn.Linear(6, 6), nn.Softplus(), nn.Linear(6, 2)).eval()
    quantizer, qmodel = quantize_with(graph_config(), model, batches(3, (8, 6)))
    plans = {p.name: p for p in quantizer.plans}
    assert plans["0"].upstream and not plans["2"].upstream
    assert qmodel.get_submodule("2").input_quant.is_quant_enabled
    assert not qmodel.get_submodule("0").input_quant.is_quant_enabled


@pytest.mark.parametrize("norm", [nn.LayerNorm(6), nn.Softmax(dim=-1)], ids=["LayerNorm", "Softmax"])
def test_layer_norm_and_softmax_are_sites_whose_output_the_next_layer_takes_quantized(norm):
    """The NPU runs them as DQ -> op -> Q: their output is quantized once, where it is produced."""
    model = nn.Sequential(nn.Linear(6, 6), norm, nn.Linear(6, 2)).eval()
    quantizer, qmodel = quantize_with(graph_config(), model, batches(3, (8, 6)))
    plans = {p.name: p for p in quantizer.plans}
    assert plans["1"].module_type is type(norm) and plans["1"].specs["output_tensors"] is not None
    assert plans["2"].upstream == {"input_tensors": "1"}
    assert not qmodel.get_submodule("2").input_quant.is_quant_enabled
    x = torch.randn(4, 6)
    site = qmodel.get_submodule("1")
    out = site(qmodel.get_submodule("0")(x))
    scale, zero_point = site.quant.act_quant.scale(), site.quant.act_quant.zero_point()
    grid = out.value / scale + zero_point
    torch.testing.assert_close(grid, torch.round(grid), atol=1e-4, rtol=0)  # on the output quantizer's grid
    torch.testing.assert_close(out.value, site.quant(norm(qmodel.get_submodule("0")(x))).value)


def test_a_layer_specific_input_spec_requantizes_the_upstream_tensor():
    config = graph_config(layer_quant_config={"block.conv1": QuantizationConfig(input_tensors=spec(Dtype.int4))})
    quantizer, qmodel = quantize_with(config, Net().eval(), unit_batches(2, (2, 3, 4, 4), seed=0))
    plan = next(p for p in quantizer.plans if p.name == "block.conv1")
    assert not plan.upstream and plan.specs["input_tensors"].bit_width == 4
    assert qmodel.get_submodule("block.conv1").input_quant.bit_width() == 4


def test_output_tensors_is_preferred_over_input_tensors_at_the_same_level_and_specific_levels_win():
    config = graph_config(
        layer=QuantizationConfig(weight=W8, input_tensors=A8, output_tensors=spec(Dtype.int4)),
        layer_type_quant_config={nn.ReLU: QuantizationConfig(input_tensors=U8)},
    )
    quantizer, _ = quantize_with(config, Net().eval(), unit_batches(2, (2, 3, 4, 4), seed=0))
    plans = {p.name: p for p in quantizer.plans}
    assert plans["act"].specs["output_tensors"].signed is False  # type level (input_tensors) over global
    assert plans["act"].origins["output_tensors"] == "layer_type_quant_config['ReLU'].input_tensors"
    assert plans["block.add"].specs["output_tensors"].bit_width == 4  # global output_tensors first


def test_type_configs_for_activations_and_additions_and_exclude_of_a_block():
    config = graph_config(
        layer_type_quant_config={"ReLU": QuantizationConfig(output_tensors=U8), "Add": QuantizationConfig(input_tensors=A8)},
        exclude=["block"],
    )
    quantizer, qmodel = quantize_with(config, Net().eval(), unit_batches(2, (2, 3, 4, 4), seed=0))
    names = [p.name for p in quantizer.plans]
    assert names == ["x", "stem", "act", "head"]  # everything inside block stays float
    assert isinstance(qmodel.get_submodule("block.add"), Add)  # the float add module
    assert isinstance(qmodel.get_submodule("block.conv1"), nn.Conv2d)
    assert not next(p for p in quantizer.plans if p.name == "head").upstream  # block.relu_1 is float


def test_graph_site_types_are_refused_in_layerwise_mode_with_the_supported_list():
    config = Config(
        global_quant_config=QuantizationConfig(weight=W8),
        layer_type_quant_config={"ReLU": QuantizationConfig(output_tensors=U8)},
    )
    with pytest.raises(ValueError, match=r"layer_type_quant_config\['ReLU'\]: ReLU is not a quantizable layer type"):
        quantize_with(config, Net().eval(), unit_batches(2, (2, 3, 4, 4), seed=0))


def test_the_extension_config_selects_graph_mode_with_backend_fx():
    config = ext.Config(
        global_quant_config=ext.QuantizationConfig(weight=ext.QuantizationSpec(), input_tensors=ext.QuantizationSpec()),
        pre_quant_opt_config=[],
        backend=ext.Backend.fx,
    )
    quantizer, qmodel = quantize_with(config, Net().eval(), unit_batches(2, (2, 3, 4, 4), seed=0))
    assert isinstance(qmodel, fx.GraphModule) and quantizer.rewriter.name == "fx"
    assert {p.module_type for p in quantizer.plans} >= {GraphInput, Add, nn.ReLU}


class TwoBranches(nn.Module):
    """Two ReLU branches added and concatenated (non-negative), and one added with a signed conv output."""

    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = nn.Conv2d(3, 4, 1), nn.Conv2d(3, 4, 1), nn.Conv2d(3, 4, 1)

    def forward(self, x):
        a, b = torch.relu(self.a(x)), torch.relu(self.b(x))
        joined = torch.cat([a + b, F.max_pool2d(a, 1)], dim=1)
        return joined, a + self.c(x)


def test_the_extension_config_in_graph_mode_gives_non_negative_tensors_unsigned_grids_as_brevitas():
    """Brevitas' graph quantization (UNSIGNED_ACT_TUPLE): ReLU outputs, and additions and concatenations
    of non-negative tensors only (through max pooling), are unsigned; an addition with a signed operand
    stays signed; the main API's dtype is honoured as written."""
    spec = ext.QuantizationSpec(bit_width=4)
    config = ext.Config(
        global_quant_config=ext.QuantizationConfig(weight=spec, input_tensors=spec),
        pre_quant_opt_config=[],
        backend=ext.Backend.fx,
    )
    model = TwoBranches().eval()
    data = [torch.randn(2, 3, 4, 4, generator=torch.Generator().manual_seed(s)) for s in range(2)]
    quantizer, qmodel = quantize_with(config, model, data)
    plans = {p.name: p for p in quantizer.plans}
    produced = {name: plans[name].specs["output_tensors"] or plans[name].specs["input_tensors"] for name in plans}
    assert {name: produced[name].signed for name in ("relu", "relu_1", "add", "cat", "add_1")} == {
        "relu": False, "relu_1": False, "add": False, "cat": False, "add_1": True,
    }  # fmt: skip
    assert plans["add"].specs["input_tensors"].signed is False and plans["add_1"].specs["input_tensors"].signed
    assert "Brevitas' convention" in plans["relu"].origins["output_tensors"]
    assert qmodel.get_submodule("relu").quant.act_quant.is_signed is False  # the quantizer built: 0..15
    codes = qmodel.get_submodule("relu").quant(torch.relu(torch.randn(64))).value / qmodel.get_submodule(
        "relu"
    ).quant.act_quant.scale()
    assert codes.min() >= 0 and torch.round(codes.max()) == 15  # the whole unsigned grid is used
    main_config = graph_config(layer=QuantizationConfig(weight=W8, input_tensors=A8))
    main_plans = {p.name: p for p in quantize_with(main_config, TwoBranches().eval(), data)[0].plans}
    assert main_plans["relu"].specs["output_tensors"].signed  # int8 as written


def test_operations_left_float_are_named_in_a_warning(caplog):
    model = nn.Sequential(nn.Linear(6, 6), nn.Softplus(), nn.GroupNorm(2, 6), nn.Dropout(0.1), nn.Linear(6, 2)).eval()
    with caplog.at_level(logging.WARNING, logger="quark"):
        quantize_with(graph_config(), model)
    # dropout is the identity where graphs are exported: it passes the quantized tensor on
    assert "graph mode leaves these operations float (what follows quantizes its own input): 1 (Softplus), 2 (GroupNorm)\n" in caplog.text


def test_a_network_input_feeding_only_an_embedding_is_not_quantized():
    model = nn.Sequential(nn.Embedding(10, 6), nn.Linear(6, 2)).eval()
    data = [torch.randint(0, 10, (4, 3)) for _ in range(2)]
    quantizer, qmodel = quantize_with(graph_config(), model, data)
    assert "input" not in [p.name for p in quantizer.plans] and GraphInput not in {p.module_type for p in quantizer.plans}
    assert qmodel(data[0]).shape == (4, 3, 2)


# -- QAT and checkpoints ----------------------------------------------------------------------------


def test_graph_mode_trains_thresholds_and_weights_and_reloads_bit_exactly():
    tqt = lambda d: QuantizationSpec(
        dtype=d, scale_type=ScaleType.pof2, round_method=RoundType.half_up, qat_spec=TQTSpec()
    )
    config = graph_config(
        layer=QuantizationConfig(weight=tqt(Dtype.int4), input_tensors=tqt(Dtype.int4)),
        layer_type_quant_config={"ReLU": QuantizationConfig(output_tensors=tqt(Dtype.uint4))},
    )
    torch.manual_seed(0)
    _, qmodel = quantize_with(config, Net(), unit_batches(2, (2, 3, 4, 4), seed=0))
    thresholds = {n: p.detach().clone() for n, p in qmodel.named_parameters() if "scaling_impl" in n}
    assert len(thresholds) >= 8  # input, 3 ReLUs, the add's input and output, ...
    optimizer = torch.optim.Adam(qmodel.parameters(), lr=1e-2)
    x, y = unit_batches(1, (2, 3, 4, 4), seed=4)[0], torch.tensor([0, 2])
    qmodel.train()
    losses = []
    for _ in range(4):
        optimizer.zero_grad()
        loss = F.cross_entropy(qmodel(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    assert any(not torch.equal(p, thresholds[n]) for n, p in qmodel.named_parameters() if n in thresholds)

    _, fresh = quantize_with(config, Net(), batches(3, (8, 6)), calibrate=False)
    fresh.load_state_dict(qmodel.state_dict())
    qmodel.eval(), fresh.eval()
    torch.testing.assert_close(fresh(x), qmodel(x), atol=0, rtol=0)


# -- untraceable models -----------------------------------------------------------------------------


class DataDependent(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(6, 6)

    def forward(self, x):
        if x.sum() > 0:  # control flow on a tensor value
            return self.linear(x)
        return x


class Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = DataDependent()

    def forward(self, x):
        return self.inner(x)


def test_an_untraceable_model_names_the_module_the_line_and_the_ways_out():
    with pytest.raises(
        UntraceableModelError,
        match=r"graph mode: torch.fx could not trace module 'inner' \(DataDependent\) at .*test_graph.py:\d+: "
        r"`if x.sum\(\) > 0:.*`: TraceError: .*Use the layerwise backend .*concrete_args.*is_leaf_module",
    ):
        quantize_with(graph_config(), Outer().eval(), batches(3, (8, 6)))


def test_a_traced_graph_module_is_taken_as_it_is():
    """The way out the error names: trace with a leaf module, then quantize the GraphModule."""

    class Leaves(fx.Tracer):
        def is_leaf_module(self, m, qualname):
            return isinstance(m, DataDependent) or super().is_leaf_module(m, qualname)

    model = Outer().eval()
    traced = fx.GraphModule(model, Leaves().trace(model))
    quantizer, qmodel = quantize_with(graph_config(), traced, batches(3, (8, 6)))
    assert [p.name for p in quantizer.plans] == ["x"]  # the leaf stays float, named in the warning
    x = batches(1, (8, 6))[0]
    assert qmodel(x).shape == x.shape
