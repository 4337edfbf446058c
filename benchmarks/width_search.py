"""Per-layer widths of the digits ResidualCNN searched against FINN's cost (issue 19, point 5).

Trains the float ResidualCNN, then :func:`quark.torch.extensions.brevitas.search.search`: the cost
model from FINN's per-layer estimates, PTQ sensitivities, the integer program's and the greedy
walk's fronts, and the measured points (PTQ, ``--qat-epochs`` of QAT, held-out accuracy, the full
FINN estimate at the same folding) with the uniform baselines W2A2 / W3A3 / W4A4 / W8A8 measured by
the same procedure. Prints both fronts, the measured table and the time of each stage.

    .venv/bin/python benchmarks/width_search.py [--qat-epochs 3] [--target-fps 20000] [--out DIR]
"""

from __future__ import annotations

import argparse
import tempfile

import torch

from quark.torch.examples import digits
from quark.torch.extensions.brevitas import search


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--qat-epochs", type=int, default=3)
    parser.add_argument("--float-epochs", type=int, default=30)
    parser.add_argument("--target-fps", type=float, default=20_000)
    parser.add_argument("--points", type=int, default=4)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    data = digits.load(0)
    torch.manual_seed(0)
    model = digits.train(digits.ResidualCNN(), data, epochs=args.float_epochs, seed=0)
    x_test = torch.cat([b[0] for b in data.loader("test", batch_size=512)])
    out = args.out or tempfile.mkdtemp(prefix="width_search_")
    result = search.search(
        model,
        data.loader("train"),
        data.loader("test"),
        x_test[:16],
        out,
        target_fps=args.target_fps,
        qat_epochs=args.qat_epochs,
        points=args.points,
    )
    print(f"float accuracy {digits.accuracy(model, data):.2f} %; output in {out}")
    for method, front in result["fronts"].items():
        print(f"{method} front ({len(front)} points): LUT / summed sensitivity")
        for p in front:
            print(f"  {p['totals']['LUT']:8,.0f}  {p['score']:8.4f}  {p['name']}")
    print(
        "measured (PTQ + QAT, held-out accuracy; LUT as the search priced it (PTQ weights), re-priced with the"
        " trained weights / full FINN estimate at the same folding):"
    )
    for p in result["points"]:
        full = p["estimated"]["LUT"] if p["estimated"] else float("nan")
        print(
            f"  {p['name']:<28} acc {p['accuracy']:6.2f} %  LUT {p['searched']['LUT']:7,.0f}, {p['predicted']['LUT']:7,.0f} / {full:7,.0f}"
            f" ({100 * (p['predicted']['LUT'] / full - 1):+.1f} %)  BRAM {p['predicted']['BRAM_18K']:.0f}"
            f"  DSP {p['predicted']['DSP']:.0f}  fps {p['fps']:,.0f}"
        )
    print(f"chosen (knee): {result['chosen']}")
    print("seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in result["seconds"].items()))
    print(f"FINN evaluations in the cost model: {result['finn_evaluations']}")
    return result


if __name__ == "__main__":
    main()
