"""TQT threshold initialisation (``_3SD``, ``_LL_J``) against the plain-torch reference.

Expected values come from ``tests/_reference/tqt.py`` (written from Jain et al. and Settle et al.,
importing nothing from quark): ``three_sd`` on the concatenated data in float64, and a literal
per-candidate Python loop of Settle et al.'s Algorithm 1 with the Jeffreys divergence.
"""

from __future__ import annotations

import math

import pytest
import torch
from _reference import tqt as R
from _shared.numerics import DISTRIBUTIONS, samples

from quark.torch.quantization.observer import PerTensorPercentileObserver, TQT3SDObserver, TQTJeffreysObserver
from quark.torch.quantization.observer import histogram as observer_module
from quark.torch.quantization.tqt_init import jeffreys_divergences, jeffreys_threshold, three_sd

# -- _3SD ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", DISTRIBUTIONS)
def test_three_sd_formula(kind):
    x = samples(kind, 10_000, seed=1).double()
    mean, std = x.mean(), x.std(unbiased=False)
    got = three_sd(mean, std)
    assert isinstance(got, torch.Tensor)
    assert float(got) == pytest.approx(R.three_sd(x), rel=1e-12)


def test_three_sd_uses_absolute_mean():
    x = samples("normal", 10_000, seed=2) - 5.0  # negative mean
    got = three_sd(x.double().mean(), x.double().std(unbiased=False))
    assert float(got) == pytest.approx(R.three_sd(x), rel=1e-12)
    assert float(got) > 5.0


@pytest.mark.parametrize("kind", DISTRIBUTIONS)
def test_3sd_observer_over_batches(kind):
    x = samples(kind, 30_000, seed=3)
    batches = [x[:1000], x[1000:8000].reshape(7, 1000), x[8000:20000].reshape(4, 3, 1000), x[20000:]]
    obs = TQT3SDObserver(symmetric=True, qmin=-128, qmax=127)
    for b in batches:
        obs(b)
    assert obs.num_batches == len(batches)
    lo, hi = obs.calculate_range()
    assert isinstance(hi, torch.Tensor) and hi.dtype == torch.float32
    assert float(hi) == pytest.approx(R.three_sd(x), rel=1e-6)
    assert float(lo) == -float(hi)


@pytest.mark.parametrize("offset", [0.0, 500.0, -1000.0])
def test_3sd_observer_std_survives_a_large_mean(offset):
    """The standard deviation itself (threshold - |mean|), to 1e-4, where the mean is 1,000 times
    it: raw float32 sums of x and x^2 would leave it some percent off. (The threshold is a float32:
    its rounding, 6e-5 at 1,000, is what the tolerance leaves room for.)"""
    x = (samples("normal", 200_000, seed=6) + offset).float()
    obs = TQT3SDObserver()
    for batch in x.split(50_000):
        obs(batch.reshape(10, -1))
    mean, std = float(x.double().mean()), float(x.double().std(unbiased=False))
    assert (float(obs.calculate_range()[1]) - abs(mean)) / 3 == pytest.approx(std, rel=1e-4)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_3sd_observer_other_float_types(dtype):
    x = samples("laplace", 20_000, seed=7).to(dtype)
    obs = TQT3SDObserver()
    obs(x)
    assert float(obs.calculate_range()[1]) == pytest.approx(R.three_sd(x.double()), rel=1e-6)


def test_3sd_observer_ignores_empty_batches():
    x = samples("laplace", 5000, seed=4)
    obs = TQT3SDObserver()
    obs(torch.empty(0))
    obs(x[:2500])
    obs(torch.empty(0, 3))
    obs(x[2500:])
    assert obs.num_batches == 2
    assert float(obs.calculate_range()[1]) == pytest.approx(R.three_sd(x), rel=1e-6)


# -- _LL_J: the divergence search ----------------------------------------------------------------


def _histogram(kind: str, bins: int) -> torch.Tensor:
    x = samples(kind, 200_000, seed=5)
    amax = float(x.abs().max())
    return R.abs_histogram(x, bins, amax).float()  # counts, as the observer stores them (float32)


@pytest.mark.parametrize("levels", [8, 128], ids=["int4", "int8"])
@pytest.mark.parametrize("kind", DISTRIBUTIONS)
def test_jeffreys_divergences_match_literal_algorithm(kind, levels):
    hist = _histogram(kind, 512)
    got = jeffreys_divergences(hist, levels)
    expected = torch.tensor(R.jeffreys_divergences(hist.tolist(), levels), dtype=torch.float64)
    assert got.shape == expected.shape == (512 - levels + 1,)
    assert got.dtype == torch.float64
    assert torch.equal(torch.isinf(got), torch.isinf(expected))
    assert not torch.isnan(got).any()
    finite = torch.isfinite(expected)
    assert finite.any()
    assert torch.allclose(got[finite], expected[finite], rtol=1e-9, atol=1e-12)
    assert (got[finite] >= 0).all()  # a Jeffreys divergence is non-negative


