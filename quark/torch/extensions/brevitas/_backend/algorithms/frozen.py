"""Weight statistics frozen for the algorithms that re-round weights (GPTQ, GPFQ).

This backend's weight quantizers compute their scale (and zero point) from the stored weight at
every call. GPTQ moves the weights it has not rounded yet, which moves their maximum and so the
scale: the columns rounded earlier would then be re-quantized with another scale at inference,
undoing most of the gain (measured: worse than round-to-nearest on a random layer). Freezing the
weight statistic of each layer makes the quantizer the fixed grid the algorithm rounds onto; the
frozen statistic is a persistent buffer, and the quantizer is re-wrapped whenever Brevitas
rebuilds it (it does on ``load_state_dict``), so it survives ``state_dict`` round trips.

Brevitas ships no way to fix a statistics-based weight scale after construction (its
``PARAMETER_FROM_STATS`` scaling has to be chosen when the quantizer is built), hence this small
wrapper around the quantizer's statistic module.
"""

from __future__ import annotations

import torch
from torch import nn


class FrozenStats(nn.Module):
    """The statistic of a weight (abs-max, min / max, per tensor, channel or group), computed once
    and kept; ``refresh(group)`` recomputes one group's entry from the current weight."""

    def __init__(self, stats: nn.Module) -> None:
        super().__init__()
        self.stats = stats
        self.register_buffer("frozen", None)
        self.pending: int | None = None

    def forward(self, x: torch.Tensor | None = None) -> torch.Tensor:
        if self.frozen is None:
            self.frozen = self.stats(x).detach().clone()
        elif self.pending is not None:
            self.frozen[:, self.pending] = self.stats(x).detach()[:, self.pending]
            self.pending = None
        return self.frozen

    def refresh(self, group: int) -> None:
        """At the next call, recompute group ``group`` (axis 1 of the statistic: groups along a
        Linear's input features) from the weight it is given."""
        self.pending = group

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        key = prefix + "frozen"
        if key in state_dict and self.frozen is None:
            self.frozen = torch.empty_like(state_dict[key])
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)


def _stat_modules(proxy: nn.Module) -> list[nn.Module]:
    """The scale and zero-point implementations of a weight quantizer that compute a statistic."""
    tensor_quant = getattr(proxy, "tensor_quant", None)
    impls = [getattr(tensor_quant, name, None) for name in ("scaling_impl", "zero_point_impl")]
    return [impl for impl in impls if impl is not None and hasattr(impl, "parameter_list_stats")]


def _wrap(proxy: nn.Module) -> list[FrozenStats]:
    wrapped = []
    for impl in _stat_modules(proxy):
        if not isinstance(impl.parameter_list_stats, FrozenStats):
            impl.parameter_list_stats = FrozenStats(impl.parameter_list_stats)
        wrapped.append(impl.parameter_list_stats)
    return wrapped


class FrozenProxyMixin:
    """Brevitas rebuilds a quantizer's modules on every ``load_state_dict``: wrap them again, so the
    frozen statistics in the checkpoint load into them."""

    def init_tensor_quant(self, *args, **kwargs):
        super().init_tensor_quant(*args, **kwargs)
        _wrap(self)


def _frozen_class(cls: type) -> type:
    """``cls`` with :class:`FrozenProxyMixin`, defined once per proxy class, as a global of this
    module so that pickled models find it."""
    if issubclass(cls, FrozenProxyMixin):
        return cls
    name = f"Frozen{cls.__name__}"
    if name not in globals():
        globals()[name] = type(name, (FrozenProxyMixin, cls), {"__module__": __name__, "__qualname__": name})
    return globals()[name]


@torch.no_grad()
def freeze(layer: nn.Module) -> list[FrozenStats]:
    """Freeze the weight statistics of ``layer`` at its current weight; returns the frozen modules
    (none when its quantizer derives no statistic from the weight, e.g. MX blocks)."""
    proxy = layer.weight_quant
    frozen = _wrap(proxy)
    if frozen:
        proxy.__class__ = _frozen_class(type(proxy))
    layer.quant_weight()  # computes and keeps them
    return frozen
