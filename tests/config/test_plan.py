"""Resolution of a config over a model into LayerPlans, and normalisation into TensorQuant."""

from __future__ import annotations

import pytest
from torch import nn

from quark.torch.extensions.brevitas import config as ext
from quark.torch.quantization.config.config import Config, QuantizationConfig, QuantizationSpec
from quark.torch.quantization.config.type import (
    DeviceType,
)
from quark.torch.quantization.plan import LayerPlan, module_names, module_sites
from quark.torch.quantization.plan import resolve as resolve_sites
from quark.torch.quantization.tensor_quant import TensorQuant, normalise

SUPPORTED = (nn.Linear, nn.Conv2d, nn.MultiheadAttention)


def resolve(model, config, supported=SUPPORTED):
    """The plan over ``model``'s modules of the supported types, as the layerwise backend resolves it."""
    return resolve_sites(config, module_sites(model, supported), module_names(model), supported)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.bn = nn.BatchNorm2d(4)
        self.fc1 = nn.Linear(4, 4)
        self.fc2 = nn.Linear(4, 4)
        self.attn = nn.MultiheadAttention(4, 2)
        self.head = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))


ALL_PLANNED = ["conv", "fc1", "fc2", "attn", "head.0", "head.2"]


@pytest.fixture(scope="module")
def net():
    return Net()


def S(dtype="int8", **kw):
    return QuantizationSpec(dtype=dtype, **kw)


INT8 = S("int8")
UINT8 = S("uint8")
INT4 = S("int4")
UINT4 = S("uint4")


def by_name(plans):
    return {p.name: p for p in plans}


def bits(plans, role):
    return {p.name: (p.specs[role].bit_width, p.specs[role].signed) if p.specs[role] else None for p in plans}


# -- which modules are planned -------------------------------------------------------------------------


def test_global_plans_every_supported_module(net):
    plans = resolve(net, Config(QuantizationConfig(weight=INT8, input_tensors=UINT8)), SUPPORTED)
    assert [p.name for p in plans] == ALL_PLANNED
    assert all(isinstance(p, LayerPlan) and p.quantized for p in plans)
    assert by_name(plans)["conv"].module_type is nn.Conv2d
    assert by_name(plans)["attn"].module_type is nn.MultiheadAttention
    for p in plans:
        assert p.specs["output_tensors"] is None and p.specs["bias"] is None
        assert p.specs["weight"] == TensorQuant(bit_width=8, signed=True)
        assert (p.specs["input_tensors"].bit_width, p.specs["input_tensors"].signed) == (8, False)


def test_empty_global_plans_unquantized_layers(net):
    plans = resolve(net, Config(QuantizationConfig()), SUPPORTED)
    assert [p.name for p in plans] == ALL_PLANNED
    assert not any(p.quantized for p in plans)
    assert all(set(p.specs.values()) == {None} for p in plans)


def test_multihead_attention_out_proj_never_planned_separately(net):
    assert isinstance(net.attn.out_proj, nn.Linear)  # a Linear subclass ...
    targeted = Config(QuantizationConfig(weight=INT8), layer_quant_config={"attn.out_proj": QuantizationConfig(weight=INT4)})
    with pytest.raises(ValueError, match=r"'attn\.out_proj' matches no quantizable module; quantizable modules: .*attn"):
        resolve(net, targeted, SUPPORTED)
    config = Config(
        QuantizationConfig(weight=INT8),
        layer_type_quant_config={nn.Linear: QuantizationConfig(weight=UINT4)},
    )
    plans = resolve(net, config, SUPPORTED)
    names = [p.name for p in plans]
    assert "attn.out_proj" not in names  # ... planned only as part of its MultiheadAttention
    assert by_name(plans)["attn"].specs["weight"].bit_width == 8


def test_children_of_planned_module_not_planned():
    class Wrapper(nn.Module):
        def __init__(self):
            super().__init__()
            self.mha = nn.MultiheadAttention(4, 2)
            self.inner = nn.Sequential(nn.MultiheadAttention(4, 1))
            self.fc = nn.Linear(4, 4)

    plans = resolve(Wrapper(), Config(QuantizationConfig(weight=INT8)), SUPPORTED)
    assert [p.name for p in plans] == ["mha", "inner.0", "fc"]


# -- precedence: name > type > global, per role, None inherits ----------------------------------------------