def test_jeffreys_divergences_outliers_have_infinite_candidates():
    """The gap between the bulk and the outliers: clipping into an empty bin is infinitely bad."""
    hist = _histogram("outliers", 512)
    expected = R.jeffreys_divergences(hist.tolist(), 8)
    assert any(math.isinf(j) for j in expected)
    got = jeffreys_divergences(hist, 8)
    assert torch.isinf(got).sum() == sum(math.isinf(j) for j in expected)


@pytest.mark.parametrize("chunk", [1, 7, 1000])
def test_jeffreys_divergences_chunking_does_not_change_the_result(chunk):
    hist = _histogram("laplace", 300)
    full = jeffreys_divergences(hist, 16)
    assert torch.equal(jeffreys_divergences(hist, 16, chunk=chunk), full)


def test_jeffreys_divergences_on_handmade_histogram():
    """A 10-bin histogram, 2 levels: every candidate computed by hand by the literal reference,
    including an empty bin (clip into it -> infinite) and a zero group."""
    hist = torch.tensor([5.0, 0.0, 3.0, 1.0, 0.0, 0.0, 2.0, 1.0, 0.0, 1.0])
    got = jeffreys_divergences(hist, 2)
    expected = R.jeffreys_divergences(hist.tolist(), 2)
    assert torch.equal(torch.isinf(got), torch.tensor([math.isinf(j) for j in expected]))
    fin = [k for k, j in enumerate(expected) if math.isfinite(j)]
    assert torch.allclose(got[fin], torch.tensor([expected[k] for k in fin], dtype=torch.float64), rtol=1e-9, atol=1e-12)
    # i=2 clips 3+1+2+1+1 = 8 into the empty bin 1: infinite
    assert math.isinf(expected[0]) and torch.isinf(got[0])


@pytest.mark.parametrize("levels", [4, 8, 128])
@pytest.mark.parametrize("kind", DISTRIBUTIONS)
def test_jeffreys_threshold_is_argmin_times_bin_width(kind, levels):
    hist = _histogram(kind, 512)
    width = 0.013
    got = jeffreys_threshold(hist, width, levels)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.float32 and got.dim() == 0
    expected = R.jeffreys_threshold(hist.tolist(), width, levels)
    assert float(got) == pytest.approx(expected, rel=1e-6)


def test_jeffreys_threshold_few_bins_keeps_full_range():
    hist = torch.tensor([4.0, 3.0, 2.0, 1.0])
    assert float(jeffreys_threshold(hist, 0.5, 4)) == 2.0
    assert float(jeffreys_threshold(hist, 0.5, 8)) == 2.0


def _edge_histogram(case: str) -> torch.Tensor:
    """Histograms where the prefix-sum search has edge cases of its own."""
    g = torch.Generator().manual_seed(11)
    if case == "sparse":  # nine bins in ten empty, at random
        h = torch.randint(1, 50, (400,), generator=g).float()
        return h * (torch.rand(400, generator=g) < 0.1)
    if case == "empty_head_and_tail":  # nothing in the first 100 bins, nor past bin 250
        h = torch.zeros(400)
        h[100:250] = torch.randint(0, 30, (150,), generator=g).float()
        return h
    if case == "few_populated":  # 5 populated bins, fewer than most level counts
        h = torch.zeros(300)
        h[[3, 40, 41, 120, 299]] = torch.tensor([7.0, 1.0, 2.0, 5.0, 1.0])
        return h
    if case == "one_populated":
        h = torch.zeros(200)
        h[57] = 9.0
        return h
    if case == "discrete_ties":  # integer data on a grid of bins: several thresholds fit exactly
        x = torch.randint(0, 12, (5000,), generator=g).float() * 16 + 0.5
        return R.abs_histogram(x, 256, 256.0)
    if case == "flat":  # every bin equal: ties everywhere
        return torch.full((300,), 4.0)
    if case == "huge_counts":  # float64 counts near 1e12: accuracy does not depend on scale
        return (torch.randn(301, generator=g, dtype=torch.float64).abs() * 1e12).round()
    raise ValueError(case)


EDGE_CASES = ("sparse", "empty_head_and_tail", "few_populated", "one_populated", "discrete_ties", "flat", "huge_counts")


