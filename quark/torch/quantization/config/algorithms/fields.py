"""Field checks of the algorithm configs: each a ``(test, what is allowed)`` pair, named once and
shared by the configs that take the field."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import field
from typing import Any

#: a field check: (test of the value, what is allowed, for the message)
Check = tuple[Callable[[Any], bool], str]


def checked(default: Any, check: Check) -> Any:
    """A dataclass field whose value must pass ``check`` on construction (see ``AlgoConfig``)."""
    return field(default=default, metadata={"check": check})


def required(check: Check) -> Any:
    """A dataclass field without a default whose value must pass ``check`` (see :func:`checked`)."""
    return field(metadata={"check": check})


def failed_checks(config: Any, checks: dict[str, Check], verdict: str = "is not valid") -> list[str]:
    """A message per listed field that fails its test, naming the class, the field, the value, the
    ``verdict`` and what is allowed."""
    owner = type(config).__name__
    return [
        f"{owner}.{name}={getattr(config, name)!r} {verdict}; allowed: {allowed}"
        for name, (ok, allowed) in checks.items()
        if not ok(getattr(config, name))
    ]


def check_fields(config: Any, checks: dict[str, Check], verdict: str = "is not valid") -> None:
    """Every listed field must pass its test; all failures are reported together."""
    bad = failed_checks(config, checks, verdict)
    if bad:
        raise ValueError("; ".join(bad))


def is_a(
    types: type | tuple[type, ...], *, optional: bool = False, test: Callable[[Any], bool] = lambda v: True
) -> Callable[[Any], bool]:
    """A test: ``value`` is of ``types`` (a bool only where bool is named) and passes ``test``."""
    named = types if isinstance(types, tuple) else (types,)

    def ok(value: Any) -> bool:
        if value is None:
            return optional
        return (
            isinstance(value, named) and not (isinstance(value, bool) and bool not in named) and test(value)
        )

    return ok


def str_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) and v for v in value)


#: keys of one ``scaling_layers`` entry (Quark's format) -> whether required
SCALING_LAYER_KEYS: dict[str, bool] = {
    "prev_op": True,
    "layers": True,
    "inp": False,
    "module2inspect": False,
    "has_kwargs": False,
    "alpha": False,
}


def _scaling_layers(value: Any) -> bool:
    if value is None:
        return True
    if not isinstance(value, list):
        return False
    for entry in value:
        if not isinstance(entry, dict) or set(entry) - set(SCALING_LAYER_KEYS):
            return False
        if any(key not in entry for key, required in SCALING_LAYER_KEYS.items() if required):
            return False
        if not isinstance(entry["prev_op"], str) or not str_list(entry["layers"]) or not entry["layers"]:
            return False
    return True


SCALING_LAYERS: Check = (
    _scaling_layers,
    (
        "None (found in the model) or a list of dicts with 'prev_op' (str) and 'layers' (non-empty list of str), "
        f"optionally {[k for k, required in SCALING_LAYER_KEYS.items() if not required]}"
    ),
)
MODULE_PATH: Check = (is_a(str, optional=True), "None or a module path (str)")
MODULE_NAMES: Check = (lambda v: v is None or str_list(v), "None or a list of module names (str)")
NAME_PATTERNS: Check = (
    lambda v: v is None or (str_list(v) and bool(v)),
    "None or a non-empty list of name patterns",
)
BIT: Check = (
    is_a(int, optional=True, test=lambda v: 2 <= v <= 16),
    "None (the weight spec's) or an int in 2..16",
)
SYM: Check = (is_a(bool, optional=True), "None (the weight spec's) or a bool")
GROUP: Check = (
    is_a(int, optional=True, test=lambda v: v > 0 or v == -1),
    "None (the weight spec's), -1 (one scale per output channel) or a positive int",
)
HEADS: Check = (is_a(int, test=lambda v: v > 0 or v == -1), "-1 (unknown) or a positive int")
BOOL: Check = (is_a(bool), "True or False")
FRACTION: Check = (is_a((int, float), test=lambda v: 0 < v <= 1), "a number in (0, 1]")
UNIT_INTERVAL: Check = (is_a((int, float), test=lambda v: 0 <= v <= 1), "a number in [0, 1]")
POSITIVE: Check = (is_a((int, float), test=lambda v: v > 0), "a positive number")
POSITIVE_INT: Check = (is_a(int, test=lambda v: v > 0), "a positive int")
