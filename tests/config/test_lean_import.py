"""The config API, observers, the extension's config/algos and the plan import without the engine
(Brevitas) or the export stack (onnx, onnxruntime, qonnx), silently and without warnings."""

from __future__ import annotations

import subprocess
import sys

import pytest
from _shared import REPO, python

BLOCKED = ("brevitas", "onnx", "onnxruntime", "qonnx")
MODULES = (
    "quark.torch.quantization.config.config",
    "quark.torch.quantization.config.type",
    "quark.torch.quantization.observer",
    "quark.torch.extensions.brevitas.config",
    "quark.torch.extensions.brevitas.algos",
    "quark.torch.quantization.plan",
    "quark.torch.quantization.tensor_quant",
    "quark.torch.quantization.config.algorithms",
    "quark.torch.extensions.brevitas.normalise",
    "quark.torch.quantization.config.datatype_specs",
    "quark.torch.quantization.quark013",
    # AMD Quark's layout: its entry points load on first use, its export configs and utilities are pure
    "quark.torch",
    "quark.torch.export",
    "quark.torch.export.config.config",
    "quark.torch.quantization.observer.observer",
    "quark.torch.quantization.observer.tqt_observer",
    "quark.torch.quantization.observer.lsq_observer",
    "quark.common.utils.import_utils",
    "quark.common.utils.log",
)

BLOCK = f"""
import sys
for _n in {BLOCKED!r}:
    sys.modules[_n] = None  # any `import _n` now raises ImportError
"""

IMPORT_ALL = f"""
import importlib, warnings
warnings.simplefilter("error")
for module in {MODULES!r}:
    importlib.import_module(module)
for name in {BLOCKED!r}:
    assert sys.modules[name] is None, name
loaded = sorted(m for m in sys.modules if m.split(".")[0] in {BLOCKED!r} and sys.modules[m] is not None)
assert not loaded, loaded
"""

# Builds and round-trips configs of both flavours and resolves a plan: none of it may need the
# blocked packages.
USE = """
from torch import nn
from quark.torch.quantization.config.config import Config, QuantizationConfig, QuantizationSpec
from quark.torch.extensions.brevitas import config as ext
from quark.torch.quantization.plan import module_names, module_sites, resolve
c = Config(QuantizationConfig(weight=QuantizationSpec(dtype="int8")))
assert Config.from_dict(c.to_dict()) == c
e = ext.Config(ext.QuantizationConfig(weight=ext.QuantizationSpec()))
assert ext.Config.from_dict(e.to_dict()) == e
m = nn.Sequential(nn.Linear(2, 2))
assert [p.name for p in resolve(c, module_sites(m, (nn.Linear,)), module_names(m), (nn.Linear,))] == ["0"]
assert [p.name for p in resolve(e, module_sites(m, (nn.Linear,)), module_names(m), (nn.Linear,))] == ["0"]
print("OK", end="")
"""


def test_lean_import_is_silent_and_warning_free():
    result = python(BLOCK + IMPORT_ALL + USE)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "OK"  # the imports themselves printed nothing
    assert result.stderr == ""


@pytest.mark.parametrize("name", BLOCKED)
def test_blocking_actually_blocks(name):
    """Guard for the test above: the sys.modules trick makes each package unimportable."""
    result = python(BLOCK + f"import {name}")
    assert result.returncode != 0
    assert "ModuleNotFoundError" in result.stderr and name in result.stderr


def test_type_module_needs_only_the_standard_library():
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import quark.torch.quantization.config.type as t\n"
        "print(t.Dtype.int8.value)"
    )
    result = subprocess.run(
        [sys.executable, "-W", "error", "-c", code],
        cwd=REPO,
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert (result.stdout, result.stderr) == ("int8\n", "")


