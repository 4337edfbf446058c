"""FINN and QONNX passes on real torchvision graphs, with and without ``indexed_lookups()``.

For each network of the vision zoo (3x32x32, random weights, batch-norm statistics from random
images): W4A4 ``presets.finn()`` graph mode (the ReLU / ReLU6 the network has unsigned); then, each
timed: quantize; QONNX export without and with verification (the verification runs qonnx's
``cleanup_model`` + ``InferShapes`` + ``execute_onnx``); FINN's front end on the exported QONNX in the
order of ``finn_dataflow.steps`` (cleanup as ``dataflow_from_qonnx`` does it, ConvertQONNXtoFINN,
streamline, convert to hardware layers, CreateDataflowPartition). The qonnx stages run plainly and
inside ``qonnx_index.indexed_lookups()`` (wrapped around the call, which is how it would be applied),
with Python's and numpy's random generators reseeded before each run: after every stage the two
graphs must serialize to the same bytes, and the verified export must report the same differences.
Plain runs ``--plain-repeats`` times, indexed ``--indexed-repeats`` times; the table gives medians.
A stage that fails (a network FINN cannot map) is recorded with its first error line and ends that
network's front end. Then the XINT8 QDQ export (``presets.xint8(graph=True)``, verified in ONNX
Runtime), which qonnx does not touch, and with ``--profile`` a cProfile of the indexed front end
of the first network: the functions that now take the time.

    PYTHONPATH=. .venv/bin/python benchmarks/finn_speed.py [--models resnet18 mobilenet_v2 regnet_x_400mf]
        [--plain-repeats 1] [--indexed-repeats 3] [--profile]
    PYTHONPATH=. .venv/bin/python benchmarks/finn_speed.py --census [NETWORK ...]   # every zoo network once

Needs torchvision and timm (``pip install --no-deps torchvision timm``) and finn-plus.
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
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from quark.torch.examples import vision_zoo
from quark.torch.extensions.brevitas import presets
from quark.torch.extensions.brevitas._backend.qonnx_index import indexed_lookups
from quark.torch.extensions.brevitas.api import ModelExporter, ModelQuantizer

MODELS = ("resnet18", "mobilenet_v2", "regnet_x_400mf")


def _cleanup(model):
    """``dataflow_from_qonnx``'s preparation: module tags, cleanup, batch 1, shapes, datatypes."""
    from qonnx.transformation.change_batchsize import ChangeBatchSize
    from qonnx.transformation.infer_datatypes import InferDataTypes
    from qonnx.transformation.infer_shapes import InferShapes
    from qonnx.util.cleanup import cleanup_model

    from quark.torch.extensions.brevitas._backend.export.finn_dataflow.origins import tag_origins

    tag_origins(model)
    model = cleanup_model(model)
    return model.transform(ChangeBatchSize(1)).transform(InferShapes()).transform(InferDataTypes())


def front_end_stages(work_dir: str) -> list[tuple[str, Callable]]:
    from quark.torch.extensions.brevitas._backend.export.finn_dataflow import front_end
    from quark.torch.extensions.brevitas._backend.export.finn_dataflow.steps import FRONT_END

    return [("cleanup", _cleanup), *FRONT_END, ("partition", lambda m: front_end._partition(m, work_dir)[0])]


def _seed() -> None:
    random.seed(0)
    np.random.seed(0)


def run_front_end(qonnx_path: str, work_dir: str, indexed: bool) -> list[tuple[str, float, bytes | None, str]]:
    """(stage, seconds, serialized graph or None, error) per stage, until one fails."""
    from qonnx.core.modelwrapper import ModelWrapper

    from quark.torch.extensions.brevitas._backend.export.safe_graph import load_checked

    _seed()
    results = []
    context = indexed_lookups() if indexed else contextlib.nullcontext()
    with context:
        model = ModelWrapper(load_checked(qonnx_path))
        for name, step in front_end_stages(work_dir):
            start = time.perf_counter()
            try:
                with contextlib.redirect_stdout(io.StringIO()):
                    model = step(model)
            except Exception as error:  # noqa: BLE001  recorded: FINN refusing a network ends its front end
                results.append((name, time.perf_counter() - start, None, f"{type(error).__name__}: {error}"))
                break
            results.append((name, time.perf_counter() - start, model.model.SerializeToString(), ""))
    return results


