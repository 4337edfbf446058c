"""Independent plain-torch reference of TQT (Jain et al., arXiv 1903.08066) and its threshold inits.

Imports nothing from ``quark`` nor ``brevitas``: the tests compare the package against these
formulas, written from the papers, not against itself.

    v        learned log2 threshold
    grid     signed: [-2^(b-1), 2^(b-1)-1]; unsigned: [0, 2^b-1]
    scale    s = 2^ceil(v) / 2^(b-1) (signed), 2^ceil(v) / 2^b (unsigned)
    q(x)     clamp(round_half_even(x/s), qmin, qmax) * s
    dq/dx    1 where qmin <= round(x/s) <= qmax, else 0
    dq/dv    s ln2 (round(x/s) - x/s) inside, s ln2 qmin below, s ln2 qmax above
             (straight-through estimators for round and ceil)

    _3SD     t = |mean x| + 3 std x (population std)
    _LL_J    Settle et al. (arXiv 1805.07941) Algorithm 1 with the Jeffreys divergence; see
             :func:`jeffreys_divergence` for the exact construction of P and Q.
"""

from __future__ import annotations

import math

import torch


def grid(bits: int, signed: bool) -> tuple[int, int]:
    if signed:
        return -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    return 0, 2**bits - 1


def levels(bits: int, signed: bool) -> int:
    """Quantization levels on one side of zero: 2^(b-1) signed, 2^b unsigned."""
    return 2 ** (bits - 1) if signed else 2**bits


def scale(v: float | torch.Tensor, bits: int, signed: bool) -> torch.Tensor:
    """s = 2^ceil(v) / levels, computed in float64 then cast to float32 (exact: a power of two)."""
    v = torch.as_tensor(v, dtype=torch.float64)
    return (torch.exp2(torch.ceil(v)) / levels(bits, signed)).to(torch.float32)


def quantize(x: torch.Tensor, v: float | torch.Tensor, bits: int, signed: bool) -> torch.Tensor:
    """TQT forward q(x)."""
    qmin, qmax = grid(bits, signed)
    s = scale(v, bits, signed).to(x.dtype)
    return torch.clamp(torch.round(x / s), qmin, qmax) * s


def codes(x: torch.Tensor, v: float | torch.Tensor, bits: int, signed: bool) -> torch.Tensor:
    """Unclamped round(x/s), float64 (for gradients)."""
    s = scale(v, bits, signed).double()
    return torch.round(x.double() / s)


def grad_x(x: torch.Tensor, v: float | torch.Tensor, bits: int, signed: bool) -> torch.Tensor:
    """dq/dx: 1 inside the grid, 0 outside (float64)."""
    qmin, qmax = grid(bits, signed)
    r = codes(x, v, bits, signed)
    return ((r >= qmin) & (r <= qmax)).double()


def grad_v(x: torch.Tensor, v: float | torch.Tensor, bits: int, signed: bool) -> torch.Tensor:
    """Elementwise dq/dv (float64)."""
    qmin, qmax = grid(bits, signed)
    s = scale(v, bits, signed).double()
    xs = x.double() / s
    r = torch.round(xs)
    inner = torch.where(r < qmin, float(qmin), torch.where(r > qmax, float(qmax), r - xs))
    return s * math.log(2.0) * inner


def three_sd(x: torch.Tensor) -> float:
    """|mean| + 3 * population std, in float64."""
    x = x.double().flatten()
    mean = x.mean()
    std = torch.sqrt(((x - mean) ** 2).mean())
    return float(mean.abs() + 3 * std)


def jeffreys_divergence(hist: list[float] | torch.Tensor, levels: int, i: int) -> float:
    """J(P_i, Q_i) of Settle et al.'s Algorithm 1 for the candidate of ``i`` bins, slow and literal.

    - P: bins [0, i) of the histogram, with all mass of bins >= i added to bin i-1 (clipping).
    - Q: the same bins WITHOUT that tail mass, bin j in group floor(j * levels / i); each group's
      mass is spread evenly over the group's non-empty bins (empty bins stay 0).
    - both normalised to sum 1; J = sum over bins of (P - Q) * log(P / Q), where bins with P = Q = 0
      contribute 0 and a bin with P > 0, Q = 0 (or P = 0, Q > 0) makes J infinite.
    - a candidate whose bins [0, i) hold fewer non-empty bins than min(levels, non-empty bins of the
      whole histogram) is uninformative (normalised P and Q then coincide whatever was clipped): J = inf.
    """
    h = [float(c) for c in hist]
    n = len(h)
    assert levels <= i <= n
    if sum(c > 0 for c in h[:i]) < min(levels, sum(c > 0 for c in h)):
        return math.inf
    p = h[:i]
    p[i - 1] += sum(h[i:])
    inside = h[:i]
    mass = [0.0] * levels  # per group: total mass and number of non-empty bins
    nonempty = [0] * levels
    for j in range(i):
        g = (j * levels) // i
        mass[g] += inside[j]
        nonempty[g] += inside[j] > 0
    q = [mass[(j * levels) // i] / nonempty[(j * levels) // i] if inside[j] > 0 else 0.0 for j in range(i)]
    sp, sq = sum(p), sum(q)
    p = [c / sp for c in p]
    q = [c / sq for c in q] if sq > 0 else q
    total = 0.0
    for pj, qj in zip(p, q):
        if pj == 0 and qj == 0:
            continue
        if pj == 0 or qj == 0:
            return math.inf
        total += (pj - qj) * math.log(pj / qj)
    return total


def jeffreys_divergences(hist, levels: int) -> list[float]:
    """J for every candidate i in [levels, len(hist)] (index k is i = levels + k)."""
    return [jeffreys_divergence(hist, levels, i) for i in range(levels, len(hist) + 1)]


def jeffreys_threshold(hist, bin_width: float, levels: int) -> float:
    """threshold = i_best * bin_width, i_best the LARGEST candidate of least J (ties within 1e-12);
    len(hist) <= levels: full range."""
    n = len(hist)
    if n <= levels:
        return n * bin_width
    js = jeffreys_divergences(hist, levels)
    least = min(js)
    best = max(k for k in range(len(js)) if js[k] <= least + 1e-12)
    return (best + levels) * bin_width


def abs_histogram(x: torch.Tensor, bins: int, bound: float) -> torch.Tensor:
    """Counts of |x| in ``bins`` equal bins over [0, bound] (the last bin closed), float64."""
    a = x.double().abs().flatten()
    idx = torch.clamp(torch.floor(a / (bound / bins)).long(), max=bins - 1)
    return torch.bincount(idx, minlength=bins).double()
