"""Independent plain-python / plain-torch reference of minifloat and block formats.

Deliberately imports nothing from ``quark`` nor ``brevitas``, and never calls torch's float8 casts:
every format is defined by its bit layout and decoded code by code, so that the tests compare the
package against the format definitions, not against itself.

Formats (sign bit, E exponent bits, M mantissa bits, exponent bias):

    code        (s, e, m): value = (-1)^s * 2^(1 - bias) * m / 2^M          e == 0 (zero, subnormal)
                           value = (-1)^s * 2^(e - bias) * (1 + m / 2^M)    e > 0  (normal)
    specials    "ieee"   : e all ones: m == 0 -> +-inf, m != 0 -> NaN   (E5M2 OCP, float16, bfloat16)
                "ocp_fn" : e all ones and m all ones -> NaN, no inf      (E4M3 OCP, max 448)
                "finite" : every code finite, no inf, no NaN            (OCP MX FP6 E3M2 / E2M3, FP4 E2M1)
                "fnuz"   : the single code 1000...0 (negative zero) -> NaN, no inf, no -0
                           (E4M3 FNUZ bias 8 max 240, E5M2 FNUZ bias 16 max 57344)

Conversion of a real x to a format (``round_to``): round to nearest, ties to the neighbour whose
code has an even mantissa (last bit 0) -- IEEE roundTiesToEven. Saturating conversion (OCP "SAT"
mode) maps |x| > max_finite, infinities included, to +-max_finite and NaN to NaN. Non-saturating
conversion of an "ieee" format maps everything at or beyond max + ulp/2 to +-inf (IEEE overflow).

OCP Microscaling (MX spec v1.0): a block of 32 elements shares X = 2^(floor(log2 max|x|) - emax_elem)
(E8M0, exponent clamped to [-127, 127]); each element is the saturating conversion of x / X to the
element format; MXINT8 elements are 8-bit two's complement integers times 2^-6 (emax_elem 0).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

import torch


@dataclass(frozen=True)
class MiniFloat:
    name: str
    exponent_bits: int
    mantissa_bits: int
    bias: int
    specials: str  # "ieee" | "ocp_fn" | "finite" | "fnuz"

    @property
    def bits(self) -> int:
        return 1 + self.exponent_bits + self.mantissa_bits

    @property
    def codes(self) -> range:
        return range(2**self.bits)


FORMATS: dict[str, MiniFloat] = {
    "fp8_e4m3": MiniFloat("fp8_e4m3", 4, 3, 7, "ocp_fn"),
    "fp8_e5m2": MiniFloat("fp8_e5m2", 5, 2, 15, "ieee"),
    "fp8_e4m3fnuz": MiniFloat("fp8_e4m3fnuz", 4, 3, 8, "fnuz"),
    "fp8_e5m2fnuz": MiniFloat("fp8_e5m2fnuz", 5, 2, 16, "fnuz"),
    "fp6_e3m2": MiniFloat("fp6_e3m2", 3, 2, 3, "finite"),
    "fp6_e2m3": MiniFloat("fp6_e2m3", 2, 3, 1, "finite"),
    "fp4": MiniFloat("fp4", 2, 1, 1, "finite"),
    "float16": MiniFloat("float16", 5, 10, 15, "ieee"),
    "bfloat16": MiniFloat("bfloat16", 8, 7, 127, "ieee"),
}

#: OCP MX spec v1.0, table 1: emax of each element type (exponent of its largest power of two)
MX_EMAX: dict[str, int] = {"int8": 0, "fp8_e4m3": 8, "fp8_e5m2": 15, "fp6_e3m2": 4, "fp6_e2m3": 2, "fp4": 2}
MX_BLOCK = 32


def ocp_style(exponent_bits: int, mantissa_bits: int) -> MiniFloat:
    """An OCP-style minifloat of any layout: bias 2^(E-1) - 1; the two OCP FP8 encodings for E4M3 /
    E5M2, all codes finite otherwise (the OCP MX convention for element formats below 8 bits)."""
    specials = {(4, 3): "ocp_fn", (5, 2): "ieee"}.get((exponent_bits, mantissa_bits), "finite")
    return MiniFloat(
        f"e{exponent_bits}m{mantissa_bits}",
        exponent_bits,
        mantissa_bits,
        2 ** (exponent_bits - 1) - 1,
        specials,
    )


def fields(fmt: MiniFloat, code: int) -> tuple[int, int, int]:
    """(sign, exponent field, mantissa field) of ``code``."""
    m = code & (2**fmt.mantissa_bits - 1)
    e = (code >> fmt.mantissa_bits) & (2**fmt.exponent_bits - 1)
    s = code >> (fmt.exponent_bits + fmt.mantissa_bits)
    return s, e, m


def decode(fmt: MiniFloat, code: int) -> float:
    """Value of ``code`` (a python float: exact, every minifloat value fits a double)."""
    s, e, m = fields(fmt, code)
    e_max, m_max = 2**fmt.exponent_bits - 1, 2**fmt.mantissa_bits - 1
    if fmt.specials == "ieee" and e == e_max:
        return math.nan if m else (-math.inf if s else math.inf)
    if fmt.specials == "ocp_fn" and e == e_max and m == m_max:
        return math.nan
    if fmt.specials == "fnuz" and s == 1 and e == 0 and m == 0:
        return math.nan
    if e == 0:
        magnitude = math.ldexp(m, 1 - fmt.bias - fmt.mantissa_bits)
    else:
        magnitude = math.ldexp(2**fmt.mantissa_bits + m, e - fmt.bias - fmt.mantissa_bits)
    return -magnitude if s else magnitude


@cache
def _table(fmt: MiniFloat) -> tuple[tuple[float, ...], tuple[bool, ...]]:
    """Sorted distinct finite values, and whether each one's code has an even mantissa."""
    seen: dict[float, bool] = {}
    for code in fmt.codes:
        v = decode(fmt, code)
        if math.isfinite(v):
            even = fields(fmt, code)[2] % 2 == 0
            seen[v] = seen.get(v, False) or even  # +0 and -0 are one value
    values = sorted(seen)
    return tuple(values), tuple(seen[v] for v in values)


