"""What a built model holds: its quantizers (with the Quark spec each was built from) and its
quantized layers, as the subjects rules are checked on."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from brevitas.proxy.parameter_quant import BiasQuantProxyFromInjectorBase, WeightQuantProxyFromInjectorBase
from brevitas.proxy.runtime_quant import ActQuantProxyFromInjectorBase
from torch import nn

from quark.torch.extensions.brevitas._backend.rules import Quantizer
from quark.torch.quantization.tensor_quant import TensorQuant

#: quantizer proxy class -> the role it quantizes (first match wins).
PROXY_ROLES: tuple[tuple[type[nn.Module], str], ...] = (
    (BiasQuantProxyFromInjectorBase, "bias"),
    (WeightQuantProxyFromInjectorBase, "weight"),
    (ActQuantProxyFromInjectorBase, "activation"),
)


def spec_of(proxy: nn.Module) -> TensorQuant | None:
    """The normalised spec a proxy was built from (``quark_spec`` in its injector), or None."""
    injector = getattr(proxy, "quant_injector", None)
    return injector.quark_spec if injector is not None and "quark_spec" in injector else None


def proxies(model: nn.Module) -> Iterator[tuple[str, str, nn.Module]]:
    """(name, role, proxy) of every enabled quantizer of ``model``."""
    for name, module in model.named_modules():
        role = next((r for cls, r in PROXY_ROLES if isinstance(module, cls)), None)
        if role is not None and module.is_quant_enabled:
            yield name, role, module


def quantizers(model: nn.Module) -> list[Quantizer]:
    """Every enabled quantizer of ``model`` with its Quark spec (None if it was not built from one)."""
    return [Quantizer(name, role, spec_of(proxy)) for name, role, proxy in proxies(model)]


@dataclass(frozen=True)
class Module:
    """A module of a built model, by its path: the subject of layer rules. ``upstream``: the roles
    its plan takes quantized from another site (graph mode: a layer's input)."""

    name: str
    module: nn.Module
    upstream: frozenset[str] = frozenset()

    def __str__(self) -> str:
        return f"module {self.name!r} ({type(self.module).__name__})"


def modules(model: nn.Module, plans: Sequence[Any] = ()) -> list[Module]:
    """Every module of ``model``, with what its plan (among ``plans``) takes from upstream."""
    upstream = {p.name: frozenset(getattr(p, "upstream", {})) for p in plans}
    return [Module(name, module, upstream.get(name, frozenset())) for name, module in model.named_modules()]
