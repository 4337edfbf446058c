"""AMD Quark's export API (``quark.torch.export.api``) with Quark's signatures and file names, each
file reloaded bit for bit: ``export_onnx`` (verified in ONNX Runtime), ``save_params`` /
``load_params``, ``export_safetensors`` / ``import_model_from_safetensors`` in Quark's key layout (4-bit
weights packed as Quark packs them, checked against a packing written here from Quark's documented
layout), ``ModelExporter`` with ``ExporterConfig``; every refused argument named."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from _shared.configs import A8, A8_POF2, B32, U4G16, U8_ASYM, W4G16, W8, W8_POF2, layer_config
from _shared.models import batches, mlp
from _shared.quantize import quantize
from safetensors.torch import load_file
from torch import nn

from quark.torch import (
    ModelExporter,
    export_onnx,
    export_safetensors,
    import_model_from_safetensors,
    load_params,
    save_params,
)
from quark.torch.export.config.config import ExporterConfig, JsonExporterConfig
from quark.torch.quantization.config.config import Config, OCP_MXFP8E4M3Spec, QuantizationConfig
from quark.torch.quantization.config.type import QuantizationMode
from quark.torch.quantization.quark013_api import QuarkFeatureRefused

#: configs of the round trips: per tensor, per channel, asymmetric, pof2 with int32 bias, 4-bit groups
CONFIGS = {
    "w8a8": layer_config(weight=W8, input_tensors=A8),
    "pof2_int32_bias": layer_config(weight=W8_POF2, input_tensors=A8_POF2, bias=B32),
    "uint8_asym": layer_config(weight=U8_ASYM, input_tensors=A8),
    "int4_groups": layer_config(weight=W4G16, input_tensors=A8),
    "uint4_groups": layer_config(weight=U4G16, input_tensors=A8),
}
X = torch.randn(5, 16)


def _quantized(name: str, mode: QuantizationMode = QuantizationMode.eager_mode) -> tuple[nn.Module, nn.Module]:
    torch.manual_seed(0)
    config = CONFIGS[name]
    config.quant_mode = mode
    model = mlp((16, 32, 4))
    return model, quantize(config, model, batches(shape=(8, 16)))


def test_export_onnx_writes_quark_s_file_verified_with_the_names_given(tmp_path):
    _, qmodel = _quantized("w8a8")
    report = export_onnx(model=qmodel, output_dir=tmp_path / "out", input_args=X, input_names=["x"], output_names=["logits"])
    import onnx

    graph = onnx.load(tmp_path / "out" / "quark_model.onnx").graph
    assert report.passed and [i.name for i in graph.input] == ["x"] and [o.name for o in graph.output] == ["logits"]


@pytest.mark.parametrize(
    ("option", "match"),
    [
        ({"do_constant_folding": False}, r"export_onnx\(do_constant_folding=False\) is not supported .*allowed: True"),
        ({"uint4_int4_flag": True}, r"export_onnx\(uint4_int4_flag=True\) is not supported \(4-bit tensors are written as int8"),
        ({"operator_export_type": torch.onnx.OperatorExportTypes.ONNX_ATEN}, r"operator_export_type=.*only torch.onnx.OperatorExportTypes.ONNX"),
        ({"input_names": ["a", "b"]}, r"input_names=\['a', 'b'\]\): expected 1 distinct non-empty names"),
    ],
)
def test_export_onnx_refuses_what_it_cannot_honour_before_writing(tmp_path, option, match):
    _, qmodel = _quantized("w8a8")
    with pytest.raises(ValueError, match=match):
        export_onnx(qmodel, tmp_path, X, **option)
    assert not (tmp_path / "quark_model.onnx").exists()


@pytest.mark.parametrize("mode", list(QuantizationMode), ids=lambda m: m.name)
@pytest.mark.parametrize("name", CONFIGS)
def test_save_params_and_load_params_round_trip_bit_for_bit(tmp_path, name, mode):
    model, qmodel = _quantized(name, mode)
    with torch.no_grad():
        expected = qmodel(X)
    save_params(qmodel, model_type="mlp", args=(X,), export_dir=tmp_path, quant_mode=mode)
    if mode is QuantizationMode.eager_mode:
        assert sorted(p.name for p in tmp_path.iterdir()) == ["mlp.json", "mlp.safetensors"]
        loaded = load_params(model, json_path=str(tmp_path / "mlp.json"), safetensors_path=str(tmp_path / "mlp.safetensors"))
    else:
        assert sorted(p.name for p in tmp_path.iterdir()) == ["mlp_quantized.pth"]
        loaded = load_params(model, pth_path=str(tmp_path / "mlp_quantized.pth"), quant_mode=mode)
    with torch.no_grad():
        assert torch.equal(loaded(X), expected)


def test_load_params_checks_the_saved_example_outputs(tmp_path):
    model, qmodel = _quantized("w8a8")
    save_params(qmodel, model_type="mlp", args=(X,), export_dir=tmp_path)
    tensors = load_file(tmp_path / "mlp.safetensors")
    key = next(k for k in tensors if k.endswith("weight") and not k.startswith("__"))
    tensors[key] = tensors[key] * 1.01  # another model's weights
    from safetensors.torch import save_file

    save_file(tensors, tmp_path / "mlp.safetensors")
    with pytest.raises(ValueError, match="the reloaded model's outputs on the saved example inputs differ"):
        load_params(model, json_path=str(tmp_path / "mlp.json"), safetensors_path=str(tmp_path / "mlp.safetensors"))
    with pytest.raises(QuarkFeatureRefused, match=r"load_params\(model=None\): .* pass the float model"):
        load_params(pth_path=str(tmp_path / "x.pth"), quant_mode=QuantizationMode.fx_graph_mode)


@pytest.mark.parametrize("weight_format", ["real_quantized", "fake_quantized"])
@pytest.mark.parametrize("pack_method", ["reorder", "order"])
@pytest.mark.parametrize("name", CONFIGS)
def test_export_safetensors_round_trips_bit_for_bit(tmp_path, name, weight_format, pack_method):
    _, qmodel = _quantized(name)
    with torch.no_grad():
        expected = qmodel(X)
    export_safetensors(qmodel, tmp_path, weight_format=weight_format, pack_method=pack_method)
    imported = import_model_from_safetensors(mlp((16, 32, 4)), model_dir=str(tmp_path))  # other float weights
    with torch.no_grad():
        assert torch.equal(imported(X), expected)
    config = json.loads((tmp_path / "config.json").read_text())["quantization_config"]
    assert config["quant_method"] == "quark" and config["export"]["weight_format"] == weight_format


def test_quark_s_layout_of_the_tensors(tmp_path):
    """Per quantized layer: the weight's integers (int8, or 4-bit packed in int32), weight_scale /
    weight_zero_point in Quark's shapes (one per channel, rows x groups per group), input_scale a scalar."""
    _, per_channel = _quantized("w8a8")
    export_safetensors(per_channel, tmp_path / "t")
    t = load_file(tmp_path / "t" / "model.safetensors")
    layer = per_channel[0]
    assert t["0.weight"].dtype == torch.int8 and torch.equal(t["0.weight"], layer.quant_weight().int().to(torch.int8))
    assert t["0.weight_scale"].shape == (32,) and t["0.input_scale"].shape == ()
    _, grouped = _quantized("int4_groups")
    export_safetensors(grouped, tmp_path / "g")
    g = load_file(tmp_path / "g" / "model.safetensors")
    ints = grouped[0].quant_weight().int().to(torch.int64)  # [32, 16]: 16 -> 2 int32 per row
    assert g["0.weight"].dtype == torch.int32 and g["0.weight"].shape == (32, 2)
    assert torch.equal(g["0.weight"], _quark_pack_int4(ints, [0, 2, 4, 6, 1, 3, 5, 7]))
    assert g["0.weight_scale"].shape == (32, 1)  # 16 input features: one group of 16