def _timed(function: Callable, indexed: bool):
    _seed()
    context = indexed_lookups() if indexed else contextlib.nullcontext()
    start = time.perf_counter()
    with context:
        result = function()
    return time.perf_counter() - start, result


def _unsigned(model: torch.nn.Module) -> tuple[str, ...]:
    return tuple(sorted({type(m).__name__ for m in model.modules()} & {"ReLU", "ReLU6"})) or ("ReLU",)


def _first_line(text: str) -> str:
    """The error's first lines, joined, at most 240 characters."""
    return " / ".join(line.strip() for line in text.strip().splitlines()[:3])[:240]


def bench_model(name: str, args, rows: list, failures: list) -> None:
    entry = vision_zoo.ZOO[name]
    model = entry.build(seed=0)
    calib = [entry.sample(8, seed=s) for s in range(2)]
    start = time.perf_counter()
    qmodel = ModelQuantizer(presets.finn(weight_bits=4, act_bits=4, unsigned=_unsigned(model))).quantize_model(
        model, calib, progress=False
    )
    rows.append((name, "quantize (W4A4 graph mode)", [time.perf_counter() - start], [], None, ""))
    x = entry.sample(2, seed=9)
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, f"{name}.qonnx.onnx")
        seconds, _ = _timed(lambda: ModelExporter(path).export_qonnx_model(qmodel, x, verify=False), False)
        rows.append((name, "QONNX export, verify=False", [seconds], [], None, ""))
        plain, indexed, reports = [], [], {}
        for repeat, flag in [(r, False) for r in range(args.plain_repeats)] + [
            (r, True) for r in range(args.indexed_repeats)
        ]:
            try:
                seconds, report = _timed(lambda: ModelExporter(path).export_qonnx_model(qmodel, x), flag)
            except Exception as error:  # noqa: BLE001  recorded, the next network goes on
                failures.append((name, "QONNX export (verified)", _first_line(f"{type(error).__name__}: {error}")))
                return
            (indexed if flag else plain).append(seconds)
            reports[flag] = [(o.name, o.max_abs_diff) for o in report.outputs]
        rows.append((name, "QONNX export, verified", plain, indexed, reports[False] == reports[True], ""))
        runs = {False: [], True: []}
        for flag, count in ((False, args.plain_repeats), (True, args.indexed_repeats)):
            for _ in range(count):
                work = os.path.join(directory, "partitions")
                runs[flag].append(run_front_end(path, work, flag))
        reference = runs[False][0]
        for i, (stage, _, graph, error) in enumerate(reference):
            same = all(len(r) > i and r[i][2] == graph and r[i][3] == error for r in runs[True])
            rows.append(
                (
                    name,
                    f"FINN {stage}",
                    [r[i][1] for r in runs[False]],
                    [r[i][1] for r in runs[True] if len(r) > i],
                    same,
                    "",
                )
            )
            if error:
                failures.append((name, f"FINN {stage}", _first_line(error)))
        xq = ModelQuantizer(presets.xint8(graph=True)).quantize_model(model, calib, progress=False)
        qdq = os.path.join(directory, f"{name}.qdq.onnx")
        try:
            seconds, _ = _timed(lambda: ModelExporter(qdq).export_onnx_model(xq, x), False)
            rows.append((name, "QDQ export XINT8 graph, verified", [seconds], [], None, ""))
        except Exception as error:  # noqa: BLE001  recorded, the next network goes on
            failures.append((name, "QDQ export XINT8", _first_line(f"{type(error).__name__}: {error}")))


def print_table(rows: list, failures: list) -> None:
    print(f"{'network':<16}{'stage':<36}{'plain s':>10}{'indexed s':>11}{'speed-up':>10}  identical")
    for name, stage, plain, indexed, same, _ in rows:
        p = statistics.median(plain) if plain else None
        q = statistics.median(indexed) if indexed else None
        ratio = f"{p / q:>9.1f}x" if p and q else f"{'':>10}"
        shown = [f"{v:.1f}" if v is not None else "-" for v in (p, q)]
        same_text = "" if same is None else "yes" if same else "NO"
        print(f"{name:<16}{stage:<36}{shown[0]:>10}{shown[1]:>11}{ratio}  {same_text}")
    print("plain / indexed: median of the runs (counts in the header); identical: same ONNX bytes after the stage")
    for name, stage, error in failures:
        print(f"failed: {name}, {stage}: {error}")