@pytest.mark.parametrize("levels", [2, 8, 16, 64, 128])  # few levels: groups evaluated directly; many: from a table
@pytest.mark.parametrize("case", EDGE_CASES)
def test_jeffreys_search_edge_cases_match_literal_algorithm(case, levels):
    hist = _edge_histogram(case)
    if hist.numel() <= levels:
        pytest.skip("no candidates")
    got = jeffreys_divergences(hist, levels)
    expected = torch.tensor(R.jeffreys_divergences(hist.tolist(), levels), dtype=torch.float64)
    assert torch.equal(torch.isinf(got), torch.isinf(expected))
    finite = torch.isfinite(expected)
    assert torch.allclose(got[finite], expected[finite], rtol=1e-9, atol=1e-12)
    assert (got[finite] >= 0).all()
    assert float(jeffreys_threshold(hist, 0.5, levels)) == R.jeffreys_threshold(hist.tolist(), 0.5, levels)


@pytest.mark.parametrize("n_bins,levels", [(300, 1), (64, 63), (64, 64), (3, 2)])
def test_jeffreys_search_extreme_level_counts_match_literal_algorithm(n_bins, levels):
    """One level (one group: the whole range), and as many levels as bins or one fewer."""
    hist = torch.randint(0, 5, (n_bins,), generator=torch.Generator().manual_seed(14)).float()
    got = jeffreys_divergences(hist, levels)
    expected = torch.tensor(R.jeffreys_divergences(hist.tolist(), levels), dtype=torch.float64)
    assert torch.equal(torch.isinf(got), torch.isinf(expected))
    finite = torch.isfinite(expected)
    assert torch.allclose(got[finite], expected[finite], rtol=1e-9, atol=1e-12)
    assert float(jeffreys_threshold(hist, 0.5, levels)) == R.jeffreys_threshold(hist.tolist(), 0.5, levels)


@pytest.mark.parametrize("chunk", [1, 100, 2**20])
@pytest.mark.parametrize("levels", [4, 128])
def test_jeffreys_divergences_chunking_does_not_change_the_result_on_either_path(levels, chunk):
    hist = _histogram("normal", 700)
    assert torch.equal(jeffreys_divergences(hist, levels, chunk=chunk), jeffreys_divergences(hist, levels))


def test_jeffreys_divergences_of_an_empty_histogram_are_zero():
    """All P and Q empty: no term, J = 0 for every candidate, so the full range wins the tie."""
    hist = torch.zeros(64)
    assert torch.equal(jeffreys_divergences(hist, 8), torch.zeros(57, dtype=torch.float64))
    assert float(jeffreys_threshold(hist, 0.25, 8)) == 16.0


# -- _LL_J: the observer --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bits,signed", [(8, True), (4, True), (2, True), (4, False), (2, False)], ids=["int8", "int4", "int2", "uint4", "uint2"]
)
@pytest.mark.parametrize("kind", DISTRIBUTIONS)
def test_jeffreys_observer_within_one_bin_of_reference(kind, bits, signed):
    x = samples(kind, 120_000, seed=6)
    # batches of growing range: the observer's histogram has to double its range on the way
    order = torch.argsort(x.abs())
    x = x[torch.cat([order[:30_000], order[30_000:][torch.randperm(90_000, generator=torch.Generator().manual_seed(0))]])]
    qmin, qmax = R.grid(bits, signed)
    obs = TQTJeffreysObserver(symmetric=True, qmin=qmin, qmax=qmax)
    for b in x.split(20_000):
        obs(b)
    lo, hi = obs.calculate_range()
    assert isinstance(hi, torch.Tensor) and float(lo) == -float(hi)

    amax = float(x.abs().max())
    bound = 2.0 ** math.ceil(math.log2(amax))
    bins = min(2048, 2 ** math.ceil(math.log2(math.sqrt(x.numel()))))  # square-root rule
    width = bound / bins
    expected = R.jeffreys_threshold(R.abs_histogram(x, bins, bound).tolist(), width, R.levels(bits, signed))
    assert abs(float(hi) - expected) <= width * (1 + 1e-6), (float(hi), expected, width)
    assert 0 < float(hi) <= bound


def test_jeffreys_observer_is_batch_order_independent():
    x = samples("laplace", 60_000, seed=7)
    a, b = TQTJeffreysObserver(qmin=-8, qmax=7), TQTJeffreysObserver(qmin=-8, qmax=7)
    for chunk in x.split(10_000):
        a(chunk)
    for chunk in reversed(x.split(7_000)):
        b(chunk)
    assert torch.equal(a.calculate_range()[1], b.calculate_range()[1])


def _histc(data: torch.Tensor, obs) -> torch.Tensor:
    return torch.histc(data, bins=obs.num_bins, min=0.0 if obs.symmetric else -obs.bound, max=obs.bound)


