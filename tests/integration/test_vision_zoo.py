"""The vision zoo: every torchvision / timm entry builds and runs on its input shape; importing the
zoo (and quark) imports no model library, prints and warns nothing."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from quark.torch.examples import vision_zoo

MISSING = vision_zoo.missing_libraries()
needs_libraries = pytest.mark.skipif(
    bool(MISSING), reason=f"not installed: {', '.join(MISSING)} (pip install --no-deps torchvision timm)"
)


def test_import_is_silent_and_lazy():
    code = (
        "import sys, warnings\n"
        "warnings.simplefilter('error')\n"
        "import quark, quark.torch.examples.vision_zoo\n"
        "assert 'torchvision' not in sys.modules and 'timm' not in sys.modules, 'imported a model library'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


@needs_libraries
def test_torchvision_imports_beside_the_cpu_torch():
    """The zoo's import path declares torchvision's missing operators once, then torchvision and
    timm import in a fresh process (the registry's CUDA torchvision fails to import there alone)."""
    code = (
        "from quark.torch.examples import vision_zoo\n"
        "models, timm = vision_zoo.import_model_libraries()\n"
        "print(type(models.resnet18()).__name__, timm.__name__)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert (done.returncode, done.stdout.strip()) == (0, "ResNet timm"), done.stderr[-2000:]


@needs_libraries
@pytest.mark.parametrize("name", sorted(vision_zoo.ZOO))
def test_entry_builds_and_runs(name):
    entry = vision_zoo.ZOO[name]
    model = entry.build(seed=0)
    assert not model.training
    with torch.no_grad():
        out = model(entry.sample(batch=2))
    assert out.shape == (2, 10)
    assert torch.isfinite(out).all()
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    assert all(int(m.num_batches_tracked) == 4 for m in norms)  # statistics from the 4 random batches
    assert all(m.momentum is not None for m in norms)  # momentum restored after the cumulative average
