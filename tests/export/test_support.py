"""The supported-layer table per format: every row exports and verifies; what the table and the
rules refuse is refused before export, naming the modules; the refusals are real (without the
check, the exporter fails)."""

from __future__ import annotations

import dataclasses

import brevitas.nn as qnn
import pytest
import torch
from _shared import REPO
from _shared.configs import A8, W8, W8A8, layer_config
from _shared.quantize import quantize
from torch import nn

from quark.torch.extensions.brevitas._backend.export import support
from quark.torch.extensions.brevitas._backend.inventory import quantizers
from quark.torch.extensions.brevitas._backend.rewrite.graph import QuantConcat
from quark.torch.extensions.brevitas.api import (
    ExportFailedError,
    ExportFormat,
    ExportVerificationError,
    ModelExporter,
    UnsupportedExportError,
)
from quark.torch.extensions.brevitas.presets import finn
from quark.torch.quantization.config.config import QuantizationSpec
from quark.torch.quantization.config.type import (
    DeviceType,
    Dtype,
    QSchemeType,
    QuantizationMode,
    RoundType,
    ScaleType,
    ZeroPointType,
)
from quark.torch.quantization.observer import PerChannelMinMaxObserver, PerTensorMinMaxObserver

METHODS = {ExportFormat.qcdq: "export_onnx_model", ExportFormat.qonnx: "export_qonnx_model"}
W8_PER_TENSOR = QuantizationSpec(dtype=Dtype.int8, observer_cls=PerTensorMinMaxObserver)


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x):
        return self.attn(x, x, x, need_weights=False)[0]


class Residual(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(8, 8)

    def forward(self, x):
        return x + self.linear(x)


class Concat(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 4), nn.Linear(8, 4)

    def forward(self, x):
        return torch.cat([self.a(x), self.b(x)], dim=1)


def _pooled(pool: nn.Module) -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), pool, nn.Flatten(), nn.LazyLinear(2))


def _stock(layer_cls):
    """A stock Brevitas activation layer in front of a float linear layer (no Quark spec)."""
    return lambda: nn.Sequential(layer_cls(return_quant_tensor=False), nn.Linear(8, 4))


def _stock_global_pool() -> nn.Module:
    """Brevitas' truncating global pool as a user builds it (graph mode requantizes a global mean)."""
    from brevitas.quant.scaled_int import TruncTo8bit

    return nn.Sequential(
        qnn.QuantReLU(return_quant_tensor=True),
        qnn.TruncAdaptiveAvgPool2d(output_size=1, trunc_quant=TruncTo8bit, return_quant_tensor=False),
        nn.Flatten(),
        nn.Linear(3, 2),
    )


#: table row -> (model builder, example input shape, quantized by ModelQuantizer in: QuantizationMode
#: or None for a stock Brevitas model; FINN_GRAPH: graph mode for the FINN target)
EAGER, GRAPH, FINN_GRAPH = QuantizationMode.eager_mode, QuantizationMode.fx_graph_mode, "finn-graph"
ROWS = {
    qnn.QuantLinear: (lambda: nn.Sequential(nn.Linear(8, 4)), (2, 8), EAGER),
    qnn.QuantConv1d: (lambda: nn.Sequential(nn.Conv1d(3, 4, 3)), (2, 3, 8), EAGER),
    qnn.QuantConv2d: (lambda: nn.Sequential(nn.Conv2d(3, 4, 3)), (2, 3, 6, 6), EAGER),
    qnn.QuantConv3d: (lambda: nn.Sequential(nn.Conv3d(2, 3, 3)), (1, 2, 4, 4, 4), EAGER),
    qnn.QuantConvTranspose1d: (lambda: nn.Sequential(nn.ConvTranspose1d(3, 4, 3)), (2, 3, 6), EAGER),
    qnn.QuantConvTranspose2d: (lambda: nn.Sequential(nn.ConvTranspose2d(3, 4, 3)), (2, 3, 5, 5), EAGER),
    qnn.QuantConvTranspose3d: (lambda: nn.Sequential(nn.ConvTranspose3d(2, 3, 3)), (1, 2, 3, 3, 3), EAGER),
    qnn.QuantMultiheadAttention: (Attention, (2, 5, 8), EAGER),
    qnn.QuantIdentity: (_stock(qnn.QuantIdentity), (2, 8), None),
    qnn.QuantReLU: (_stock(qnn.QuantReLU), (2, 8), None),
    qnn.QuantEltwiseAdd: (Residual, (2, 8), GRAPH),
    QuantConcat: (Concat, (2, 8), GRAPH),
    qnn.TruncAvgPool2d: (lambda: _pooled(nn.AvgPool2d(2)), (2, 3, 4, 4), FINN_GRAPH),
    qnn.TruncAdaptiveAvgPool2d: (_stock_global_pool, (2, 3, 4, 4), None),
}
#: rows whose layer exists only without an output spec (an average pool with one is requantized)
NO_OUTPUT = {qnn.TruncAvgPool2d}


