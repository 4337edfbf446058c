"""``MergeBatchNorm`` and the XINT8 preset that uses it: batch norm folded, the float function kept,
models without batch norm untouched (no tracing), and an integer QDQ graph that ONNX Runtime
computes exactly as torch."""

from __future__ import annotations

import pytest
import torch
from _shared.models import trained_batch_norm
from torch import nn

from quark.torch.examples import digits
from quark.torch.extensions.brevitas.algos import MergeBatchNorm


def test_batch_norm_is_folded_and_the_function_kept():
    model = trained_batch_norm(digits.ResidualCNN())
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
    model = trained_batch_norm(_UntraceableWithBlocks())
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


class _PaddedConvLayer(nn.Module):
    """transformers' convolution layers compute their padding from sizes (torch.fx cannot trace
    them), and read their children's attributes."""

    def __init__(self, reuse: bool = False):
        super().__init__()
        self.convolution = nn.Conv2d(3, 4, 3)
        self.normalization = nn.BatchNorm2d(4)
        self.reuse = reuse

    def forward(self, x):
        pad = int(self.convolution.stride[0] * x.shape[-1] % 2 + 1)
        features = self.convolution(nn.functional.pad(x, (pad, pad, pad, pad)))
        out = torch.relu(self.normalization(features))
        return out + features if self.reuse else out  # with reuse, the conv's output feeds the sum too


@pytest.mark.parametrize("reuse", [False, True], ids=["alone", "reused"])
def test_without_a_graph_batch_norm_is_folded_where_one_batch_shows_it_is_exact(reuse, caplog):
    """No torch.fx graph: a batch of calibration data shows which layer's output each batch norm takes;
    a fold is kept only where the outputs stay the same (not where the layer's output feeds more)."""
    from quark.torch.extensions.brevitas._backend.algorithms.batch_norm import merge_batch_norm

    model = trained_batch_norm(nn.Sequential(_PaddedConvLayer(reuse), _PaddedConvLayer()))
    model[1].convolution = nn.Conv2d(4, 4, 3)
    trained_batch_norm(model)
    x = torch.rand(2, 3, 8, 8)
    with torch.no_grad():
        expected = model(x)
    merged = merge_batch_norm(MergeBatchNorm(), model, [torch.rand(2, 3, 8, 8)])
    folded = {name for name, m in merged.named_modules() if isinstance(m, nn.Identity)}
    assert folded == ({"1.normalization"} if reuse else {"0.normalization", "1.normalization"})
    assert merged[0].convolution.stride == (1, 1)  # the layers themselves stay, attributes and all
    with torch.no_grad():
        torch.testing.assert_close(merged(x), expected, rtol=1e-5, atol=1e-5)
    assert ("0.normalization (BatchNorm2d)" in caplog.text) is reuse  # the one kept is named
