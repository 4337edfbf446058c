"""Our custom quantizer blocks through both exporters: rounding modes (against QONNX's own
semantics), power-of-two and cast scales, zero points, per-channel and per-group weights,
dynamic activations and wide integers (refused where a format cannot express them)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from _shared.configs import A8, A8_POF2, W8, W8_POF2, layer_config
from _shared.graphs import initializers, op_types
from _shared.quantize import quantize
from torch import nn

from quark.torch.extensions.brevitas._backend.export import verify
from quark.torch.extensions.brevitas._backend.export.handlers import QONNX_ROUNDING
from quark.torch.extensions.brevitas._backend.mapping import ROUND_IMPLS
from quark.torch.extensions.brevitas.api import ModelExporter, UnsupportedExportError
from quark.torch.quantization.config.config import QuantizationSpec
from quark.torch.quantization.config.type import Dtype, QSchemeType, RoundType, ScaleType, ZeroPointType
from quark.torch.quantization.observer import PerChannelMinMaxObserver, PerTensorMinMaxObserver

BOTH = ["export_onnx_model", "export_qonnx_model"]
TIES = [-5.5, -2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 5.5]
#: RoundType -> TIES rounded, written from the definitions (cf. fastmachinelearning/qonnx PR#110)
GOLDEN = {
    RoundType.half_even: [-6, -2, -2, -0, 0, 2, 2, 6],
    RoundType.floor: [-6, -3, -2, -1, 0, 1, 2, 5],
    RoundType.round: [-6, -3, -2, -1, 1, 2, 3, 6],
    RoundType.half_up: [-5, -2, -1, 0, 1, 2, 3, 6],
    RoundType.toward_zero: [-5, -2, -1, -0, 0, 1, 2, 5],
}
#: RoundType -> the values its QONNX rounding_mode is written for: half_up (floor(x + 0.5)) is HALF_UP
#: (ties away from zero) on unsigned grids only, x >= 0; signed grids are written as thresholds
#: (handlers._SpecRounding; test_finn_multithreshold_rounds_half_up)
WRITTEN_FOR = {RoundType.half_up: lambda x: x >= 0}


@pytest.mark.parametrize("round_method", list(RoundType))
def test_qonnx_rounding_mode_means_what_our_rounding_does(round_method):
    from qonnx.custom_op.general.quant import resolve_rounding_mode

    x = np.asarray(TIES, np.float32)
    kept = WRITTEN_FOR.get(round_method, np.isfinite)(x)
    x, golden = x[kept], np.asarray(GOLDEN[round_method])[kept]
    qonnx_result = resolve_rounding_mode(QONNX_ROUNDING[round_method])(x)
    torch_result = ROUND_IMPLS[round_method]()(torch.from_numpy(x)).numpy()
    np.testing.assert_array_equal(qonnx_result, golden)
    np.testing.assert_array_equal(torch_result, golden)


def test_finn_multithreshold_rounds_half_up():
    """FINN's MultiThreshold counts x >= (k + 1/2): RoundType.half_up is its rounding."""
    from qonnx.custom_op.general.multithreshold import multithreshold

    x = np.asarray([TIES], np.float32)
    thresholds = np.arange(-8, 8, dtype=np.float32)[None, :] + 0.5  # a signed 5-bit grid, step 1
    counted = multithreshold(x, thresholds, out_bias=-8)
    np.testing.assert_array_equal(counted[0], GOLDEN[RoundType.half_up])


def _identity_with_output_quant(spec: QuantizationSpec, scale: float = 2.0**-4) -> nn.Module:
    """y = q(x): a Linear with identity weight and no bias, its output quantized by ``spec``
    (calibrated on +-8: int8 pof2 gives the scale 2^-4, of 8 / 127.5)."""
    layer = nn.Linear(8, 8, bias=False)
    with torch.no_grad():
        layer.weight.copy_(torch.eye(8))
    model = quantize(
        layer_config(output_tensors=spec), nn.Sequential(layer), [torch.full((1, 8), 8.0), -torch.full((1, 8), 8.0)]
    )
    assert model[0].output_quant.scale().item() == scale
    return model