def test_every_row_of_the_table_has_a_case():
    assert set(ROWS) == set(support.LAYER_FORMATS)


def _build(row):
    build, shape, mode = ROWS[row]
    torch.manual_seed(0)
    model = build()
    if mode is not None:
        model(torch.randn(*shape))  # lazy layers take their shapes
        output = {} if row in NO_OUTPUT else {"output_tensors": A8}
        cfg = layer_config(weight=W8_PER_TENSOR, input_tensors=A8, **output)
        cfg.quant_mode = mode
        if mode == FINN_GRAPH:  # FINN's target truncates windowed average pools
            cfg = finn(weight_bits=8, act_bits=8)
        model = quantize(cfg, model, [torch.randn(*shape) for _ in range(2)])
    return model.eval(), torch.randn(*shape)


@pytest.mark.parametrize(
    "row, fmt",
    [(r, f) for r, formats in support.LAYER_FORMATS.items() for f in sorted(formats, key=str)],
    ids=lambda v: getattr(v, "__name__", getattr(v, "value", v)),
)
def test_table_row_exports_and_verifies(onnx_path, row, fmt):
    model, x = _build(row)
    assert any(type(m) is row for m in model.modules())
    report = getattr(ModelExporter(onnx_path), METHODS[fmt])(model, x)
    assert report.passed and (report.max_diff_lsb is None or report.max_diff_lsb <= 1)


@pytest.mark.parametrize("fmt", list(ExportFormat))
def test_per_channel_transposed_convolution_with_quantized_input_exports_exactly(onnx_path, fmt):
    """Output-channel scales (ch_axis=1 of a transposed convolution's weight) and a quantized input."""
    torch.manual_seed(0)
    pof2 = {"observer_cls": PerChannelMinMaxObserver, "qscheme": QSchemeType.per_channel, "ch_axis": 1}
    model = quantize(
        layer_config(weight=QuantizationSpec(dtype=Dtype.int8, scale_type=ScaleType.pof2, **pof2), input_tensors=QuantizationSpec(dtype=Dtype.int8, scale_type=ScaleType.pof2)),
        nn.Sequential(nn.ConvTranspose2d(4, 3, 3)),
        [torch.randn(2, 4, 6, 6) for _ in range(2)],
    )
    report = getattr(ModelExporter(onnx_path), METHODS[fmt])(model, torch.randn(2, 4, 6, 6))
    assert report.passed and report.max_abs_diff == 0


