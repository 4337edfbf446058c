"""The benchmarks in one run: one table on stdout, ``results.json`` and PNG plots in ``--out``.

Runs the measuring functions of the scripts beside this one (each also has its own command line):

- ``digits_ptq``: digits CNN test accuracy change per PTQ config and ``quantize_model`` wall time;
- ``bit_sweep``: digits CNN test accuracy against bit width (``digits_ptq.bit_sweep``), plotted in
  ``accuracy_vs_bits.png``;
- ``formats``: accuracy change of int8 / fp8 / MX configs (``formats_accuracy.py``; MiniLM's
  embedding cosine too, full run only);
- ``minilm``: all-MiniLM-L6-v2 embedding fidelity, round-to-nearest and the best algorithm per
  configuration (``minilm_fidelity.py``; not in ``--quick`` unless named with ``--only``, then
  round-to-nearest only);
- ``qat_speed``: QAT step time against float (``qat_step_speed.py``);
- ``graph_speed``: graph-mode QAT step and calibration against float (``graph_speed.py``);
- ``export``: export time and verification per zoo model, config and format (``export_zoo.py``);
- ``finn_executor``: the demo's FINN dataflow on 10,000 digits images, FINN's Python execution
  beside the batched executor (``finn_executor.py``);
- ``memory``: calibration peak memory against the number of batches (``calibration_memory.py``);
- ``quark_ptq`` (opt-in: only with ``--only quark_ptq``): ``quantize_model`` wall time against AMD
  Quark's own Brevitas extension, same client code, transformers' vision models
  (``quark_ptq_time.py``); creates AMD's environment (``.venv-amd-quark/``) when missing, and is
  skipped with the reason when that cannot be done (no registry).

``--quick`` runs fewer seeds, steps, batches and models (a few minutes on 2 cores): a smoke test
of the whole set, not figures to quote. The JSON records the load average at start and end:
timings taken while other work loads the machine are not comparable with a quiet run.

    .venv/bin/python benchmarks/run.py [--quick] [--out DIR] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

#: one table row: (benchmark, item, figure, value)
Row = tuple[str, str, str, str]


def _digits_ptq(quick: bool) -> dict:
    import digits_ptq

    configs = [
        "W8A8 per-tensor (main API)",
        "W8A8 per-tensor (extension, Preprocess)",
        "W4 per-channel / A8 (main API)",
        "W4 per-tensor / A4 (main API)",
    ]
    return digits_ptq.measure([0] if quick else [0, 1, 2], configs if quick else None)


def _bit_sweep(quick: bool) -> dict:
    import digits_ptq

    return digits_ptq.bit_sweep([0] if quick else [0, 1, 2], [2, 3, 4, 6, 8] if quick else list(range(2, 9)))


def _formats(quick: bool) -> dict:
    import formats_accuracy

    return formats_accuracy.measure([0] if quick else [0, 1, 2], with_minilm=not quick)


#: the round-to-nearest row and the best algorithm of each MiniLM configuration (README figures)
MINILM_ROWS = [
    "W8A8 per tensor | RTN",
    "W8A8 per tensor | HadamardRotation+GPTQ",
    "W4 g32 sym | RTN",
    "W4 g32 sym | HadamardRotation+GPTQ act-order",
    "W4 g32 asym | RTN",
    "W4 g32 asym | HadamardRotation+GPTQ",
]


def _minilm(quick: bool) -> dict:
    import minilm_fidelity

    if quick:  # round-to-nearest rows only, fewer sentences
        rows = [row for row in MINILM_ROWS if row.endswith("| RTN")]
        return minilm_fidelity.measure(rows, n_calib=32, n_eval=64, eval_offset=1000)
    return minilm_fidelity.measure(MINILM_ROWS, n_calib=128, n_eval=256, eval_offset=1000)


def _qat_speed(quick: bool) -> dict:
    import qat_step_speed

    return qat_step_speed.measure(steps=10 if quick else 60, threads=1)


def _graph_speed(quick: bool) -> dict:
    import graph_speed

    return graph_speed.measure(
        steps=10 if quick else 40, batches=4 if quick else 16, threads=(1,) if quick else (1, 2)
    )


def _export(quick: bool) -> dict:
    import export_zoo

    models = ["tfc", "resnet_bn"] if quick else list(export_zoo.ZOO)
    return {"rows": export_zoo.measure(models)}


def _finn_executor(quick: bool) -> dict:
    import finn_executor

    if quick:
        return finn_executor.measure(images=2_000, finn_images=50, repeats=2, float_epochs=1)
    return finn_executor.measure()


def _memory(quick: bool) -> dict:
    import calibration_memory

    return {"rows": calibration_memory.measure([4, 16] if quick else [4, 16, 64, 256])}


def _quark_ptq(quick: bool) -> dict:
    import quark_ptq_time

    log = lambda msg: print(msg, file=sys.stderr, flush=True)
    try:
        if quick:
            return quark_ptq_time.measure(runs=1, models=["resnet", "vit"], configs=["W8A8 per tensor"], log=log)
        return quark_ptq_time.measure(log=log)
    except quark_ptq_time.Unavailable as e:
        log(f"quark_ptq skipped: AMD Quark's environment is not available: {e}")
        return {"skipped": str(e)}


#: name -> (runs in --quick, measuring function)
BENCHMARKS: dict[str, tuple[bool, Callable[[bool], dict]]] = {
    "digits_ptq": (True, _digits_ptq),
    "bit_sweep": (True, _bit_sweep),
    "formats": (True, _formats),
    "minilm": (False, _minilm),
    "qat_speed": (True, _qat_speed),
    "graph_speed": (True, _graph_speed),
    "export": (True, _export),
    "finn_executor": (True, _finn_executor),
    "memory": (True, _memory),
    "quark_ptq": (False, _quark_ptq),
}
#: run only when named with --only (they install or download something first)
OPT_IN = {"quark_ptq"}


# -- the table: one function per benchmark turns its result into rows -----------------------------


def _rows_digits_ptq(r: dict) -> list[Row]:
    rows = [("digits_ptq", "float", "test accuracy %", _mean(r["float_accuracy"], ".2f"))]
    for name, c in r["configs"].items():
        rows.append(
            ("digits_ptq", name, "accuracy change, points (median)", f"{c['accuracy_change_median']:+.2f}")
        )
        rows.append(("digits_ptq", name, "PTQ wall time s (median)", f"{c['quantize_s_median']:.2f}"))
    return rows


def _rows_bit_sweep(r: dict) -> list[Row]:
    return [
        ("bit_sweep", name.replace("{b}", str(b)), "test accuracy %", f"{acc:.2f}")
        for name, accs in r["accuracy"].items()
        for b, acc in zip(r["bits"], accs)
    ]


def _rows_formats(r: dict) -> list[Row]:
    rows = [
        ("formats", f"digits {name}", "accuracy change, points (mean)", _mean(v, "+.2f"))
        for name, v in r["digits"]["accuracy_change"].items()
    ]
    rows += [
        ("formats", f"MiniLM {name}", "embedding cosine", f"{cos:.4f}")
        for name, cos in r.get("minilm_cosine", {}).items()
    ]
    return rows


def _rows_minilm(r: dict) -> list[Row]:
    return [
        (
            "minilm",
            name,
            "mean / min cosine, PTQ s",
            f"{x['mean_cosine']:.4f} / {x['min_cosine']:.4f}, {x['ptq_s']:.0f}",
        )
        for name, x in r["rows"].items()
    ]


def _rows_qat_speed(r: dict) -> list[Row]:
    return [
        ("qat_speed", name, f"QAT step ratio to float ({r['threads']} thread)", f"{ratio:.2f}x")
        for name, ratio in r["ratio_to_float"].items()
        if name != "float"
    ]


def _rows_graph_speed(r: dict) -> list[Row]:
    rows = []
    for threads, t in r["threads"].items():
        rows += [
            ("graph_speed", name, f"QAT step ratio to float ({threads} thread)", f"{ratio:.2f}x")
            for name, ratio in t["step_ratio_to_float"].items()
            if name != "float"
        ]
        rows.append(
            (
                "graph_speed",
                "graph (fx) calibration",
                f"per batch, ratio to a float forward ({threads} thread)",
                f"{t['calibration_ratio_to_forward']:.2f}x",
            )
        )
    return rows


def _rows_export(r: dict) -> list[Row]:
    rows = []
    for x in r["rows"]:
        item = f"{x['model']} {x['config']} {x['format']}"
        seconds = "" if x["s"] is None else f", {x['s']:.1f} s"
        value = f"{x['exported']}, {x['exact graph']}, {x['max LSB']}{seconds}"
        rows.append(("export", item, "verified, exact graph, max LSB, time", value))
    return rows


def _rows_finn_executor(r: dict) -> list[Row]:
    images, threads = f"{r['images']:,} digits images", f"{r['threads']} threads"
    return [
        (
            "finn_executor",
            f"demo dataflow, FINN's Python execution ({r['finn_images']:,} timed)",
            f"s for {images} ({threads})",
            f"{r['finn_s_all_images']:.1f}",
        ),
        ("finn_executor", "demo dataflow, batched executor", f"s for {images} ({threads})", f"{r['batched_s']:.2f}"),
        (
            "finn_executor",
            "batched executor vs FINN's Python execution",
            "speed-up, outputs identical",
            f"{r['ratio']:,.0f}x, {r['identical_outputs']}",
        ),
    ]


def _rows_memory(r: dict) -> list[Row]:
    return [
        ("memory", f"{x['batches']} calibration batches", "peak RSS MiB", f"{x['peak_rss_mib']:.0f}")
        for x in r["rows"]
    ]


def _rows_quark_ptq(r: dict) -> list[Row]:
    if "skipped" in r:
        return [("quark_ptq", "AMD Quark's extension", "skipped", r["skipped"])]
    rows = []
    for x in r["rows"]:
        if x["ratio"] is None:
            value = f"failed: ours {x['ours error'] or 'ran'}; AMD {x['AMD error'] or 'ran'}"
        else:
            value = f"{x['ours quantize_s']:.2f} / {x['AMD quantize_s']:.2f} s, {x['ratio']:.2f}x"
        rows.append(("quark_ptq", f"{x['model']} {x['config']}", "quantize_model ours / AMD (median)", value))
    return rows


ROWS: dict[str, Callable[[dict], list[Row]]] = {
    "digits_ptq": _rows_digits_ptq,
    "bit_sweep": _rows_bit_sweep,
    "formats": _rows_formats,
    "minilm": _rows_minilm,
    "qat_speed": _rows_qat_speed,
    "graph_speed": _rows_graph_speed,
    "export": _rows_export,
    "finn_executor": _rows_finn_executor,
    "memory": _rows_memory,
    "quark_ptq": _rows_quark_ptq,
}


def _mean(values: list[float], fmt: str) -> str:
    return format(sum(values) / len(values), fmt)


def render(rows: list[Row]) -> str:
    headers = ("benchmark", "item", "figure", "value")
    widths = [max(len(str(c)) for c in col) for col in zip(headers, *rows)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()
    return "\n".join([line(headers), line("-" * w for w in widths), *map(line, rows)])


def plot_bit_sweep(result: dict, path: Path) -> Path:
    """Test accuracy against bit width, one line per series, the float accuracy dashed."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, accs in result["accuracy"].items():
        ax.plot(result["bits"], accs, marker="o", label=name.replace("{b}", "b"))
    ax.axhline(result["float_accuracy"], color="grey", linestyle="--", label="float")
    ax.set(
        xlabel="bit width b (weights per channel, inputs per tensor)",
        ylabel="test accuracy (%)",
        title=f"digits CNN PTQ, mean of seeds {result['seeds']}",
        xticks=result["bits"],
    )
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


