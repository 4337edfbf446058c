"""One rule type for everything a format, a target, a layer or an algorithm refuses, and one collector.

A :class:`Rule` is a row: what it refuses, how to find it in one subject (a quantizer, a layer's
plan, a graph site, a written graph), what is allowed instead and why. Rule sets are tuples of
rows (the plan's :mod:`.layers`, the export formats' in ``export/support.py``, each target's in
``targets/``); :func:`problems` collects every problem of every subject before anything is
reported, in one message form, and :func:`markdown` writes the table the docs embed (a test keeps
each in sync).

A rule's ``check(subject)`` yields one entry per problem: the offending values (``"round_method=half_up"``),
or ``(values, allowed)`` where what is allowed depends on the subject; nothing when the subject
passes. The collector writes ``<where>: <values>; <context> allows <allowed> (<reason>)``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: what a check yields per problem: the values, or (the values, what is allowed for this subject)
Found = str | tuple[str, str]


@dataclass(frozen=True)
class Rule:
    """A row: ``refuses`` (the table's description), ``check`` (the problems of one subject),
    ``allowed`` (what to use instead), ``reason`` (why), ``scope`` (the contexts it applies in,
    e.g. ``{"format": {qcdq}}``; empty: everywhere), ``notes`` (what a report says of a subject that
    passed, beyond ``allowed``: e.g. what a target runs elsewhere)."""

    refuses: str
    check: Callable[[Any], Iterable[Found]]
    allowed: str
    reason: str
    scope: Mapping[str, frozenset] = field(default_factory=dict)
    notes: Callable[[Any], list[str]] | None = None

    def applies(self, context: Mapping[str, Any]) -> bool:
        return all(context[key] in values for key, values in self.scope.items() if key in context)


def problems(
    rules: Iterable[Rule],
    subjects: Iterable[Any],
    *,
    where: Callable[[Any], str] | None = None,
    allows: str = "",
    context: Mapping[str, Any] | None = None,
) -> list[str]:
    """Every problem of every subject under the rules that apply in ``context``, one line each:
    ``<where(subject)>: <values>; <allows> allows <allowed> (<reason>)``."""
    context = context or {}
    rules = [rule for rule in rules if rule.applies(context)]
    lines = []
    for subject in subjects:
        prefix = f"{where(subject)}: " if where is not None else ""
        for rule in rules:
            for found in rule.check(subject):
                values, allowed = found if isinstance(found, tuple) else (found, rule.allowed)
                lines.append(
                    f"{prefix}{values}; {allows + ' allows' if allows else 'allowed:'} {allowed} ({rule.reason})"
                )
    return lines


def passed(rules: Iterable[Rule], subject: Any, label: str) -> list[str]:
    """The rules ``subject`` meets, as ``<label>: <allowed>`` (what a report lists as checked), each with
    its notes on the subject."""
    lines = []
    for rule in rules:
        if not any(True for _ in rule.check(subject)):
            lines.append(f"{label}: {rule.allowed}")
            lines += [f"{label}: {note}" for note in (rule.notes(subject) if rule.notes else [])]
    return lines


def markdown(rules: Sequence[Rule], columns: Mapping[str, Callable[[Rule], str]] | None = None) -> str:
    """The rules as a markdown table: the ``columns`` first (title -> the cell of a rule, e.g. its
    scope), then what is refused, what is allowed and why."""
    columns = columns or {}
    head = [*columns, "refused", "allowed", "why"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for rule in rules:
        cells = [cell(rule) for cell in columns.values()]
        lines.append("| " + " | ".join([*cells, rule.refuses, rule.allowed or "-", rule.reason]) + " |")
    return "\n".join(lines)


# -- rules on one quantizer's spec -----------------------------------------------------------------

ACT, WEIGHT, BIAS = frozenset({"activation"}), frozenset({"weight"}), frozenset({"bias"})
DATA = ACT | WEIGHT


@dataclass(frozen=True)
class Quantizer:
    """A quantizer of a built model: its module path, role (activation, weight, bias) and Quark spec
    (None when it was not built from one)."""

    name: str
    role: str
    spec: Any

    def __str__(self) -> str:
        return f"quantizer {self.name!r} ({self.role})"


def _from_a_spec(q: Quantizer) -> Iterable[Found]:
    if q.spec is None:
        yield "not built from a Quark spec"


#: a target's checks read the spec each quantizer was built from
FROM_A_SPEC = Rule(
    "a quantizer not built from a Quark spec",
    _from_a_spec,
    "quantizers built by ModelQuantizer from a Quark config",
    "the target's rules read the spec a quantizer was built from",
)


def spec_rule(
    roles: frozenset[str],
    field_name: str,
    ok: Callable[[Any], bool],
    allowed: str,
    reason: str,
    *,
    shown: Callable[[Any], str] | None = None,
    problem: Callable[[Any], str] | None = None,
    refuses: str | None = None,
    scope: Mapping[str, frozenset] | None = None,
) -> Rule:
    """A rule on one field of a quantizer's spec: ``ok(spec)``, else the problem ``field=shown(spec)``
    (or ``problem(spec)`` where the field alone does not say it)."""

    def value(spec: Any) -> str:
        if shown is not None:
            return shown(spec)
        found = getattr(spec, field_name)
        return found.name if hasattr(found, "name") else repr(found)

    def check(q: Quantizer) -> Iterable[Found]:
        if q.spec is not None and q.role in roles and not ok(q.spec):
            yield problem(q.spec) if problem is not None else f"{field_name}={value(q.spec)}"

    return Rule(
        refuses or f"{'/'.join(sorted(roles))} `{field_name}`", check, allowed, reason, dict(scope or {})
    )
