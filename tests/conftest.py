"""Fixtures of the whole suite, and its tiers. ``tests/`` is on ``sys.path`` (pyproject's ``pythonpath``), so the
independent references import as ``_reference`` and the shared models and helpers as ``_shared``.

The tiers mirror the package's layers, each folder needing more than the one before it:

    tests/config        torch only: the config layer (quark/torch/quantization) and the extension's config
    tests/backend       + Brevitas: quantizing (quark/torch/extensions/brevitas/_backend, api.py, qat.py)
    tests/export        + onnx, onnxruntime, qonnx: the exports (_backend/export)
    tests/targets       + the same: the IPU and FINN targets (_backend/targets); the modules that drive
                        FINN itself skip themselves when finn-plus is missing
    tests/integration   + the same: the command line, the examples, the benchmarks runner

A tier whose packages are missing is not collected: each of its test modules is reported as one
skip naming the tier, the package and how to install it (``-ra``'s summary: ``SKIPPED [33] ...:
tests/backend: needs brevitas (not installed; pip install 'quark-brevitas[brevitas]')``);
``tests/test_tiers.py`` proves it by running pytest with the package hidden. ``make test-fast``
runs the first two tiers without the ``slow`` tests.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
import torch

TESTS = Path(__file__).resolve().parent
_EXPORT = ("brevitas", "onnx", "onnxruntime", "qonnx")
#: tier folder (relative to tests/) -> the packages its tests need beyond torch
TIERS: dict[str, tuple[str, ...]] = {
    "config": (),
    "backend": ("brevitas",),
    "export": _EXPORT,
    "targets": _EXPORT,
    "targets/hls4ml": (*_EXPORT, "hls4ml"),
    "integration": _EXPORT,
}
#: package -> how to install it, for the skip's reason
INSTALL = {
    "brevitas": "pip install 'quark-brevitas[brevitas]'",
    "onnx": "pip install 'quark-brevitas[export]'",
    "onnxruntime": "pip install 'quark-brevitas[export]'",
    "qonnx": "pip install 'quark-brevitas[export]'",
    "hls4ml": "pip install 'quark-brevitas[hls4ml]'",
}

#: folders and files whose tests run on one intra-op thread: tiny tensors, where OpenMP's spinning
#: threads on the 2 shared cores of the test machines made the digits training 4x slower under
#: load (5 s vs 22 s) with identical results
ONE_THREAD = (
    "backend/formats/",
    "backend/qat/",
    "backend/rewrite/",
    "backend/algorithms/",
    "config/test_tqt_init.py",
    "config/test_algorithm_configs.py",
    "export/test_algorithms.py",
    "export/test_qat_export.py",
    "targets/finn/test_graph_zoo.py",
    "targets/ipu/test_graph_zoo.py",
)


def missing(packages: tuple[str, ...]) -> list[str]:
    """The packages of ``packages`` that do not import (``sys.modules[name] = None`` hides one)."""
    absent = []
    for name in packages:
        try:
            importlib.import_module(name)
        except ImportError:
            absent.append(name)
    return absent


class _Reason:
    def __init__(self, *, reason: str, **kwargs):
        super().__init__(**kwargs)
        self.reason = reason


class MissingModule(_Reason, pytest.File):
    """A test module of a tier whose packages are missing: one skip, the module is never imported."""

    def collect(self):
        pytest.skip(self.reason)


class MissingTier(_Reason, pytest.Directory):
    """A tier folder whose packages are missing: its test modules, each a ``MissingModule``."""

    def collect(self):
        for entry in sorted(self.path.iterdir()):
            if entry.is_dir() and entry.name != "__pycache__":
                yield MissingTier.from_parent(self, path=entry, reason=self.reason)
            elif entry.name.startswith("test_") and entry.suffix == ".py":
                yield MissingModule.from_parent(self, path=entry, reason=self.reason)


@pytest.hookimpl(tryfirst=True)
def pytest_collect_directory(path: Path, parent: pytest.Collector):
    """Replace a tier folder whose packages are missing by skips that name them."""
    tier = path.relative_to(TESTS).as_posix() if path.is_relative_to(TESTS) else None
    absent = missing(TIERS.get(tier, ()))
    if not absent:
        return None
    how = sorted({INSTALL.get(name, name) for name in absent})
    reason = f"tests/{tier}: needs {', '.join(absent)} (not installed; {'; '.join(how)})"
    return MissingTier.from_parent(parent, path=path, reason=reason)


@pytest.fixture(autouse=True)
def one_thread(request):
    """One intra-op thread for the tests of ``ONE_THREAD``. (A ``usefixtures`` mark added in
    ``pytest_collection_modifyitems`` comes too late: pytest has already resolved the fixtures,
    and those tests ran on every thread.)"""
    where = Path(str(request.node.fspath)).resolve().relative_to(TESTS).as_posix()
    if not where.startswith(ONE_THREAD):
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
