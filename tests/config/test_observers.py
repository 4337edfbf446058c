"""The observers (``quark/torch/quantization/observer/``) on their own: min-max, per-channel,
percentile (histogram) and MSE ranges against plain torch, exact or to one histogram bin.
"""

from __future__ import annotations

import math

import pytest
import torch
from _reference import quant as R
from _shared.numerics import exact, near_percentile

from quark.torch.quantization.config.config import QuantizationSpec
from quark.torch.quantization.config.type import QSchemeType
from quark.torch.quantization.observer import (
    OBSERVERS,
    PerChannelMinMaxObserver,
    PerTensorMinMaxObserver,
    PerTensorMSEObserver,
    PerTensorPercentileObserver,
)
from quark.torch.quantization.observer.selectors import _SelectorObserver
from quark.torch.quantization.tensor_quant import Format, normalise


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


# -- the table, row by row (OBSERVERS: names a config file may give) ---------------------------------

_X = torch.cat([torch.randn(1000, generator=torch.Generator().manual_seed(35)), torch.tensor([-9.0, 12.0])])


def _minmax(observer, lo, hi, x):
    return lo == min(float(x.min()), 0.0) and hi == max(float(x.max()), 0.0)


def _percentile(observer, lo, hi, x):
    """The central ``percentile`` interval of x, to one histogram bin (asymmetric)."""
    width, tail = 2 * observer.bound / observer.num_bins, (100 - observer.percentile) / 200
    return near_percentile(lo, x, tail, width) and near_percentile(hi, x, 1 - tail, width)


def _clipping(observer, lo, hi, x):
    """An MSE search on the 8-bit grid: inside the data's range, clipping its two outliers."""
    return float(x.min()) <= lo < 0 < hi < float(x.max())


def _pof2_grid(observer, lo, hi, x):
    """AMD Quark's power-of-two vote: a grid of 255 steps of a power of two holding zero (the
    majority batch's choice, so not necessarily the outliers)."""
    step = (hi - lo) / 255
    return lo <= 0 <= hi and step > 0 and math.log2(step).is_integer()


def _lsq(observer, lo, hi, x):
    """LSQ's initial scale 2 mean|x| / sqrt(qmax) over all data, on the unsigned grid."""
    scale = 2 * float(x.abs().double().mean()) / math.sqrt(255)
    return lo == 0 and math.isclose(hi, scale * 255, rel_tol=1e-5)


def _mean_abs(observer, lo, hi, x):
    """The mean |x| over all data, on both sides (the bipolar scale: XNOR-Net's L2 optimum)."""
    mean = float(x.double().abs().mean())
    return math.isclose(hi, mean, rel_tol=1e-6) and lo == -hi


def _refused(reason: str):
    """The spec naming the observer is refused, naming it and why (``reason``: a regex)."""
    return reason


def _is(fmt: Format, statistic: str, qscheme: QSchemeType):
    return lambda tq: (tq.format, tq.statistic, tq.qscheme) == (fmt, statistic, qscheme)


