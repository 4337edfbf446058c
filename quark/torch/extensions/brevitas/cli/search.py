"""``quark-brevitas search``: per-layer weight and activation widths chosen against FINN's estimates
for a part at a target frame rate (:func:`quark.torch.extensions.brevitas.search.search`).

    quark-brevitas search --model MOD:FN --checkpoint FLOAT.pt --data TRAIN.npz --eval-data VAL.npz \\
        --part xc7z020clg400-1 --target-fps N [--clock-mhz 100] [--bits 2,3,4,8] [--qat-epochs K] \\
        [--metric lut|bram|dsp] [--points N|all] [--upto W4A4] [--seed S] [--search-input] -o DIR

This module is the parser's part and imports the standard library only (``--help`` stays fast);
the subcommand is ``commands.search``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any


def add_parser(sub: Any, add: Callable[..., argparse.ArgumentParser], common: Callable[..., None]) -> None:
    """Register ``search`` in the command table (called by ``cli.parser`` with its ``_add`` and ``_common``)."""
    s = add(sub, "search", "per-layer bit widths against FINN's cost: an accuracy-versus-resource front for a part")
    s.add_argument("--model", required=True, help="the float model's factory: path/to/file.py:factory or module:factory")
    s.add_argument("--checkpoint", required=True, help="the float model's state_dict (.pt)")
    s.add_argument("--data", required=True, help="training / calibration data: .npz with arrays x (inputs) and y (integer labels)")
    s.add_argument("--eval-data", required=True, help="held-out data: .npz with arrays x and y")
    s.add_argument("--part", required=True, help="FPGA part, e.g. xc7z020clg400-1")
    s.add_argument("--target-fps", type=float, required=True, help="frames per second every point must reach")
    s.add_argument("--clock-mhz", type=float, default=100.0)
    s.add_argument("--bits", default="2,3,4,8", help="widths to search, comma separated")
    s.add_argument("--qat-epochs", type=int, default=0, help="QAT epochs for each measured point")
    s.add_argument("--metric", choices=["lut", "bram", "dsp"], default="lut", help="the resource the front trades against accuracy")
    s.add_argument("--points", default="4", help="front points to measure, spread evenly over their range of the metric; 'all': every one")
    s.add_argument("--upto", default=None, help="measure only front points no dearer than this uniform baseline (e.g. W4A4)")
    s.add_argument("--seed", type=int, default=0, help="seed of each measured point's QAT (the order of the batches)")
    s.add_argument("--search-input", action="store_true",
                   help="search the network input's width too (the host then feeds round(x / scale) at that width)")
    s.add_argument("-o", "--output", required=True, help="output directory")
    common(s)
