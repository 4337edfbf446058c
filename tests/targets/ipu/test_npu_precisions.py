"""The NPU's precisions (issue 22): the A8W8, A16W8, BF16 and BFP16 presets export to QDQ graphs that
ONNX Runtime runs and that the IPU target's per-precision rules accept; the 16-bit Q/DQ, the casts
and the BFP16 blocks are re-read from the file and checked against the formulas. The presets' fields
and arguments: tests/config/test_presets.py."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from onnx import numpy_helper
from torch import nn

from quark.torch.extensions.brevitas import presets
from quark.torch.extensions.brevitas._backend.targets.ipu import precisions
from quark.torch.extensions.brevitas.api import ModelExporter, ModelQuantizer
from quark.torch.quantization.config.config import Config, QuantizationConfig


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8))


def _data() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return [torch.randn(4, 16, generator=g) * 3 for _ in range(4)]


def _export(config: Config, path) -> tuple[nn.Module, object]:
    qmodel = ModelQuantizer(config).quantize_model(_mlp(), _data(), progress=False)
    report = ModelExporter(path).export_onnx_model(qmodel, _data()[0])
    return qmodel, report


PRESET_PRECISION = {"xint8": "IPU", "a8w8": "IPU (A8W8)", "a16w8": "IPU (A16W8)", "bf16": "IPU (BF16)", "bfp16": "IPU (BFP16)"}


def test_mse_calibration_clips_a_heavy_tail_and_exports_verified(onnx_path):
    """``a8w8(calibration="mse")`` on heavy-tailed inputs (Student's t, 2 degrees of freedom): the
    input's range is clipped inside the one MinMax spans, and the graph exports verified and passes
    the A8W8 checks."""
    torch.manual_seed(1)
    data = [torch.distributions.StudentT(2.0).sample((1024, 16)) for _ in range(4)]
    scales = {}
    for calibration in ("minmax", "mse"):
        qmodel = ModelQuantizer(presets.a8w8(calibration=calibration)).quantize_model(_mlp(), data, progress=False)
        scales[calibration] = float(qmodel[0].input_quant.scale().detach())
    assert scales["minmax"] == pytest.approx((max(d.max() for d in data) - min(d.min() for d in data)).item() / 255)
    assert scales["mse"] < 0.97 * scales["minmax"]
    report = ModelExporter(onnx_path).export_onnx_model(qmodel, data[1][:4])
    assert report.passed and report.verified and all(c.startswith("IPU (A8W8):") for c in report.target_checks)


@pytest.mark.parametrize("name", list(PRESET_PRECISION))
def test_every_npu_preset_exports_verified_and_passes_its_precision_checks(onnx_path, name):
    _, report = _export(getattr(presets, name)(), onnx_path)
    assert report.passed and report.verified
    assert report.target_checks and all(c.startswith(PRESET_PRECISION[name] + ":") for c in report.target_checks)
    assert onnx.load(str(onnx_path)).opset_import[0].version == 17


def test_a16w8_writes_16_bit_qdq_in_the_contrib_domain_with_the_formula(onnx_path):
    qmodel, _ = _export(presets.a16w8(), onnx_path)
    model = onnx.load(str(onnx_path))
    consts = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    consts.update(
        (n.output[0], numpy_helper.to_array(n.attribute[0].t)) for n in model.graph.node if n.op_type == "Constant"
    )
    q = next(n for n in model.graph.node if n.op_type == "QuantizeLinear")
    assert q.domain == "com.microsoft" and {"com.microsoft"} <= {o.domain for o in model.opset_import}
    scale, zero_point = consts[q.input[1]], consts[q.input[2]]
    assert zero_point.dtype == np.int16
    # the formula, uint16 asymmetric: q = clamp(round_half_even(x / s) + z, 0, 65535); written as q - 2^15
    proxy = qmodel[0].input_quant
    s, z = float(proxy.scale()), int(proxy.zero_point())
    assert np.float32(s) == scale and z - 2**15 == int(zero_point)
    x = _data()[0].numpy()
    expected = (np.clip(np.round(x / np.float32(s)) + z, 0, 65535) - z) * np.float32(s)
    np.testing.assert_array_equal(qmodel[0].input_quant(torch.from_numpy(x)).value.detach().numpy(), expected.astype(np.float32))


def test_bf16_graph_casts_activations_and_stores_bfloat16_exact_weights(onnx_path):
    _export(presets.bf16(), onnx_path)
    model = onnx.load(str(onnx_path))
    casts = [n for n in model.graph.node if n.op_type == "Cast"]
    assert [a.i for n in casts for a in n.attribute if a.name == "to"] == [16, 1, 16, 1]  # bfloat16, float, twice
    weights = [numpy_helper.to_array(i) for i in model.graph.initializer if i.dims and len(i.dims) == 2]
    assert weights and all(np.all(w.view(np.uint32) & 0xFFFF == 0) for w in weights)


def _bfp16(x: np.ndarray) -> np.ndarray:
    """AMD's BFP16 from its definition, per block of 8 along the last axis (float64)."""
    blocks = x.astype(np.float64).reshape(-1, 8)
    out = np.empty_like(blocks)
    for i, block in enumerate(blocks):
        largest = np.abs(block).max()
        e = -127 if largest == 0 else int(np.clip(np.floor(np.log2(largest)), -127, 127))
        if np.any(np.round(block / 2.0 ** (e - 6)) > 127):
            e = min(e + 1, 127)
        out[i] = np.clip(np.round(block / 2.0 ** (e - 6)), -128, 127) * 2.0 ** (e - 6)
    return out.reshape(x.shape)


def test_bfp16_graph_computes_the_blocks_exactly_in_onnx_runtime(onnx_path):
    import onnxruntime as ort

    config = Config(
        global_quant_config=QuantizationConfig(input_tensors=presets.bfp16().global_quant_config.input_tensors)
    )
    qmodel = ModelQuantizer(config).quantize_model(nn.Sequential(nn.Linear(16, 4)), progress=False)
    ModelExporter(onnx_path).export_onnx_model(qmodel, torch.zeros(64, 16))
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    # values across binades, ties, a block whose maximum rounds up to the next exponent, zeros
    g = np.random.default_rng(0)
    x = (g.standard_normal((64, 16)) * 2.0 ** g.integers(-20, 20, (64, 1))).astype(np.float32)
    x[0, :8] = [127.5, 1, -1, 0.5, 0, 0, 0, 0]  # 127.5 / 2^0 rounds to 128: one binade up
    x[1, :8] = 0
    x[2, :8] = [-128, 1.5, 2.5, -2.5, 3, 0, 0, 0]
    layer = qmodel[0]
    quantized_input = layer.input_quant(torch.from_numpy(x)).value.detach().numpy()
    np.testing.assert_array_equal(quantized_input, _bfp16(x).astype(np.float32))
    expected = qmodel(torch.from_numpy(x)).detach().numpy()
    (produced,) = session.run(None, {session.get_inputs()[0].name: x})
    # the layer's float sums may differ in order (the exporter's float tolerance); the blocks are exact above
    np.testing.assert_allclose(produced, expected, rtol=1e-5, atol=1e-5 * float(np.abs(expected).max()))


def test_a_mixed_a8_a16_model_is_checked_for_both_precisions(onnx_path):
    config = presets.a8w8()
    config.layer_quant_config["2"] = QuantizationConfig(input_tensors=presets.activation_spec(16))
    qmodel = ModelQuantizer(config).quantize_model(_mlp(), _data(), progress=False)
    report = ModelExporter(onnx_path).export_onnx_model(qmodel, _data()[0])
    assert report.passed and report.target_checks[0].startswith("IPU (A8W8+A16W8):")
    model = onnx.load(str(onnx_path))
    domains = [n.domain for n in model.graph.node if n.op_type == "QuantizeLinear"]
    assert domains == ["", "com.microsoft"]


def test_every_precision_row_claims_its_preset_and_only_it():
    from quark.torch.quantization.tensor_quant import normalise

    specs = {name: getattr(presets, name)().global_quant_config.input_tensors for name in PRESET_PRECISION}
    for name, spec in specs.items():
        claimed = [p.name for p in precisions.PRECISIONS if p.claims(normalise(spec, "input_tensors", name))]
        assert claimed == [PRESET_PRECISION[name].removeprefix("IPU (").rstrip(")") if name != "xint8" else "XINT8"]


def test_16_bit_qdq_stay_in_the_standard_domain_from_opset_21(onnx_path):
    config = Config(global_quant_config=QuantizationConfig(input_tensors=presets.activation_spec(16), weight=presets.a16w8().global_quant_config.weight))
    qmodel = ModelQuantizer(config).quantize_model(_mlp(), _data(), progress=False)
    report = ModelExporter(onnx_path, opset_version=21).export_onnx_model(qmodel, _data()[0])
    model = onnx.load(str(onnx_path))
    assert report.passed and {n.domain for n in model.graph.node if n.op_type == "QuantizeLinear"} == {""}
