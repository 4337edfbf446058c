"""A user's model file that imports timm loads in the package's environment: the command line
declares torchvision's missing operators before it imports a user's file (the registry's
torchvision is a CUDA build whose import fails beside the CPU torch). Each case runs in a fresh
interpreter: the declaration is process-wide."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import numpy as np
import pytest
from _shared import REPO

pytestmark = pytest.mark.skipif(importlib.util.find_spec("timm") is None, reason="timm is not installed")

MODEL_FILE = '''
import timm  # a user's model file that imports timm (here for its layers)
from timm.layers import SelectAdaptivePool2d
from torch import nn


def build():
    return nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), SelectAdaptivePool2d(flatten=True), nn.Linear(4, 3))
'''
CONFIG = """
global_quant_config:
  weight: {dtype: int8, qscheme: per_channel, ch_axis: 0, observer_cls: PerChannelMinMaxObserver}
  input_tensors: {dtype: int8}
"""


def _python(code: str, cwd) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=300, check=False, env=env)


def test_without_the_declaration_importing_timm_fails_here(tmp_path):
    """The control: the failure the command line works around is real in this environment."""
    result = _python("import timm", tmp_path)
    if result.returncode == 0:
        pytest.skip("torchvision's operators load in this environment: nothing to work around")
    assert "torchvision::nms does not exist" in result.stderr


def test_quantize_a_model_file_that_imports_timm(tmp_path):
    (tmp_path / "mynet.py").write_text(MODEL_FILE)
    (tmp_path / "w8a8.yaml").write_text(CONFIG)
    np.savez(tmp_path / "calib.npz", images=np.random.default_rng(0).random((16, 1, 6, 6), dtype=np.float32))
    code = (
        "from quark.torch.extensions.brevitas.cli import main\n"
        "raise SystemExit(main(['quantize', '--config', 'w8a8.yaml', '--model', 'mynet.py:build', '--data', "
        "'calib.npz', '-o', 'q.pt', '-q']))"
    )
    result = _python(code, tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "q.pt").exists() and "quantized 2 of 2 layers" in result.stdout
