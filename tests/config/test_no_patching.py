"""The package never patches a dependency at run time: no module of ``quark/`` assigns an attribute of
qonnx, FINN, onnx or onnxruntime (a module, class or function it imported from them), calls
``setattr`` on one, or uses ``unittest.mock``. Read from the source (the AST), so a patch anywhere in
the package fails here whether or not a test runs it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "quark"
PATCHABLE = ("qonnx", "finn", "onnx", "onnxruntime")


def _imported(tree: ast.AST) -> set[str]:
    """Local names bound to something imported from the patchable packages."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names if a.name.split(".")[0] in PATCHABLE}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in PATCHABLE:
            names |= {a.asname or a.name for a in node.names}
    return names


def _root(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def patches(source: str) -> list[str]:
    """Each assignment to, ``setattr`` on or ``mock`` of an imported qonnx / FINN / onnx / onnxruntime
    object in ``source``, as 'line: what'."""
    tree = ast.parse(source)
    imported = _imported(tree)
    found = []
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        for target in targets:
            for element in target.elts if isinstance(target, ast.Tuple) else [target]:
                if isinstance(element, ast.Attribute) and _root(element) in imported:
                    found.append(f"{node.lineno}: assigns {ast.unparse(element)}")
        call = isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr")
        if call and node.args and _root(node.args[0]) in imported:
            found.append(f"{node.lineno}: {node.func.id}({ast.unparse(node.args[0])}, ...)")
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if any(m == "unittest.mock" or m.startswith("unittest.mock.") or m == "mock" for m in modules) or (
                isinstance(node, ast.ImportFrom) and node.module == "unittest" and any(a.name == "mock" for a in node.names)
            ):
                found.append(f"{node.lineno}: imports mock")
    return found


def test_the_package_patches_no_dependency():
    found = {
        str(path.relative_to(PACKAGE.parent)): problems
        for path in sorted(PACKAGE.rglob("*.py"))
        if (problems := patches(path.read_text()))
    }
    assert not found, f"run-time patches of qonnx / FINN / onnx / onnxruntime, or mock, in quark/: {found}"


@pytest.mark.parametrize(
    "source",
    [
        "from qonnx.core.modelwrapper import ModelWrapper\nModelWrapper.find_producer = lambda self, n: None\n",
        "import qonnx.core.onnx_exec as oxe\noxe.execute_node = None\n",
        "import finn\nfinn.transformation.qonnx.convert_qonnx_to_finn.FoldQuantWeights = object\n",
        "from finn.transformation.qonnx import convert_qonnx_to_finn\nsetattr(convert_qonnx_to_finn, 'FoldQuantWeights', 1)\n",
        "from unittest import mock\n",
        "import unittest.mock\n",
        "import onnxruntime as rt\nrt.InferenceSession, x = None, 1\n",
        "from qonnx.core.modelwrapper import ModelWrapper\ndel ModelWrapper.transform\n",
    ],
)
def test_each_kind_of_patch_is_found(source):
    assert patches(source), source


def test_writes_to_graphs_and_own_objects_are_not_patches():
    source = (
        "from qonnx.core.modelwrapper import ModelWrapper\nimport onnx\n"
        "model = ModelWrapper(onnx.ModelProto())\nmodel.fix_float64 = False\nnode = model.graph.node[0]\n"
        "node.input[0] = 'x'\nclass Mine(ModelWrapper):\n    EQUIVALENTS = {}\n"
    )
    assert patches(source) == []


def test_the_removed_trust_table_and_version_gate_are_gone():
    text = "\n".join(path.read_text() for path in PACKAGE.rglob("*.py"))
    for name in ("AUDITED_QONNX", "TRUSTS", "indexed_lookups", "qonnx_index"):
        assert name not in text, name
