"""What an export target asks of each quantizer, as table rows, and the checks both targets share
(:mod:`ipu` for the NPU, :mod:`finn_target` for FINN)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from torch import nn

from quark.torch.extensions.brevitas._backend.export.support import quantizers
from quark.torch.quantization.tensor_quant import TensorQuant


@dataclass(frozen=True)
class Requirement:
    """A quantizer spec a target needs: ``ok(spec)``, else ``field=shown(spec)``; ``allowed``, and why."""

    roles: frozenset[str]
    field: str
    ok: Callable[[TensorQuant], bool]
    shown: Callable[[TensorQuant], str]
    allowed: str
    reason: str = ""


def spec_problems(model: nn.Module, requirements: Iterable[Requirement], target: str) -> list[str]:
    """One line per quantizer of ``model`` and requirement it misses, naming the field and what ``target`` allows."""
    requirements = tuple(requirements)
    problems = []
    for name, role, _proxy, spec in quantizers(model):
        if spec is None:
            problems.append(f"quantizer {name!r} ({role}): not built from a Quark spec; the {target} check needs one")
            continue
        problems += [
            f"quantizer {name!r} ({role}): {req.field}={req.shown(spec)}; {target} allows {req.allowed}"
            + (f" ({req.reason})" if req.reason else "")
            for req in requirements
            if role in req.roles and not req.ok(spec)
        ]
    return problems


def dynamic_shapes(model) -> list[str]:
    """The graph inputs and outputs of an ONNX ``model`` whose shape is not fully static."""
    problems = []
    for value in [*model.graph.input, *model.graph.output]:
        dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in value.type.tensor_type.shape.dim]
        if any(not isinstance(d, int) or d <= 0 for d in dims):
            kind = "input" if value in model.graph.input else "output"
            problems.append(f"graph {kind} {value.name!r} has dynamic shape {dims}")
    return problems