@pytest.mark.parametrize("fmt", list(ExportFormat))
def test_per_channel_transposed_convolution_with_float_input_exports(onnx_path, fmt):
    torch.manual_seed(0)
    model = quantize(
        layer_config(weight=QuantizationSpec(
                dtype=Dtype.int8,
                observer_cls=PerChannelMinMaxObserver,
                qscheme=QSchemeType.per_channel,
                ch_axis=1,
            )),
        nn.Sequential(nn.ConvTranspose2d(4, 3, 3)),
        None,
    )
    assert getattr(ModelExporter(onnx_path), METHODS[fmt])(model, torch.randn(2, 4, 5, 5)).passed


def test_a_truncating_average_pool_is_refused_by_qcdq_with_the_fix(onnx_path):
    model, x = _build(qnn.TruncAvgPool2d)
    with pytest.raises(
        UnsupportedExportError,
        match=r"module '2' \(TruncAvgPool2d\): a truncating average pool; qcdq allows a requantized average "
        r"\(graph mode builds one for every target but FINN\)",
    ):
        ModelExporter(onnx_path).export_onnx_model(model, x)


def test_a_layer_outside_the_table_is_refused_with_the_exportable_list(onnx_path):
    model = nn.Sequential(nn.Linear(8, 4), qnn.QuantSigmoid(return_quant_tensor=False))
    with pytest.raises(
        UnsupportedExportError,
        match=r"module '1' \(QuantSigmoid\): no qcdq export; qcdq allows the exportable layers \[.*'QuantConv1d'",
    ):
        ModelExporter(onnx_path).export_onnx_model(model, torch.randn(2, 8))


def test_every_offending_quantizer_is_listed_at_once(onnx_path):
    spec = QuantizationSpec(dtype=Dtype.int16, observer_cls=PerTensorMinMaxObserver)
    torch.manual_seed(0)
    model = quantize(
        layer_config(weight=spec),
        nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2)),
        [torch.randn(4, 8)],
    )
    with pytest.raises(UnsupportedExportError) as info:
        ModelExporter(onnx_path).export_onnx_model(model, torch.randn(2, 8))
    assert [p.split(":")[0] for p in info.value.problems] == [
        "quantizer '0.weight_quant' (weight)",
        "quantizer '2.weight_quant' (weight)",
    ]
    assert "cannot export to qcdq (TorchScript exporter)" in str(info.value)


def test_dynamo_rows_are_refused_before_export(onnx_path):
    torch.manual_seed(0)
    model = quantize(W8A8, Attention(), [torch.randn(2, 5, 8)])
    for method in METHODS.values():
        with pytest.raises(
            UnsupportedExportError,
            match=r"module 'attn' \(QuantMultiheadAttention\): dynamo=True; (qcdq|qonnx) allows dynamo=False",
        ):
            getattr(ModelExporter(onnx_path, dynamo=True), method)(model, torch.randn(2, 5, 8))
    group = QuantizationSpec(
        dtype=Dtype.int4,
        observer_cls=PerChannelMinMaxObserver,
        qscheme=QSchemeType.per_group,
        ch_axis=1,
        group_size=4,
    )
    model = quantize(layer_config(weight=group), nn.Sequential(nn.Linear(8, 4)), None)
    with pytest.raises(
        UnsupportedExportError,
        match=r"'0.weight_quant' \(weight\): qscheme=per_group; qonnx allows per_tensor, per_channel \(or dynamo=False\)",
    ):
        ModelExporter(onnx_path, dynamo=True).export_qonnx_model(model, torch.randn(2, 8))


def test_problems_of_a_supported_model_are_empty():
    torch.manual_seed(0)
    model = quantize(W8A8, nn.Sequential(nn.Linear(8, 4)), [torch.randn(2, 8)])
    assert all(support.problems(model, fmt, dynamo=False) == [] for fmt in ExportFormat)
    assert [(q.name, q.role) for q in quantizers(model) if q.spec is not None] == [
        ("0.input_quant", "activation"),
        ("0.weight_quant", "weight"),
    ]


