"""Errors raised by the exporter. Each derives from a standard exception, so callers can catch
``ValueError`` / ``RuntimeError`` without importing this module."""

from __future__ import annotations

from typing import Any

from quark.common.errors import FailedError, RefusedError


class UnsupportedExportError(RefusedError):
    """The model (or the export settings) cannot be expressed in the requested format.

    Raised before anything is exported; ``problems`` lists one line per offending module.
    """

    def __init__(self, message: str, problems: list[str]):
        super().__init__(message)
        self.problems = problems


class TargetCheckError(RefusedError):
    """A config or an exported graph does not meet the target device's requirements."""

    def __init__(self, message: str, problems: list[str]):
        super().__init__(message)
        self.problems = problems


class ExportFailedError(FailedError):
    """The ONNX exporter itself failed; the model is restored, the cause is chained."""


class ExportVerificationError(FailedError):
    """The exported graph, executed, does not reproduce the torch model within tolerance."""

    def __init__(self, message: str, report: Any):
        super().__init__(message)
        self.report = report