@pytest.mark.parametrize("round_method", list(RoundType))
def test_activation_rounding_exports_to_qonnx_exactly_at_ties(onnx_path, round_method):
    """Up to 8 bits an activation quantizer is written as FINN's own node with exact thresholds for its
    rounding (FINN would convert a Quant node with ties up whatever its rounding_mode); wider, as a
    Quant node with its rounding_mode (signed half-up: two Quants, see below). Exact at every tie."""
    for dtype, scale in ((Dtype.int8, 2.0**-4), (Dtype.int16, 2.0**-12)):
        spec = QuantizationSpec(
            dtype=dtype, observer_cls=PerTensorMinMaxObserver, scale_type=ScaleType.pof2, round_method=round_method
        )
        model = _identity_with_output_quant(spec, scale)
        x = torch.tensor([TIES], dtype=torch.float32) * scale  # every value a tie on the grid
        torch.testing.assert_close(model(x) / scale, torch.tensor([GOLDEN[round_method]], dtype=torch.float32))
        report = ModelExporter(onnx_path).export_qonnx_model(model, x, tolerance_lsb=0)
        graph = onnx.load(str(onnx_path)).graph
        modes = {a.s.decode() for n in graph.node for a in n.attribute if a.name == "rounding_mode"}
        activation_modes = modes - {QONNX_ROUNDING[RoundType.half_even]}  # the identity weight's own Quant
        if dtype is Dtype.int8:
            assert "MultiThreshold" in op_types(onnx_path) and activation_modes <= set(), (round_method, modes)
        elif round_method is RoundType.half_up:  # signed, wider than thresholds: FLOOR then CEIL
            assert {"FLOOR", "CEIL"} <= modes
        else:
            assert QONNX_ROUNDING[round_method] in modes and "MultiThreshold" not in op_types(onnx_path)
        assert report.max_abs_diff == 0


#: dtype -> (the pof2 scale of +-8, the nodes a signed half-up quantizer is written as)
HALF_UP_FORMS = {
    Dtype.int4: (1.0, {"MultiThreshold"}),
    Dtype.int8: (2.0**-4, {"MultiThreshold"}),
    Dtype.int16: (2.0**-12, {"Quant"}),  # wider than FINN's thresholds: ceil(floor(2u) / 2), two Quants
}


@pytest.mark.parametrize("dtype", list(HALF_UP_FORMS))
def test_signed_half_up_exports_exactly_next_to_ties(onnx_path, dtype):
    """floor(x / s + 1/2) on the float32 values next to each tie, as torch and FINN's thresholds
    compute it. Written before as HALF_UP of x / s + 2^(b-1), whose float32 sum kept x / s only to
    2^(b-24): every value within half of that below a tie rounded up (int8: 0.5 - 2^-20 -> 1)."""
    scale, nodes = HALF_UP_FORMS[dtype]
    spec = QuantizationSpec(
        dtype=dtype, observer_cls=PerTensorMinMaxObserver, scale_type=ScaleType.pof2, round_method=RoundType.half_up
    )
    model = _identity_with_output_quant(spec, scale)
    ties = torch.tensor(TIES)
    u = torch.stack([torch.nextafter(ties, ties - 1), ties, torch.nextafter(ties, ties + 1), ties - 2.0**-20])
    report = ModelExporter(onnx_path).export_qonnx_model(model, u * scale, tolerance_lsb=0)
    assert report.max_abs_diff == 0
    assert nodes <= set(op_types(onnx_path))
    expected = torch.floor(u.double() + 0.5).float()  # exact: float64 holds u + 1/2
    with torch.no_grad():
        torch.testing.assert_close(model(u * scale) / scale, expected, rtol=0, atol=0)


