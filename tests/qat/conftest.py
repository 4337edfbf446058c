"""Makes ``tests/_reference`` importable as ``_reference``; runs these tests on one intra-op thread.

One thread: the test machines have 2 shared cores, where OpenMP's two spinning threads made the
digits training 4x slower under load (5 s vs 22 s) with identical results.
"""

import sys
from pathlib import Path

import pytest
import torch

_TESTS = str(Path(__file__).resolve().parents[1])
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
