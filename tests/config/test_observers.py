"""The observers (``quark/torch/quantization/observer/``) on their own: min-max, per-channel,
percentile (histogram) and MSE ranges against plain torch, exact or to one histogram bin.
"""

from __future__ import annotations

import pytest
import torch
from _reference import quant as R
from _shared.numerics import exact, near_percentile

from quark.torch.quantization.observer import (
    PerChannelMinMaxObserver,
    PerTensorMinMaxObserver,
    PerTensorMSEObserver,
    PerTensorPercentileObserver,
)


def _batches(seed=30):
    g = torch.Generator().manual_seed(seed)
    shifts = [(1.0, 0.0), (4.0, 2.0), (0.5, -3.0), (2.0, 1.0)]
    return [torch.randn(8, 6, 5, generator=g) * k + o for k, o in shifts]


@pytest.mark.parametrize("symmetric", [True, False])
def test_minmax_observer_global_range(symmetric):
    batches = _batches()
    obs = PerTensorMinMaxObserver(symmetric=symmetric)
    for b in batches:
        obs(b)
    allx = torch.cat(batches)
    assert obs.num_batches == 4
    exact(obs.min_val, allx.min())
    exact(obs.max_val, allx.max())
    lo, hi = obs.calculate_range()
    elo, ehi = torch.clamp(allx.min(), max=0), torch.clamp(allx.max(), min=0)
    if symmetric:
        elo, ehi = -torch.maximum(-elo, ehi), torch.maximum(-elo, ehi)
    exact(lo, elo)
    exact(hi, ehi)


def test_minmax_observer_range_contains_zero():
    obs = PerTensorMinMaxObserver(symmetric=False)
    obs(torch.tensor([2.0, 3.0]))
    lo, hi = obs.calculate_range()
    assert lo == 0 and hi == 3


@pytest.mark.parametrize("ch_axis", [0, 1, 2, -1])
@pytest.mark.parametrize("symmetric", [True, False])
def test_per_channel_minmax_observer(ch_axis, symmetric):
    batches = _batches(31)
    obs = PerChannelMinMaxObserver(symmetric=symmetric, ch_axis=ch_axis)
    for b in batches:
        obs(b)
    allx = torch.cat(batches, dim=1 if ch_axis == 0 else 0).movedim(ch_axis, 0).flatten(1)
    exact(obs.min_val, allx.min(1).values)
    exact(obs.max_val, allx.max(1).values)
    lo, hi = obs.calculate_range()
    elo, ehi = torch.clamp(allx.min(1).values, max=0), torch.clamp(allx.max(1).values, min=0)
    if symmetric:
        elo, ehi = -torch.maximum(-elo, ehi), torch.maximum(-elo, ehi)
    exact(lo, elo)
    exact(hi, ehi)


@pytest.mark.parametrize("percentile", [99.0, 99.9, PerTensorPercentileObserver.percentile])
@pytest.mark.parametrize("symmetric", [True, False])
def test_percentile_observer_within_one_bin(percentile, symmetric):
    g = torch.Generator().manual_seed(32)
    batches = [torch.randn(50_000, generator=g) * k for k in (1.0, 3.0, 0.7)]  # the range doubles
    cls = type("P", (PerTensorPercentileObserver,), {"percentile": percentile})
    obs = cls(symmetric=symmetric)
    for b in batches:
        obs(b)
    allx = torch.cat(batches)
    lo, hi = obs.calculate_range()
    if symmetric:
        width = obs.bound / obs.num_bins
        assert near_percentile(hi, allx.abs(), percentile / 100, width)
        assert lo == -hi
    else:
        width = 2 * obs.bound / obs.num_bins
        tail = (100 - percentile) / 200
        assert near_percentile(lo, allx, tail, width)
        assert near_percentile(hi, allx, 1 - tail, width)


@pytest.mark.parametrize("symmetric", [True, False])
def test_histogram_doubling_keeps_counts(symmetric):
    g = torch.Generator().manual_seed(33)
    batches = [torch.randn(1000, generator=g) * k for k in (0.3, 1.0, 0.1, 5.0, 20.0)]
    obs = PerTensorPercentileObserver(symmetric=symmetric)
    for b in batches:
        obs(b)
    allx = torch.cat(batches)
    assert obs.bound >= float(allx.abs().max())
    assert float(obs.hist.sum()) == allx.numel()
    data = allx.abs() if symmetric else allx
    direct = torch.histc(data, bins=obs.num_bins, min=0.0 if symmetric else -obs.bound, max=obs.bound)
    # merging bins is exact up to elements lying on a bin edge of one resolution but not the other
    assert float((obs.hist - direct).abs().sum()) <= 2 * len(batches)


def _heavy_tailed(seed=34):
    torch.manual_seed(seed)
    x = torch.distributions.Laplace(0.0, 1.0).sample((100_000,))
    x[:20] = torch.linspace(-60.0, 80.0, 20)
    return x


@pytest.mark.parametrize("symmetric", [True, False])
def test_mse_observer_beats_minmax(symmetric):
    x = _heavy_tailed()
    qmin, qmax = (-128, 127) if symmetric else (0, 255)
    mse_obs = PerTensorMSEObserver(symmetric=symmetric, qmin=qmin, qmax=qmax)
    mm_obs = PerTensorMinMaxObserver(symmetric=symmetric, qmin=qmin, qmax=qmax)
    for chunk in x.split(25_000):
        mse_obs(chunk)
        mm_obs(chunk)

    def mse(lo, hi):
        s, zp, gmin, gmax = R.qparams(lo, hi, 8, True, symmetric)
        return float(((R.quantize(x, s, zp, gmin, gmax)[1] - x) ** 2).mean())

    lo, hi = mse_obs.calculate_range()
    mlo, mhi = mm_obs.calculate_range()
    assert lo <= 0 <= hi
    assert hi - lo < mhi - mlo  # it clips the outliers
    assert mse(lo, hi) <= mse(mlo, mhi)
