"""Exit statuses and the command line's own errors. No torch import: ``--help`` stays fast."""

from __future__ import annotations

from quark.common.errors import (
    FAILED,
    INTERNAL,
    INTERRUPTED,
    OK,
    USAGE,
    FailedError,
    RefusedError,
)

__all__ = ["FAILED", "INTERNAL", "INTERRUPTED", "OK", "USAGE", "Failed", "UsageError", "one_line"]


class UsageError(RefusedError):
    """A mistake in the command line or its files: reported in one line, exit status 2.

    The message names the option (or the YAML path of a config field), the value and what is
    allowed, in the command line's words.
    """


class Failed(FailedError):
    """The work ran and its result is wrong (a verification, a FINN step): exit status 1."""


def one_line(text: str) -> str:
    """``text`` on one line (the library's multi-line messages list one problem a line)."""
    return "; ".join(" ".join(line.split()) for line in str(text).strip().splitlines() if line.strip())
