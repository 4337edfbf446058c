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


def test_the_guard_restores_register_fake():
    real = torch.library.register_fake
    with vision_zoo._skip_fakes_of_missing_ops():
        assert torch.library.register_fake is not real
    assert torch.library.register_fake is real


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
