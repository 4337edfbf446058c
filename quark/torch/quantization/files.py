"""Atomic file writing: a file appears complete, or not at all.

Quantization and export take long, and a crash, Ctrl-C or full disk while a file is written must
neither leave a truncated file nor destroy the file written before. Every writer of the package
(configs, ONNX exports, FINN files) writes a temporary file in the target's directory and renames
it over the target when complete (``os.replace``: atomic within one file system, POSIX and
Windows). Written here because the package that did this, ``atomicwrites``, is archived; the
recipe is the standard one.

A missing directory is created: an export that fails at the end of an hours-long run for want of
a directory loses the run. A path that is a directory, or whose parent is a file, is an error.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

__all__ = ["atomic_path", "check_writable", "write_text"]


def check_writable(path: str | os.PathLike) -> str:
    """``path`` as a string, after checking it can become a file: not a directory, no file in the
    way of its directory, the nearest existing folder writable. Raises ``IsADirectoryError`` /
    ``NotADirectoryError`` / ``PermissionError`` naming the path."""
    path = os.fspath(path)
    if os.path.isdir(path):
        raise IsADirectoryError(f"{path!r} is a directory; give the path of a file to write")
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.isdir(parent):
        if os.path.exists(parent):
            raise NotADirectoryError(f"cannot write {path!r}: {parent!r} is a file, not a directory")
        parent = os.path.dirname(parent)
    if not os.access(parent, os.W_OK | os.X_OK):
        raise PermissionError(f"cannot write {path!r}: the folder {parent!r} is not writable")
    return path


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[str]:
    """A temporary path next to ``path`` for a writer to write; renamed to ``path`` when the block
    ends without an error, removed otherwise (``path`` is then as it was).

    The temporary name keeps ``path``'s suffix (``.model.onnx.<random>.tmp.onnx``), for writers
    that choose a format by suffix. The directory is created when missing.
    """
    path = check_writable(path)
    directory, name = os.path.split(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    temp = os.path.join(directory, f".{name}.{uuid.uuid4().hex[:12]}.tmp{os.path.splitext(name)[1]}")
    try:
        yield temp
        _fsync(temp)
        os.replace(temp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(temp)


def write_text(path: str | Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    with atomic_path(path) as temp, open(temp, "x", encoding="utf-8") as f:
        f.write(text)


def _fsync(path: str) -> None:
    """Flush ``path`` to the disk, so that the rename never publishes a file whose data is still in
    the page cache (a power loss would otherwise leave an empty file under the final name)."""
    with open(path, "rb+") as f:
        os.fsync(f.fileno())
