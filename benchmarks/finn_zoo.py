"""FINN zoo: each whole-integer FINN-style network of ``tests/_shared/finn_zoo.py`` through FINN's
dataflow back half, on real digits.

Per network: nodes left outside the dataflow partition (host-side layout only), the largest
|difference| between the hardware-layer graph (executed in Python) and torch on the digits test
images, whether the predictions are identical, FINN's LUT / BRAM_18K / DSP estimates and the
estimated frames per second on the part at the clock, folded by FINN's SetFolding for the target.

    .venv/bin/python benchmarks/finn_zoo.py [--part xc7z020clg400-1] [--clock-mhz 100]
        [--target-fps 50000] [--samples 359] [--networks tfc cnv] [--markdown]
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import torch
from _shared.finn_zoo import FINN_ZOO, calibrated, digits_batches

from quark.torch.extensions.brevitas.api import FinnError, ModelExporter

HEADERS = (
    "network",
    "outside partition",
    "max |diff|",
    "predictions",
    "LUT",
    "BRAM_18K",
    "DSP",
    "est. fps",
    "fits",
    "s",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", default="xc7z020clg400-1")
    parser.add_argument("--clock-mhz", type=float, default=100.0)
    parser.add_argument("--target-fps", type=float, default=50_000)
    parser.add_argument("--samples", type=int, default=None, help="digits test images (default: all 359)")
    parser.add_argument("--networks", nargs="*", default=list(FINN_ZOO))
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    logging.getLogger("finn_logger").setLevel(logging.ERROR)
    train, test = digits_batches()
    test = test[: args.samples] if args.samples else test
    rows = []
    for name in args.networks:
        start = time.perf_counter()
        model = calibrated(name, train[:4])
        with tempfile.TemporaryDirectory() as out:
            try:
                r = ModelExporter(out).export_finn_dataflow(
                    model, test, part=args.part, target_fps=args.target_fps, clock_mhz=args.clock_mhz
                )
            except FinnError as error:
                rows.append((name, f"refused: {error}".splitlines()[0], "", "", "", "", "", "", "", ""))
                continue
        e, v = r.estimate, r.verification
        rows.append(
            (
                name,
                ", ".join(o.split(" ")[1].strip("(,") for o in r.outside) or "none",
                f"{v.max_abs_diff:.2g}",
                f"{'identical' if v.predictions_identical else 'DIFFER'} ({v.samples})",
                f"{e.totals['LUT']:,.0f}",
                f"{e.totals['BRAM_18K']:,.0f}",
                f"{e.totals['DSP']:,.0f}",
                f"{e.fps:,.0f}",
                "yes" if e.fits else "no",
                f"{time.perf_counter() - start:.0f}",
            )
        )
    print(
        f"FINN zoo on {args.part} at {args.clock_mhz:g} MHz, target {args.target_fps:g} fps, digits test "
        f"images: {len(test)}"
    )
    if args.markdown:
        print("| " + " | ".join(HEADERS) + " |")
        print("|" + "---|" * len(HEADERS))
        for row in rows:
            print("| " + " | ".join(row) + " |")
    else:
        widths = [max(len(str(x)) for x in col) for col in zip(HEADERS, *rows)]
        for row in (HEADERS, *rows):
            print("  ".join(str(x).ljust(w) for x, w in zip(row, widths)))


if __name__ == "__main__":
    main()
