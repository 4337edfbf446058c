"""Time of TQT threshold initialisation on a 1M-element tensor: _3SD and _LL_J (Settle et al.'s
Jeffreys-divergence search), through the observers calibration uses, median of repeats.

    .venv/bin/python benchmarks/tqt_init_time.py [--numel 1000000] [--repeats 15] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from quark.torch.quantization.observer import TQT3SDObserver, TQTJeffreysObserver

OBSERVERS = {"_3SD": TQT3SDObserver, "_LL_J": TQTJeffreysObserver}


def main(numel: int, repeats: int, threads: int) -> None:
    torch.set_num_threads(threads)
    x = torch.randn(numel, generator=torch.Generator().manual_seed(0))
    print(f"TQT threshold init on {numel} normal values, int8, {threads} thread(s), median of {repeats}")
    for name, cls in OBSERVERS.items():
        times, threshold = [], None
        for _ in range(repeats):
            start = time.perf_counter()
            observer = cls(symmetric=True, qmin=-128, qmax=127)
            observer(x)
            threshold = float(observer.calculate_range()[1])
            times.append(time.perf_counter() - start)
        print(f"  {name:<6} {1e3 * statistics.median(times):8.1f} ms   threshold {threshold:.4f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--numel", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    main(args.numel, args.repeats, args.threads)
