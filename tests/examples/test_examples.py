"""Every script in examples/ runs, end to end, and does what its docstring says."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_example_has_a_test():
    tested = {name.removeprefix("test_") for name in globals() if name.startswith("test_")}
    assert {p.stem for p in EXAMPLES.glob("*.py")} <= tested


def test_ipu_transformers_resnet(tmp_path):
    result = load("ipu_transformers_resnet").main(["--output", str(tmp_path / "resnet.onnx")])
    assert result["report"].passed
    assert "IPU: Q/DQ scales exact powers of two, zero points 0" in result["report"].target_checks
    assert result["cosine"] > 0.98 and result["agreement"] >= 0.9
    assert (tmp_path / "resnet.onnx").stat().st_size > 0


@pytest.mark.slow
def test_digits_ptq(capsys):
    load("digits_ptq").main()
    out = capsys.readouterr().out
    assert "float model: test accuracy" in out and out.count("test accuracy") == 3