def _awkward(case: str) -> torch.Tensor:
    g = torch.Generator().manual_seed(12)
    if case == "normal":
        return torch.randn(20_000, generator=g)
    if case == "bin_edges":  # values exactly on the edges of the 2048 bins over [-4, 4], and +-4
        return torch.randint(-1024, 1025, (20_000,), generator=g).float() / 256
    if case == "subnormal":  # all |x| < 2^-126: bins of width 2^-140 or less
        return torch.randint(-2**13, 2**13, (20_000,), generator=g).float() * 2.0**-149
    if case == "transposed":  # not contiguous
        return torch.randn(200, 100, generator=g).t()
    raise ValueError(case)


@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("case", ["normal", "bin_edges", "subnormal", "transposed"])
def test_histogram_counts_equal_torch_histc(case, symmetric):
    """The observers count with bincount; the bins must be exactly those of torch.histc."""
    x = _awkward(case)
    obs = PerTensorPercentileObserver(symmetric=symmetric)
    obs(x)
    assert float(obs.hist.sum()) == x.numel()
    assert torch.equal(obs.hist, _histc(x.abs() if symmetric else x, obs))


@pytest.mark.parametrize("cls", [TQTJeffreysObserver, PerTensorPercentileObserver])
def test_histogram_counted_in_slices_is_the_same(cls, monkeypatch):
    """Large tensors are counted a slice at a time; slicing (here every 777 values) changes nothing."""
    x = _awkward("bin_edges").reshape(40, 500) * torch.relu(torch.randn(40, 500, generator=torch.Generator().manual_seed(3)))
    whole = cls()
    whole(x)
    monkeypatch.setattr(observer_module, "_SLICE", 777)
    sliced = cls()
    sliced(x)
    assert torch.equal(sliced.hist, whole.hist)
    data = x[x != 0] if cls.skip_zeros else x
    assert torch.equal(sliced.hist, _histc(data.abs() if sliced.symmetric else data, sliced))


def test_jeffreys_observer_leaves_out_exact_zeros():
    g = torch.Generator().manual_seed(13)
    x = torch.relu(torch.randn(30_000, generator=g))  # half zeros
    x[::7] = -0.0
    obs, nonzero_only = TQTJeffreysObserver(qmin=-8, qmax=7), TQTJeffreysObserver(qmin=-8, qmax=7)
    for batch in (x[:10_000], torch.zeros(500), x[10_000:]):
        obs(batch)
        nonzero_only(batch[batch != 0])
    assert obs.num_batches == 3
    assert float(obs.hist.sum()) == int((x != 0).sum())
    assert torch.equal(obs.hist, _histc(x[x != 0].abs(), obs))
    assert torch.equal(obs.calculate_range()[1], nonzero_only.calculate_range()[1])


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("cls", [TQTJeffreysObserver, PerTensorPercentileObserver])
def test_histogram_observers_reject_non_finite_data(cls, bad):
    obs = cls()
    obs(torch.ones(10))
    with pytest.raises(ValueError, match=f"{cls.__name__}: calibration tensor holds .*NaN or infinity"):
        obs(torch.tensor([1.0, bad, 2.0]))


# -- device, tensors, no NumPy ------------------------------------------------------------------


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", DEVICES)
def test_init_stays_on_device_without_numpy(device, monkeypatch):
    def no_numpy(*_a, **_k):
        raise AssertionError("threshold initialisation must not go through NumPy")

    monkeypatch.setattr(torch.Tensor, "numpy", no_numpy)
    monkeypatch.setattr(torch.Tensor, "__array__", no_numpy, raising=False)
    x = samples("laplace", 50_000, seed=8).to(device)

    t = three_sd(x.double().mean(), x.double().std(unbiased=False))
    assert isinstance(t, torch.Tensor) and t.device.type == device

    hist = torch.histc(x.abs(), bins=256, min=0, max=float(x.abs().max()))
    assert jeffreys_divergences(hist, 8).device.type == device
    t = jeffreys_threshold(hist, 0.01, 8)
    assert isinstance(t, torch.Tensor) and t.device.type == device

    for cls in (TQT3SDObserver, TQTJeffreysObserver):
        obs = cls(qmin=-8, qmax=7).to(device)
        obs(x)
        lo, hi = obs.calculate_range()
        assert isinstance(hi, torch.Tensor) and hi.device.type == device and lo.device.type == device


def test_jeffreys_search_needs_no_host_values():
    """On the meta device there are no values to read: the search must be pure tensor code."""
    hist = torch.empty(300, device="meta")
    assert jeffreys_divergences(hist, 8).device.type == "meta"
    assert jeffreys_threshold(hist, 0.1, 8).device.type == "meta"