FLOOR_W = QuantizationSpec(
    dtype=Dtype.int8,
    observer_cls=PerTensorMinMaxObserver,
    scale_type=ScaleType.pof2,
    round_method=RoundType.floor,
)
GROUP_W = QuantizationSpec(
    dtype=Dtype.int4,
    observer_cls=PerChannelMinMaxObserver,
    qscheme=QSchemeType.per_group,
    ch_axis=1,
    group_size=4,
)
A8_POF2 = QuantizationSpec(dtype=Dtype.int8, observer_cls=PerTensorMinMaxObserver, scale_type=ScaleType.pof2)


@pytest.mark.slow
@pytest.mark.parametrize("fmt", list(ExportFormat))
@pytest.mark.parametrize(
    "weight, match, without_check",
    [
        (
            FLOOR_W,
            r"'0.weight_quant' \(weight\): round_method=floor; .* allows half_even \(or dynamo=False\)",
            ExportVerificationError,
        ),
        (
            GROUP_W,
            r"'0.weight_quant' \(weight\): qscheme=per_group; .* allows per_tensor, per_channel",
            ExportFailedError,
        ),
    ],
    ids=["floor-weights", "per-group"],
)
def test_dynamo_weight_rules_are_refused_and_real(onnx_path, monkeypatch, fmt, weight, match, without_check):
    torch.manual_seed(0)
    model = quantize(
        layer_config(weight=weight, input_tensors=A8_POF2, output_tensors=A8_POF2),
        nn.Sequential(nn.Linear(16, 8, bias=False)),
        [torch.randn(4, 16)],
    )
    x = torch.randn(64, 16)
    with pytest.raises(UnsupportedExportError, match=match):
        getattr(ModelExporter(onnx_path, dynamo=True), METHODS[fmt])(model, x)
    monkeypatch.setattr(support, "check", lambda *args: None)
    with pytest.raises(without_check):
        getattr(ModelExporter(onnx_path, dynamo=True), METHODS[fmt])(model, x)
    assert getattr(ModelExporter(onnx_path), METHODS[fmt])(
        model, x
    ).passed  # the TorchScript exporter handles it


def test_docs_embed_the_current_support_table():

    docs = (REPO / "docs" / "export.md").read_text()
    assert support.markdown() in docs, "docs/export.md: paste the output of support.markdown()"


_DYNAMIC = QuantizationSpec(dtype=Dtype.uint8, symmetric=False, is_dynamic=True)
_FLOOR_A = QuantizationSpec(
    dtype=Dtype.int8, observer_cls=PerTensorMinMaxObserver, round_method=RoundType.floor
)
_A16 = QuantizationSpec(dtype=Dtype.int16, observer_cls=PerTensorMinMaxObserver)
_FLOAT_ZP = QuantizationSpec(
    dtype=Dtype.uint8,
    observer_cls=PerTensorMinMaxObserver,
    symmetric=False,
    zero_point_type=ZeroPointType.float32,
)
_B32 = QuantizationSpec(dtype=Dtype.int32)


