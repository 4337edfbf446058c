"""The import rules between layers, checked on the source (every import, top level or not).

- the config layer (``quark/torch/quantization``) imports nothing from ``quark.torch.extensions``;
- Brevitas, ONNX, ONNX Runtime, QONNX and FINN are imported only under
  ``quark/torch/extensions/brevitas/_backend/``;
- the extension's own modules outside ``_backend`` reach Brevitas only through ``_backend``
  (whose ``__init__`` checks the version first).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from _shared import REPO

PACKAGE = REPO / "quark"
ENGINE = ("brevitas", "onnx", "onnxruntime", "qonnx", "finn", "onnxoptimizer")
BACKEND = PACKAGE / "torch" / "extensions" / "brevitas" / "_backend"
CONFIG_LAYER = PACKAGE / "torch" / "quantization"


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import in ``path``, nested ones included."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
    return found


def sources(root: Path) -> list[Path]:
    return sorted(root.rglob("*.py"))


def _top(module: str) -> str:
    return module.split(".")[0]


@pytest.mark.parametrize("path", sources(CONFIG_LAYER), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_config_layer_imports_neither_extensions_nor_the_engine(path):
    bad = [
        (line, m) for line, m in imports(path) if m.startswith("quark.torch.extensions") or _top(m) in ENGINE
    ]
    assert not bad, f"{path.relative_to(PACKAGE)} imports {bad}"


@pytest.mark.parametrize(
    "path", [p for p in sources(PACKAGE) if BACKEND not in p.parents], ids=lambda p: str(p.relative_to(PACKAGE))
)
def test_only_the_backend_imports_the_engine(path):
    bad = [(line, m) for line, m in imports(path) if _top(m) in ENGINE]
    assert not bad, f"{path.relative_to(PACKAGE)} imports {bad}; only _backend/ may"


def test_the_checks_see_nested_imports(tmp_path):
    """Guard: an import inside a function is found too."""
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from brevitas.nn import QuantLinear\n")
    assert imports(probe) == [(2, "brevitas.nn")]


def test_the_layers_exist():
    """Guard: the folders the rules name are where the code is (a move would make the rules vacuous)."""
    assert (CONFIG_LAYER / "plan.py").exists() and (CONFIG_LAYER / "config" / "config.py").exists()
    assert (BACKEND / "mapping.py").exists() and (BACKEND / "rewrite" / "layerwise.py").exists()
    assert len(sources(CONFIG_LAYER)) >= 8 and len(sources(BACKEND)) >= 15


EXPORT = BACKEND / "export"


@pytest.mark.parametrize("path", sources(EXPORT), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_the_formats_depend_on_no_target(path):
    """``_backend/export`` (the formats: writing, verifying) imports neither the targets nor the exporter
    above both; a target imports the formats it takes."""
    above = ("quark.torch.extensions.brevitas._backend.targets", "quark.torch.extensions.brevitas._backend.exporter")
    bad = [(line, m) for line, m in imports(path) if m.startswith(above)]
    assert not bad, f"{path.relative_to(PACKAGE)} imports {bad}"
