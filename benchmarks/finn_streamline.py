"""FINN's streamlining of a vision-zoo network with and without the package's moves past joins and forks
(``sweeps.JoinMoveWhereMovable`` / ``ForkMoveWhereMovable``), side by side in one run.

The network is quantized and exported as ``benchmarks/finn_build.py`` does it (graph mode + ``presets.finn()``,
W4A4, 3x32x32, integer input), taken through the FINN steps before streamlining once, then streamlined
(``front_end.streamline``, the ``step_quark_streamline`` step) in fresh processes, alternating, ``--runs``
times each: **with** ``FinnModelWrapper`` as the package ships it, **without** the join and fork rows
of its ``EQUIVALENTS`` table (deleted in that child process only, so FINN's passes run as FINN wrote them).
Printed: the median seconds of each, their ratio, and whether the streamlined graphs are the same bytes.

    .venv/bin/python benchmarks/finn_streamline.py [--network densenet121] [--runs 1]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import finn_build

VARIANTS = ("with", "without")


def before_streamlining(name: str, directory: Path) -> None:
    """The network's QONNX file through the steps before streamlining, saved as ``absorbed.onnx``."""
    from quark.torch.extensions.brevitas._backend.targets.finn import front_end
    from quark.torch.extensions.brevitas._backend.targets.finn.build_config import MAX_MULTITHRESHOLD_BITS
    from quark.torch.extensions.brevitas._backend.targets.finn.sweeps import FinnModelWrapper

    finn_build.prepare(name, directory)
    model = front_end.prepare(FinnModelWrapper(str(directory / "model_integer_input.qonnx.onnx")))
    model = front_end.absorb_clips(front_end.to_finn(model, MAX_MULTITHRESHOLD_BITS))
    model.save(str(directory / "absorbed.onnx"))


def streamline(variant: str, directory: Path) -> dict:
    import onnx

    from quark.torch.extensions.brevitas._backend.targets.finn import front_end
    from quark.torch.extensions.brevitas._backend.targets.finn.sweeps import (
        FORK_MOVES,
        JOIN_MOVES,
        FinnModelWrapper,
    )

    if variant == "without":  # this child process only: FINN's passes as FINN wrote them
        for move in (*JOIN_MOVES, *FORK_MOVES):
            del FinnModelWrapper.EQUIVALENTS[move]
    model = FinnModelWrapper(onnx.load(str(directory / "absorbed.onnx")), fix_missing_initializer_valueinfo=False)
    start = time.perf_counter()
    result = front_end.streamline(model)
    seconds = time.perf_counter() - start
    digest = hashlib.sha256(result.model.SerializeToString()).hexdigest()
    return {"seconds": seconds, "nodes": len(result.graph.node), "sha256": digest}


def _child(step: str, name: str, directory: str) -> None:
    import logging
    import warnings

    logging.basicConfig(level=logging.ERROR)
    warnings.simplefilter("ignore")
    if step == "prepare":
        before_streamlining(name, Path(directory))
        finn_build.report({})
    else:
        finn_build.report(streamline(step, Path(directory)))


def _run(step: str, name: str, directory: Path) -> dict:
    result = finn_build.fresh_process(__file__, [step, name, str(directory)])
    if "failed" in result:
        raise SystemExit(f"{step} failed:\n{result['failed']}")
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--network", default="densenet121")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(*args.child)
        return 0
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the start; one process at a time")
    with tempfile.TemporaryDirectory(prefix=f"finn_streamline_{args.network}_") as scratch:
        directory = Path(scratch)
        _run("prepare", args.network, directory)
        runs: dict[str, list[dict]] = {v: [] for v in VARIANTS}
        for _ in range(args.runs):
            for variant in VARIANTS:
                runs[variant].append(_run(variant, args.network, directory))
    medians = {v: statistics.median(r["seconds"] for r in results) for v, results in runs.items()}
    same = len({r["sha256"] for results in runs.values() for r in results}) == 1
    for variant, results in runs.items():
        each = ", ".join(f"{r['seconds']:.1f}" for r in results)
        print(f"{args.network} streamline {variant:<8} median {medians[variant]:7.1f} s (runs {each}), {results[0]['nodes']} nodes")
    print(f"ratio without / with: {medians['without'] / medians['with']:.2f}; the same graph bytes: {'yes' if same else 'NO'}")
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
