"""The error of the FINN dataflow flow."""

from __future__ import annotations

from collections.abc import Sequence


class FinnDataflowError(RuntimeError):
    """A FINN step failed, changed the outputs, or left compute outside the dataflow partition.

    ``problems`` has one line per offending node or layer (its torch module where known).
    """

    def __init__(self, message: str, problems: Sequence[str] = ()):
        super().__init__(message if not problems else message + "\n  " + "\n  ".join(problems))
        self.problems = list(problems)
