"""A QAT-trained TQT model exports to QONNX and QCDQ graphs that reproduce its predictions exactly."""

import pytest
import torch

from quark.torch.examples import digits
from quark.torch.extensions.brevitas.algos import Preprocess
from quark.torch.extensions.brevitas.api import ModelExporter, ModelQuantizer
from quark.torch.extensions.brevitas.qat import freeze
from quark.torch.quantization.config.config import Config, QuantizationConfig, QuantizationSpec, TQTSpec
from quark.torch.quantization.config.type import Dtype, ScaleType, TQTThresholdInitMeth

pytest.importorskip("qonnx")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def trained():
    model, data = digits.trained_cnn(seed=0, epochs=8)

    def tqt(dtype):
        return QuantizationSpec(dtype=dtype, scale_type=ScaleType.pof2, qat_spec=TQTSpec(TQTThresholdInitMeth._3SD))

    config = Config(
        global_quant_config=QuantizationConfig(weight=tqt(Dtype.int4), input_tensors=tqt(Dtype.uint4)),
        pre_quant_opt_config=[Preprocess(equalize_iterations=0)],  # batch norm merged before QAT
    )
    qmodel = ModelQuantizer(config).quantize_model(model, data.loader("train"), progress=False)
    digits.train(qmodel, data, epochs=2, lr=1e-3, seed=0)
    images = torch.stack([x for x, _ in data.test])
    return freeze(qmodel), images


@pytest.mark.parametrize("method", ["export_qonnx_model", "export_onnx_model"])
def test_exported_graph_reproduces_the_trained_model_exactly(trained, method, tmp_path):
    qmodel, images = trained
    report = getattr(ModelExporter(str(tmp_path / "m.onnx")), method)(qmodel, images)
    assert report.passed
    assert report.max_abs_diff == 0  # on all 359 test images: identical logits, so identical predictions
