"""The numerics tests' pieces: dtypes, qschemes and rounding modes by name, a spec builder, crafted
weights without edge cases, calibration and probe inputs, and the exact comparison of a Brevitas
QuantTensor (value, scale, zero point, integer codes) with the reference of ``tests/_reference/quant.py``.

Torch, the config layer and the references only: the observer tests of the config tier use it too.
"""

from __future__ import annotations

import math

import torch
from _reference import compare
from torch import nn

from quark.torch.quantization.config.config import QuantizationSpec
from quark.torch.quantization.config.type import Dtype, QSchemeType, RoundType, ScaleType, ZeroPointType

#: dtype name -> (Dtype, bits, signed)
DTYPES = {
    "int8": (Dtype.int8, 8, True),
    "uint8": (Dtype.uint8, 8, False),
    "int4": (Dtype.int4, 4, True),
    "uint4": (Dtype.uint4, 4, False),
}


#: qscheme label -> (qscheme, ch_axis, group_size) for a Linear(32, 16) weight
QSCHEMES = {
    "per_tensor": ("per_tensor", None, None),
    "per_channel": ("per_channel", 0, None),
    "per_group": ("per_group", 1, 8),
}


ROUNDS = ("half_even", "floor", "round")


def spec(
    dtype: str,
    symmetric: bool = True,
    qscheme: str = "per_tensor",
    ch_axis=None,
    group_size=None,
    scale_type="float",
    round_method="half_even",
    zp_type="int32",
    **kw,
) -> QuantizationSpec:
    return QuantizationSpec(
        dtype=DTYPES[dtype][0],
        qscheme=QSchemeType[qscheme],
        ch_axis=ch_axis,
        group_size=group_size,
        symmetric=symmetric,
        scale_type=ScaleType[scale_type],
        round_method=RoundType[round_method],
        zero_point_type=ZeroPointType[zp_type],
        **kw,
    )


def exact(got: torch.Tensor, expected: torch.Tensor) -> None:
    compare.exact(got, expected, broadcast=True, equal_nan=False)


def codes(qt) -> torch.Tensor:
    """Integer codes of a Brevitas QuantTensor: value / scale + zero_point, rounded."""
    return torch.round(qt.value / qt.scale + qt.zero_point)


def check_quant_tensor(qt, x: torch.Tensor, q, deq, s, zp) -> None:
    """Dequantized values, scale, zero point and integer codes of ``qt`` equal the reference."""
    exact(qt.value, deq)
    exact(qt.scale.expand_as(x), s.expand_as(x))
    exact(torch.as_tensor(qt.zero_point).expand_as(x), zp.expand_as(x))
    exact(codes(qt), q)


def set_weight(layer: nn.Module, w: torch.Tensor) -> None:
    with torch.no_grad():
        layer.weight.copy_(w)


def block_ids(shape, qscheme: str, ch_axis: int | None, group_size: int | None) -> torch.Tensor:
    """Index of the quantization block (tensor / channel / group) of every element."""
    n = math.prod(shape)
    if qscheme == "per_tensor":
        return torch.zeros(shape, dtype=torch.long)
    if qscheme == "per_channel":
        view = [1] * len(shape)
        view[ch_axis] = shape[ch_axis]
        return torch.arange(shape[ch_axis]).reshape(view).expand(shape).clone()
    moved = list(shape)
    moved.append(moved.pop(ch_axis))
    return (torch.arange(n).reshape(moved) // group_size).movedim(-1, ch_axis).contiguous()


def crafted_weight(shape, qscheme, ch_axis, group_size, bits: int, pof2: bool, seed: int = 0) -> torch.Tensor:
    """A weight on which the documented formulas have no edge cases.

    Every block holds both signs, its own min ``lo = -(k + 1/4) u`` and max ``hi = (2^b - 1 - k - 1/4) u``
    (so hi > -lo and -lo/s = k + 1/4 for the asymmetric scale s = u: the zero point does not depend on
    the rounding rule), and values strictly inside. ``pof2``: u is a power of two (asymmetric scales
    are then exactly powers of two); otherwise u is a random float.
    """
    g = torch.Generator().manual_seed(seed)
    ids = block_ids(shape, qscheme, ch_axis, group_size)
    n = int(ids.max()) + 1
    k = torch.randint(1, 2 ** (bits - 1) - 1, (n,), generator=g).double()
    u = 2.0 ** -torch.randint(6, 10, (n,), generator=g).double()
    if not pof2:
        u = u * (1.1 + 0.8 * torch.rand(n, generator=g, dtype=torch.double))
    lo, hi = -(k + 0.25) * u, (2**bits - 1 - k - 0.25) * u
    w = lo[ids] + (hi - lo)[ids] * (0.02 + 0.96 * torch.rand(shape, generator=g, dtype=torch.double))
    flat, fids = w.flatten(), ids.flatten()
    for b in range(n):
        pos = (fids == b).nonzero().flatten()
        flat[pos[0]], flat[pos[1]] = lo[b], hi[b]
    return flat.reshape(shape).float()


def calibration_batches() -> list[torch.Tensor]:
    """3 batches of different ranges; global range [-3, 5] is no single batch's nor their average."""
    g = torch.Generator().manual_seed(11)
    batches = []
    for lo, hi in [(-1.0, 2.0), (-3.0, 0.5), (0.2, 5.0)]:
        b = lo + (hi - lo) * torch.rand(4, 32, generator=g)
        b[0, 0], b[1, 1] = lo, hi
        batches.append(b)
    return batches


def probe_input() -> torch.Tensor:
    """Inputs beyond the calibrated range on both sides (the clamp is exercised) and inside it."""
    g = torch.Generator().manual_seed(12)
    return torch.cat([torch.linspace(-6.0, 6.0, 32)[None], 3 * torch.randn(4, 32, generator=g)])


def near_percentile(value, data: torch.Tensor, q: float, width: float) -> bool:
    """``value`` is the q-quantile of ``data`` to one histogram bin ``width``; the rank is allowed one
    step either way (percentile definitions differ by one order statistic)."""
    data = data.flatten().sort().values
    k = min(max(math.ceil(q * data.numel()), 1), data.numel())  # 1-based rank of the q-quantile
    lo, hi = data[max(k - 2, 0)], data[min(k, data.numel() - 1)]
    value = float(torch.as_tensor(value).detach())
    return float(lo) - width <= value <= float(hi) + width


def samples(kind: str, n: int, seed: int) -> torch.Tensor:
    """``n`` samples of a distribution of ``DISTRIBUTIONS`` (the TQT initialisation tests' data)."""
    g = torch.Generator().manual_seed(seed)
    if kind == "normal":
        return torch.randn(n, generator=g) * 0.7 + 0.2
    if kind == "laplace":
        u = torch.rand(n, generator=g, dtype=torch.float64) - 0.5
        return (-0.5 * torch.sign(u) * torch.log1p(-2 * u.abs())).float()
    if kind == "outliers":  # normal bulk plus 0.1% of values 30-60x larger
        x = torch.randn(n, generator=g)
        k = max(1, n // 1000)
        idx = torch.randperm(n, generator=g)[:k]
        x[idx] = torch.sign(torch.randn(k, generator=g)) * (30 + 30 * torch.rand(k, generator=g))
        return x
    raise ValueError(kind)


#: the distributions of ``samples``
DISTRIBUTIONS = ("normal", "laplace", "outliers")
