"""TQT under torch.distributed: 2 CPU processes (gloo), DistributedDataParallel, 3 SGD steps.

Each rank calibrates on DIFFERENT data (``_ddp_worker.calib_batches``); observers merge their
statistics across ranks, so thresholds must agree across ranks before DDP broadcasts anything,
and equal those of a single-process calibration over the union of both ranks' data.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from _shared import REPO

from backend.qat import _ddp_worker as W
from quark.torch.extensions.brevitas.api import ModelQuantizer

pytestmark = pytest.mark.slow  # two fresh interpreters importing torch + Brevitas: ~10 s

WORLD = 2
HERE = Path(__file__).resolve().parent
ROOT = REPO


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ddp_results(tmp_path_factory):
    out = tmp_path_factory.mktemp("ddp")
    env = {
        **os.environ,
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(_free_port()),
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(HERE), os.environ.get("PYTHONPATH", "")]),
        "OMP_NUM_THREADS": "1",
    }
    procs, logs = [], []
    for rank in range(WORLD):
        logs.append(out / f"rank{rank}.log")
        with open(logs[-1], "w") as log:
            procs.append(
                subprocess.Popen(
                    [sys.executable, str(HERE / "_ddp_worker.py"), str(rank), str(WORLD), str(out)],
                    cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                )
            )
    # a rank that dies leaves the other waiting in a collective: stop both at the first failure
    deadline = time.monotonic() + 240
    try:
        while any(p.poll() is None for p in procs):
            failed = [r for r, p in enumerate(procs) if p.returncode not in (None, 0)]
            if failed or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for rank, p in enumerate(procs):
        assert p.returncode == 0, f"rank {rank} exited with {p.returncode}:\n{logs[rank].read_text()[-4000:]}"
    return out


def _load(out: Path, init: str, rank: int) -> dict:
    return torch.load(out / f"{init}_rank{rank}.pt", weights_only=True)


def _single_process(init: str) -> torch.nn.Module:
    union = [b for rank in range(WORLD) for b in W.calib_batches(rank)]
    return ModelQuantizer(W.config(init)).quantize_model(W.build_model(), union, progress=False)


def _equal(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k, v in a.items():
        assert torch.equal(v, b[k]), k


@pytest.mark.parametrize("init", list(W.INITS))
def test_identical_across_ranks_at_init_and_every_step(ddp_results, init):
    r0, r1 = _load(ddp_results, init, 0), _load(ddp_results, init, 1)
    assert len(r0["init"]) == 4  # 2 layers x (weight, input)
    _equal(r0["init"], r1["init"])  # recorded before DDP's broadcast from rank 0
    _equal(r0["init_params"], r1["init_params"])
    assert len(r0["steps"]) == len(r1["steps"]) == W.STEPS
    previous = r0["init"]
    for s0, s1 in zip(r0["steps"], r1["steps"]):
        _equal(s0["thresholds"], s1["thresholds"])
        _equal(s0["params"], s1["params"])
        assert any(not torch.equal(s0["thresholds"][k], previous[k]) for k in previous)  # they do train
        previous = s0["thresholds"]


def test_ranks_calibrated_on_different_data():
    """Guard: without the merge, the ranks' input thresholds would differ."""
    for init in W.INITS:
        t = [
            W.thresholds(ModelQuantizer(W.config(init)).quantize_model(W.build_model(), W.calib_batches(r), progress=False))
            for r in range(WORLD)
        ]
        first_input = min(k for k in t[0] if "input_quant" in k)  # layerwise: 0.input_quant; graph: input_quant
        assert not torch.equal(t[0][first_input], t[1][first_input]), init


@pytest.mark.parametrize("init", ["minmax", "ll_j", "graph_minmax"])
def test_thresholds_equal_single_process_union_exactly(ddp_results, init):
    _equal(_load(ddp_results, init, 0)["init"], W.thresholds(_single_process(init)))


def test_3sd_thresholds_close_to_single_process_union(ddp_results):
    got, expected = _load(ddp_results, "3sd", 0)["init"], W.thresholds(_single_process("3sd"))
    assert got.keys() == expected.keys()
    for k in got:
        assert torch.allclose(got[k], expected[k], rtol=1e-6, atol=0), k


@pytest.mark.parametrize("init", list(W.INITS))
def test_rank_without_calibration_data(ddp_results, init):
    """Rank 1 saw no batch: it takes the merged statistics, i.e. those of rank 0's data."""
    t0 = torch.load(ddp_results / f"{init}_empty_rank0.pt", weights_only=True)
    t1 = torch.load(ddp_results / f"{init}_empty_rank1.pt", weights_only=True)
    _equal(t0, t1)
    expected = W.thresholds(ModelQuantizer(W.config(init)).quantize_model(W.build_model(), W.calib_batches(0), progress=False))
    _equal(t0, expected)


@pytest.mark.parametrize("init", list(W.INITS))
def test_rank0_checkpoint_reloads_single_process(ddp_results, init):
    ckpt = torch.load(ddp_results / f"{init}_ckpt.pt", weights_only=True)
    q = ModelQuantizer(W.config(init)).quantize_model(W.build_model(), progress=False, calibrate=False)
    q.load_state_dict(ckpt["state_dict"])
    with torch.no_grad():  # one thread here (conftest) as in the workers
        assert torch.equal(q(W.fixed_input()), ckpt["out"])
