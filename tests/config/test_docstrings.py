"""Every public class, function and method of the documented modules that import without Brevitas has a
docstring (docs/api.md renders them; ``api`` and ``qat``: ``tests/export/test_docstrings.py``)."""

from __future__ import annotations

import pytest
from _shared.docstrings import documented, public

DOCUMENTED = [
    "quark.torch.quantization.config.config",
    "quark.torch.quantization.config.algorithms",
    "quark.torch.quantization.config.type",
    "quark.torch.quantization.observer",
    "quark.torch.quantization.plan",
    "quark.torch.extensions.brevitas.config",
    "quark.torch.extensions.brevitas.algos",
    "quark.torch.extensions.brevitas.presets",
    "quark.torch.extensions.brevitas.graph",
]


@pytest.mark.parametrize("module_name", DOCUMENTED)
def test_every_public_name_has_a_docstring(module_name):
    found = public(module_name)
    assert found, f"{module_name} exposes nothing public"
    missing = [name for name, obj in found if not documented(obj)]
    assert not missing, f"{module_name}: no docstring on {missing}"
