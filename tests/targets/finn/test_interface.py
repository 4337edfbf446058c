"""The FINN target's interface to FINN (``targets/finn/interface.py``, and the hand-off's import):
the network input made integer, the operations left float, and a hand-off without finn-plus that
says how to install it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _shared.models import unit_batches
from _shared.quantize import quantized_mlp, quantized_on_unit_batches

from quark.torch.extensions.brevitas._backend.targets.finn import interface as finn_interface
from quark.torch.extensions.brevitas.api import (
    ModelExporter,
    TargetCheckError,
)
from quark.torch.extensions.brevitas.presets import finn
from quark.torch.quantization.config.config import QuantizationConfig


def test_finn_handoff_without_finn_says_how_to_install(onnx_path, monkeypatch):
    import sys

    from quark.torch.extensions.brevitas.api import finn_handoff

    ModelExporter(onnx_path).export_qonnx_model(quantized_mlp(), torch.randn(2, 12))
    monkeypatch.setitem(sys.modules, "finn.transformation.qonnx.convert_qonnx_to_finn", None)
    with pytest.raises(
        ImportError, match=r"the FINN target needs finn-plus .*pip install --no-deps finn-plus==1.6.1"
    ):
        finn_handoff(onnx_path, torch.randn(2, 12))


def test_the_integer_input_is_annotated_and_computes_the_same(tmp_path):
    from qonnx.core.modelwrapper import ModelWrapper
    from qonnx.core.onnx_exec import execute_onnx

    model = quantized_on_unit_batches(finn())
    x = unit_batches(1)[0]
    path = tmp_path / "model.onnx"
    ModelExporter(path).export_qonnx_model(model, x)
    integer = finn_interface.integer_input(path, tmp_path / "int.onnx")
    assert integer.datatype == "UINT8"
    assert integer.scale == model.input_quant.act_quant.scale().item()
    wrapper = ModelWrapper(str(tmp_path / "int.onnx"))
    assert wrapper.graph.input[0].name == integer.name and str(wrapper.get_tensor_datatype(integer.name)) == "UINT8"
    assert wrapper.find_consumer(integer.name).op_type == "Mul"  # the input quantizer became its scale
    x_int = np.clip(np.floor(x.numpy() / integer.scale + 0.5), 0, 255).astype(np.float32)
    out = execute_onnx(wrapper, {integer.name: x_int})[wrapper.graph.output[0].name]
    np.testing.assert_array_equal(out, model(x).detach().numpy())
    # the integers of float inputs, as the removed quantizer made them: ties up (finn()), clamped to 0..255
    np.testing.assert_array_equal(integer.integers(x.numpy()), x_int)
    edges = np.array([-1.0, *((np.arange(4) + 0.5) * integer.scale), 1e3], np.float32)
    np.testing.assert_array_equal(integer.integers(edges), [0, 1, 2, 3, 4, 255])


def test_an_unquantized_network_input_cannot_become_integer(tmp_path):
    config = finn()
    config.layer_type_quant_config["GraphInput"] = QuantizationConfig()
    config.global_quant_config.target_device = None  # export without the target's refusal
    config.global_quant_config.input_tensors = None
    model = quantized_on_unit_batches(config)
    path = tmp_path / "model.onnx"
    ModelExporter(path).export_qonnx_model(model, unit_batches(1)[0])
    with pytest.raises(TargetCheckError, match=r"integer_input: the graph input 'global_in' does not feed one Quant node; quantize the network input"):
        finn_interface.integer_input(path)


def test_float_operations_count_the_nodes_that_are_not_integer(tmp_path):
    from qonnx.core.modelwrapper import ModelWrapper

    model = quantized_on_unit_batches(finn())
    path = tmp_path / "model.onnx"
    ModelExporter(path).export_qonnx_model(model, unit_batches(1)[0])
    # the QONNX graph before FINN: the Gemm of float Quant outputs and the Relu are float
    floats = finn_interface.float_operations(ModelWrapper(str(path)))
    assert floats and all(f.split()[0] in ("Gemm", "Relu", "Quant", "Mul") for f in floats)
