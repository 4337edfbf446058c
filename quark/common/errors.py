"""The package's error hierarchy: every error class it defines derives from
:class:`QuarkBrevitasError`, and from the standard exception callers already catch (``ValueError``
for a refused input, ``RuntimeError`` for work that ran and failed, ``ImportError`` /
``NotImplementedError`` for AMD Quark's names it refuses). ``exit_status`` is the command line's
(docs/cli.md, "Exit status"). Standard library only: the config layer imports it, and the command
line's ``--help`` stays fast.
"""

from __future__ import annotations

from typing import ClassVar

#: exit statuses of the command line
OK, FAILED, USAGE, INTERNAL, INTERRUPTED = 0, 1, 2, 3, 130


class QuarkBrevitasError(Exception):
    """An error the package raises on purpose; its message names the field or module, the value and
    what is allowed."""

    exit_status: ClassVar[int] = INTERNAL
    #: the command line's word for it ("error: ...", "failed: ...")
    word: ClassVar[str] = "error"


class RefusedError(QuarkBrevitasError, ValueError):
    """An input the package cannot take (a config, a model, data, a setting), refused before any work
    changes the model."""

    exit_status = USAGE


class FailedError(QuarkBrevitasError, RuntimeError):
    """Work that ran and whose result is wrong or did not come (a verification, a toolchain's step)."""

    exit_status = FAILED
    word = "failed"