def test_finn_preset_silu_just_below_a_tie_exports_exactly(onnx_path):
    """EfficientNet-B0's squeeze-excitation in small (graph mode, FINN preset): a SiLU input on the
    grid, 16, at half the output step, 32. SiLU(16) is 16 - 2^-19 in torch and 16 - 2^-20 in ONNX
    Runtime (its sigmoid differs by an ulp): both just below the tie, both 0. The graph gave 32:
    x / s + 8 rounded to the tie 8.5 in float32, and 0.5 - 2^-25 + 0.5 rounds to 1 in float32."""
    from quark.torch.extensions.brevitas.presets import finn

    qmodel = quantize(finn(unsigned=()), nn.Sequential(nn.SiLU()).eval(), [torch.tensor([[0.0, 240.0]])])
    assert qmodel.get_submodule("0.quant").act_quant.scale().item() == 32.0  # pof2 of 240 / 7.5
    x = torch.tensor([[16.0, 48.0, 80.0, 240.0, 0.0, 1.0, 2.0, 3.0]])  # uint8 input, step 1
    with torch.no_grad():
        assert qmodel(x)[0, 0].item() == 0
    report = ModelExporter(onnx_path).export_qonnx_model(qmodel, x)
    assert report.max_abs_diff == 0


@pytest.mark.parametrize("round_method", [RoundType.floor, RoundType.round])
def test_qcdq_refuses_activation_rounding_other_than_half_even(onnx_path, round_method):
    model = _identity_with_output_quant(
        QuantizationSpec(
            dtype=Dtype.int8,
            observer_cls=PerTensorMinMaxObserver,
            scale_type=ScaleType.pof2,
            round_method=round_method,
        )
    )
    with pytest.raises(
        UnsupportedExportError,
        match=rf"quantizer '0.output_quant' \(activation\): round_method={round_method.name}; qcdq allows half_even",
    ):
        ModelExporter(onnx_path).export_onnx_model(model, torch.zeros(1, 8))


@pytest.mark.parametrize("method", BOTH)
@pytest.mark.parametrize("round_method", [RoundType.floor, RoundType.round])
def test_weight_rounding_survives_both_formats(onnx_path, method, round_method):
    """Weights are exported as torch quantized them (QONNX re-quantizes with ROUND: exact on the grid)."""
    weight = QuantizationSpec(
        dtype=Dtype.int8,
        observer_cls=PerTensorMinMaxObserver,
        scale_type=ScaleType.pof2,
        round_method=round_method,
    )
    layer = nn.Linear(16, 8, bias=False)
    with torch.no_grad():  # every weight a tie on the grid of step 2^-6 (abs max 127.5 * 2^-6)
        layer.weight.copy_(
            (torch.randint(-100, 100, (8, 16), generator=torch.Generator().manual_seed(0)) + 0.5) / 64
        )
        layer.weight[0, 0] = 127.5 / 64
    model = quantize(
        layer_config(weight=weight, input_tensors=A8_POF2, output_tensors=A8_POF2),
        nn.Sequential(layer),
        [torch.randn(4, 16) for _ in range(2)],
    )
    quant = model[0].quant_weight()
    assert quant.scale.item() == 2.0**-6
    assert not torch.equal(
        quant.int().float(), torch.clamp(torch.round(layer.weight * 64), -128, 127)
    )  # ties differ
    report = getattr(ModelExporter(onnx_path), method)(model, torch.randn(6, 16))
    assert report.exact and report.max_abs_diff == 0


@pytest.mark.parametrize("method", BOTH)
def test_pof2_scales_are_exact_powers_of_two_in_the_graph(onnx_path, method):
    torch.manual_seed(0)
    model = quantize(
        layer_config(weight=W8_POF2, input_tensors=A8_POF2),
        nn.Sequential(nn.Linear(16, 8, bias=False)),
        [torch.randn(4, 16) for _ in range(2)],
    )
    getattr(ModelExporter(onnx_path), method)(model, torch.randn(3, 16))
    graph = verify.Graph(onnx.load(str(onnx_path)))
    scales = [graph.scale(n) for n in graph.model.graph.node if n.op_type in verify.SCALE_INPUT]
    assert scales and all(verify.is_pof2(s) for s in scales)


