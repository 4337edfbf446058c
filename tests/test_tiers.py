"""The tiers of the suite (``tests/conftest.py``: ``TIERS``).

- What each tier's tests may import, checked on the sources (every import, nested ones included,
  and the ``_shared`` modules they import): the config tier never reaches Brevitas or the export
  stack, the backend tier never the export stack.
- A tier whose packages are missing is reported as skipped, naming them: pytest runs in a fresh
  interpreter with the package hidden (``sys.modules[name] = None``, so that importing it fails as
  if it were not installed).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys

import pytest
from _shared import REPO

TESTS = REPO / "tests"
EXPORT_STACK = ("onnx", "onnxruntime", "qonnx", "onnxoptimizer", "finn")
#: tier -> modules (and their submodules) its tests may not import
FORBIDDEN = {
    "config": (
        "brevitas",
        *EXPORT_STACK,
        "quark.torch.extensions.brevitas.api",
        "quark.torch.extensions.brevitas.qat",
        "quark.torch.extensions.brevitas.cli",
        "quark.torch.extensions.brevitas._backend",
        "_shared.quantize",
        "_shared.graphs",
        "_shared.finn_zoo",
    ),
    "backend": (
        *EXPORT_STACK,
        "quark.torch.extensions.brevitas._backend.export",
        "quark.torch.extensions.brevitas._backend.targets",
        "_shared.graphs",
        "_shared.finn_zoo",
    ),
}
#: tier -> names whose use needs what the tier lacks (quantizing, exporting)
FORBIDDEN_NAMES = {
    "config": {"ModelQuantizer", "quantize_model", "ModelExporter", "finn_handoff", "export_finn_dataflow"},
    "backend": {"ModelExporter", "export_onnx_model", "export_qonnx_model", "finn_handoff", "export_finn_dataflow"},
}


def imports(path) -> set[str]:
    """Every module ``path`` imports, at any depth (``from a import b`` counts as ``a`` and ``a.b``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return found


def reached(path) -> set[str]:
    """``imports(path)`` and, through the ``_shared`` modules among them, theirs."""
    seen, todo = set(), [path]
    while todo:
        for module in imports(todo.pop()) - seen:
            seen.add(module)
            if module.startswith("_shared."):
                shared = TESTS / (module.replace(".", "/") + ".py")
                if shared.exists():
                    todo.append(shared)
    return seen


def names(path) -> set[str]:
    return {n.id if isinstance(n, ast.Name) else n.attr for n in ast.walk(ast.parse(path.read_text()))
            if isinstance(n, (ast.Name, ast.Attribute))}  # fmt: skip


def modules(tier: str) -> list:
    return sorted((TESTS / tier).rglob("*.py"))


@pytest.mark.parametrize("tier", FORBIDDEN)
def test_a_tier_imports_nothing_its_packages_lack(tier):
    bad = {
        str(path.relative_to(TESTS)): sorted(m for m in reached(path) if m.startswith(FORBIDDEN[tier]))
        for path in modules(tier)
    }
    assert not {k: v for k, v in bad.items() if v}


@pytest.mark.parametrize("tier", FORBIDDEN_NAMES)
def test_a_tier_calls_nothing_its_packages_lack(tier):
    bad = {str(path.relative_to(TESTS)): sorted(names(path) & FORBIDDEN_NAMES[tier]) for path in modules(tier)}
    assert not {k: v for k, v in bad.items() if v}


def test_the_checks_see_nested_imports_and_shared_modules(tmp_path):
    probe = tmp_path / "test_probe.py"
    probe.write_text("from _shared.configs import W8\n\ndef test():\n    from _shared.quantize import quantize\n")
    assert {"_shared.quantize", "quark.torch.extensions.brevitas.api"} <= reached(probe)


def pytest_hiding(hidden: tuple[str, ...], *args: str) -> subprocess.CompletedProcess:
    """pytest ``args`` in a fresh interpreter with the packages ``hidden``."""
    code = "import sys\n" + "".join(f"sys.modules[{name!r}] = None\n" for name in hidden)
    code += f"import pytest\nsys.exit(pytest.main({['-p', 'no:cacheprovider', '-q', '-ra', *args]!r}))\n"
    return subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=False, timeout=600
    )


