"""Every public class, function and method of the documented modules has a docstring (docs/api.md renders them)."""

from __future__ import annotations

import importlib
import inspect

import pytest

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
    "quark.torch.extensions.brevitas.api",
    "quark.torch.extensions.brevitas.qat",
]

#: methods whose meaning is torch's or Python's own
INHERITED_MEANING = {"forward", "extra_repr"}


def _public(module_name: str) -> list[tuple[str, object]]:
    module = importlib.import_module(module_name)
    names = getattr(module, "__all__", None) or [n for n in dir(module) if not n.startswith("_")]
    found = []
    for name in names:
        obj = getattr(module, name)
        if (inspect.isclass(obj) or inspect.isfunction(obj)) and obj.__module__.startswith("quark."):
            found.append((name, obj))
            if inspect.isclass(obj) and obj.__module__ == module_name:
                found += [
                    (f"{name}.{k}", v)
                    for k, v in vars(obj).items()
                    if inspect.isfunction(v) and not k.startswith("_") and k not in INHERITED_MEANING
                ]
    return found


def _documented(obj: object) -> bool:
    doc = (obj.__doc__ or "").strip()
    # dataclasses write their signature as __doc__, older enums "An enumeration."
    generated = inspect.isclass(obj) and (doc.startswith(f"{obj.__name__}(") or doc == "An enumeration.")
    return bool(doc) and not generated


@pytest.mark.parametrize("module_name", DOCUMENTED)
def test_every_public_name_has_a_docstring(module_name):
    public = _public(module_name)
    assert public, f"{module_name} exposes nothing public"
    missing = [name for name, obj in public if not _documented(obj)]
    assert not missing, f"{module_name}: no docstring on {missing}"
