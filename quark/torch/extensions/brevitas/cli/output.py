"""What the command line shows while it works: its own warnings once, other packages' chatter
only with ``-v``, and a line per FINN step unless ``-q``.

Default: warnings of this package (each said once per run) and a progress line per long stage.
``-q``: results and errors only. ``-v``: INFO logging of everything, other packages' warnings too.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
import time
import warnings
from collections.abc import Iterator

#: loggers of other packages whose chatter -q and the default hide (shown with -v)
THIRD_PARTY_LOGGERS = ("finn_logger", "finn", "qonnx", "brevitas", "onnxscript", "torch.onnx")
#: packages whose Python warnings are hidden unless -v
THIRD_PARTY_WARNINGS = r"(qonnx|finn|brevitas|onnx|onnxscript|onnxruntime|torch|dependencies|pydantic)(\.|$)"
#: loggers whose INFO records are progress: the FINN build's step checks (one record per step), the
#: FINN dataflow directory's stages, the exporter
PROGRESS_LOGGERS = (
    "quark.torch.extensions.brevitas._backend.targets.finn.checks",
    "quark.torch.extensions.brevitas._backend.targets.finn.dataflow",
    "quark.torch.extensions.brevitas.cli.commands",
)


class _Once(logging.Filter):
    """Each message once per run (a warning repeated by every rebuilt model is said once)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[tuple[int, str]] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.levelno, record.getMessage())
        if key in self.seen:
            return False
        self.seen.add(key)
        return True


class _Progress(logging.Handler):
    """A line per pipeline step or stage on stderr, with the seconds since the command started."""

    def __init__(self, started: float) -> None:
        super().__init__(logging.INFO)
        self.started = started

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno != logging.INFO:
            return
        text = " ".join(record.getMessage().split()).split("; ")[0]  # a step's check, without its node counts
        print(f"[{time.perf_counter() - self.started:5.1f} s] {text[:150]}", file=sys.stderr, flush=True)


def _log_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """A Python warning as one logged line (said once per run, like every warning here)."""
    logging.getLogger("quark.cli").warning("%s", " ".join(str(message).split()))


class Output:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        args = self.args
        verbose, quiet = args.verbose, args.quiet or args.json
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s" if verbose else "warning: %(message)s"))
        handler.addFilter(_Once())
        handler.setLevel(logging.INFO if verbose else logging.WARNING)  # progress has its own handler
        root = logging.getLogger()
        saved = (root.level, list(root.handlers))
        root.handlers[:] = [handler]
        root.setLevel(logging.INFO if verbose else logging.ERROR if quiet else logging.WARNING)
        muted = {name: logging.getLogger(name).level for name in THIRD_PARTY_LOGGERS}
        for name in THIRD_PARTY_LOGGERS:
            if not verbose:
                logging.getLogger(name).setLevel(logging.ERROR)
        progress = []
        if not verbose and not quiet:
            started = time.perf_counter()
            for name in PROGRESS_LOGGERS:
                log = logging.getLogger(name)
                step = _Progress(started)
                log.addHandler(step)
                progress.append((log, step, log.level))
                log.setLevel(logging.INFO)
        with warnings.catch_warnings():
            warnings.showwarning = _log_warning
            if not verbose:
                warnings.filterwarnings("ignore", module=THIRD_PARTY_WARNINGS)
            if quiet:
                warnings.simplefilter("ignore")
            try:
                yield
            finally:
                for log, step, level in progress:
                    log.removeHandler(step)
                    log.setLevel(level)
                for name, level in muted.items():
                    logging.getLogger(name).setLevel(level)
                root.setLevel(saved[0])
                root.handlers[:] = saved[1]
