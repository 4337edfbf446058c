"""Point 3 of issue 11: files from strangers (quantizing): a layer type named in a config file is
compared with class names, never imported; a quantized model's checkpoint loads with
``weights_only=True``."""

from __future__ import annotations

import io

import pytest
import torch
from _shared.configs import W8A8_IO
from _shared.models import batches, mlp
from _shared.quantize import quantize

from quark.torch.extensions.brevitas.api import ModelQuantizer
from quark.torch.quantization.config.config import Config


def test_a_layer_type_key_is_a_name_compared_with_class_names_never_imported():
    config = Config.from_dict({"global_quant_config": {}, "layer_type_quant_config": {"os.system": {"weight": {"dtype": "int8"}}}})
    assert list(config.layer_type_quant_config) == ["os.system"]
    with pytest.raises(ValueError, match=r"layer_type_quant_config\['os.system'\]: os.system is not a quantizable layer type"):
        ModelQuantizer(config).quantize_model(mlp(seed=0))


def test_a_quantized_checkpoint_loads_with_weights_only():
    """The state of a quantized model (scales, zero points, calibrated flags) is plain tensors."""
    qmodel = quantize(W8A8_IO, mlp(seed=0), batches(3))
    buffer = io.BytesIO()
    torch.save(qmodel.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)
    fresh = ModelQuantizer(W8A8_IO).quantize_model(mlp(seed=1), calibrate=False, progress=False)
    fresh.load_state_dict(state)
    x = torch.randn(4, 12)
    assert torch.equal(fresh(x), qmodel(x))