def summary(result: subprocess.CompletedProcess) -> str:
    return result.stdout.strip().splitlines()[-1]


def skips(result: subprocess.CompletedProcess) -> dict[str, int]:
    """Reason -> count of the SKIPPED lines of ``-ra``'s summary."""
    found: dict[str, int] = {}
    for count, reason in re.findall(r"^SKIPPED \[(\d+)\] .*?: (.*)$", result.stdout, re.MULTILINE):
        found[reason] = found.get(reason, 0) + int(count)
    return found


def installed(*names: str) -> None:
    """Skip unless every package of ``names`` is installed (the check hides one of those present)."""
    for name in names:
        pytest.importorskip(name, reason=f"{name} is not installed")


def test_missing_packages_skip_each_tier_that_needs_them_naming_them():
    """One run per hidden package group: every test module of each tier needing it is one skip whose
    reason names the tier, the package and how to install it; nothing runs, nothing errors."""
    installed("brevitas", "onnx", "onnxruntime", "qonnx")
    tiers = ["backend", "export", "targets", "integration"]
    for hidden, needing, installs in [
        (("brevitas",), tiers, "pip install 'quark-brevitas[brevitas]'"),
        (("onnx", "onnxruntime", "qonnx"), tiers[1:], "pip install 'quark-brevitas[export]'"),
    ]:
        result = pytest_hiding(hidden, *(f"tests/{tier}" for tier in needing))
        assert result.returncode == 5, result.stdout[-3000:]  # no test ran, nothing failed or errored
        assert skips(result) == {
            f"tests/{tier}: needs {', '.join(hidden)} (not installed; {installs})": len(list((TESTS / tier).rglob("test_*.py")))
            for tier in needing
        }
        assert re.fullmatch(r"\d+ skipped in .*", summary(result)), summary(result)


def test_one_module_of_a_missing_tier_is_skipped_too():
    installed("brevitas")
    result = pytest_hiding(("brevitas",), "tests/backend/test_mapping.py")
    assert result.returncode == 5 and "SKIPPED [1]" in result.stdout and "tests/backend: needs brevitas" in result.stdout


def test_the_finn_modules_skip_themselves_without_finn_plus():
    """``tests/targets/finn`` needs the export stack; its modules that drive FINN itself skip, naming finn-plus."""
    installed("brevitas", "onnx", "onnxruntime", "qonnx", "finn")
    driving = ["tests/targets/finn/test_front_end.py", "tests/targets/finn/test_dataflow.py"]
    result = pytest_hiding(("finn",), *driving)
    assert result.returncode == 5, result.stdout[-3000:]
    assert len(re.findall(r"^SKIPPED \[1\] .*finn-plus is not installed", result.stdout, re.MULTILINE)) == len(driving)


def test_the_hls4ml_tier_skips_without_hls4ml_naming_it():
    installed("brevitas", "onnx", "onnxruntime", "qonnx", "hls4ml")
    result = pytest_hiding(("hls4ml",), "tests/targets/hls4ml")
    assert result.returncode == 5, result.stdout[-3000:]
    reason = "tests/targets/hls4ml: needs hls4ml (not installed; pip install 'quark-brevitas[hls4ml]')"
    assert skips(result) == {reason: len(list((TESTS / "targets" / "hls4ml").glob("test_*.py")))}


@pytest.mark.parametrize(
    "tier, hidden",
    [("config", ("brevitas", *EXPORT_STACK)), ("backend", EXPORT_STACK)],
)
def test_a_tier_collects_without_the_packages_it_does_not_need(tier, hidden):
    installed(*{"config": (), "backend": ("brevitas",)}[tier])
    result = pytest_hiding(hidden, "--collect-only", f"tests/{tier}")
    assert result.returncode == 0, result.stdout[-3000:]
    assert re.fullmatch(r"\d+ tests collected in .*", summary(result)), summary(result)


@pytest.mark.slow
def test_the_config_tier_passes_with_torch_alone():
    """Every config test runs and passes with Brevitas and the export stack hidden."""
    result = pytest_hiding(("brevitas", *EXPORT_STACK), "tests/config")
    assert result.returncode == 0, result.stdout[-3000:]
    assert re.fullmatch(r"\d+ passed in .*", summary(result)), summary(result)
