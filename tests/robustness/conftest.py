"""Fixtures of the robustness tests, and Hypothesis' settings.

Hypothesis runs derandomized (the same examples on every run, no example database), so CI is
reproducible; ``HYPOTHESIS_PROFILE=explore`` draws fresh random examples, ten times as many.
"""

from __future__ import annotations

import logging
import os

import pytest
from hypothesis import HealthCheck, Phase, settings

# no "explain" phase in CI: it re-runs a failing example's variations for a minute
settings.register_profile(
    "ci",
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
)
settings.register_profile(
    "explore", derandomize=False, database=None, deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(autouse=True)
def _quiet_logs():
    logging.getLogger("quark").setLevel(logging.WARNING)


@pytest.fixture
def onnx_path(tmp_path):
    return tmp_path / "model.onnx"