_PER_TENSOR, _PER_CHANNEL, _PER_GROUP = QSchemeType.per_tensor, QSchemeType.per_channel, QSchemeType.per_group
_UINT8 = {"dtype": "uint8", "symmetric": False}
_UINT8_POF2 = {**_UINT8, "scale_type": "pof2"}
_INT8_CHANNEL_POF2 = {"dtype": "int8", "qscheme": "per_channel", "ch_axis": 0, "scale_type": "pof2"}
#: observer name -> (spec fields naming it, role, what the spec normalises to, the range check on
#: ``_X`` of an observer that calibrates; None for the names selecting what a quantizer computes itself)
OBSERVER_CASES = {
    "PerTensorMinMaxObserver": (_UINT8, "input_tensors", _is(Format.integer, "minmax", _PER_TENSOR), _minmax),
    "PerChannelMinMaxObserver": (
        {"dtype": "int8", "qscheme": "per_channel", "ch_axis": 0},
        "weight",
        _is(Format.integer, "minmax", _PER_CHANNEL),
        _minmax,  # one channel here; test_per_channel_minmax_observer: several
    ),
    "PerGroupMinMaxObserver": (
        {"dtype": "int4", "qscheme": "per_group", "ch_axis": 1, "group_size": 8},
        "weight",
        _is(Format.integer, "minmax", _PER_GROUP),
        None,
    ),
    "PerTensorPercentileObserver": (_UINT8, "input_tensors", _is(Format.integer, "percentile", _PER_TENSOR), _percentile),
    "PerTensorMSEObserver": (_UINT8, "input_tensors", _is(Format.integer, "mse", _PER_TENSOR), _clipping),
    "PerTensorHistogramObserver": (_UINT8, "input_tensors", _is(Format.integer, "mse", _PER_TENSOR), _clipping),
    "PlaceholderObserver": ({"dtype": "bfloat16"}, "weight", lambda tq: tq.format is Format.cast, None),
    "PerBlockMXObserver": (
        {"dtype": "mx", "mx_element_dtype": "fp8_e4m3", "qscheme": "per_group", "ch_axis": 1, "group_size": 32},
        "weight",
        lambda tq: (tq.format, tq.group_size) == (Format.mx, 32),
        None,
    ),
    "PerBlockBFPObserver": (
        {"dtype": "mx6", "qscheme": "per_group", "ch_axis": 1, "group_size": 16},
        "weight",
        lambda tq: (tq.format, tq.group_size) == (Format.bdr, 16),
        None,
    ),
    # AMD Quark 0.13's observers (formulas: tests/backend/formats/test_quark013_observers.py)
    "PerTensorHistogramObserverPro": (_UINT8, "input_tensors", _is(Format.integer, "histogram_pro", _PER_TENSOR), _clipping),
    "PerTensorPowOf2MinMaxObserver": (_UINT8_POF2, "input_tensors", _is(Format.integer, "minmax", _PER_TENSOR), _pof2_grid),
    "PerTensorPowOf2MinMSEObserver": (_UINT8_POF2, "input_tensors", _is(Format.integer, "pof2_mse", _PER_TENSOR), _pof2_grid),
    "PerChannelPowOf2MinMaxObserver": (_INT8_CHANNEL_POF2, "weight", _is(Format.integer, "minmax", _PER_CHANNEL), _pof2_grid),
    "PerChannelPowOf2MinMSEObserver": (
        _INT8_CHANNEL_POF2, "weight", _refused("MinMSE search over five powers of two runs per tensor here"), _pof2_grid
    ),
    "LSQObserver": ({"dtype": "uint8"}, "input_tensors", _is(Format.integer, "lsq", _PER_TENSOR), _lsq),
    "TQTObserver": (
        {"dtype": "int8", "scale_type": "pof2", "qat_spec": {"name": "TQTSpec", "threshold_init_meth": "_3SD"}},
        "input_tensors",
        lambda tq: tq.format is Format.integer and tq.tqt,
        None,
    ),
    "PerBlockMXDiffsObserver": (
        {"dtype": "fp4", "qscheme": "per_group", "ch_axis": -1, "group_size": 32, "scale_format": "e8m0"},
        "weight",
        _refused("a per-block search of the shared exponent"),
        None,
    ),
    "PerBlock2DMinMaxObserver": (
        {"dtype": "int8", "qscheme": "per_block", "block_size": [4, 4]}, "weight", _refused("2-D weight blocks"), None
    ),    # binary and ternary tensors (formulas: tests/backend/formats/test_binary.py)
    "MeanAbsObserver": ({"dtype": "bipolar"}, "weight", _is(Format.bipolar, "mean_abs", _PER_TENSOR), _mean_abs),
    "UnitScaleObserver": ({"dtype": "bipolar"}, "input_tensors", _is(Format.bipolar, "unit", _PER_TENSOR), None),
}


def test_every_observer_row_has_a_case():
    assert set(OBSERVER_CASES) == set(OBSERVERS)


@pytest.mark.parametrize("name", list(OBSERVER_CASES))
def test_every_observer_row_loads_by_name_normalises_and_observes(name):
    """The name loads (and saves) as the class; the spec normalises to the observer's statistic or
    format; an observer that calibrates gives its range on ``_X``, one that selects refuses to."""
    fields, role, normalises_to, check = OBSERVER_CASES[name]
    cls = OBSERVERS[name]
    spec = QuantizationSpec.from_dict({**fields, "observer_cls": name})
    assert spec.observer_cls is cls and spec.to_dict()["observer_cls"] == name
    if isinstance(normalises_to, str):
        with pytest.raises(ValueError, match=normalises_to):
            normalise(spec, role, "x")
    else:
        assert normalises_to(normalise(spec, role, "x"))
    observer = cls(symmetric=False, qmin=0, qmax=255, ch_axis=0)
    if check is None:
        assert issubclass(cls, _SelectorObserver)
        with pytest.raises(TypeError, match=rf"{name} selects .* computed by the quantizer itself"):
            observer(_X)
        return
    for chunk in _X[None].split(300, dim=1):  # one row: one channel for the per-channel observer
        observer(chunk)
    lo, hi = (float(v.squeeze()) for v in observer.calculate_range())
    assert check(observer, lo, hi, _X), (lo, hi)
