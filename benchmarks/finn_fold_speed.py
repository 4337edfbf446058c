"""FINN's ``ConvertQONNXtoFINN`` with FINN's ``FoldQuantWeights`` and with the pipeline's one-sweep
folding (``passes.fold_quant_weights_in_one_sweep``), side by side in one process.

For each network of ``quark.torch.examples.vision_zoo`` (random weights, 3x32x32, W4A4
``presets.finn()`` graph mode): export its QONNX once, prepare it as the FINN pipeline does
(``pipeline.prepare``: checked load, module tags, cleanup, batch 1), then convert it ``--repeats``
times each way, interleaved (one sweep, FINN's, one sweep, ...) so a change of load hits both alike,
inside the pipeline's indexed lookups. Printed: the seconds of each run, and whether the two graphs
have the same op sequence and compute the same outputs on a random input (FINN names the scale
tensors it creates at random, so names and their order are not compared).

    PYTHONPATH=. .venv/bin/python benchmarks/finn_fold_speed.py [--networks resnet18 densenet121] [--repeats 2]

Needs finn-plus, torchvision and timm (``pip install --no-deps torchvision timm``).
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]


def export(name: str, path: str) -> None:
    from finn_speed import _vision_export  # the FINN speed benchmark's export: graph mode, W4A4

    _vision_export(name, path)


def finns_conversion(model):
    """``pipeline._to_finn`` as it was: FINN's step as FINN runs it."""
    from finn.transformation.qonnx.convert_qonnx_to_finn import ConvertQONNXtoFINN
    from finn.transformation.qonnx.quant_act_to_multithreshold import default_filter_function_generator

    from quark.torch.extensions.brevitas._backend.targets.finn import pipeline
    from quark.torch.extensions.brevitas._backend.targets.finn.origins import run_transform

    bits = pipeline.MAX_THRESHOLD_BITS
    convert = ConvertQONNXtoFINN(filter_function=default_filter_function_generator(max_multithreshold_bit_width=bits))
    return pipeline._tidy(run_transform(model, convert))


def bench(name: str, repeats: int) -> str:
    from qonnx.core.onnx_exec import execute_onnx

    from quark.torch.extensions.brevitas._backend.qonnx_index import indexed_lookups
    from quark.torch.extensions.brevitas._backend.targets.finn import pipeline

    path = tempfile.mktemp(suffix=".onnx")
    export(name, path)
    ways = {"one sweep": pipeline._to_finn, "FINN's FoldQuantWeights": finns_conversion}
    seconds: dict[str, list[float]] = {way: [] for way in ways}
    graphs = {}
    with indexed_lookups():
        for _ in range(repeats):
            for way, convert in ways.items():
                model = pipeline.prepare(path, np.zeros((1, 3, 32, 32), np.float32))[0]
                start = time.perf_counter()
                graphs[way] = convert(model)
                seconds[way].append(time.perf_counter() - start)
    ours, finns = graphs.values()
    same_ops = [n.op_type for n in ours.graph.node] == [n.op_type for n in finns.graph.node]
    x = np.random.default_rng(0).random((1, 3, 32, 32)).astype(np.float32)
    outs = [execute_onnx(g, {g.graph.input[0].name: x})[g.graph.output[0].name] for g in (ours, finns)]
    times = "; ".join(f"{way} {' / '.join(f'{s:.1f}' for s in runs)} s" for way, runs in seconds.items())
    return (
        f"{name}: {times}; same op sequence {same_ops}, outputs identical {bool(np.array_equal(*outs))} "
        f"(max |diff| {float(np.abs(outs[0] - outs[1]).max()):.3g})"
    )


def main(bench=bench, doc: str = __doc__, networks=("resnet18", "densenet121"), repeats: int = 2) -> None:
    """``--networks`` and ``--repeats``, then ``bench(name, repeats)``'s line per network, one thread,
    warnings off (``finn_streamline_speed.py`` runs its own ``bench`` through this too)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--networks", nargs="+", default=list(networks))
    parser.add_argument("--repeats", type=int, default=repeats)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)
    torch.set_num_threads(1)
    for name in args.networks:
        print(bench(name, args.repeats), flush=True)


if __name__ == "__main__":
    main()
