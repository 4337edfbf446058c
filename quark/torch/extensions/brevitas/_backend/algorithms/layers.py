"""Which quantized layers an algorithm works on, and what it refuses in their weight specs.

Both are needed twice: before anything is built (``check``: on the resolved plan, reported with
the layer rules) and when the algorithm runs (``targets``: on the quantized model).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence
from typing import Any

from brevitas.nn.quant_layer import QuantWeightBiasInputOutputLayer
from torch import nn

from quark.torch.quantization.config.spec import Role
from quark.torch.quantization.config.type import QSchemeType
from quark.torch.quantization.plan import LayerPlan
from quark.torch.quantization.tensor_quant import TensorQuant


def weight_quantized(module: nn.Module) -> bool:
    """A Brevitas Linear / Conv layer whose weight is quantized."""
    return isinstance(module, QuantWeightBiasInputOutputLayer) and module.weight_quant.is_quant_enabled


#: the child a Hadamard rotation (Brevitas' RotatedModule) wraps a layer in: ``q_proj`` becomes
#: ``q_proj.layer``, and Quark's ``inside_layer_modules`` name the layer as before the rotation
ROTATED_CHILD = ".layer"


def in_scope(name: str, decoder_layers: str | None, patterns: Sequence[str] | None) -> bool:
    """Whether layer ``name`` is one an algorithm with these ``model_decoder_layers`` /
    ``inside_layer_modules`` works on: inside a block (``<decoder_layers>.<i>.``) and matching a
    pattern relative to it (a rotated layer by its name before the rotation too); without patterns,
    every layer (of the blocks, when given)."""
    if decoder_layers is not None:
        head = decoder_layers + "."
        if not name.startswith(head) or "." not in name[len(head) :]:
            return False
        relative = name[len(head) :].split(".", 1)[1]
    else:
        relative = name
    if patterns is None:
        return True
    names = [relative, relative.removesuffix(ROTATED_CHILD)] if relative.endswith(ROTATED_CHILD) else [relative]
    return any(fnmatch.fnmatchcase(n, p) or fnmatch.fnmatchcase(n, f"*.{p}") for n in names for p in patterns)


def unmatched_patterns(
    names: Iterable[str], decoder_layers: str | None, patterns: Sequence[str] | None
) -> list[str]:
    """The patterns of ``inside_layer_modules`` that match no layer."""
    names = list(names)
    return [p for p in patterns or () if not any(in_scope(n, decoder_layers, [p]) for n in names)]


def _grouping(tq: TensorQuant) -> tuple[int | None, str]:
    """(group size in Quark's algorithm terms, description): per_group n, per_channel -1, per_tensor None."""
    if tq.qscheme is QSchemeType.per_group:
        return tq.group_size, f"per_group group_size={tq.group_size}"
    if tq.qscheme is QSchemeType.per_channel:
        return -1, "per_channel (group_size=-1)"
    return None, "per_tensor"


def weight_spec_problems(config: Any, plans: Sequence[LayerPlan], scope: Iterable[str]) -> list[str]:
    """Where ``config.bit`` / ``sym`` / ``group_size`` (None: anything) disagree with the weight spec of a
    layer in ``scope``: one line per disagreement, naming both values and the modules."""
    owner = type(config).__name__
    scope = set(scope)
    found: dict[str, list[str]] = {}
    for plan in plans:
        tq = plan.specs[Role.weight]
        if plan.name not in scope or tq is None:
            continue
        group, described = _grouping(tq)
        checks = (
            ("bit", config.bit, tq.bit_width, f"bit width {tq.bit_width}"),
            ("sym", config.sym, tq.symmetric, f"symmetric={tq.symmetric}"),
            ("group_size", config.group_size, group, described),
        )
        for field_name, wanted, actual, shown in checks:
            if wanted is not None and wanted != actual:
                line = f"{owner}.{field_name}={wanted!r} disagrees with the weight spec ({shown})"
                found.setdefault(line, []).append(plan.name)
    return [
        f"{line} of {_modules(names)}; set them equal, or {owner}.{line.split('=')[0].split('.')[1]}=None to take the spec's"
        for line, names in found.items()
    ]


def _modules(names: list[str], limit: int = 3) -> str:
    shown = ", ".join(repr(n) for n in names[:limit])
    return (
        f"module {shown}"
        if len(names) == 1
        else f"modules {shown}" + (f" and {len(names) - limit} more" if len(names) > limit else "")
    )


def quantized_weight_plans(plans: Sequence[LayerPlan]) -> list[LayerPlan]:
    return [p for p in plans if p.specs[Role.weight] is not None]