def _quark_pack_int4(ints: torch.Tensor, order: list[int]) -> torch.Tensor:
    """Quark's documented 4-bit packing, written here element by element: column c of the packed tensor
    holds columns 8c + order[i] of the weight in bits 4i..4i+3 (two's complement nibbles)."""
    rows, columns = ints.shape
    packed = np.zeros((rows, -(-columns // 8)), dtype=np.int64)
    for r in range(rows):
        for c in range(packed.shape[1]):
            for i in range(8):
                column = 8 * c + order[i]
                if column < columns:
                    packed[r, c] |= (int(ints[r, column]) & 0xF) << (4 * i)
    return torch.from_numpy(packed.astype(np.uint32).view(np.int32))


def test_export_safetensors_refuses_block_formats_naming_the_layers(tmp_path):
    spec = OCP_MXFP8E4M3Spec(ch_axis=-1, is_dynamic=False).to_quantization_spec()
    torch.manual_seed(0)
    qmodel = quantize(Config(QuantizationConfig(weight=spec)), mlp((32, 32, 4)), batches(shape=(8, 32)))
    with pytest.raises(ValueError, match=r"export_safetensors: these layers' weights are not on an integer grid: 0 .*save_params"):
        export_safetensors(qmodel, tmp_path)
    assert not (tmp_path / "model.safetensors").exists()


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda q, d: export_safetensors(q, d, custom_mode="awq"), ValueError, r"custom_mode='awq'\) is not supported"),
        (lambda q, d: export_safetensors(q, d, weight_format="packed"), ValueError, r"weight_format='packed' is not supported; allowed: 'real_quantized' or 'fake_quantized'"),
        (lambda q, d: import_model_from_safetensors(None, str(d)), QuarkFeatureRefused, r"model=None\): building a Hugging Face model skeleton"),
        (lambda q, d: import_model_from_safetensors(mlp(), str(d), multi_device=True), QuarkFeatureRefused, r"spreading a model over several devices"),
        (lambda q, d: save_params(q, "m", export_dir=d, compressed=True), ValueError, r"save_params\(compressed=True\) is not supported \(real-quantized weights are written by export_safetensors\)"),
        (lambda q, d: ModelExporter(ExporterConfig(JsonExporterConfig()), d).export_quark_model(q), QuarkFeatureRefused, r"export_quark_model: Quark's json \+ pth format is superseded"),
        (lambda q, d: ModelExporter(ExporterConfig(JsonExporterConfig()), d).export_gguf_model(q, d, "llama"), QuarkFeatureRefused, r"export_gguf: GGUF files serve llama.cpp"),
    ],
    ids=["custom_mode", "weight_format", "model=None", "multi_device", "compressed", "export_quark_model", "gguf"],
)
def test_refusals_name_the_argument_and_what_to_use(tmp_path, call, error, match):
    _, qmodel = _quantized("w8a8")
    with pytest.raises(error, match=match):
        call(qmodel, tmp_path)