def test_precedence_and_inheritance_per_role(net):
    config = Config(
        QuantizationConfig(weight=INT8, input_tensors=UINT8, bias=INT8),
        layer_type_quant_config={nn.Linear: QuantizationConfig(weight=INT4, output_tensors=UINT8)},
        layer_quant_config={"fc1": QuantizationConfig(weight=UINT4, bias=None, input_tensors=INT8)},
    )
    plans = by_name(resolve(net, config, SUPPORTED))

    fc1 = plans["fc1"]
    assert (fc1.specs["weight"].bit_width, fc1.specs["weight"].signed) == (4, False)
    assert fc1.specs["input_tensors"] == normalise(INT8, "input_tensors", "")  # name level
    assert fc1.specs["output_tensors"] == normalise(UINT8, "output_tensors", "")  # None at name level -> type level
    assert fc1.specs["bias"] == normalise(INT8, "bias", "")  # None at name and type level -> global

    fc2 = plans["fc2"]
    assert (fc2.specs["weight"].bit_width, fc2.specs["weight"].signed) == (4, True)
    assert fc2.specs["output_tensors"] == normalise(UINT8, "output_tensors", "")  # type level
    assert fc2.specs["input_tensors"] == normalise(UINT8, "input_tensors", "")  # global
    assert fc2.specs["bias"] == normalise(INT8, "bias", "")

    conv = plans["conv"]
    assert conv.specs["weight"].bit_width == 8 and conv.specs["output_tensors"] is None
    assert conv.specs["input_tensors"] == normalise(UINT8, "input_tensors", "")
    assert bits(plans.values(), "weight") == {
        "conv": (8, True),
        "fc1": (4, False),
        "fc2": (4, True),
        "attn": (8, True),
        "head.0": (4, True),
        "head.2": (4, True),
    }


def test_role_only_in_name_level(net):
    config = Config(
        QuantizationConfig(weight=INT8), layer_quant_config={"fc2": QuantizationConfig(output_tensors=UINT8)}
    )
    plans = resolve(net, config, SUPPORTED)
    assert [p.name for p in plans if p.specs["output_tensors"] is not None] == ["fc2"]
    assert by_name(plans)["fc2"].specs["weight"].bit_width == 8


def test_target_device_inherits(net):
    config = Config(
        QuantizationConfig(weight=INT8, target_device=DeviceType.CPU),
        layer_quant_config={
            "fc1": QuantizationConfig(target_device=DeviceType.IPU),
            "fc2": QuantizationConfig(),
        },
    )
    plans = by_name(resolve(net, config, SUPPORTED))
    assert plans["fc1"].target_device is DeviceType.IPU
    assert plans["fc2"].target_device is DeviceType.CPU
    assert plans["conv"].target_device is DeviceType.CPU


def test_layer_type_key_class_or_string_same_plan(net):
    g = QuantizationConfig(weight=INT8)
    t = QuantizationConfig(weight=UINT4)
    by_class = resolve(net, Config(g, layer_type_quant_config={nn.Conv2d: t}), SUPPORTED)
    by_str = resolve(net, Config(g, layer_type_quant_config={"Conv2d": t}), SUPPORTED)
    assert [(p.name, p.specs) for p in by_class] == [(p.name, p.specs) for p in by_str]
    assert by_name(by_str)["conv"].specs["weight"].bit_width == 4
    assert by_name(by_str)["fc1"].specs["weight"].bit_width == 8


def test_layer_type_multihead_attention(net):
    config = Config(
        QuantizationConfig(weight=INT8),
        layer_type_quant_config={"MultiheadAttention": QuantizationConfig(weight=INT4)},
    )
    assert bits(resolve(net, config, SUPPORTED), "weight")["attn"] == (4, True)


# -- name patterns -----------------------------------------------------------------------------------


def test_wildcard_name(net):
    config = Config(
        QuantizationConfig(weight=INT8), layer_quant_config={"head.*": QuantizationConfig(weight=INT4)}
    )
    plans = by_name(resolve(net, config, SUPPORTED))
    assert plans["head.0"].specs["weight"].bit_width == 4
    assert plans["head.2"].specs["weight"].bit_width == 4
    assert plans["fc1"].specs["weight"].bit_width == 8


def test_wildcard_fc_question_mark(net):
    config = Config(
        QuantizationConfig(weight=INT8), layer_quant_config={"fc?": QuantizationConfig(weight=UINT8)}
    )
    plans = by_name(resolve(net, config, SUPPORTED))
    assert plans["fc1"].specs["weight"].signed is False and plans["fc2"].specs["weight"].signed is False
    assert plans["conv"].specs["weight"].signed is True


@pytest.mark.parametrize("exact_first", [True, False])
def test_exact_name_beats_wildcard(net, exact_first):
    items = [("head.2", QuantizationConfig(weight=UINT4)), ("head.*", QuantizationConfig(weight=INT4))]
    if not exact_first:
        items.reverse()
    config = Config(QuantizationConfig(weight=INT8), layer_quant_config=dict(items))
    plans = by_name(resolve(net, config, SUPPORTED))
    assert (plans["head.2"].specs["weight"].bit_width, plans["head.2"].specs["weight"].signed) == (4, False)
    assert (plans["head.0"].specs["weight"].bit_width, plans["head.0"].specs["weight"].signed) == (4, True)


def test_name_patterns_are_case_sensitive(net):
    with pytest.raises(ValueError, match=r"layer_quant_config pattern 'FC1' matches no quantizable module"):
        resolve(
            net, Config(QuantizationConfig(), layer_quant_config={"FC1": QuantizationConfig()}), SUPPORTED
        )


# -- exclude -----------------------------------------------------------------------------------------


