"""Fixtures of the whole suite. ``tests/`` is on ``sys.path`` (pyproject's ``pythonpath``), so the
independent references import as ``_reference``."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

#: folders whose tests run on one intra-op thread: tiny tensors, where OpenMP's spinning threads
#: on the 2 shared cores of the test machines made the digits training 4x slower under load
#: (5 s vs 22 s) with identical results
ONE_THREAD = ("formats", "qat", "graph")


@pytest.fixture
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def pytest_collection_modifyitems(items):
    for item in items:
        if Path(str(item.fspath)).parent.name in ONE_THREAD:
            item.add_marker(pytest.mark.usefixtures("one_thread"))