@pytest.mark.parametrize(
    "roles, fmt, dynamo, without_check",
    [
        ({"input_tensors": _DYNAMIC}, ExportFormat.qonnx, False, ExportFailedError),
        ({"input_tensors": _DYNAMIC}, ExportFormat.qcdq, False, ExportFailedError),
        ({"input_tensors": _FLOOR_A}, ExportFormat.qcdq, False, ExportVerificationError),
        ({"weight": _A16}, ExportFormat.qcdq, False, ExportFailedError),
        ({"input_tensors": _FLOAT_ZP}, ExportFormat.qcdq, False, ExportVerificationError),
        ({"input_tensors": A8, "bias": _B32}, ExportFormat.qcdq, True, ExportFailedError),
        ({"weight": QuantizationSpec(dtype=Dtype.bipolar)}, ExportFormat.qcdq, False, ExportFailedError),
    ],
    ids=[
        "dynamic-qonnx",
        "dynamic-qcdq",
        "floor-qcdq",
        "int16-weight-qcdq",
        "float-zero-point-qcdq",
        "int32-bias-qcdq-dynamo",
        "bipolar-weight-qcdq",
    ],
)
def test_every_spec_refusal_is_real(onnx_path, monkeypatch, roles, fmt, dynamo, without_check):
    """Without the check, each refused spec fails in the exporter or gives a graph that differs."""
    torch.manual_seed(0)
    model = quantize(
        layer_config(**{"weight": W8, **roles}),
        nn.Sequential(nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 4)),
        [torch.randn(4, 16) + 0.5 for _ in range(2)],
    )
    x = torch.randn(64, 16) + 0.5
    with pytest.raises(UnsupportedExportError):
        getattr(ModelExporter(onnx_path, dynamo=dynamo), METHODS[fmt])(model, x)
    monkeypatch.setattr(support, "check", lambda *args: None)
    with pytest.raises(without_check):
        getattr(ModelExporter(onnx_path, dynamo=dynamo), METHODS[fmt])(model, x)


# -- the rules, row by row ----------------------------------------------------------------------------

QCDQ, QONNX = ExportFormat.qcdq, ExportFormat.qonnx


def _rule_key(rule) -> str:
    return f"{rule.refuses} -> {rule.allowed}"


def _linear(**roles):
    """A Linear(32, 8) quantized with ``roles`` (32 input channels: an MX block)."""
    return lambda: quantize(layer_config(**roles), nn.Sequential(nn.Linear(32, 8)), [torch.randn(4, 32)])


def _graph_pooled():
    """Graph mode for FINN: its windowed average pool is the truncating one (FINN's own); quantized
    without the target's rules (its signed ReLU output FINN refuses), which are not under test here."""
    from quark.torch.extensions.brevitas import api

    cfg = layer_config(weight=W8_PER_TENSOR, input_tensors=A8)
    cfg.global_quant_config.target_device = DeviceType.FINN
    cfg.quant_mode = QuantizationMode.fx_graph_mode
    model = _pooled(nn.AvgPool2d(2))
    model(torch.randn(2, 3, 4, 4))
    check, api._check_target = api._check_target, lambda model, plans: None
    try:
        return quantize(cfg, model, [torch.randn(2, 3, 4, 4)])
    finally:
        api._check_target = check


def _rotated():
    from quark.torch.extensions.brevitas import algos
    from quark.torch.quantization.config.config import Config, QuantizationConfig

    config = Config(QuantizationConfig(weight=W8_PER_TENSOR), pre_quant_opt_config=[algos.HadamardRotation()])
    return quantize(config, nn.Sequential(nn.Linear(16, 8)), [torch.randn(2, 16)])


def _wide_activation():
    """A 24-bit activation quantizer: configs stop at 16 bits, so the spec an int16 quantizer was built
    from is widened in its injector (what the export check reads)."""
    model = _linear(input_tensors=QuantizationSpec(dtype=Dtype.int16))()
    proxy = model[0].input_quant
    (spec,) = [q.spec for q in quantizers(model) if q.name == "0.input_quant"]
    proxy.quant_injector = proxy.quant_injector.let(quark_spec=dataclasses.replace(spec, bit_width=24))
    return model


