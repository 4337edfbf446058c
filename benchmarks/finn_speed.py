"""FINN's front end on qonnx's own ``ModelWrapper`` and on the package's ``FinnModelWrapper``, side by
side in one process: what the package's equivalents of qonnx's and FINN's whole-graph passes gain.

For each network: export to QONNX once, then run the same stages ``--repeats`` times on a plain
``ModelWrapper`` (qonnx's and FINN's passes as they are) and ``--repeats`` times on a
``FinnModelWrapper`` (its ``EQUIVALENTS``), interleaved so a change of load on a shared machine hits
both alike, with Python's and numpy's random generators reseeded before each run. The stages are the
FINN build's graph work (``targets/finn/front_end``): preparation (module tags, cleanup, batch 1),
ConvertQONNXtoFINN, clip absorption, streamlining, accumulating pools, hardware layers, the dataflow
partition; called directly, without the build's step checks. Printed per stage and in total: the
median wall-clock and process-CPU seconds of both and their ratio, and whether the graphs after the
stage serialize to the same bytes in every run (the equivalents must change nothing). A stage that
fails (a network FINN cannot map) is recorded with its first error line and ends that run.

Networks: ``--finn-zoo`` names FINN-style Brevitas networks of ``tests/_shared/finn_zoo.py``
(digits, 1x8x8); ``--vision`` names torchvision / timm networks of ``quark.torch.examples.vision_zoo``
(random weights, 3x32x32, W4A4 ``presets.finn()`` graph mode), where ``--vision-stages K`` stops
after the first K stages (the full front end of resnet18 takes minutes per run on two cores).

    PYTHONPATH=. .venv/bin/python benchmarks/finn_speed.py [--repeats 3]
        [--finn-zoo resnet concat mobilenet] [--vision resnet18 [--vision-stages 2]] [--profile]

Needs finn-plus; ``--vision`` needs torchvision and timm (``pip install --no-deps torchvision timm``).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import logging
import os
import pstats
import random
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from quark.torch.extensions.brevitas.api import ModelExporter

Seconds = tuple[float, float]  # (wall, process CPU)


def _prepare(path: str, fast: bool):
    """The build's preparation: the checked load, module tags, cleanup (qonnx's on a plain
    ``ModelWrapper``, the package's on a ``FinnModelWrapper``), batch 1, shapes, datatypes."""
    from qonnx.core.modelwrapper import ModelWrapper
    from qonnx.util.cleanup import cleanup_model as qonnx_cleanup

    from quark.torch.extensions.brevitas._backend.export.safe_graph import load_checked
    from quark.torch.extensions.brevitas._backend.qonnx_passes.wrapper import cleanup_model
    from quark.torch.extensions.brevitas._backend.targets.finn.front_end import batch_one
    from quark.torch.extensions.brevitas._backend.targets.finn.origins import tag_origins
    from quark.torch.extensions.brevitas._backend.targets.finn.sweeps import FinnModelWrapper

    model = (FinnModelWrapper if fast else ModelWrapper)(load_checked(path))
    tag_origins(model)
    return batch_one(cleanup_model(model) if fast else qonnx_cleanup(model))


def stages(work_dir: str, fast: bool) -> list[tuple[str, Callable]]:
    from pathlib import Path

    from quark.torch.extensions.brevitas._backend.targets.finn import front_end

    return [
        ("prepare", lambda path: _prepare(path, fast)),
        ("ConvertQONNXtoFINN", lambda m: front_end.to_finn(m, 8)),
        ("absorb clips", front_end.absorb_clips),
        ("streamline", front_end.streamline),
        ("accumulating pools", front_end.accumulating_pools),
        ("hardware layers", front_end.convert_to_hw),
        ("partition", lambda m: front_end.create_dataflow_partition(m, Path(work_dir))),
    ]


def _clock() -> Seconds:
    return time.perf_counter(), time.process_time()


def _since(start: Seconds) -> Seconds:
    wall, cpu = _clock()
    return wall - start[0], cpu - start[1]


def run_pipeline(qonnx_path: str, work_dir: str, fast: bool, limit: int | None = None) -> list[tuple]:
    """(stage, seconds, serialized graph or None, error) per stage, until one fails."""
    random.seed(0)
    np.random.seed(0)
    results = []
    model = qonnx_path  # the first stage loads it
    for name, step in stages(work_dir, fast)[:limit]:
        start = _clock()
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                model = step(model)
        except Exception as error:  # noqa: BLE001  recorded: FINN refusing a network ends the run
            results.append((name, _since(start), None, f"{type(error).__name__}: {error}"))
            break
        results.append((name, _since(start), model.model.SerializeToString(), ""))
    return results


def _finn_zoo_export(name: str, path: str) -> None:
    from _shared import finn_zoo as zoo

    train, test = zoo.digits_batches()
    ModelExporter(path).export_qonnx_model(zoo.calibrated(name, train[:2]), test[:2], verify=False)


