"""How long ``quark-brevitas --help`` takes in a fresh process (the command line imports neither torch
nor the backend until a command runs; ``tests/integration/cli`` checks that torch stays unimported,
this script the time). Prints every run and the median, for ``python -m`` and the console script.

    python benchmarks/cli_startup.py [--runs 7]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def timings(command: list[str], runs: int) -> list[float]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    seconds = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run([*command, "--help"], capture_output=True, check=True, env=env)
        seconds.append(time.perf_counter() - started)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    commands = {"python -m quark.torch.extensions.brevitas": [sys.executable, "-m", "quark.torch.extensions.brevitas"]}
    script = Path(sys.executable).parent / "quark-brevitas"  # the console script `pip install` writes
    if script.exists():
        commands["quark-brevitas"] = [str(script)]
    print(f"load average {os.getloadavg()[0]:.2f}; {args.runs} fresh processes each")
    for name, command in commands.items():
        seconds = timings(command, args.runs)
        print(f"{name} --help: median {statistics.median(seconds):.3f} s (runs {', '.join(f'{s:.3f}' for s in seconds)})")


if __name__ == "__main__":
    main()
