"""Time of TQT threshold initialisation on a 1M-element tensor, as calibration uses it.

Each timed call builds the observer, observes the tensor as one batch and calls calculate_range:
``_LL_J`` (Settle et al.'s Jeffreys-divergence search on the histogram of |x|) and ``_3SD``
(running float64 moments), side by side with the float64 mean and std of the same tensor
(``x.double()``, ``.mean()``, ``.std()``). Repeats are interleaved (the order rotates), so the three
see the same machine load; medians and their ratios, for each thread count, of wall-clock time and
of the process's CPU time (all threads): on a shared machine, wall time also counts the time other
processes hold the CPUs.

    .venv/bin/python benchmarks/tqt_init_time.py [--numel 1000000] [--repeats 31] [--threads 1 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import torch

from quark.torch.quantization.observer import TQT3SDObserver, TQTJeffreysObserver


def _init(cls: type) -> Callable[[torch.Tensor], float]:
    def run(x: torch.Tensor) -> float:
        observer = cls(symmetric=True, qmin=-128, qmax=127)  # int8
        observer(x)
        return float(observer.calculate_range()[1])

    return run


def _mean_std(x: torch.Tensor) -> float:
    x64 = x.double()
    return float(x64.mean().abs() + 3 * x64.std())


TASKS: dict[str, Callable[[torch.Tensor], float]] = {
    "_LL_J": _init(TQTJeffreysObserver),
    "_3SD": _init(TQT3SDObserver),
    "mean+std f64": _mean_std,
}


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def medians(x: torch.Tensor, repeats: int) -> tuple[dict[tuple[str, str], float], dict[str, float]]:
    """Median seconds of each task on each clock over interleaved repeats (after one untimed round),
    and each task's result."""
    names = list(TASKS)
    results = {name: TASKS[name](x) for name in names}
    times: dict[tuple[str, str], list[float]] = {(clock, name): [] for clock in CLOCKS for name in names}
    for r in range(repeats):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            start = {clock: read() for clock, read in CLOCKS.items()}
            TASKS[name](x)
            for clock, read in CLOCKS.items():
                times[clock, name].append(read() - start[clock])
    return {key: statistics.median(t) for key, t in times.items()}, results


def main(numel: int, repeats: int, threads: list[int]) -> None:
    x = torch.randn(numel, generator=torch.Generator().manual_seed(0))
    print(f"TQT threshold init, {numel} normal values, int8, median of {repeats} interleaved repeats")
    print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    print(
        f"{'threads':>7} {'clock':>5} {'_LL_J ms':>9} {'_3SD ms':>8} {'mean+std ms':>12} "
        f"{'_LL_J/mean+std':>15} {'_3SD/mean+std':>14}"
    )
    for n in threads:
        torch.set_num_threads(n)
        t, results = medians(x, repeats)
        for clock in CLOCKS:
            ll_j, sd, base = (t[clock, name] for name in TASKS)
            print(
                f"{n:>7} {clock:>5} {1e3 * ll_j:9.2f} {1e3 * sd:8.2f} {1e3 * base:12.2f} "
                f"{ll_j / base:15.2f} {sd / base:14.2f}"
            )
    print("thresholds: " + ", ".join(f"{name} {value:.6f}" for name, value in results.items()))
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--numel", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=31)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    main(args.numel, args.repeats, args.threads)