def test_exclude_single_module(net):
    plans = resolve(net, Config(QuantizationConfig(weight=INT8), exclude=["fc1"]), SUPPORTED)
    assert [p.name for p in plans] == ["conv", "fc2", "attn", "head.0", "head.2"]


def test_exclude_container_removes_descendants(net):
    plans = resolve(net, Config(QuantizationConfig(weight=INT8), exclude=["head"]), SUPPORTED)
    assert [p.name for p in plans] == ["conv", "fc1", "fc2", "attn"]


def test_exclude_wildcard(net):
    plans = resolve(net, Config(QuantizationConfig(weight=INT8), exclude=["fc*", "head.2"]), SUPPORTED)
    assert [p.name for p in plans] == ["conv", "attn", "head.0"]


def test_exclude_beats_layer_quant_config(net):
    config = Config(
        QuantizationConfig(weight=INT8),
        layer_quant_config={"head.0": QuantizationConfig(weight=INT4)},
        exclude=["head"],
    )
    assert "head.0" not in [p.name for p in resolve(net, config, SUPPORTED)]


def test_exclude_everything(net):
    assert resolve(net, Config(QuantizationConfig(weight=INT8), exclude=["*"]), SUPPORTED) == []


# -- resolve errors ----------------------------------------------------------------------------------


def test_unknown_name_pattern_lists_modules(net):
    config = Config(QuantizationConfig(), layer_quant_config={"decoder.*": QuantizationConfig(weight=INT8)})
    with pytest.raises(
        ValueError,
        match=r"layer_quant_config pattern 'decoder\.\*' matches no quantizable module; quantizable modules: conv, fc1, fc2, attn, "
        r"head\.0, head\.2$",
    ):
        resolve(net, config, SUPPORTED)


def test_exclude_pattern_matching_nothing(net):
    with pytest.raises(ValueError, match=r"exclude pattern 'fc3' matches no module; modules: conv, bn, fc1"):
        resolve(net, Config(QuantizationConfig(), exclude=["fc1", "fc3"]), SUPPORTED)


def test_long_module_list_is_truncated():
    model = nn.Sequential(*[nn.Linear(2, 2) for _ in range(40)])
    with pytest.raises(ValueError, match=r"modules: 0, 1, .*, 29, \.\.\. \(10 more\)$"):
        resolve(model, Config(QuantizationConfig(), exclude=["x"]), SUPPORTED)


@pytest.mark.parametrize("key", ["Conv2d", nn.Conv2d, "MultiheadAttention"])
def test_layer_type_not_present(key):
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    name = key if isinstance(key, str) else key.__name__
    with pytest.raises(
        ValueError,
        match=rf"layer_type_quant_config\['{name}'\] matches no module of the model; quantizable types present: \['Linear'\]",
    ):
        resolve(
            model,
            Config(QuantizationConfig(), layer_type_quant_config={key: QuantizationConfig()}),
            SUPPORTED,
        )


@pytest.mark.parametrize("key", ["BatchNorm2d", nn.BatchNorm2d, "ReLU", "Sequential", "Linearr"])
def test_layer_type_not_quantizable(net, key):
    name = key if isinstance(key, str) else key.__name__
    with pytest.raises(
        ValueError,
        match=rf"layer_type_quant_config\['{name}'\]: {name} is not a quantizable layer type; "
        r"supported: \['Conv2d', 'Linear', 'MultiheadAttention'\]",
    ):
        resolve(
            net, Config(QuantizationConfig(), layer_type_quant_config={key: QuantizationConfig()}), SUPPORTED
        )


def test_resolve_rejects_non_config(net):
    with pytest.raises(
        TypeError,
        match=r"expected quark\.torch\.quantization\.config\.config\.Config or .*got QuantizationConfig",
    ):
        resolve(net, QuantizationConfig(), SUPPORTED)


def test_resolve_reports_spec_error_with_location(net):
    config = Config(
        QuantizationConfig(), layer_quant_config={"fc2": QuantizationConfig(weight=S("fp8_e4m3", symmetric=False))}
    )
    with pytest.raises(
        ValueError,
        match=r"layer_quant_config\['fc2'\]\.weight \(module 'fc2'\): symmetric=False is not supported with dtype=Dtype\.fp8_e4m3",
    ):
        resolve(net, config, SUPPORTED)


def test_resolve_does_not_modify_model(net):
    before = [(n, type(m)) for n, m in net.named_modules()]
    resolve(net, Config(QuantizationConfig(weight=INT8), exclude=["head"]), SUPPORTED)
    assert [(n, type(m)) for n, m in net.named_modules()] == before


# -- extension flavour -------------------------------------------------------------------------------


def test_resolve_extension_config(net):
    config = ext.Config(
        ext.QuantizationConfig(
            weight=ext.QuantizationSpec(bit_width=4), input_tensors=ext.QuantizationSpec()
        ),
        pre_quant_opt_config=[],
    )
    plans = resolve(net, config, SUPPORTED)
    assert [p.name for p in plans] == ALL_PLANNED
    assert all(p.specs["weight"].bit_width == 4 and p.specs["input_tensors"].bit_width == 8 for p in plans)