@pytest.mark.parametrize("method", BOTH)
@pytest.mark.parametrize(
    "scale_type, dtype", [(ScaleType.float16, torch.float16), (ScaleType.bfloat16, torch.bfloat16)]
)
def test_cast_scales_export_their_rounded_value(onnx_path, method, scale_type, dtype):
    spec = QuantizationSpec(dtype=Dtype.int8, observer_cls=PerTensorMinMaxObserver, scale_type=scale_type)
    torch.manual_seed(0)
    model = quantize(
        layer_config(weight=spec, input_tensors=spec, output_tensors=spec),
        nn.Sequential(nn.Linear(16, 8)),
        [torch.randn(4, 16) for _ in range(2)],
    )
    report = getattr(ModelExporter(onnx_path), method)(model, torch.randn(3, 16))
    graph = verify.Graph(onnx.load(str(onnx_path)))
    scales = np.concatenate(
        [graph.scale(n).ravel() for n in graph.model.graph.node if n.op_type in verify.SCALE_INPUT]
    )
    np.testing.assert_array_equal(scales, torch.from_numpy(scales).to(dtype).float().numpy())
    assert report.passed and report.max_diff_lsb <= 1


ASYM_U8 = QuantizationSpec(dtype=Dtype.uint8, observer_cls=PerTensorMinMaxObserver, symmetric=False)


@pytest.mark.parametrize("method", BOTH)
def test_asymmetric_zero_points(onnx_path, method):
    torch.manual_seed(0)
    model = quantize(
        layer_config(weight=ASYM_U8, input_tensors=ASYM_U8, output_tensors=ASYM_U8),
        nn.Sequential(nn.Linear(16, 8)),
        [torch.randn(4, 16) + 1 for _ in range(2)],
    )
    assert model[0].input_quant.zero_point().item() != 0
    report = getattr(ModelExporter(onnx_path), method)(model, torch.randn(5, 16) + 1)
    assert report.passed and report.max_diff_lsb <= 1
    if method == "export_onnx_model":
        zero_points = [v for k, v in initializers(onnx_path).items() if v.dtype == np.uint8 and v.size == 1]
        assert any(z.item() != 0 for z in zero_points)


def test_float_zero_point_exports_to_qonnx_only(onnx_path):
    spec = QuantizationSpec(
        dtype=Dtype.uint8,
        observer_cls=PerTensorMinMaxObserver,
        symmetric=False,
        zero_point_type=ZeroPointType.float32,
    )
    torch.manual_seed(0)
    model = quantize(
        layer_config(input_tensors=spec, output_tensors=spec),
        nn.Sequential(nn.Linear(16, 8)),
        [torch.randn(4, 16) + 1 for _ in range(2)],
    )
    assert ModelExporter(onnx_path).export_qonnx_model(model, torch.randn(5, 16)).passed
    with pytest.raises(
        UnsupportedExportError,
        match=r"'0.input_quant' \(activation\): zero_point_type=float32; qcdq allows int32",
    ):
        ModelExporter(onnx_path).export_onnx_model(model, torch.randn(5, 16))


@pytest.mark.parametrize("method", BOTH)
def test_per_channel_weights(onnx_path, method):
    torch.manual_seed(0)
    model = quantize(
        layer_config(weight=W8, input_tensors=A8, output_tensors=A8),
        nn.Sequential(nn.Conv2d(3, 6, 3)),
        [torch.randn(2, 3, 6, 6) for _ in range(2)],
    )
    report = getattr(ModelExporter(onnx_path), method)(model, torch.randn(2, 3, 6, 6))
    graph = verify.Graph(onnx.load(str(onnx_path)))
    assert any(graph.scale(n) is not None and graph.scale(n).size == 6 for n in graph.model.graph.node)
    assert report.passed and report.max_diff_lsb <= 1