#: benchmark -> (file name, plotting function)
PLOTS = {"bit_sweep": ("accuracy_vs_bits.png", plot_bit_sweep)}


def write(results: dict[str, dict], meta: dict, out: Path) -> tuple[str, Path, list[Path]]:
    """The table (text), ``results.json`` and the PNG plots of ``results``, written to ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    rows = [row for name, result in results.items() for row in ROWS[name](result)]
    plots = [plot(results[name], out / file) for name, (file, plot) in PLOTS.items() if name in results]
    path = out / "results.json"
    document = {
        "meta": meta,
        "table": [dict(zip(("benchmark", "item", "figure", "value"), r)) for r in rows],
        "results": results,
        "plots": [p.name for p in plots],
    }
    path.write_text(json.dumps(document, indent=1, default=str))
    return render(rows), path, plots


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer seeds, steps and models (a smoke test)")
    parser.add_argument(
        "--out", type=Path, default=Path("benchmarks/results"), help="folder for JSON and PNG"
    )
    parser.add_argument(
        "--only",
        nargs="+",
        choices=list(BENCHMARKS),
        metavar="NAME",
        help=f"run only these, of {', '.join(BENCHMARKS)} ({', '.join(sorted(OPT_IN))}: only when named)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)  # warnings of the benchmarks' own configs are known
    warnings.simplefilter("ignore")
    names = args.only or [
        name for name, (in_quick, _) in BENCHMARKS.items() if (in_quick or not args.quick) and name not in OPT_IN
    ]
    meta = {
        "quick": args.quick,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_average_start": os.getloadavg(),
    }
    results, seconds = {}, {}
    for name in names:
        torch.set_num_threads(1)  # the speed benchmarks set their own thread counts
        start = time.perf_counter()
        results[name] = BENCHMARKS[name][1](args.quick)
        seconds[name] = round(time.perf_counter() - start, 1)
        print(f"{name}: {seconds[name]} s", file=sys.stderr, flush=True)
    meta |= {"seconds": seconds, "load_average_end": os.getloadavg()}
    table, path, plots = write(results, meta, args.out)
    print(table)
    print(
        f"\nload average at start / end: {meta['load_average_start'][0]:.1f} / {meta['load_average_end'][0]:.1f} "
        f"on {meta['cpus']} CPUs; wrote {path}" + "".join(f", {p}" for p in plots)
    )
    return {"results": results, "json": path, "plots": plots, "table": table}


if __name__ == "__main__":
    main()
