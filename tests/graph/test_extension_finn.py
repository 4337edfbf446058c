"""The Brevitas extension's plain config in graph mode, as its users write it (no sign, no rounding,
no target), taken to FINN's dataflow: the networks of the digits demo, trained on real digits, reach
one partition whose hardware layers give torch's predictions on the whole test set."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from quark.torch.examples import digits
from quark.torch.extensions.brevitas import config as bcfg
from quark.torch.extensions.brevitas.api import ModelExporter, ModelQuantizer
from quark.torch.quantization.config.type import ScaleType

NETWORKS = {
    "mlp": lambda: nn.Sequential(nn.Flatten(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10)),
    "cnn": digits.cnn,
}


@pytest.mark.slow
@pytest.mark.parametrize("name", NETWORKS)
def test_the_extension_config_in_graph_mode_reaches_finn_with_torch_predictions(tmp_path, name):
    pytest.importorskip("finn.transformation.fpgadataflow.create_dataflow_partition", reason="finn-plus is not installed")
    data = digits.load(0)
    torch.manual_seed(0)
    model = digits.train(NETWORKS[name](), data, epochs=5, seed=0)
    spec = bcfg.QuantizationSpec(bit_width=4, scale_type=ScaleType.pof2)
    config = bcfg.Config(
        global_quant_config=bcfg.QuantizationConfig(weight=spec, input_tensors=spec, output_tensors=spec),
        backend=bcfg.Backend.fx,
    )
    qmodel = ModelQuantizer(config).quantize_model(model, data.loader("train"), progress=False)
    x_test, _ = (torch.cat(t) for t in zip(*data.loader("test", batch_size=512)))
    result = ModelExporter(tmp_path).export_finn_dataflow(qmodel, x_test, integer_input=True)
    assert result.verification.passed and result.verification.samples == len(x_test) == 359
    assert result.verification.identical_predictions == 359 and result.verification.max_abs_diff == 0.0
    assert result.float_layers == ()  # an integer dataflow