_INT8 = QuantizationSpec(dtype=Dtype.int8)
#: rule (refused -> allowed) -> (the model, format, dynamo, the rules its problems come from besides this one)
RULE_CASES = {
    "activation/weight `format` -> integer, minifloat or cast formats": (
        _linear(weight=QuantizationSpec(dtype=Dtype.mx, mx_element_dtype=Dtype.int8)), QONNX, False, (),
    ),
    "activation/weight `format` -> integer formats, casts, bfp16": (
        _linear(weight=QuantizationSpec(dtype=Dtype.mx, mx_element_dtype=Dtype.int8)), QCDQ, False, (),
    ),
    "activation/weight `format` -> integer formats, bfloat16 / float16 casts, bfp16": (
        _linear(weight=QuantizationSpec(dtype=Dtype.fp8_e4m3)), QCDQ, False, (),
    ),
    "activation `is_dynamic` -> False": (_linear(input_tensors=QuantizationSpec(dtype=Dtype.int8, is_dynamic=True)), QONNX, False, ()),
    "activation `round_method` -> half_even": (
        _linear(input_tensors=QuantizationSpec(dtype=Dtype.int8, round_method=RoundType.floor)), QCDQ, False, (),
    ),
    "weight `bit_width` -> 2..8": (_linear(weight=QuantizationSpec(dtype=Dtype.int16)), QCDQ, False, ()),
    "activation `bit_width` -> 2..16": (_wide_activation, QCDQ, False, ()),
    "activation/weight `zero_point_type` -> int32": (
        _linear(input_tensors=QuantizationSpec(dtype=Dtype.uint8, symmetric=False, zero_point_type=ZeroPointType.float32)),
        QCDQ, False, (),
    ),
    "bias `bias` -> float biases (or dynamo=False)": (
        _linear(weight=_INT8, input_tensors=_INT8, bias=QuantizationSpec(dtype=Dtype.int32)), QCDQ, True, (),
    ),
    "weight `qscheme` -> per_tensor, per_channel (or dynamo=False)": (
        _linear(weight=QuantizationSpec(dtype=Dtype.int4, qscheme=QSchemeType.per_group, ch_axis=1, group_size=8)),
        QONNX, True, (),
    ),
    "weight `round_method` -> half_even (or dynamo=False)": (
        _linear(weight=QuantizationSpec(dtype=Dtype.int8, round_method=RoundType.floor)), QONNX, True, (),
    ),
    "a layer without a qcdq export -> the layers of the table above": (
        lambda: nn.Sequential(nn.Linear(8, 4), qnn.QuantSigmoid(return_quant_tensor=False)), QCDQ, False, (),
    ),
    "a layer without a qonnx export -> the layers of the table above": (
        lambda: nn.Sequential(nn.Linear(8, 4), qnn.QuantSigmoid(return_quant_tensor=False)), QONNX, False, (),
    ),
    "`TruncAvgPool2d`/`TruncAdaptiveAvgPool2d`: a truncating average pool -> a requantized average (graph mode builds one "
    "for every target but FINN)": (
        _graph_pooled, QCDQ, False, ("a layer without a qcdq export -> the layers of the table above",),
    ),
    "`QuantMultiheadAttention`: dynamo=True -> dynamo=False": (
        lambda: quantize(W8A8, Attention(), [torch.randn(2, 5, 8)]), QONNX, True, (),
    ),
    "`RotatedModule`: an online Hadamard rotation (HadamardRotation), a float transform -> the qcdq export, or no "
    "HadamardRotation": (_rotated, QONNX, False, ()),
}


def test_every_rule_row_has_a_case():
    assert set(RULE_CASES) == {_rule_key(r) for r in (*support.SPEC_RULES, *support.LAYER_RULES)}


@pytest.mark.parametrize("key", list(RULE_CASES))
def test_every_rule_row_names_its_case_and_nothing_else(key):
    """``problems`` (what export checks first) finds the row's problem in its case, and no other row's
    but those listed; the same model in the other format or exporter may pass this row."""
    build, fmt, dynamo, also = RULE_CASES[key]
    torch.manual_seed(0)
    model = build()
    applying = {_rule_key(r): r for r in (*support.SPEC_RULES, *support.LAYER_RULES) if r.applies({"format": fmt, "dynamo": dynamo})}
    found = support.problems(model, fmt, dynamo)
    rows = {k for k, r in applying.items() for line in found if line.endswith(f"({r.reason})")}
    assert rows == {key, *also}, found
    assert len(found) == 1 + len(also), found
