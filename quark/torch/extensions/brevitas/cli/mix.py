"""``quark-brevitas mix``: promote the fewest activation sites of a config from 8 to 16 bits until a
metric on evaluation data is met, and write the mixed config
(:func:`quark.torch.extensions.brevitas.mixing.mix`).

    quark-brevitas mix --config a8w8.yaml --model model.py:build --data calib.npz --eval-data eval.npz \\
        --metric cosine --target 0.995 -o mixed.yaml

This module is the parser's part and imports the standard library only (``--help`` stays fast);
the subcommand is ``commands.mix``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any


def add_parser(sub: Any, add: Callable[..., argparse.ArgumentParser], common: Callable[..., None]) -> None:
    """Register ``mix`` in the command table (called by ``cli.parser`` with its ``_add`` and ``_common``)."""
    m = add(sub, "mix", "promote the fewest activation sites to 16 bits until a metric is met (A8/A16 mixing)")
    m.add_argument("--config", required=True, help="base config (main API, 8-bit integer activations), .yaml or .json")
    m.add_argument(
        "--model",
        required=True,
        help="the float model: path/to/file.py:factory, module:factory or a transformers model directory",
    )
    m.add_argument("--data", required=True, help="calibration data (.npz, .pt or a folder of images); also where sensitivities are measured")
    m.add_argument("--eval-data", required=True, help="evaluation data the metric is checked on")
    m.add_argument("--metric", choices=["cosine", "sqnr"], default="cosine", help="against the float model; sqnr in dB")
    m.add_argument("--target", type=float, required=True, help="the metric to reach")
    m.add_argument("--no-prune", action="store_true", help="keep every site promoted on the way to the target")
    m.add_argument(
        "--ranking",
        choices=["auto", "promotion", "demotion"],
        default="auto",
        help="sensitivities as the gain of each site promoted alone, the loss of each demoted alone, or (auto) from "
        "the end whose metric is nearer the target",
    )
    m.add_argument("-o", "--output", required=True, help="mixed config to write (.yaml or .json)")
    common(m)
