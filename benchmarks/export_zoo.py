"""Export zoo: every zoo model x config x format x exporter, exported, executed and compared.

Each model of ``tests/_shared/zoo.py`` is quantized with ModelQuantizer (main-API configs:
``int8-pof2`` = the XINT8 preset, ``int8-float`` = float scales) and exported to QCDQ (executed in
ONNX Runtime, optimizations off) and QONNX (executed with qonnx after cleanup). One row per export:
whether it was written, whether the graph is exact (power-of-two scales, exact operations only),
the largest |difference| to torch and the same in output LSBs, and for QCDQ the difference in LSBs
when ONNX Runtime runs with its default optimizations (as deployed; informative); refused exports
show the support table's reason, cut to ``--width`` characters.

    .venv/bin/python benchmarks/export_zoo.py [--dynamo] [--models tfc cnv] [--markdown]
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

from _shared.zoo import CONFIGS, ZOO, quantized

from quark.torch.extensions.brevitas.api import (
    ExportFailedError,
    ExportVerificationError,
    ModelExporter,
    UnsupportedExportError,
)

METHODS = {"qcdq": "export_onnx_model", "qonnx": "export_qonnx_model"}
HEADERS = (
    "model",
    "config",
    "format",
    "exporter",
    "exported",
    "exact graph",
    "max abs diff",
    "max LSB",
    "ORT-opt LSB",
    "s",
)


def run(models: list[str], exporters: list[bool], width: int) -> list[tuple]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in models:
            for config in CONFIGS:
                qmodel, example = quantized(name, config)
                for fmt, method in METHODS.items():
                    for dynamo in exporters:
                        path = Path(tmp) / f"{name}-{config}-{fmt}-{dynamo}.onnx"
                        start = time.perf_counter()
                        exporter = "dynamo" if dynamo else "torchscript"
                        try:
                            report = getattr(ModelExporter(path, dynamo=dynamo), method)(qmodel, example)
                        except UnsupportedExportError as error:
                            reason = error.problems[0].split(": ", 1)[-1]
                            rows.append(
                                (
                                    name,
                                    config,
                                    fmt,
                                    exporter,
                                    "refused: " + reason[:width],
                                    "",
                                    "",
                                    "",
                                    "",
                                    "",
                                )
                            )
                            continue
                        except (ExportFailedError, ExportVerificationError) as error:
                            message = _cause(error)
                            rows.append(
                                (name, config, fmt, exporter, "FAIL: " + message[:width], "", "", "", "", "")
                            )
                            continue
                        lsb, deployed = report.max_diff_lsb, report.optimized_runtime_diff
                        rows.append(
                            (
                                name,
                                config,
                                fmt,
                                exporter,
                                "yes" if report.passed else "FAIL",
                                "yes" if report.exact else "no",
                                f"{report.max_abs_diff:.3g}",
                                "-" if lsb is None else f"{lsb:.3g}",
                                "-" if deployed is None else f"{deployed:.3g}",
                                f"{time.perf_counter() - start:.1f}",
                            )
                        )
    return rows


def measure(models: list[str], width: int = 60) -> list[dict]:
    """The rows of :func:`run` (TorchScript exporter) as dicts keyed by ``HEADERS``; ``s`` a float
    (None for a refused or failed export)."""
    rows = [dict(zip(HEADERS, row)) for row in run(models, [False], width)]
    for row in rows:
        row["s"] = float(row["s"]) if row["s"] else None
    return rows


def _cause(error: Exception) -> str:
    """The informative part of an export error (torch.export buries it under an 'Exception summary')."""
    text = str(error)
    if "Exception summary" in text:
        text = text.split("Exception summary", 1)[1].strip().splitlines()[0]
    elif "failed: " in text:
        text = text.split("failed: ", 1)[1]
    return " ".join(text.split())


def render(rows: list[tuple], markdown: bool) -> str:
    if markdown:
        lines = ["| " + " | ".join(HEADERS) + " |", "|" + "|".join("---" for _ in HEADERS) + "|"]
        return "\n".join(lines + ["| " + " | ".join(map(str, r)) + " |" for r in rows])
    widths = [max(len(str(c)) for c in col) for col in zip(HEADERS, *rows)]
    fmt = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()
    return "\n".join([fmt(HEADERS), fmt("-" * w for w in widths), *map(fmt, rows)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(ZOO), choices=list(ZOO))
    parser.add_argument("--dynamo", action="store_true", help="also export with torch's dynamo exporter")
    parser.add_argument("--markdown", action="store_true", help="print a markdown table")
    parser.add_argument("--width", type=int, default=60, help="characters of a refusal reason to show")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    warnings.filterwarnings("ignore")  # Brevitas / torch.onnx chatter; the table is the output
    rows = run(args.models, [False, True] if args.dynamo else [False], args.width)
    print(render(rows, args.markdown))
    failed = [r for r in rows if r[4].startswith("FAIL")]
    if failed:
        sys.exit(f"{len(failed)} exports did not verify")


if __name__ == "__main__":
    main()
