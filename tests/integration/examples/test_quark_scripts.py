"""The project's own scripts of AMD Quark's documented usages (examples/quark_scripts/), run end to
end: the basic usage page (a small OPT, its export_safetensors imported back bit for bit, LLMTemplate
refused by name) and the vision example's flows on torchvision's ResNet-18 with the digits, each with
``--model_export onnx torch_save``: every ``quark_model.onnx`` executed in ONNX Runtime equal to torch,
every ``save_params`` file reloaded bit for bit. Each script runs in a fresh interpreter (its torchvision
declaration and its logger are process-wide)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys

import pytest
from _shared import REPO

SCRIPTS = REPO / "examples" / "quark_scripts"
pytestmark = pytest.mark.slow  # ResNet-18 seven times: ~4 minutes on 2 cores

#: the vision example's flags (Quark's), each a run
VISION_FLOWS = {
    "a8w8": ["--a8w8"],
    "a16w8": ["--a16w8"],
    "non_overflow": ["--non_overflow"],
    "mse_powof2": ["--mse_powof2"],
    "qat_tqt": ["--qat", "--tqt"],
    "qat_lsq": ["--qat", "--lsq"],
    "default": [],
}


def _run(script: str, *args: str, cwd) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [sys.executable, str(SCRIPTS / script), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=900,
        check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return ast.literal_eval(result.stdout.strip().splitlines()[-1]) if script == "vision_quantize.py" else result.stdout


@pytest.mark.parametrize("flow", VISION_FLOWS)
def test_vision_example_flow_exports_onnx_equal_to_torch_and_params_bit_exact(tmp_path, flow):
    out = tmp_path / "export"
    results = _run("vision_quantize.py", *VISION_FLOWS[flow], "--model_export", "onnx", "torch_save",
                   "--export_dir", str(out), "--max_steps", "3", cwd=tmp_path)  # fmt: skip
    assert results["onnx max |diff|"] == 0.0 and results["load_params bit-exact"] == 1.0
    assert sorted(p.name for p in out.iterdir()) == ["quark_model.onnx", "resnet18_quantized.pth"]
    assert ("QAT" in results) is flow.startswith("qat") and ("PTQ" in results) is (flow != "qat_tqt")


def test_basic_usage_page(tmp_path):
    printed = _run("basic_usage.py", "--output_dir", str(tmp_path / "export_safetensors"), cwd=tmp_path)
    assert "import_model_from_safetensors bit-exact: True" in printed
    assert "quantized layers: 13" in printed  # two decoder layers of six Linears, and the LM head
    assert "LLMTemplate: LLMTemplate.get: Quark's LLM templates" in printed
    assert sorted(p.name for p in (tmp_path / "export_safetensors").iterdir()) == ["config.json", "model.safetensors"]