def values(fmt: MiniFloat, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """All finite representable values, ascending, zero once."""
    return torch.tensor(_table(fmt)[0], dtype=dtype)


def positive_values(fmt: MiniFloat, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    v = values(fmt, dtype)
    return v[v > 0]


def max_finite(fmt: MiniFloat) -> float:
    return _table(fmt)[0][-1]


def min_subnormal(fmt: MiniFloat) -> float:
    return math.ldexp(1, 1 - fmt.bias - fmt.mantissa_bits)


def min_normal(fmt: MiniFloat) -> float:
    return math.ldexp(1, 1 - fmt.bias)


def subnormals(fmt: MiniFloat) -> list[float]:
    """Positive subnormal values (exponent field 0, mantissa != 0)."""
    return [math.ldexp(m, 1 - fmt.bias - fmt.mantissa_bits) for m in range(1, 2**fmt.mantissa_bits)]


def has_inf(fmt: MiniFloat) -> bool:
    return fmt.specials == "ieee"


def has_nan(fmt: MiniFloat) -> bool:
    return fmt.specials != "finite"


def midpoints(fmt: MiniFloat) -> tuple[torch.Tensor, torch.Tensor]:
    """(midpoint of every pair of consecutive finite values, the neighbour it rounds to: even mantissa)."""
    vals, even = _table(fmt)
    mids, targets = [], []
    for (a, ea), (b, eb) in zip(zip(vals, even), zip(vals[1:], even[1:])):
        if fmt.mantissa_bits:  # consecutive codes alternate mantissa parity (zero: one value, two codes)
            assert ea != eb or a == 0 or b == 0, (fmt, a, b)
        mids.append((a + b) / 2)
        targets.append(a if ea else b)
    return torch.tensor(mids, dtype=torch.float64), torch.tensor(targets, dtype=torch.float64)


def round_to(x: torch.Tensor, fmt: MiniFloat, saturate: bool = True) -> torch.Tensor:
    """Nearest value of ``fmt`` to every element of ``x`` (ties to even mantissa), as float64.

    saturate=True: +-inf and |x| > max_finite give +-max_finite, NaN gives NaN.
    saturate=False ("ieee" formats only): values from max + ulp/2 up give +-inf.
    """
    vals_t, even_t = _table(fmt)
    vals = torch.tensor(vals_t, dtype=torch.float64)
    even = torch.tensor(even_t, dtype=torch.bool)
    top = vals_t[-1]
    if not saturate:
        if not has_inf(fmt):
            raise ValueError(f"{fmt.name} has no infinity: only saturating conversion is defined")
        # the next power of two beyond max is the (virtual) even neighbour standing for inf
        ulp = vals_t[-1] - vals_t[-2]
        beyond = torch.tensor([top + ulp], dtype=torch.float64)
        vals = torch.cat([-beyond, vals, beyond])
        even = torch.cat([torch.tensor([True]), even, torch.tensor([True])])
    x64 = x.detach().to(torch.float64)
    xc = torch.nan_to_num(x64, nan=0.0).clamp(vals[0].item(), vals[-1].item()).contiguous()
    hi_idx = torch.searchsorted(vals, xc).clamp(1, len(vals) - 1)
    lo, hi = vals[hi_idx - 1], vals[hi_idx]
    d_lo, d_hi = xc - lo, hi - xc
    pick_hi = (d_hi < d_lo) | ((d_hi == d_lo) & even[hi_idx])
    y = torch.where(pick_hi, hi, lo)
    if not saturate:
        y = torch.where(y.abs() > top, torch.copysign(torch.full_like(y, math.inf), y), y)
        y = torch.where(x64.abs() == math.inf, x64, y)
    y = torch.where(torch.isnan(x64), x64, y)
    return y


def quantize_scaled(x: torch.Tensor, fmt: MiniFloat, scale: torch.Tensor) -> torch.Tensor:
    """scale * FP(x / scale), the division and product in x's dtype, the rounding exact."""
    q = round_to(x / scale, fmt).to(x.dtype)
    return q * scale


# -- scales ------------------------------------------------------------------------------------


def absmax(
    x: torch.Tensor, qscheme: str = "per_tensor", axis: int = 0, group_size: int | None = None
) -> torch.Tensor:
    """max|x| per tensor / per channel of ``axis`` / per group of ``group_size`` along ``axis``,
    broadcastable against x."""
    a = x.detach().abs()
    if qscheme == "per_tensor":
        return a.max()
    if qscheme == "per_channel":
        dims = [d for d in range(x.dim()) if d != axis % x.dim()]
        return a.amax(dim=dims, keepdim=True)
    am = a.movedim(axis, -1)
    g = am.reshape(*am.shape[:-1], -1, group_size)
    return g.amax(-1, keepdim=True).expand_as(g).reshape(am.shape).movedim(-1, axis)


def float_scale(amax: torch.Tensor, fmt: MiniFloat, scale_type: str = "float") -> torch.Tensor:
    """amax / max_finite in amax's dtype, then restricted: 'pof2' 2^round(log2 s), 'float16' /
    'bfloat16' rounded to that dtype, 'float' / 'float32' unchanged."""
    s = amax / max_finite(fmt)
    if scale_type in ("float", "float32"):
        return s
    if scale_type == "pof2":
        return torch.exp2(torch.round(torch.log2(s)))
    return s.to(getattr(torch, scale_type)).to(s.dtype)


# -- OCP MX ------------------------------------------------------------------------------------


def floor_log2(x: torch.Tensor) -> torch.Tensor:
    """floor(log2 x) for x > 0, exactly (from the binary exponent, not from a rounded log)."""
    _, e = torch.frexp(x.to(torch.float64))
    return (e - 1).to(torch.int64)


#: AMD Quark's "even" shared exponent: the block maximum rounded (half up) at this many mantissa
#: bits of the element before its exponent is taken (Quark's get_dtype_params)
MX_EVEN_MANTISSA_BITS = {"int8": 8, "fp8_e4m3": 3, "fp8_e5m2": 2, "fp6_e3m2": 2, "fp6_e2m3": 3, "fp4": 1}


def mx_block_exponent(amax: torch.Tensor, element: str, mode: str = "floor") -> torch.Tensor:
    """The exponent e of a block maximum amax > 0 (float64, exact) before emax is subtracted:
    floor: floor(log2 amax) (the OCP MX spec); ceil: ceil(log2 amax); even (AMD Quark 0.13's default):
    floor(log2(amax rounded half up to MX_EVEN_MANTISSA_BITS mantissa bits))."""
    e = floor_log2(amax)
    if mode == "floor":
        return e
    if mode == "ceil":
        return e + (amax != torch.exp2(e.to(torch.float64))).to(torch.int64)
    half_ulp = torch.exp2((e - MX_EVEN_MANTISSA_BITS[element] - 1).to(torch.float64))
    return floor_log2(amax + half_ulp)


def mx_quantize(
    x: torch.Tensor, element: str, axis: int, block: int = MX_BLOCK, int8_min: int = -128, mode: str = "floor"
):
    """OCP MX quantize-dequantize of ``x`` in blocks of ``block`` along ``axis``.

    Returns (dequantized values in x's dtype, per-element shared scale X as float64, broadcast to x).
    A block whose max|x| is 0 takes X = 2^-127 (any scale represents it) and stays 0. ``mode``: how
    the shared exponent comes from the block maximum (see :func:`mx_block_exponent`).
    """
    x64 = x.detach().to(torch.float64).movedim(axis, -1)
    shape = x64.shape
    if shape[-1] % block:
        raise ValueError(f"axis length {shape[-1]} is not a multiple of {block}")
    g = x64.reshape(*shape[:-1], -1, block)
    amax = g.abs().amax(-1, keepdim=True)
    exp = torch.where(
        amax > 0, mx_block_exponent(torch.where(amax > 0, amax, torch.ones_like(amax)), element, mode) - MX_EMAX[element], -127
    )
    exp = exp.clamp(-127, 127)
    X = torch.exp2(exp.to(torch.float64))
    if element == "int8":
        q = torch.clamp(torch.round(g / X * 64), int8_min, 127) / 64
    else:
        q = round_to(g / X, FORMATS[element])
    y = (q * X).reshape(shape).movedim(-1, axis)
    X = X.expand_as(g).reshape(shape).movedim(-1, axis)
    return y.to(x.dtype), X


def bits_of_float16_family(dtype: torch.dtype) -> torch.Tensor:
    """Every 16-bit pattern of bfloat16 / float16 reinterpreted as that dtype (for cross-checks only)."""
    return torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(dtype)
