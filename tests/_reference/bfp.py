"""Independent reference of AMD's BFP16 block floating point (AMD Quark 0.13's ``Dtype.bfp16``),
written from its definition. Imports nothing from ``quark`` nor ``brevitas``; element by element in
Python with exact rational arithmetic.

A block is 8 consecutive elements along the reduction axis; they share an 8-bit exponent, each
element is an 8-bit two's complement integer:

    E0     = floor(log2 max_i |x_i|)                (NaN / inf read as 0; an all-zero block: E = -127)
    E      = E0 + 1 if some round_half_even(x_i / 2^(E0 - 6)) > 127, else E0; clamped to [-127, 127]
    q_i    = clamp(round_half_even(x_i / 2^(E - 6)), -128, 127)
    x^_i   = q_i * 2^(E - 6)

NaN stays NaN, +-inf saturates to 127 / -128 steps.
"""

from __future__ import annotations

import math
from fractions import Fraction

import torch

BLOCK, MANTISSA, EMIN, EMAX, QMIN, QMAX = 8, 7, -127, 127, -128, 127


def round_half_even(r: Fraction) -> int:
    lower = math.floor(r)
    rest = r - lower
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and lower % 2 == 1):
        return lower + 1
    return lower


def shared_exponent(block: list[float]) -> int:
    finite = [abs(v) if math.isfinite(v) else 0.0 for v in block]
    top = max(finite)
    if top == 0:
        return EMIN
    exponent = math.frexp(top)[1] - 1
    step = Fraction(2) ** (exponent - (MANTISSA - 1))
    if any(round_half_even(Fraction(v) / step) > QMAX for v in block if math.isfinite(v)):
        exponent += 1
    return min(max(exponent, EMIN), EMAX)


def quantize_block(block: list[float]) -> list[float]:
    exponent = shared_exponent(block)
    step = Fraction(2) ** (exponent - (MANTISSA - 1))
    out = []
    for v in block:
        if math.isnan(v):
            out.append(math.nan)
        elif math.isinf(v):
            out.append(float((QMAX if v > 0 else QMIN) * step))
        else:
            out.append(float(max(QMIN, min(QMAX, round_half_even(Fraction(v) / step))) * step))
    return out


def quantize(x: torch.Tensor, axis: int = -1) -> torch.Tensor:
    """x^ with blocks of 8 along ``axis``, in x's dtype."""
    moved = x.detach().to(torch.float64).movedim(axis, -1)
    assert moved.shape[-1] % BLOCK == 0
    rows = moved.reshape(-1, BLOCK)
    out = torch.tensor([quantize_block(row.tolist()) for row in rows], dtype=torch.float64)
    return out.reshape(moved.shape).movedim(-1, axis).to(x.dtype)
