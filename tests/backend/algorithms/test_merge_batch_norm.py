"""``MergeBatchNorm`` and the XINT8 preset that uses it: batch norm folded, the float function kept,
models without batch norm untouched (no tracing), and an integer QDQ graph that ONNX Runtime
computes exactly as torch."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from quark.torch.examples import digits
from quark.torch.extensions.brevitas import presets
from quark.torch.extensions.brevitas.algos import MergeBatchNorm
from quark.torch.extensions.brevitas.api import ModelExporter, ModelQuantizer


def _trained_batch_norm(model: nn.Module) -> nn.Module:
    """Non-trivial running statistics and affine parameters, so a wrong fold shows."""
    torch.manual_seed(0)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
            nn.init.uniform_(m.weight, 0.5, 1.5)
            nn.init.uniform_(m.bias, -0.2, 0.2)
    return model.eval()


def test_batch_norm_is_folded_and_the_function_kept():
    model = _trained_batch_norm(digits.ResidualCNN())
    x = torch.rand(16, 1, 8, 8)
    with torch.no_grad():
        expected = model(x)
    merged = MergeBatchNorm().apply(model)  # folds into the layers it is given, as Preprocess
    assert not any(isinstance(m, nn.BatchNorm2d) for m in merged.modules())
    with torch.no_grad():
        torch.testing.assert_close(merged(x), expected, rtol=1e-5, atol=1e-5)


class _Untraceable(nn.Module):
    """Data-dependent control flow: torch.fx cannot trace it."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(x) if x.sum() > 0 else -self.fc(x)


def test_a_model_without_batch_norm_is_returned_as_it_is():
    model = _Untraceable()
    assert MergeBatchNorm().apply(model) is model


class _UntraceableWithBlocks(nn.Module):
    """Control flow at the top (as transformers' models have), conv-BN blocks below it."""

    def __init__(self):
        super().__init__()
        self.block = nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU())
        self.other = nn.Sequential(nn.Conv2d(4, 4, 1), nn.BatchNorm2d(4))

    def forward(self, x):
        y = self.other(self.block(x))
        return y if x.sum() > 0 else -y


def test_a_model_that_does_not_trace_whole_is_folded_block_by_block(caplog):
    model = _trained_batch_norm(_UntraceableWithBlocks())
    x = torch.rand(4, 1, 8, 8)
    with torch.no_grad():
        expected = model(x)
    merged = MergeBatchNorm().apply(model)
    assert not any(isinstance(m, nn.BatchNorm2d) for m in merged.modules())
    assert {name for name, _ in merged.named_children()} == {"block", "other"}  # names kept for configs
    with torch.no_grad():
        torch.testing.assert_close(merged(x), expected, rtol=1e-5, atol=1e-5)
    assert "stay float" not in caplog.text


def test_a_batch_norm_after_an_addition_stays_and_is_named(caplog):
    class AddThenNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(2, 2, 1)
            self.bn = nn.BatchNorm2d(2)

        def forward(self, x):
            return self.bn(self.conv(x) + x)

    merged = MergeBatchNorm().apply(AddThenNorm().eval())
    assert isinstance(merged.get_submodule("bn"), nn.BatchNorm2d)
    assert "bn (BatchNorm2d)" in caplog.text


@pytest.mark.parametrize("graph", [False, True], ids=["layerwise", "graph"])
def test_xint8_folds_batch_norm_into_an_integer_graph_onnx_runtime_computes_exactly(tmp_path, graph):
    """Before the preset folded batch norm, the graph kept a float BatchNormalization between each
    Conv and its quantizer, and ONNX Runtime's float arithmetic flipped a rounding of torch's
    (0.07 on the logits of the trained digits network)."""
    import onnx

    data = digits.load(0)
    torch.manual_seed(0)
    model = _trained_batch_norm(digits.ResidualCNN())
    x_test = torch.cat([x for x, _ in data.loader("test", batch_size=512)])
    quantizer = ModelQuantizer(presets.xint8(graph=graph))
    qmodel = quantizer.quantize_model(model, data.loader("train"), progress=False)
    path = tmp_path / "digits.onnx"
    report = ModelExporter(path).export_onnx_model(qmodel, x_test, plans=quantizer.plans)
    assert report.exact and report.max_abs_diff == 0.0
    assert "BatchNormalization" not in {n.op_type for n in onnx.load(path).graph.node}


def test_xint8_without_merging_keeps_batch_norm():
    assert presets.xint8(merge_batch_norm=False).pre_quant_opt_config == []
    assert presets.xint8().pre_quant_opt_config == [MergeBatchNorm()]
