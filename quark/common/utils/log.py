"""``ScreenLogger``: AMD Quark's logger for scripts, on the standard ``logging`` module.

``ScreenLogger(__name__)`` is the logger of that name with a handler of its own printing
``[QUARK-INFO]: message`` lines to stderr (set up when the first one is made, as in Quark; importing
this module sets up nothing). Its level is shared by all of them: ``ScreenLogger.set_shared_level``.
The package's own modules log through plain ``logging.getLogger``, which prints nothing unless the
application configures logging.
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

FORMAT = "[QUARK-%(levelname)s]: %(message)s"


class ScreenLogger:
    """A named logger that shows INFO and above on the screen (stderr)."""

    _shared_level: ClassVar[int] = logging.INFO
    _instances: ClassVar[list[ScreenLogger]] = []

    def __init__(self, name: str) -> None:
        self.logger = logging.getLogger(f"{name}_screen")
        self.logger.propagate = False
        if not any(isinstance(h, logging.StreamHandler) for h in self.logger.handlers):
            handler = logging.StreamHandler()
            handler.setFormatter(logging.Formatter(FORMAT))
            self.logger.addHandler(handler)
        self.logger.setLevel(self._shared_level)
        self._instances.append(self)

    @classmethod
    def set_shared_level(cls, level: int) -> None:
        """The level of every ScreenLogger, made or to be made."""
        cls._shared_level = level
        for instance in cls._instances:
            instance.logger.setLevel(level)

    def debug(self, msg: Any, *args: Any, **kwargs: Any) -> None:
        self.logger.debug(msg, *args, **kwargs)

    def info(self, msg: Any, *args: Any, **kwargs: Any) -> None:
        self.logger.info(msg, *args, **kwargs)

    def warning(self, msg: Any, *args: Any, **kwargs: Any) -> None:
        self.logger.warning(msg, *args, **kwargs)

    def error(self, msg: Any, *args: Any, **kwargs: Any) -> None:
        self.logger.error(msg, *args, **kwargs)

    def exception(self, msg: Any, *args: Any, **kwargs: Any) -> None:
        self.logger.exception(msg, *args, **kwargs)

    def critical(self, msg: Any, *args: Any, **kwargs: Any) -> None:
        self.logger.critical(msg, *args, **kwargs)