@pytest.mark.parametrize("method", BOTH)
@pytest.mark.parametrize("layer, shape", [(nn.Linear(16, 8), (3, 16)), (nn.Conv2d(8, 4, 3), (2, 8, 5, 5))])
@pytest.mark.parametrize("ch_axis", [0, 1])
def test_per_group_weights(onnx_path, method, layer, shape, ch_axis):
    spec = QuantizationSpec(
        dtype=Dtype.int4,
        observer_cls=PerChannelMinMaxObserver,
        qscheme=QSchemeType.per_group,
        ch_axis=ch_axis,
        group_size=4,
    )
    torch.manual_seed(0)
    model = quantize(
        layer_config(weight=spec, input_tensors=A8_POF2, output_tensors=A8_POF2),
        nn.Sequential(layer),
        [torch.randn(*shape) for _ in range(2)],
    )
    report = getattr(ModelExporter(onnx_path), method)(model, torch.randn(*shape))
    assert report.passed and report.max_diff_lsb <= 1
    if method == "export_onnx_model":  # integer weights (groups x group elements) dequantized on axis 0
        weights = [v for v in initializers(onnx_path).values() if v.dtype == np.int8 and v.ndim == 2]
        assert any(w.shape[1] == 4 for w in weights)


@pytest.mark.parametrize("method, fmt", [("export_onnx_model", "qcdq"), ("export_qonnx_model", "qonnx")])
@pytest.mark.parametrize("symmetric", [True, False])
def test_dynamic_activations_are_refused_naming_the_quantizer(onnx_path, method, fmt, symmetric):
    spec = QuantizationSpec(
        dtype=Dtype.int8 if symmetric else Dtype.uint8, symmetric=symmetric, is_dynamic=True
    )
    model = quantize(layer_config(weight=W8, input_tensors=spec), nn.Sequential(nn.Linear(4, 4)), None)
    with pytest.raises(
        UnsupportedExportError,
        match=rf"quantizer '0.input_quant' \(activation\): is_dynamic=True; {fmt} allows False",
    ):
        getattr(ModelExporter(onnx_path), method)(model, torch.randn(2, 4))


def test_sixteen_bit_activations_export_to_both_formats_and_sixteen_bit_weights_to_qonnx_only(onnx_path):
    """QCDQ writes 16-bit activations on int16 QuantizeLinear / DequantizeLinear (com.microsoft below
    opset 21: tests/targets/ipu/test_npu_precisions.py); weights stay int8 / uint8 initializers."""
    spec = QuantizationSpec(dtype=Dtype.int16, observer_cls=PerTensorMinMaxObserver)
    torch.manual_seed(0)
    model = quantize(
        layer_config(weight=W8, input_tensors=spec), nn.Sequential(nn.Linear(8, 4)), [torch.randn(4, 8)]
    )
    assert ModelExporter(onnx_path).export_qonnx_model(model, torch.randn(2, 8)).passed
    assert ModelExporter(onnx_path).export_onnx_model(model, torch.randn(2, 8)).passed
    assert {initializers(onnx_path)[n.input[2]].dtype for n in onnx.load(str(onnx_path)).graph.node if n.op_type == "QuantizeLinear"} == {np.dtype(np.int16)}
    model = quantize(
        layer_config(weight=spec, input_tensors=A8), nn.Sequential(nn.Linear(8, 4)), [torch.randn(4, 8)]
    )
    assert ModelExporter(onnx_path).export_qonnx_model(model, torch.randn(2, 8)).passed
    with pytest.raises(
        UnsupportedExportError, match=r"'0.weight_quant' \(weight\): bit_width=16; qcdq allows 2..8"
    ):
        ModelExporter(onnx_path).export_onnx_model(model, torch.randn(2, 8))


def test_four_bit_qcdq_uses_clip(onnx_path):
    spec = QuantizationSpec(dtype=Dtype.int4, observer_cls=PerTensorMinMaxObserver, scale_type=ScaleType.pof2)
    torch.manual_seed(0)
    model = quantize(
        layer_config(weight=spec, input_tensors=spec),
        nn.Sequential(nn.Linear(8, 4, bias=False)),
        [torch.randn(4, 8)],
    )
    report = ModelExporter(onnx_path).export_onnx_model(model, torch.randn(3, 8))
    values = initializers(onnx_path)
    bounds = {
        tuple(values[i].item() for i in n.input[1:])
        for n in onnx.load(str(onnx_path)).graph.node
        if n.op_type == "Clip"
    }
    assert "Clip" in op_types(onnx_path) and bounds == {(-8, 7)}
    assert report.exact and report.max_abs_diff == 0