def test_model_exporter_of_earlier_quark_writes_through_the_same_functions(tmp_path):
    model, qmodel = _quantized("int4_groups")
    exporter = ModelExporter(config=ExporterConfig(json_export_config=JsonExporterConfig(pack_method="order")), export_dir=tmp_path)
    assert exporter.export_onnx_model(qmodel, X).passed and (tmp_path / "quark_model.onnx").exists()
    exporter.export_safetensors_model(qmodel, quant_config=qmodel.quant_config)
    assert json.loads((tmp_path / "config.json").read_text())["quantization_config"]["export"]["pack_method"] == "order"
    with torch.no_grad():
        assert torch.equal(import_model_from_safetensors(model, str(tmp_path))(X), qmodel(X))
    with pytest.raises(ValueError, match=r"JsonExporterConfig.kv_cache_group=\['k'\] is not supported; allowed: \[\]"):
        JsonExporterConfig(kv_cache_group=["k"])


def test_a_hugging_face_model_s_config_is_kept_beside_the_quantization_config(tmp_path):
    class WithConfig(nn.Sequential):
        class config:
            @staticmethod
            def to_dict():
                return {"model_type": "toy", "hidden_size": 32}

    torch.manual_seed(0)
    qmodel = quantize(CONFIGS["w8a8"], WithConfig(*mlp((16, 32, 4))), batches(shape=(8, 16)))
    export_safetensors(qmodel, tmp_path)
    written = json.loads((tmp_path / "config.json").read_text())
    assert written["model_type"] == "toy" and written["quantization_config"]["quant_method"] == "quark"
