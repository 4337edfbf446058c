"""Public names of a module and whether each is documented (docs/api.md renders the docstrings)."""

from __future__ import annotations

import importlib
import inspect

#: methods whose meaning is torch's or Python's own
INHERITED_MEANING = {"forward", "extra_repr"}


def public(module_name: str) -> list[tuple[str, object]]:
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


def documented(obj: object) -> bool:
    doc = (obj.__doc__ or "").strip()
    # dataclasses write their signature as __doc__, older enums "An enumeration."
    generated = inspect.isclass(obj) and (doc.startswith(f"{obj.__name__}(") or doc == "An enumeration.")
    return bool(doc) and not generated