def profile_indexed(name: str, top: int = 18) -> None:
    """cProfile of the indexed front end of ``name``: where the time goes now."""
    entry = vision_zoo.ZOO[name]
    model = entry.build(seed=0)
    calib = [entry.sample(8, seed=s) for s in range(2)]
    qmodel = ModelQuantizer(presets.finn(weight_bits=4, act_bits=4, unsigned=_unsigned(model))).quantize_model(
        model, calib, progress=False
    )
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "m.qonnx.onnx")
        ModelExporter(path).export_qonnx_model(qmodel, entry.sample(2, seed=9), verify=False)
        profiler = cProfile.Profile()
        profiler.enable()
        run_front_end(path, os.path.join(directory, "partitions"), True)
        profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(top)
    print(f"\ncProfile of the indexed FINN front end of {name} (tottime, top {top}):")
    print("\n".join(line[:170] for line in out.getvalue().splitlines() if line.strip()))


def census(names: list[str]) -> None:
    """Every network once, indexed: where the W4A4 QONNX export, FINN's front end and the XINT8 QDQ
    export stop (the first error), or that they pass."""
    print(f"\n{'network':<24}{'seconds':>8}  result")
    for name in names:
        start = time.perf_counter()
        entry = vision_zoo.ZOO[name]
        model = entry.build(seed=0)
        calib = [entry.sample(8, seed=s) for s in range(2)]
        x = entry.sample(2, seed=9)
        outcome = []
        with tempfile.TemporaryDirectory() as directory, indexed_lookups():
            path = os.path.join(directory, "m.qonnx.onnx")
            try:
                config = presets.finn(weight_bits=4, act_bits=4, unsigned=_unsigned(model))
                qmodel = ModelQuantizer(config).quantize_model(model, calib, progress=False)
                ModelExporter(path).export_qonnx_model(qmodel, x)
                outcome.append("QONNX verified")
                stages = run_front_end(path, os.path.join(directory, "partitions"), True)
                failed = [(stage, error) for stage, _, _, error in stages if error]
                outcome.append(f"FINN {failed[0][0]} failed: {_first_line(failed[0][1])}" if failed else "FINN ok")
            except Exception as error:  # noqa: BLE001  recorded, the next network goes on
                outcome.append(f"W4A4 failed: {_first_line(f'{type(error).__name__}: {error}')}")
            try:
                xq = ModelQuantizer(presets.xint8(graph=True)).quantize_model(model, calib, progress=False)
                ModelExporter(os.path.join(directory, "m.qdq.onnx")).export_onnx_model(xq, x)
                outcome.append("QDQ verified")
            except Exception as error:  # noqa: BLE001  recorded, the next network goes on
                outcome.append(f"QDQ failed: {_first_line(f'{type(error).__name__}: {error}')}")
        print(f"{name:<24}{time.perf_counter() - start:>8.0f}  " + "; ".join(outcome), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=sorted(vision_zoo.ZOO))
    parser.add_argument("--plain-repeats", type=int, default=1)
    parser.add_argument("--indexed-repeats", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--census", nargs="*", help="networks to run once, indexed, recording where each stops")
    args = parser.parse_args()
    logging.getLogger("quark").setLevel(logging.ERROR)
    logging.getLogger("finn_logger").setLevel(logging.ERROR)  # FINN's per-node notices
    import warnings

    warnings.filterwarnings("ignore")  # qonnx's GemmToMatMul opset and layout notices, once per pass
    torch.set_num_threads(1)
    print(
        f"plain runs: {args.plain_repeats}, indexed runs: {args.indexed_repeats}; torch threads 1; "
        f"{os.cpu_count()} cores (shared), load average {', '.join(f'{v:.1f}' for v in os.getloadavg())}"
    )
    if args.census is not None:
        census(args.census or sorted(vision_zoo.ZOO))
        return
    rows: list = []
    failures: list = []
    for name in args.models:
        start = time.perf_counter()
        bench_model(name, args, rows, failures)
        load = ", ".join(f"{v:.1f}" for v in os.getloadavg())
        print(f"[{name} done in {time.perf_counter() - start:.0f} s; load average {load}]", flush=True)
    print_table(rows, failures)
    if args.profile:
        profile_indexed(args.models[0])


if __name__ == "__main__":
    main()
