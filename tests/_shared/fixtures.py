"""Fixtures of the export and robustness folders (their conftest.py imports them)."""

from __future__ import annotations

import logging

import pytest


@pytest.fixture(autouse=True)
def quiet_logs():
    """The package's INFO lines (export steps, calibration) kept out of the test output."""
    logging.getLogger("quark").setLevel(logging.WARNING)
    yield


@pytest.fixture
def onnx_path(tmp_path):
    return tmp_path / "model.onnx"
