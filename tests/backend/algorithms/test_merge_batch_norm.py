"""``MergeBatchNorm`` and the XINT8 preset that uses it: batch norm folded, the float function kept,
models without batch norm untouched (no tracing), and an integer QDQ graph that ONNX Runtime
computes exactly as torch."""

from __future__ import annotations

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


