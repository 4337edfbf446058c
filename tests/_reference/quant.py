"""Independent plain-torch reference of the documented Quark integer quantization formulas.

Deliberately imports nothing from ``quark`` nor ``brevitas``: every parameter is a plain string,
int or bool, so that the tests compare the package against the formulas, not against itself.

    grid     symmetric signed: [-2^(b-1), 2^(b-1)-1]; symmetric unsigned and asymmetric: [0, 2^b-1]
    range    lo = min(min x, 0), hi = max(max x, 0); symmetric: amax = max(-lo, hi)
    scale    sym signed: amax / ((qmax-qmin)/2); sym unsigned: hi / (2^b-1); asym: (hi-lo) / (2^b-1)
    zp       asym: round_half_even(-lo/s) ("int32") or -lo/s ("float32"); sym: 0
    quant    q = clamp(R(x/s + zp), qmin, qmax); dequant = (q - zp) * s
"""

from __future__ import annotations

import torch


def grid(bits: int, signed: bool, symmetric: bool) -> tuple[int, int]:
    if symmetric and signed:
        return -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    return 0, 2**bits - 1


def round_(x: torch.Tensor, method: str) -> torch.Tensor:
    """method: 'half_even' (ties to even), 'floor', 'round' (ties away from zero), 'half_up' (ties up),
    'toward_zero' (truncation)."""
    if method == "half_even":
        return torch.round(x)
    if method == "floor":
        return torch.floor(x)
    if method == "round":
        return torch.sign(x) * torch.floor(torch.abs(x) + 0.5)
    if method == "half_up":  # x + 0.5 exactly (float64 holds it), not rounded in float32 first
        return torch.floor(x.double() + 0.5).to(x.dtype)
    if method == "toward_zero":
        return torch.trunc(x)
    raise ValueError(method)


def restrict_scale(s: torch.Tensor, scale_type: str) -> torch.Tensor:
    """scale_type: 'float' / 'float32' (unchanged), 'pof2', 'float16', 'bfloat16'."""
    if scale_type in ("float", "float32"):
        return s
    if scale_type == "pof2":
        return torch.exp2(torch.round(torch.log2(s)))
    return s.to(getattr(torch, scale_type)).to(s.dtype)


def minmax(x: torch.Tensor, qscheme: str = "per_tensor", ch_axis: int = 0, group_size: int | None = None):
    """Range (lo, hi), broadcastable against x: 'per_tensor', 'per_channel' (one per index of ch_axis),
    'per_group' (one per group_size consecutive elements along ch_axis)."""
    if qscheme == "per_tensor":
        return torch.clamp(x.min(), max=0), torch.clamp(x.max(), min=0)
    xm = x.movedim(ch_axis, -1)
    if qscheme == "per_channel":
        xm = xm.reshape(-1, x.shape[ch_axis])
        lo, hi = xm.min(0).values, xm.max(0).values
        shape = [1] * x.dim()
        shape[ch_axis] = -1
        return torch.clamp(lo, max=0).reshape(shape), torch.clamp(hi, min=0).reshape(shape)
    g = xm.reshape(*xm.shape[:-1], -1, group_size)
    lo = g.min(-1, keepdim=True).values.expand_as(g).reshape(xm.shape).movedim(-1, ch_axis)
    hi = g.max(-1, keepdim=True).values.expand_as(g).reshape(xm.shape).movedim(-1, ch_axis)
    return torch.clamp(lo, max=0), torch.clamp(hi, min=0)


def qparams(lo, hi, bits: int, signed: bool, symmetric: bool,
            scale_type: str = "float", zp_type: str = "int32"):
    """(scale, zero point, qmin, qmax) of the range [lo, hi]."""
    qmin, qmax = grid(bits, signed, symmetric)
    if symmetric:
        amax = torch.maximum(-lo, hi)
        s = amax / ((qmax - qmin) / 2) if signed else hi / (2**bits - 1)
        return restrict_scale(s, scale_type), torch.zeros_like(s), qmin, qmax
    s = restrict_scale((hi - lo) / (2**bits - 1), scale_type)
    zp = -lo / s
    return s, (torch.round(zp) if zp_type == "int32" else zp), qmin, qmax


def quantize(x, s, zp, qmin: int, qmax: int, round_method: str = "half_even"):
    """(integer codes q, dequantized (q - zp) * s); the zero point is added before rounding."""
    q = torch.clamp(round_(x / s + zp, round_method), qmin, qmax)
    return q, (q - zp) * s


def fake_quant(x, bits, signed, symmetric, qscheme="per_tensor", ch_axis=0, group_size=None,
               scale_type="float", round_method="half_even", zp_type="int32", rng=None):
    """Everything at once: MinMax range of x (or ``rng=(lo, hi)``), then quantize. Returns (q, deq, s, zp)."""
    lo, hi = rng if rng is not None else minmax(x, qscheme, ch_axis, group_size)
    s, zp, qmin, qmax = qparams(lo, hi, bits, signed, symmetric, scale_type, zp_type)
    q, deq = quantize(x, s, zp, qmin, qmax, round_method)
    return q, deq, s, zp


def bias_quant(b, s_in, s_w, bits: int = 32, round_method: str = "half_even"):
    """Bias with scale = input scale x weight scale (per output channel when s_w is).

    Returns (q, deq, s_b)."""
    s_b = s_in * s_w
    q = torch.clamp(round_(b / s_b, round_method), -(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    return q, q * s_b, s_b