def _vision_export(name: str, path: str) -> None:
    from quark.torch.examples import vision_zoo
    from quark.torch.extensions.brevitas import presets
    from quark.torch.extensions.brevitas.api import ModelQuantizer

    entry = vision_zoo.ZOO[name]
    model = entry.build(seed=0)
    unsigned = tuple(sorted({type(m).__name__ for m in model.modules()} & {"ReLU", "ReLU6"})) or ("ReLU",)
    config = presets.finn(weight_bits=4, act_bits=4, unsigned=unsigned)
    qmodel = ModelQuantizer(config).quantize_model(model, [entry.sample(8, seed=s) for s in range(2)], progress=False)
    with torch.no_grad():
        ModelExporter(path).export_qonnx_model(qmodel, entry.sample(2, seed=9), verify=False)


def bench(label: str, export: Callable[[str], None], repeats: int, limit: int | None, rows: list) -> None:
    """``repeats`` plain and ``repeats`` fast runs of the stages on one network, interleaved."""
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "m.qonnx.onnx")
        export(path)
        runs: dict[bool, list] = {False: [], True: []}
        for _ in range(repeats):
            for fast in (True, False):
                runs[fast].append(run_pipeline(path, os.path.join(directory, f"partitions{fast}"), fast, limit))
    reference = runs[False][0]
    every = runs[False] + runs[True]
    for i, (stage, _, graph, error) in enumerate(reference):
        same = all(len(r) > i and r[i][2] == graph and r[i][3] == error for r in every)
        times = {flag: [r[i][1] for r in runs[flag] if len(r) > i] for flag in runs}
        rows.append((label, stage, times[False], times[True], same, error))
    complete = all(len(r) == len(reference) for r in every)
    totals = {flag: [tuple(map(sum, zip(*(s[1] for s in r)))) for r in runs[flag]] for flag in runs}
    same_all = all(row[4] for row in rows if row[0] == label) and complete
    rows.append((label, f"total ({len(reference)} stages)", totals[False], totals[True], same_all, ""))


def _median(times: list[Seconds], i: int) -> float | None:
    return statistics.median(t[i] for t in times) if times else None


def print_table(rows: list, repeats: int) -> None:
    print(
        f"\n{'network':<22}{'stage':<30}{'plain wall':>11}{'fast':>9}{'ratio':>7}"
        f"{'plain CPU':>11}{'fast':>9}{'ratio':>7}  identical"
    )
    for label, stage, plain, fast, same, _ in rows:
        cells = []
        for i in (0, 1):
            p, q = _median(plain, i), _median(fast, i)
            ratio = f"{p / q:.2f}x" if p is not None and q else "-"
            cells.append(f"{p:>11.2f}{q:>9.2f}{ratio:>7}" if p is not None and q is not None else f"{'-':>27}")
        print(f"{label:<22}{stage:<30}{cells[0]}{cells[1]:>27}  {'yes' if same else 'NO'}")
    print(
        f"seconds, median of {repeats} plain and {repeats} fast runs; ratio = plain / fast (above 1: the "
        "package's FinnModelWrapper is faster); identical: the same ONNX bytes after the stage in every run"
    )
    for label, stage, *_, error in rows:
        if error:
            print(f"stopped: {label}, {stage}: " + " / ".join(error.strip().splitlines()[:2])[:200])


def profile_fast(label: str, export: Callable[[str], None], limit: int | None, top: int = 18) -> None:
    """cProfile of one run on ``FinnModelWrapper``: the functions that take the time now."""
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "m.qonnx.onnx")
        export(path)
        profiler = cProfile.Profile()
        profiler.enable()
        run_pipeline(path, os.path.join(directory, "partitions"), True, limit)
        profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(top)
    print(f"\ncProfile of the fast stages on {label} (tottime, top {top}):")
    print("\n".join(line[:170] for line in out.getvalue().splitlines() if line.strip()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="plain runs and fast runs per network")
    parser.add_argument("--finn-zoo", nargs="*", default=["resnet", "concat", "mobilenet"])
    parser.add_argument("--vision", nargs="*", default=[], help="vision zoo networks (torchvision / timm)")
    parser.add_argument("--vision-stages", type=int, default=None, help="stop the vision networks after K stages")
    parser.add_argument("--profile", action="store_true", help="then a cProfile of one fast run of the first")
    args = parser.parse_args()
    logging.getLogger("quark").setLevel(logging.ERROR)
    logging.getLogger("finn_logger").setLevel(logging.ERROR)  # FINN's per-node notices
    warnings.filterwarnings("ignore")  # qonnx's GemmToMatMul opset and layout notices, once per pass
    torch.set_num_threads(1)
    print(
        f"{args.repeats} plain + {args.repeats} fast runs per network, interleaved; torch threads 1; "
        f"{os.cpu_count()} cores, load average {', '.join(f'{v:.1f}' for v in os.getloadavg())}"
    )
    networks = [(f"finn_zoo {n}", lambda p, n=n: _finn_zoo_export(n, p), None) for n in args.finn_zoo]
    stop = args.vision_stages
    networks += [(n + (f" ({stop} st.)" if stop else ""), lambda p, n=n: _vision_export(n, p), stop) for n in args.vision]
    rows: list = []
    for label, export, limit in networks:
        start = time.perf_counter()
        bench(label, export, args.repeats, limit, rows)
        load = ", ".join(f"{v:.1f}" for v in os.getloadavg())
        print(f"[{label} done in {time.perf_counter() - start:.0f} s; load average {load}]", flush=True)
    print_table(rows, args.repeats)
    if args.profile and networks:
        profile_fast(*networks[0])


if __name__ == "__main__":
    main()
