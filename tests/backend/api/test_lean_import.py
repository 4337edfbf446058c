"""Quantizing needs no export package: with onnx, onnxruntime or qonnx hidden, the API imports and
quantizes without loading it, and an export that needs it fails before writing anything, naming the
package and the extra that installs it. (Importing without Brevitas: ``tests/config/test_lean_import.py``.)"""

from __future__ import annotations

import pytest
from _shared import python

pytestmark = pytest.mark.slow  # three fresh interpreters importing torch and Brevitas: ~15 s

QUANTIZE = """
import torch
from torch import nn
from quark.torch.extensions.brevitas.api import ModelExporter, ModelQuantizer
from quark.torch.quantization.config.config import Config, QuantizationConfig, QuantizationSpec
from quark.torch.quantization.observer import PerTensorMinMaxObserver
spec = QuantizationSpec(dtype="int8", observer_cls=PerTensorMinMaxObserver)
model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
q = ModelQuantizer(Config(QuantizationConfig(weight=spec, input_tensors=spec)))
qmodel = q.quantize_model(model, [torch.randn(8, 4)], progress=False)
assert qmodel(torch.randn(2, 4)).shape == (2, 2)
loaded = sorted(m for m in sys.modules if m.split(".")[0] == BLOCKED_NAME and sys.modules[m] is not None)
assert not loaded, loaded
for method in ("export_onnx_model", "export_qonnx_model"):
    try:
        getattr(ModelExporter(f"{OUT}/{method}.onnx"), method)(qmodel, torch.randn(2, 4))
    except ImportError as error:
        print(f"{method}: {error}")
"""


@pytest.mark.parametrize("name", ["onnx", "onnxruntime", "qonnx"])
def test_quantizing_needs_no_export_package_and_exporting_names_the_extra(name, tmp_path):
    """With ``name`` hidden, the API imports and quantizes without loading it; an export that needs it
    fails before writing anything, naming the package and the extra that installs it."""
    pytest.importorskip("brevitas", reason="Brevitas is not installed")
    code = f"import sys\nsys.modules[{name!r}] = None\nBLOCKED_NAME, OUT = {name!r}, {str(tmp_path)!r}\n" + QUANTIZE
    result = python(code)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()  # qonnx executes QONNX graphs with onnxruntime
    needing = ["export_qonnx_model"] if name == "qonnx" else ["export_onnx_model", "export_qonnx_model"]
    assert [line.split(":")[0] for line in lines] == needing
    assert all(f"needs {name}" in line and "pip install 'quark-brevitas[export]'" in line for line in lines)
    assert not any((tmp_path / f"{method}.onnx").exists() for method in needing)
