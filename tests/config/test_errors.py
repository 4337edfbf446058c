"""One error hierarchy: every exception class the package defines derives from
``quark.common.errors.QuarkBrevitasError`` (beside the standard exception callers catch), checked on
the source, so a new error class cannot slip out of it; the exit statuses the command line maps them to."""

from __future__ import annotations

import ast
import builtins

import pytest
from _shared import REPO

from quark.common.errors import FAILED, USAGE, FailedError, QuarkBrevitasError, RefusedError
from quark.torch.quantization.quark013_api import QuarkFeatureRefused, QuarkNameRefused

#: the standard exceptions (warnings are not errors)
STANDARD = {
    name
    for name, value in vars(builtins).items()
    if isinstance(value, type) and issubclass(value, BaseException) and not issubclass(value, Warning)
}
#: the hierarchy's roots, defined from the standard ones
ROOTS = {"QuarkBrevitasError", "RefusedError", "FailedError"}
#: classes outside it on purpose: module path -> class -> why
OUTSIDE = {
    "quark/common/errors.py": {"QuarkBrevitasError": "the root"},
    "quark/torch/extensions/brevitas/api.py": {
        "QuantizationInterrupted": "a KeyboardInterrupt: `except Exception` must not swallow Ctrl-C",
    },
    "quark/torch/extensions/brevitas/_backend/data.py": {"ForwardStopped": "control flow out of a forward hook"},
}


def _defined_from_standard() -> list[tuple[str, str]]:
    """(module path, class) of every class naming a standard exception as a base and no root."""
    found = []
    for path in sorted((REPO / "quark").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.ClassDef):
                continue
            bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
            if bases & STANDARD and not bases & ROOTS:
                found.append((str(path.relative_to(REPO)), node.name))
    return found


def test_every_error_class_derives_from_the_package_root():
    outside = [(path, name) for path, name in _defined_from_standard() if name not in OUTSIDE.get(path, {})]
    assert not outside, f"derive these from quark.common.errors (RefusedError, FailedError): {outside}"


def test_the_check_sees_a_class_from_a_standard_exception():
    """Guard: the walk finds what it must refuse (here the listed exceptions themselves)."""
    found = _defined_from_standard()
    assert ("quark/torch/extensions/brevitas/api.py", "QuantizationInterrupted") in found


@pytest.mark.parametrize(
    "error, standard, status",
    [
        (RefusedError("x"), ValueError, USAGE),
        (FailedError("x"), RuntimeError, FAILED),
        (QuarkNameRefused("x"), ImportError, USAGE),
        (QuarkFeatureRefused("x"), NotImplementedError, USAGE),
    ],
)
def test_errors_are_the_standard_exception_too_and_carry_their_exit_status(error, standard, status):
    assert isinstance(error, QuarkBrevitasError) and isinstance(error, standard) and error.exit_status == status
