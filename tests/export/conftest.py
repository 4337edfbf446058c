"""Fixtures of the export tests."""

from __future__ import annotations

import logging

import pytest


@pytest.fixture(autouse=True)
def _quiet_logs():
    logging.getLogger("quark").setLevel(logging.WARNING)
    yield


@pytest.fixture
def onnx_path(tmp_path):
    return tmp_path / "model.onnx"
