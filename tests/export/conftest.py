"""Fixtures of the export tests; makes ``tests/`` importable (``export.zoo``, ``export.helpers``)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

_TESTS = str(Path(__file__).resolve().parents[1])
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)


@pytest.fixture(autouse=True)
def _quiet_logs():
    logging.getLogger("quark").setLevel(logging.WARNING)
    yield


@pytest.fixture
def onnx_path(tmp_path):
    return tmp_path / "model.onnx"