@pytest.mark.parametrize("method", BOTH)
def test_bias_rounding_survives_both_formats(onnx_path, method):
    """int32 bias (scale = s_in x s_w) rounded down: QONNX re-quantizes it with FLOOR, QCDQ stores the integers."""
    bias = QuantizationSpec(dtype=Dtype.int32, round_method=RoundType.floor)
    torch.manual_seed(0)
    model = quantize(
        layer_config(weight=W8_POF2, input_tensors=A8_POF2, bias=bias),  # float output: the bias shows
        nn.Sequential(nn.Linear(16, 8)),
        [torch.randn(4, 16) for _ in range(2)],
    )
    scaled = model[0].bias / (model[0].input_quant.scale() * model[0].quant_weight().scale)
    assert not torch.equal(torch.floor(scaled), torch.round(scaled))  # the rounding matters here
    report = getattr(ModelExporter(onnx_path), method)(model, torch.randn(6, 16))
    assert report.exact and report.max_abs_diff == 0


MINIFLOATS = [Dtype.fp8_e4m3, Dtype.fp8_e5m2, Dtype.fp4, Dtype.bfloat16]


def _minifloat_model(dtype: Dtype) -> nn.Module:
    spec = (
        QuantizationSpec(dtype=dtype)
        if dtype in (Dtype.bfloat16, Dtype.float16)
        else QuantizationSpec(dtype=dtype, observer_cls=PerTensorMinMaxObserver)
    )
    torch.manual_seed(0)
    return quantize(
        layer_config(weight=spec, input_tensors=spec), nn.Sequential(nn.Linear(32, 8)), [torch.randn(4, 32)]
    )


@pytest.mark.parametrize("dtype", MINIFLOATS, ids=lambda d: d.name)
def test_minifloats_export_to_qonnx_floatquant_and_are_refused_by_qcdq(onnx_path, dtype):
    """Scaled minifloats are refused by QCDQ; casts (bfloat16 here) are written as Cast pairs (below)."""
    model = _minifloat_model(dtype)
    report = ModelExporter(onnx_path).export_qonnx_model(model, torch.randn(16, 32))
    assert "FloatQuant" in op_types(onnx_path) and report.passed
    if dtype is Dtype.bfloat16:
        return
    with pytest.raises(
        UnsupportedExportError,
        match=r"'0.input_quant' \(activation\): format=.*; qcdq allows integer formats",
    ):
        ModelExporter(onnx_path).export_onnx_model(model, torch.randn(16, 32))


@pytest.mark.parametrize("dtype", [Dtype.bfloat16, Dtype.float16], ids=lambda d: d.name)
def test_casts_export_to_qcdq_as_cast_pairs(onnx_path, dtype):
    model = _minifloat_model(dtype)
    report = ModelExporter(onnx_path).export_onnx_model(model, torch.randn(16, 32))
    ops = op_types(onnx_path)
    assert report.passed and "Cast" in ops and "QuantizeLinear" not in ops


