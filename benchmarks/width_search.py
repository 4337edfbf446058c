"""Per-layer widths searched against FINN's cost (issue 19, point 5), on the digits ResidualCNN or
a TFC-shaped MLP on MNIST-5k, with every measured point confirmed from its files.

Networks (``--network``):

- ``digits``: ``digits.ResidualCNN`` on scikit-learn's 8x8 digits (1,437 training / 359 held-out),
  float-trained 30 epochs (Adam 3e-3, constant); default target 20,000 fps.
- ``tfc``: ``binary_tfc.float_tfc()`` (784-64-64-64-10: Linear, BatchNorm1d, ReLU; the last Linear
  plain) on MNIST-5k (``quark.torch.examples.mnist``: 4,000 training / 1,000 held-out, stratified),
  float-trained 20 epochs (Adam 3e-3, cosine); default target 100,000 fps.

Then, for each ``--seeds`` value (the seed of every measured point's QAT: the order of its batches;
the float model, the cost model, the sensitivities and the front are the same for every seed),
:func:`quark.torch.extensions.brevitas.search.search` on the xc7z020 at 100 MHz: the cost model
from FINN's per-layer estimates, PTQ sensitivities, the integer program's and the greedy walk's
fronts, every front point no dearer than ``--upto`` (``--points``: how many, spread over that range;
``all``: every one) and the uniform baselines W2A2 / W3A3 / W4A4 / W8A8, each trained ``--qat-epochs``
by the same recipe (TQT thresholds, one Adam at 1e-3 cosine-decayed to 0), its held-out accuracy
and FINN's full dataflow estimate at the cost model's folding.

Every measured point is then confirmed from its files alone (:func:`search.confirm`): the checkpoint
re-loaded into a model rebuilt from its ``config.yaml``, its accuracy measured again (must equal the
claim), ``export_finn_dataflow`` run again at its folding (the cost model's LUT claim and the recorded
estimate within 5 %, the target met). The goal of the issue is checked on the confirmed figures:
a point with at least 25 % fewer LUTs than W4A4 at no more than 0.5 points lower accuracy, or higher
accuracy at no more LUTs. The exit status is 1 if any claim did not reproduce.

    python benchmarks/width_search.py --network digits|tfc [--seeds 0 1 2] [--qat-epochs 8] \\
        [--points all] [--upto W4A4] [--target-fps N] [--search-input] [--sensitivity-epochs K] [--out DIR]

``--search-input``: the network input's width is searched too (the host feeds ``round(x / scale)``
at that width; FINN's bnn_pynq TFC takes 1- or 2-bit pixels); the baselines keep 8-bit inputs.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import os
import shutil
import sys
import tempfile
import time
import warnings

import torch

from quark.torch.examples import digits, mnist
from quark.torch.extensions.brevitas import search

PART, CLOCK_MHZ = "xc7z020clg400-1", 100.0
#: network -> (default target fps, what the log says about it)
NETWORKS = {
    "digits": (20_000.0, "digits ResidualCNN (scikit-learn 8x8 digits, 1,437 train / 359 held out)"),
    "tfc": (100_000.0, "TFC 784-64-64-64-10 with batch norm and ReLU (MNIST-5k, 4,000 train / 1,000 held out)"),
}
#: the issue's goal: at least this fraction fewer LUTs than W4A4 ...
LUT_CUT = 0.25
#: ... at no more than this many points lower held-out accuracy
ACCURACY_SLACK = 0.5


def float_model(network: str):
    """(float model, data) of ``network``, deterministic."""
    torch.manual_seed(0)
    if network == "digits":
        data = digits.load(0)
        return digits.train(digits.ResidualCNN(), data, epochs=30, seed=0), data
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from binary_tfc import float_tfc  # the TFC of the binary benchmark, reused

    data = mnist.load(0)
    return digits.train(float_tfc(), data, epochs=20, lr=3e-3, seed=0, schedule="cosine"), data


@contextlib.contextmanager
def quiet():
    """FINN's and qonnx's prints, warnings and log lines kept out of the log (the tables are the log)."""
    level = logging.getLogger().level
    logging.getLogger().setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.getLogger().setLevel(level)


def goal(confirmed: dict[str, dict], points: list[dict]) -> tuple[dict, list[tuple[str, float, float, str]]]:
    """W4A4's confirmed figures and the points meeting the goal on their confirmed figures:
    (name, LUT change against W4A4 in %, accuracy change in points, which branch)."""
    base = confirmed["W4A4"]
    met = []
    for p in points:
        if p["uniform"]:
            continue
        c = confirmed[p["name"]]
        lut = c["estimate"]["LUT"] / base["estimate"]["LUT"] - 1
        acc = c["accuracy"] - base["accuracy"]
        if lut <= -LUT_CUT and acc >= -ACCURACY_SLACK:
            met.append((p["name"], 100 * lut, acc, f"{100 * LUT_CUT:.0f} % fewer LUTs"))
        elif lut <= 0 and acc > 0:
            met.append((p["name"], 100 * lut, acc, "higher accuracy at no more LUTs"))
    return base, met


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--network", choices=sorted(NETWORKS), default="digits")
    parser.add_argument("--qat-epochs", type=int, default=search.QAT_EPOCHS)
    parser.add_argument("--target-fps", type=float, default=None, help="default: 20,000 (digits), 100,000 (tfc)")
    parser.add_argument("--points", default="all", help="front points to measure (spread over the range), or 'all'")
    parser.add_argument("--upto", default="W4A4", help="measure front points no dearer than this uniform baseline")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="QAT seeds (every one reported)")
    parser.add_argument("--search-input", action="store_true", help="search the network input's width too")
    parser.add_argument("--sensitivity-epochs", type=int, default=0, help="QAT epochs before each sensitivity (0: PTQ)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    target_fps = args.target_fps or NETWORKS[args.network][0]
    points = None if args.points == "all" else int(args.points)
    start = time.perf_counter()
    model, data = float_model(args.network)
    float_seconds = time.perf_counter() - start
    train, evaluation = list(data.loader("train")), list(data.loader("test", batch_size=256))
    example = torch.cat([x for x, _ in evaluation])[:16]
    out = args.out or tempfile.mkdtemp(prefix=f"width_search_{args.network}_")
    print(f"{NETWORKS[args.network][1]}: float accuracy {search.accuracy(model, evaluation):.2f} % "
          f"(trained in {float_seconds:.0f} s); {PART} at {CLOCK_MHZ:g} MHz, target {target_fps:,.0f} fps; "
          f"{args.qat_epochs} QAT epochs per point; QAT seeds {args.seeds}; network input "
          + ("searched" if args.search_input else "8 bits") + "; sensitivities "
          + (f"after {args.sensitivity_epochs} QAT epochs" if args.sensitivity_epochs else "by PTQ") + f"; output in {out}")
    failures, summary = 0, {}
    for index, seed in enumerate(args.seeds):
        directory = os.path.join(out, f"seed{seed}")
        if index:  # the cost model and the sensitivities do not depend on the QAT seed
            shutil.copytree(os.path.join(out, f"seed{args.seeds[0]}", "cache"), os.path.join(directory, "cache"), dirs_exist_ok=True)
        with quiet():
            result = search.search(
                model, train, evaluation, example, directory, part=PART, clock_mhz=CLOCK_MHZ, target_fps=target_fps,
                qat_epochs=args.qat_epochs, points=points, upto=args.upto, seed=seed, progress=False,
                network_input=args.search_input, sensitivity_epochs=args.sensitivity_epochs,
            )
        seconds = result["seconds"]
        searched = sum(seconds[k] for k in ("cost model", "sensitivities", "milp", "greedy"))
        if index == 0:
            print(f"search (cost model + sensitivities + fronts, without the final QAT): {searched:.1f} s "
                  + "(" + ", ".join(f"{k} {v:.1f}" for k, v in seconds.items() if k != "measure") + ")"
                  + f"; FINN evaluations in the cost model: {result['finn_evaluations']}")
            print(f"variables: {', '.join(result['variables'])}")
            for method, front in result["fronts"].items():
                print(f"{method} front ({len(front)} points): LUT (searched) / summed sensitivity")
                for p in front:
                    print(f"  {p['totals']['LUT']:8,.0f}  {p['score']:9.4f}  {p['name']}")
        else:
            print(f"search: cost model and sensitivities from the cache ({', '.join(result['cached'])})")
        confirmed = {}
        print(f"seed {seed}: measured (QAT {args.qat_epochs} epochs; accuracy claimed / re-loaded checkpoint; LUT searched"
              " (PTQ weights), cost model with the trained weights / full FINN estimate / FINN estimate re-run from the"
              f" checkpoint); measure {seconds['measure']:.0f} s")
        for p in result["points"]:
            with quiet():
                c = search.confirm(model, directory, p, evaluation, example, part=PART, clock_mhz=CLOCK_MHZ,
                                   target_fps=target_fps)
            confirmed[p["name"]] = c
            again = c["estimate"]["LUT"]
            print(f"  {p['name']:<30} acc {p['accuracy']:6.2f} / {c['accuracy']:6.2f} %  LUT {p['searched']['LUT']:7,.0f},"
                  f" {p['predicted']['LUT']:7,.0f} / {p['LUT']:7,.0f} / {again:7,.0f} ({100 * (p['predicted']['LUT'] / again - 1):+.1f} %,"
                  f" searched {100 * (p['searched']['LUT'] / again - 1):+.1f} %)  BRAM {p['BRAM_18K']:.0f}  DSP {p['DSP']:.0f}"
                  f"  fps {c['fps']:,.0f}{'  (uniform)' if p['uniform'] else ''}")
            for problem in c["problems"]:
                print(f"    NOT CONFIRMED: {problem}")
            failures += len(c["problems"])
            summary.setdefault(p["name"], {})[seed] = (c["accuracy"], again)
        base, met = goal(confirmed, result["points"])
        print(f"seed {seed}: measured front: {', '.join(result['measured_front'])}; knee (chosen.yaml): {result['chosen']}")
        print(f"seed {seed}: goal against W4A4 ({base['accuracy']:.2f} %, {base['estimate']['LUT']:,.0f} LUT; "
              f"{100 * LUT_CUT:.0f} % fewer: <= {(1 - LUT_CUT) * base['estimate']['LUT']:,.0f} LUT at >= "
              f"{base['accuracy'] - ACCURACY_SLACK:.2f} %, or > {base['accuracy']:.2f} % at <= {base['estimate']['LUT']:,.0f} LUT): "
              + ("; ".join(f"{n} ({lut:+.1f} % LUT, {acc:+.2f} points: {why})" for n, lut, acc, why in met) if met else "no point"))
    print(f"every seed (accuracy %, confirmed; LUT, FINN's re-run estimate): seeds {args.seeds}")
    for name, by_seed in sorted(summary.items(), key=lambda kv: min(v[1] for v in kv[1].values())):
        accs = [by_seed[s][0] if s in by_seed else float("nan") for s in args.seeds]
        luts = sorted({round(v[1]) for v in by_seed.values()})
        print(f"  {name:<30} " + " ".join(f"{a:6.2f}" for a in accs) + f"  mean {sum(accs) / len(accs):6.2f}"
              + "  LUT " + "/".join(f"{v:,}" for v in luts))
    print(f"claims not reproduced: {failures}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
