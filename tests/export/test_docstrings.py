"""Every public class, function and method of the documented modules that need Brevitas (``api``,
``qat``) has a docstring (docs/api.md renders them; the others: ``tests/config/test_docstrings.py``).
In the export tier: ``api``'s public names include the export functions, which import onnx when
first looked up."""

from __future__ import annotations

import pytest
from _shared.docstrings import documented, public

DOCUMENTED = [
    "quark.torch.extensions.brevitas.api",
    "quark.torch.extensions.brevitas.qat",
]


@pytest.mark.parametrize("module_name", DOCUMENTED)
def test_every_public_name_has_a_docstring(module_name):
    found = public(module_name)
    assert found, f"{module_name} exposes nothing public"
    missing = [name for name, obj in found if not documented(obj)]
    assert not missing, f"{module_name}: no docstring on {missing}"