@pytest.mark.parametrize(
    "spec",
    [
        QuantizationSpec(
            dtype=Dtype.mx,
            mx_element_dtype=Dtype.fp8_e4m3,
            qscheme=QSchemeType.per_group,
            ch_axis=1,
            group_size=32,
            scale_type=ScaleType.pof2,
        ),
        QuantizationSpec(
            dtype=Dtype.mx9,
            qscheme=QSchemeType.per_group,
            ch_axis=1,
            group_size=16,
            scale_type=ScaleType.pof2,
        ),
    ],
    ids=["mx-fp8", "mx9"],
)
@pytest.mark.parametrize("method", BOTH)
def test_block_formats_are_refused_and_would_fail(onnx_path, monkeypatch, spec, method):
    from quark.torch.extensions.brevitas._backend.export import support
    from quark.torch.extensions.brevitas.api import ExportFailedError

    model = quantize(layer_config(weight=spec), nn.Sequential(nn.Linear(32, 8)), None)
    with pytest.raises(
        UnsupportedExportError,
        match=r"'0.weight_quant' \(weight\): format=(mx|bdr).*no export handler for block formats",
    ):
        getattr(ModelExporter(onnx_path), method)(model, torch.randn(4, 32))
    monkeypatch.setattr(support, "check", lambda *args: None)
    fails = (  # QCDQ's block handler (BFP16) takes MX9 and names what it cannot write
        r"mx9: QCDQ export writes one-level blocks \(BFP16\) only, not micro-exponents"
        if spec.dtype is Dtype.mx9 and method == "export_onnx_model"
        else "'NoneType' object is not callable"
    )
    with pytest.raises(ExportFailedError, match=fails):
        getattr(ModelExporter(onnx_path), method)(model, torch.randn(4, 32))


@pytest.mark.parametrize("method", BOTH)
def test_tqt_model_after_qat_steps_matches_its_export(onnx_path, method):
    """Learned power-of-two thresholds (TQT), a few QAT steps, then export: within 1 LSB (measured 0)."""
    from quark.torch.quantization.config.config import TQTSpec
    from quark.torch.quantization.config.type import TQTThresholdInitMeth

    tqt = QuantizationSpec(
        dtype=Dtype.int8,
        symmetric=True,
        scale_type=ScaleType.pof2,
        qat_spec=TQTSpec(TQTThresholdInitMeth._3SD),
    )
    torch.manual_seed(0)
    model = quantize(
        layer_config(weight=tqt, input_tensors=tqt, output_tensors=tqt),
        nn.Sequential(nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 4)),
        [torch.randn(4, 16) for _ in range(3)],
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    model.train()
    for _ in range(5):
        loss = model(torch.randn(8, 16)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    report = getattr(ModelExporter(onnx_path), method)(model.eval(), torch.randn(32, 16))
    assert report.passed and report.max_diff_lsb <= 1


def test_wide_bias_integers_are_recovered_in_float64():
    """An int32 bias near 3e6 on a 2.7e-8 grid (as A16W8's attention output on MiniLM): float32's
    value / scale is off by more than Brevitas' 0.2 tolerance, float64's gives the integers back."""
    from brevitas.quant_tensor import IntQuantTensor

    from quark.torch.extensions.brevitas._backend.export.handlers import bias_integers

    q = torch.cat([torch.arange(3_000_000.0, 3_001_000.0), -torch.arange(2_000_000.0, 2_000_100.0), torch.arange(-8.0, 8.0)])
    q = q.double()
    scale = torch.tensor(2.7e-8, dtype=torch.float32)
    value = (q * scale.double()).float()  # the bias as torch holds it: float32's nearest to q * scale
    quant = IntQuantTensor(value, scale, torch.tensor(0.0), torch.tensor(32.0), signed=True, training=False)
    with pytest.raises(RuntimeError, match="not valid"):
        quant.int()  # Brevitas' float32 quotient
    got = bias_integers(quant)
    assert got.dtype == torch.int32 and torch.equal(got.double(), q)
    # near 2^31 (a min-max int32 bias grid) float32's quotient is already integral: Brevitas' integers kept
    top = torch.tensor([2**31 - 128.0, -(2.0**31), 1_973_869_952.0, 2.0**31])  # float32's 2^31 - 1 is 2^31
    wide = IntQuantTensor((top * scale).float(), scale, torch.tensor(0.0), torch.tensor(32.0), signed=True, training=False)
    assert bias_integers(wide).tolist() == [2**31 - 128, -(2**31), 1_973_869_952, 2**31 - 1]
    off_grid = IntQuantTensor(value + scale / 2, scale, torch.tensor(0.0), torch.tensor(32.0), signed=True, training=False)
    with pytest.raises(RuntimeError, match="values of the 32-bit bias are not on its grid"):
        bias_integers(off_grid)
