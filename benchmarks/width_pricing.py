"""How long the width search's cost model takes to price one candidate (per-layer widths), once its
tables are built: on the digits ResidualCNN (scikit-learn's 8x8 digits, trained 5 epochs), the 64
patterns of widths 2, 3, 4, 8 repeated over the variables, priced ``--repeats`` times. Prints the
table build time, the median seconds per candidate and whether any candidate needed FINN again
(``tests/targets/finn/test_cost.py`` checks that none does and that the prices match FINN's
estimate; this script the time). Needs finn-plus.

    python benchmarks/width_pricing.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import time

import torch

from quark.torch.examples import digits
from quark.torch.extensions.brevitas import search

PART, CLOCK_MHZ, TARGET_FPS = "xc7z020clg400-1", 100.0, 20_000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    data = digits.load(0)
    torch.manual_seed(0)
    model = digits.train(digits.ResidualCNN(), data, epochs=5, seed=0)
    example = next(iter(data.loader("test", batch_size=8)))[0]
    started = time.perf_counter()
    cost_model, space = search.build_cost_model(
        model, data.loader("train"), example, part=PART, clock_mhz=CLOCK_MHZ, target_fps=TARGET_FPS
    )
    built = time.perf_counter() - started
    evaluations = cost_model.evaluations
    patterns = list(itertools.product((2, 3, 4, 8), repeat=3))
    candidates = [{v.name: pattern[i % len(pattern)] for i, v in enumerate(space)} for pattern in patterns]
    per_candidate = []
    for _ in range(args.repeats):
        started = time.perf_counter()
        for candidate in candidates:
            cost_model.cost(candidate)
        per_candidate.append((time.perf_counter() - started) / len(candidates))
    print(f"load average {os.getloadavg()[0]:.2f}; {len(space)} variables, {len(candidates)} candidates")
    print(f"tables built in {built:.1f} s ({evaluations} FINN evaluations)")
    print(
        f"pricing: median {statistics.median(per_candidate) * 1e3:.3f} ms per candidate "
        f"(runs {', '.join(f'{s * 1e3:.3f}' for s in per_candidate)} ms); "
        f"FINN evaluations while pricing: {cost_model.evaluations - evaluations}"
    )


if __name__ == "__main__":
    main()
