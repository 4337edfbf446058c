"""Config flavours announced by module name and registered on first use.

A package that brings its own config flavour (the Brevitas extension) announces, by name, the
module whose ``register()`` tells the plan how to read it (:func:`add_flavour`), as it announces
its algorithm implementations with ``add_backend``. The module is imported the first time the plan
meets a config or spec class it does not know (:func:`load_flavours`), so importing the package
stays light (the command line's ``--help`` does not import torch). No import of torch here.
"""

from __future__ import annotations

import importlib

_ANNOUNCED: list[str] = []
_LOADED: set[str] = set()


def add_flavour(module: str) -> None:
    """Announce ``module``: its ``register()`` registers a config view and a spec normaliser."""
    if module not in _ANNOUNCED:
        _ANNOUNCED.append(module)


def load_flavours() -> bool:
    """Import every announced module not loaded yet and call its ``register()``; True if any was."""
    pending = [m for m in _ANNOUNCED if m not in _LOADED]
    for module in pending:
        importlib.import_module(module).register()
        _LOADED.add(module)
    return bool(pending)
