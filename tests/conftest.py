"""Fixtures of the whole suite. ``tests/`` is on ``sys.path`` (pyproject's ``pythonpath``), so the
independent references import as ``_reference``."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

#: folders whose tests run on one intra-op thread: tiny tensors, where OpenMP's spinning threads
#: on the 2 shared cores of the test machines made the digits training 4x slower under load
#: (5 s vs 22 s) with identical results
ONE_THREAD = ("formats", "qat", "graph", "algorithms")


@pytest.fixture(autouse=True)
def one_thread(request):
    """One intra-op thread for the tests of the ``ONE_THREAD`` folders. (A ``usefixtures`` mark
    added in ``pytest_collection_modifyitems`` comes too late: pytest has already resolved the
    fixtures, and those tests ran on every thread.)"""
    if Path(str(request.node.fspath)).parent.name not in ONE_THREAD:
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
