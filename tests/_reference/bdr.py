"""Independent reference of MX6 / MX9, the shared-microexponent block data representations (BDR)
of Rouhani et al., "With Shared Microexponents, A Little Shifting Goes a Long Way" (arXiv
2302.08007), written from the paper's definition.

Imports nothing from ``quark`` nor ``brevitas``. Deliberately a different computation from the
package: element by element in Python with exact rational arithmetic (``fractions.Fraction``)
and exponents from ``math.frexp``, so no float rounding can hide in it. Slow; keep tensors small.

BDR parameters (paper, Table 1): k1 elements share a d1-bit exponent, k2 elements a d2-bit
micro-exponent, each element is a sign and an m-bit magnitude.

    MX9 = (k1=16, d1=8, k2=2, d2=1, m=7)      MX6 = (16, 8, 2, 1, m=4)
    bits / element = 1 + m + d1/k1 + d2/k2     (9, 6)

One block b (k1 consecutive elements along the reduction axis), sub-blocks j of k2 elements:

    e(v)   = floor(log2 v) for v > 0
    E      = e(max_{i in b} |x_i|) clamped to [-(2^(d1-1) - 1), 2^(d1-1) - 1]   (zero block: the min)
    mu_j   = min(E - e(max_{i in j} |x_i|), 2^d2 - 1), at least 0               (zero pair: 2^d2 - 1)
    step   = 2^(E - mu_j - (m - 1))
    q_i    = round_half_even(x_i / step), clamped to [-(2^m - 1), 2^m - 1]
    x^_i   = q_i * step

Non-finite inputs: the maxima skip NaN and +-inf; NaN -> NaN; +-inf -> +-(2^m - 1) * step.
"""

from __future__ import annotations

import math
from fractions import Fraction

import torch

#: name -> (k1, d1, k2, d2, m)
FORMATS: dict[str, tuple[int, int, int, int, int]] = {
    "mx9": (16, 8, 2, 1, 7),
    "mx6": (16, 8, 2, 1, 4),
}


def params(fmt: str) -> tuple[int, int, int, int, int]:
    return FORMATS[fmt]


def bits_per_element(fmt: str) -> Fraction:
    k1, d1, k2, d2, m = FORMATS[fmt]
    return 1 + m + Fraction(d1, k1) + Fraction(d2, k2)


def exponent_range(fmt: str) -> tuple[int, int]:
    d1 = FORMATS[fmt][1]
    top = 2 ** (d1 - 1) - 1
    return -top, top


def floor_log2(v: float) -> int:
    """floor(log2 v), v > 0 finite, exact: v = f * 2^e with f in [0.5, 1)."""
    _, e = math.frexp(v)
    return e - 1


def round_half_even(r: Fraction) -> int:
    lower = math.floor(r)
    rest = r - lower
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and lower % 2 == 1):
        return lower + 1
    return lower


def encode_block(block: list[float], fmt: str) -> tuple[int, list[int], list[int | float]]:
    """(E, [mu_j], [q_i]) of one block; q_i is NaN for a NaN input."""
    k1, _d1, k2, d2, m = FORMATS[fmt]
    assert len(block) == k1
    emin, emax = exponent_range(fmt)
    mu_max, q_max = 2**d2 - 1, 2**m - 1
    finite = [abs(v) if math.isfinite(v) else 0.0 for v in block]
    top = max(finite)
    E = emin if top == 0 else min(max(floor_log2(top), emin), emax)
    mus, codes = [], []
    for j in range(0, k1, k2):
        pair_top = max(finite[j : j + k2])
        mu = mu_max if pair_top == 0 else max(0, min(E - floor_log2(pair_top), mu_max))
        mus.append(mu)
        step = Fraction(2) ** (E - mu - (m - 1))
        for v in block[j : j + k2]:
            if math.isnan(v):
                codes.append(math.nan)
            elif math.isinf(v):
                codes.append(q_max if v > 0 else -q_max)
            else:
                codes.append(max(-q_max, min(q_max, round_half_even(Fraction(v) / step))))
    return E, mus, codes


def decode_block(E: int, mus: list[int], codes: list[int | float], fmt: str) -> list[float]:
    _k1, _d1, k2, _d2, m = FORMATS[fmt]
    out = []
    for i, q in enumerate(codes):
        if isinstance(q, float) and math.isnan(q):
            out.append(math.nan)
        else:
            out.append(float(q * Fraction(2) ** (E - mus[i // k2] - (m - 1))))
    return out


def _blocks(x: torch.Tensor, axis: int, k1: int) -> torch.Tensor:
    """x as rows of k1 consecutive elements along ``axis`` (float64, exact for any float input)."""
    moved = x.detach().to(torch.float64).movedim(axis, -1)
    assert moved.shape[-1] % k1 == 0
    return moved.reshape(-1, k1)


def quantize(x: torch.Tensor, fmt: str, axis: int = -1) -> torch.Tensor:
    """x^: x quantized to ``fmt`` with blocks along ``axis``, dequantized, cast to x's dtype."""
    k1 = FORMATS[fmt][0]
    rows = _blocks(x, axis, k1)
    out = [decode_block(*encode_block(row.tolist(), fmt), fmt) for row in rows]
    moved_shape = x.movedim(axis, -1).shape
    result = torch.tensor(out, dtype=torch.float64).reshape(moved_shape).movedim(-1, axis)
    return result.to(x.dtype)


def steps(x: torch.Tensor, fmt: str, axis: int = -1) -> torch.Tensor:
    """Per-element step 2^(E - mu_j - (m - 1)) (float64), same shape as x."""
    k1, _d1, k2, _d2, m = FORMATS[fmt]
    rows = _blocks(x, axis, k1)
    out = []
    for row in rows:
        E, mus, _ = encode_block(row.tolist(), fmt)
        out.append([2.0 ** (E - mus[i // k2] - (m - 1)) for i in range(k1)])
    moved_shape = x.movedim(axis, -1).shape
    return torch.tensor(out, dtype=torch.float64).reshape(moved_shape).movedim(-1, axis)


def representable_magnitudes(fmt: str, E: int, mu: int) -> list[float]:
    """All magnitudes an element of a sub-block with micro-exponent mu can hold in a block with
    shared exponent E: q * 2^(E - mu - (m - 1)), q = 0 .. 2^m - 1."""
    m = FORMATS[fmt][4]
    return [float(q * Fraction(2) ** (E - mu - (m - 1))) for q in range(2**m)]
