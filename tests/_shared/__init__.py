"""Models, data, configs and helpers shared by the test tiers (``tests/`` is on ``sys.path``).

    models.py      float models and their data (torch only)
    configs.py     specs and configs of the main API (the config layer)
    numerics.py    the numerics tests' specs, crafted tensors and exact comparison of QuantTensors
    strategies.py  Hypothesis strategies over specs, configs and tensors, and the suite's profile
    docstrings.py  public names of a module and whether each is documented
    fixtures.py    fixtures a tier's conftest.py imports (quiet logs, an ONNX path)
    quantize.py    quantize(), a model's state before and after, a few training steps (Brevitas)
    finn_zoo.py    whole-integer FINN-style networks built from Brevitas layers (Brevitas)
    zoo.py         the export zoo: small networks of the shapes users export, configs, calibration
    graphs.py      readers of written ONNX graphs (onnx)

and here: ``REPO``, ``python()`` (code in a fresh interpreter) and ``leftovers()`` (an atomic
write's temporary files). Each module imports only what its tier has: a config test may import
``models``, ``configs``, ``numerics``, ``strategies``, ``docstrings`` and ``zoo``, never
``quantize`` (which needs Brevitas); ``tests/test_tiers.py`` checks it.
"""

import os
import subprocess
import sys
from pathlib import Path

#: the repository root
REPO = Path(__file__).resolve().parents[2]


def leftovers(directory) -> list[str]:
    """The temporary files an atomic write left in ``directory`` (none, once it has cleaned up)."""
    return sorted(name for name in os.listdir(directory) if ".tmp" in name)


def python(code: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """``code`` run by a fresh interpreter in the repository root, warnings as errors."""
    return subprocess.run(
        [sys.executable, "-W", "error", "-c", code], cwd=REPO, check=False, capture_output=True, text=True, timeout=timeout
    )
