"""Switching a quantized model's quantizers off and on: the float counterpart of every tensor at the
same place in the same graph, whatever the rewrites did (Brevitas' own ``disable_quant``)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from brevitas.graph.calibrate import QuantizationStatusManager
from brevitas.proxy.parameter_quant import BiasQuantProxyFromInjectorBase
from brevitas.proxy.quant_proxy import QuantProxyFromInjector
from torch import nn

#: a proxy's attribute name -> the tensor of its module it quantizes
ROLES = {"weight_quant": "weight", "input_quant": "input", "output_quant": "output", "act_quant": "output"}


def quantizers(model: nn.Module) -> dict[str, QuantProxyFromInjector]:
    """The model's quantizers that are on, by module path; bias quantizers apart (:func:`bias_quantizers`)."""
    return {
        name: proxy
        for name, proxy in model.named_modules()
        if isinstance(proxy, QuantProxyFromInjector)
        and not isinstance(proxy, BiasQuantProxyFromInjectorBase)
        and proxy.is_quant_enabled
        and name.rpartition(".")[2] in ROLES
    }


def bias_quantizers(model: nn.Module) -> list[nn.Module]:
    return [m for m in model.modules() if isinstance(m, BiasQuantProxyFromInjectorBase) and m.is_quant_enabled]


@contextlib.contextmanager
def only(model: nn.Module, on: set[str], every: dict[str, QuantProxyFromInjector], biases: bool) -> Iterator[None]:
    """Only the quantizers of ``every`` named in ``on`` quantize (the bias quantizers with ``biases``);
    layers hand plain tensors on unless everything is on. Everything is on again afterwards."""
    everything = on >= set(every) and biases
    bias_proxies = bias_quantizers(model)
    for name, proxy in every.items():
        proxy.disable_quant = name not in on
    for proxy in bias_proxies:
        proxy.disable_quant = not biases
    returned = None if everything else QuantizationStatusManager.disable_return_quant_tensor(model)
    try:
        yield
    finally:
        for proxy in [*every.values(), *bias_proxies]:
            proxy.disable_quant = False
        if returned is not None:
            QuantizationStatusManager.restore_return_quant_tensor(model, returned)


def off(model: nn.Module) -> contextlib.AbstractContextManager[None]:
    """Every quantizer of ``model`` off: the float model, in the quantized model's graph."""
    return only(model, set(), quantizers(model), biases=False)
