"""Fixtures of the target tests."""

from _shared.fixtures import onnx_path, quiet_logs  # noqa: F401  (fixtures, found by name)
