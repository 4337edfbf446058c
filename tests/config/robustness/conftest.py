"""Fixtures of the robustness tests."""

from _shared.fixtures import quiet_logs  # noqa: F401  (a fixture, found by name)
