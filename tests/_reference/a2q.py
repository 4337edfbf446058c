"""Independent plain-torch reference of accumulator-aware weight quantization (A2Q, A2Q+).

Written from the papers (Colbert, Pappalardo, Petri-Koenig, "A2Q: Accumulator-Aware Quantization
with Guaranteed Overflow Avoidance", ICCV 2023, eq. 12-16; Colbert, Pappalardo, Petri-Koenig,
Umuroglu, "A2Q+: Improving Accumulator-Aware Weight Quantization", 2024, section 3), importing
nothing from ``quark`` nor ``brevitas``. Weights are (output channels, dot-product length).

    bound    A2Q  ||q||_1 <= T = (2^(P-1) - 1) * 2^(signed - N)
             A2Q+ ||q||_1 <= T = (2^P - 2) / (2^N - 1)     (zero-centred weights, either input sign)
    weights  v = w - mean(w) (A2Q+) or w (A2Q), per channel; g' = min(g / s, T);
             q = clamp(trunc(v * g' / ||v||_1), -(2^(b-1) - 1), 2^(b-1) - 1); w_q = q * s
    accumulator of q . x for x on the N-bit grid: per channel
             max = sum_{q>0} q * xmax + sum_{q<0} q * xmin, min likewise; within P signed bits
             when -2^(P-1) <= min and max <= 2^(P-1) - 1

The weights are computed in the order the quantizer divides (w / p + (-mean) / p, p = ||v||_1 / g'),
in float32 with torch's L1 norm like the model, so that truncation meets the same float values
(atol=0 on the codes: a value one ulp below an integer truncates to the integer below).
"""

from __future__ import annotations

import torch


def bound(acc_bits: int, input_bits: int, input_signed: bool, zero_centered: bool) -> float:
    if zero_centered:
        return (2.0**acc_bits - 2.0) / (2.0**input_bits - 1.0)
    return (2.0 ** (acc_bits - 1) - 1.0) * 2.0 ** (int(input_signed) - input_bits)


def input_range(bits: int, signed: bool) -> tuple[int, int]:
    return (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)


def codes(
    w: torch.Tensor,
    g: torch.Tensor,
    s: torch.Tensor,
    weight_bits: int,
    acc_bits: int,
    input_bits: int,
    input_signed: bool,
    zero_centered: bool,
) -> torch.Tensor:
    """Integer weights q of ``w`` (C, K) with norm parameter ``g`` (C, 1) and scale ``s`` (C, 1)."""
    w = w.float()
    shift = -w.mean(dim=1, keepdim=True) if zero_centered else torch.zeros_like(w[:, :1])
    norm = (w + shift).norm(p=1, dim=1, keepdim=True)  # torch's L1 norm (summation order as the model's)
    bits = torch.tensor(float(acc_bits))
    inputs = torch.tensor(float(input_bits))
    if zero_centered:
        limit = (2.0**bits - 2.0) / (2.0**inputs - 1.0)
    else:
        limit = (2.0 ** (bits - 1.0) - 1.0) * 2.0 ** (float(input_signed) - inputs)
    gain = torch.clamp(g / s, max=limit)
    pre = norm / gain
    y = w / pre + shift / pre
    qmax = 2 ** (weight_bits - 1) - 1
    return torch.clamp(torch.trunc(y), -qmax, qmax)


def accumulator_extremes(q: torch.Tensor, input_bits: int, input_signed: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(min, max) over every input on the grid of the integer dot product of each channel of ``q``
    (C, K), exactly (int64)."""
    lo, hi = input_range(input_bits, input_signed)
    q = q.round().to(torch.int64)
    positive, negative = q.clamp(min=0), q.clamp(max=0)
    largest = (positive * hi + negative * lo).sum(dim=1)
    smallest = (positive * lo + negative * hi).sum(dim=1)
    return smallest, largest


def fits(q: torch.Tensor, acc_bits: int, input_bits: int, input_signed: bool) -> bool:
    """Whether every dot product of ``q`` with an input on the grid fits a signed ``acc_bits`` accumulator."""
    smallest, largest = accumulator_extremes(q, input_bits, input_signed)
    return bool(smallest.min() >= -(2 ** (acc_bits - 1)) and largest.max() <= 2 ** (acc_bits - 1) - 1)


def dot(q: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Exact integer dot products (int64) of integer inputs ``x`` (N, K) with ``q`` (C, K)."""
    return x.round().to(torch.int64) @ q.round().to(torch.int64).T
