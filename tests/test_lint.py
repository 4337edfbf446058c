"""The sources stay clean under the pinned ruff (pyproject's [tool.ruff] settings)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_ruff_check_is_clean():
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed (it is in the test extra: make venv installs it)")
    result = subprocess.run(
        [ruff, "check", "quark", "tests", "benchmarks", "examples"], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout[-4000:]
