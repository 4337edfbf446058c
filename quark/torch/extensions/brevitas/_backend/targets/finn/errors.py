"""The errors of the FINN target's build."""

from __future__ import annotations

from collections.abc import Sequence

from quark.common.errors import FailedError, RefusedError


class FinnError(FailedError):
    """A FINN step failed or changed the outputs, a node stayed outside the hardware, or the
    hardware graph differs from the model.

    ``problems`` has one line per offending node or layer (its torch module where known).
    """

    def __init__(self, message: str, problems: Sequence[str] = (), shown: Sequence[str] | None = None):
        """``shown``: the lines the message gives instead of every problem (a summary of many)."""
        lines = problems if shown is None else shown
        super().__init__(message if not lines else message + "\n  " + "\n  ".join(lines))
        self.problems = list(problems)


class FinnConfigError(RefusedError):
    """A FINN build setting (``FinnBuildConfig`` field, folding entry) that cannot be used: names the
    field, the value and what is allowed."""
