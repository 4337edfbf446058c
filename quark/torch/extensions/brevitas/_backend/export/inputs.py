"""Example inputs of an export: a tensor, a tuple of tensors (optionally ending with a dict of
keyword inputs, as ``torch.onnx.export`` takes them) or a dict of keyword inputs.

Tensors move to the model's device; floating tensors take its floating dtype, integer tensors
(token ids) stay integer. Every tensor becomes a named graph input: positional inputs take the
names of ``forward``'s parameters, keyword inputs their keys. Keyword inputs are exported through
:class:`KeywordAdapter`, a module whose ``forward`` takes exactly the given tensors, in order.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from quark.torch.extensions.brevitas._backend.data import check_finite, device_dtype, move


@dataclass
class ExampleInputs:
    positional: tuple[torch.Tensor, ...]
    keywords: dict[str, Any]  # tensors become graph inputs; other values stay constants
    names: list[str]  # graph input names, in graph order

    @classmethod
    def of(cls, model: nn.Module, args: Any) -> ExampleInputs:
        args = move(args, *device_dtype(model))
        if isinstance(args, torch.Tensor):
            positional, keywords = (args,), {}
        elif isinstance(args, Mapping):
            positional, keywords = (), dict(args)
        elif isinstance(args, (tuple, list)):
            args = tuple(args)
            if args and isinstance(args[-1], Mapping):
                positional, keywords = args[:-1], dict(args[-1])
            else:
                positional, keywords = args, {}
        else:
            raise TypeError(
                f"export args of type {type(args).__name__}: expected a tensor, a tuple of tensors "
                "(optionally ending with a dict of keyword inputs) or a dict of keyword inputs"
            )
        bad = [i for i, a in enumerate(positional) if not isinstance(a, torch.Tensor)]
        if bad:
            raise TypeError(
                f"export args: positional inputs must be tensors, got {[type(positional[i]).__name__ for i in bad]} "
                f"at positions {bad}; pass non-tensor arguments as keyword inputs (a dict)"
            )
        params = [
            p.name
            for p in inspect.signature(model.forward).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
        names = [params[i] if i < len(params) else f"input_{i}" for i in range(len(positional))]
        names += [k for k, v in keywords.items() if isinstance(v, torch.Tensor)]
        inputs = cls(positional, keywords, names)
        check_finite((f"export input {name!r}", t) for name, t in zip(names, inputs.tensors))  # a NaN output verifies nothing
        return inputs

    @property
    def tensors(self) -> list[torch.Tensor]:
        return [*self.positional, *(v for v in self.keywords.values() if isinstance(v, torch.Tensor))]

    def module_and_args(self, model: nn.Module) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
        """What to hand to the exporter: the model itself, or an adapter taking only tensors."""
        if not self.keywords:
            return model, self.positional
        return KeywordAdapter(model, len(self.positional), self.keywords), tuple(self.tensors)

    def run(self, model: nn.Module) -> Any:
        return model(*self.positional, **self.keywords)


class KeywordAdapter(nn.Module):
    """``forward(*tensors)`` -> ``model(*positional, **keywords)``, with non-tensor keywords fixed."""

    def __init__(self, model: nn.Module, num_positional: int, keywords: dict[str, Any]):
        super().__init__()
        self.model = model
        self.num_positional = num_positional
        self.tensor_keys = [k for k, v in keywords.items() if isinstance(v, torch.Tensor)]
        self.constants = {k: v for k, v in keywords.items() if not isinstance(v, torch.Tensor)}

    def forward(self, *tensors: torch.Tensor) -> Any:
        positional = tensors[: self.num_positional]
        keywords = dict(zip(self.tensor_keys, tensors[self.num_positional :]))
        return self.model(*positional, **keywords, **self.constants)


def flatten_outputs(output: Any) -> list[torch.Tensor]:
    """The model's outputs as a list of tensors, in graph output order."""
    if isinstance(output, torch.Tensor):
        return [output]
    if isinstance(output, (tuple, list)):
        return [t for item in output for t in flatten_outputs(item)]
    if output is None:
        return []
    if hasattr(output, "value") and isinstance(output.value, torch.Tensor):  # a Brevitas QuantTensor
        return [output.value]
    raise TypeError(
        f"model output of type {type(output).__name__}: expected tensors, tuples or lists of tensors"
    )


def output_names(count: int) -> list[str]:
    return ["output"] if count == 1 else [f"output_{i}" for i in range(count)]
