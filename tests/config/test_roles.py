"""Roles are typed: the package looks up a plan's ``specs`` / ``origins`` / ``upstream`` by
:class:`~quark.torch.quantization.config.spec.Role`, never by a string literal (checked on the source),
and ``ACTIVATION_ROLES`` is defined once."""

from __future__ import annotations

import ast

from _shared import REPO

from quark.torch.quantization.config.spec import ACTIVATION_ROLES, ROLES, Role

PLAN_TABLES = {"specs", "origins", "upstream"}


def _table(node: ast.AST) -> bool:
    """``x.specs`` or a local ``specs`` (and the other plan tables)."""
    return (isinstance(node, ast.Attribute) and node.attr in PLAN_TABLES) or (isinstance(node, ast.Name) and node.id in PLAN_TABLES)


def _string_lookups(tree: ast.AST) -> list[int]:
    """Lines of ``x.specs["weight"]``, ``x.specs.get("weight")`` and ``"weight" in x.specs``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and _table(node.value):
            key = node.slice
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" and _table(node.func.value) and node.args:
            key = node.args[0]
        elif isinstance(node, ast.Compare) and isinstance(node.ops[0], (ast.In, ast.NotIn)) and _table(node.comparators[0]):
            key = node.left
        else:
            continue
        if isinstance(key, ast.Constant) and key.value in ROLES:
            found.append(node.lineno)
    return found


def test_no_string_role_lookups_in_the_package():
    found = {}
    for path in sorted((REPO / "quark").rglob("*.py")):
        lines = _string_lookups(ast.parse(path.read_text(), str(path)))
        if lines:
            found[str(path.relative_to(REPO))] = lines
    assert not found, f"look roles up by Role (quark.torch.quantization.config.spec): {found}"


def test_the_check_finds_each_form():
    code = 'p.specs["weight"]; p.origins.get("bias"); "input_tensors" in p.upstream; specs["bias"]; p.specs[Role.weight]; d["weight"]'
    assert _string_lookups(ast.parse(code)) == [1, 1, 1, 1]


def test_activation_roles_are_defined_once():
    definitions = [
        str(path.relative_to(REPO))
        for path in (REPO / "quark").rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "ACTIVATION_ROLES" for t in node.targets)
    ]
    assert definitions == ["quark/torch/quantization/config/spec.py"]


def test_roles_are_the_layer_config_fields_and_plain_strings():
    from dataclasses import fields

    from quark.torch.quantization.config.config import QuantizationConfig

    assert [r.value for r in Role] == [f.name for f in fields(QuantizationConfig) if f.name in ROLES] == list(ROLES)
    assert ACTIVATION_ROLES == ("input_tensors", "output_tensors") and {"weight": 1}[Role.weight] == 1
