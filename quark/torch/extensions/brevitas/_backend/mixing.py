"""The numerics of A8/A16 mixing (``quark.torch.extensions.brevitas.mixing``): which activation
quantizers a site has, putting one model's quantizers into another, the metrics, and how many
activation values each site moves per sample.

Two models quantized from the same config, one with 8-bit and one with 16-bit activations, have
the same sites at the same module paths; a site is promoted in the 8-bit model by putting the
16-bit model's activation quantizers (their calibrated scales included) in place of its own. So
the sensitivity of every site is measured with forward passes only, without quantizing again.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from brevitas.proxy.runtime_quant import ActQuantProxyFromInjectorBase
from torch import nn
from typing_extensions import Self

from quark.torch.extensions.brevitas._backend.data import batches, run_batch
from quark.torch.extensions.brevitas._backend.export.inputs import flatten_outputs

#: (reference outputs, candidate outputs), each [samples, ...] -> a score, higher is better
Metric = Callable[[torch.Tensor, torch.Tensor], float]
#: (model, batch) -> the tensor the metric compares, samples first
OutputFn = Callable[[nn.Module, Any], torch.Tensor]


def cosine(reference: torch.Tensor, candidate: torch.Tensor) -> float:
    """Mean over samples of the cosine similarity of the flattened outputs."""
    a, b = reference.flatten(1).double(), candidate.flatten(1).double()
    return float(torch.nn.functional.cosine_similarity(a, b, dim=1).mean())


def sqnr(reference: torch.Tensor, candidate: torch.Tensor) -> float:
    """Signal-to-quantization-noise ratio in dB: 10 log10(sum ref^2 / sum (ref - candidate)^2)."""
    a, b = reference.double(), candidate.double()
    noise = float(((a - b) ** 2).sum())
    return math.inf if noise == 0 else 10 * math.log10(float((a**2).sum()) / noise)


#: metric name -> function (the CLI's --metric choices)
METRICS: dict[str, Metric] = {"cosine": cosine, "sqnr": sqnr}


def first_output(model: nn.Module, batch: Any) -> torch.Tensor:
    """The model's first output tensor (a transformers ``ModelOutput``'s first field; what follows
    it, such as a key/value cache that is no tensor, is not read)."""
    output = run_batch(model, batch)
    if hasattr(output, "to_tuple"):
        output = output.to_tuple()
    found = _first_tensor(output)
    if found is None:
        raise TypeError(f"model output of type {type(output).__name__}: no tensor in it")
    return found


def _first_tensor(output: Any) -> torch.Tensor | None:
    if isinstance(output, (tuple, list)):
        return next((t for t in map(_first_tensor, output) if t is not None), None)
    flat = flatten_outputs(output)  # a tensor, a QuantTensor or None (anything else: TypeError)
    return flat[0] if flat else None


@torch.no_grad()
def outputs(model: nn.Module, data: Iterable[Any], output_fn: OutputFn) -> torch.Tensor:
    """``output_fn`` on every batch, concatenated along the samples."""
    model.eval()
    return torch.cat([output_fn(model, batch).detach().float().cpu() for batch in batches(data, progress=False)])


def activation_proxies(model: nn.Module, site: str) -> list[str]:
    """The module paths of the activation quantizers of ``site`` (the site's module and below)."""
    module = model.get_submodule(site)
    prefix = f"{site}." if site else ""
    return [f"{prefix}{name}" for name, m in module.named_modules() if name and _is_act_proxy(m)]


def _is_act_proxy(module: nn.Module) -> bool:
    return isinstance(module, ActQuantProxyFromInjectorBase) and module.is_quant_enabled


def _set(model: nn.Module, path: str, module: nn.Module) -> None:
    parent, _, attr = path.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, attr, module)


class Swap:
    """Put ``donor``'s activation quantizers of some sites into ``model``, and back."""

    def __init__(self, model: nn.Module, donor: nn.Module, sites: Sequence[str]) -> None:
        self.model, self.donor = model, donor
        self.paths = [p for site in sites for p in activation_proxies(model, site)]
        self.saved: dict[str, nn.Module] = {}

    def __enter__(self) -> Self:
        for path in self.paths:
            self.saved[path] = self.model.get_submodule(path)
            _set(self.model, path, self.donor.get_submodule(path))
        return self

    def __exit__(self, *exc: object) -> None:
        for path, module in self.saved.items():
            _set(self.model, path, module)
        self.saved.clear()


@torch.no_grad()
def elements_per_sample(model: nn.Module, sites: Sequence[str], batch: Any) -> dict[str, int]:
    """How many activation values each site's quantizers produce per sample, on one batch."""
    counts: dict[str, int] = dict.fromkeys(sites, 0)
    handles = []
    for site in sites:
        for path in activation_proxies(model, site):

            def hook(module, inputs, output, site=site):
                value = output.value if hasattr(output, "value") else output
                if isinstance(value, torch.Tensor):
                    counts[site] += value.numel()

            handles.append(model.get_submodule(path).register_forward_hook(hook))
    try:
        run_batch(model.eval(), batch)
    finally:
        for handle in handles:
            handle.remove()
    per = batch_size(batch)
    return {site: count // per for site, count in counts.items()}


def batch_size(batch: Any) -> int:
    """The number of samples of a batch: the first dimension of its first tensor."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() else 1
    values = batch.values() if isinstance(batch, dict) else batch
    return next((batch_size(v) for v in values if isinstance(v, (torch.Tensor, dict, list, tuple))), 1)
