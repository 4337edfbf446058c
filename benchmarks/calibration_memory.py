"""Peak memory of calibration as the number of calibration batches grows: flat when the statistics
are running (MinMax, histograms of fixed size, moments), not stored.

Each count runs in a fresh process: a CNN (4 convolutions, 64 channels, 32x32 inputs, batches of
16: 4 MiB of activations per layer and batch, 1 GiB over 256 batches if they were kept), quantized W8A8 with static activations, all
observers at once (MinMax, percentile and MSE histograms, TQT _3SD moments and _LL_J histogram),
batches made on the fly by a generator (nothing held by the caller). Reported: the process's peak
resident memory (``VmHWM`` of ``/proc/self/status``: the high-water mark of this process's own
memory; ``ru_maxrss`` would not do, Linux carries it over from the parent across ``exec``, so a
child of a large process reports the parent's size) after calibration, and its growth over the
smallest count.

``--control`` runs the same with one observer of our own that keeps every tensor it sees (as an
exact percentile over all data would): the measurement then grows by the 4 MiB per batch kept,
which shows that a flat line is a finding, not the measurement missing the growth.

    .venv/bin/python benchmarks/calibration_memory.py [--batches 4 16 64 256] [--threads 1] [--control]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys

import torch
from torch import nn


def child(num_batches: int, threads: int, control: bool) -> dict:
    from quark.torch.extensions.brevitas.api import ModelQuantizer
    from quark.torch.quantization.config.config import Config, QuantizationConfig, QuantizationSpec, TQTSpec
    from quark.torch.quantization.config.type import Dtype, QSchemeType, ScaleType, TQTThresholdInitMeth
    from quark.torch.quantization.observer import OBSERVERS, PerTensorMinMaxObserver

    class KeepEverything(PerTensorMinMaxObserver):  # the control: statistics stored, not running
        def _observe(self, x):
            super()._observe(x)
            self.__dict__.setdefault("kept", []).append(x.clone())

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    convs = [nn.Conv2d(3 if i == 0 else 64, 64, 3, padding=1) for i in range(4)]
    model = nn.Sequential(*[m for c in convs for m in (c, nn.ReLU())])
    weight = QuantizationSpec(dtype=Dtype.int8, qscheme=QSchemeType.per_channel, ch_axis=0, observer_cls=OBSERVERS["PerChannelMinMaxObserver"])
    act = {  # one observer of each kind, one per layer input, and an output observer
        "0": QuantizationSpec(dtype=Dtype.int8),
        "2": QuantizationSpec(
            dtype=Dtype.int8, observer_cls=KeepEverything if control else OBSERVERS["PerTensorPercentileObserver"]
        ),
        "4": QuantizationSpec(dtype=Dtype.uint8, symmetric=False, observer_cls=OBSERVERS["PerTensorMSEObserver"]),
        "6": QuantizationSpec(dtype=Dtype.int8, scale_type=ScaleType.pof2, qat_spec=TQTSpec(TQTThresholdInitMeth._LL_J)),
    }
    tqt_3sd = QuantizationSpec(dtype=Dtype.int8, scale_type=ScaleType.pof2, qat_spec=TQTSpec(TQTThresholdInitMeth._3SD))
    config = Config(
        QuantizationConfig(weight=weight),
        layer_quant_config={
            name: QuantizationConfig(weight=weight, input_tensors=spec, output_tensors=tqt_3sd if name == "6" else None)
            for name, spec in act.items()
        },
    )

    def batches():  # made on the fly: the caller holds none of them
        g = torch.Generator().manual_seed(1)
        for _ in range(num_batches):
            yield torch.randn(16, 3, 32, 32, generator=g)

    ModelQuantizer(config).quantize_model(model, batches(), progress=False)
    return {"batches": num_batches, "peak_rss_mib": _peak_rss_kib() / 1024}


def _peak_rss_kib() -> int:
    """This process's resident-memory high-water mark in KiB (Linux's ``VmHWM``; elsewhere ``ru_maxrss``)."""
    try:
        with open("/proc/self/status") as status:
            return int(next(line for line in status if line.startswith("VmHWM:")).split()[1])
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def measure(counts: list[int], threads: int = 1, control: bool = False) -> list[dict]:
    """One fresh process per count: ``[{"batches": n, "peak_rss_mib": m}, ...]``."""
    rows = []
    for count in counts:
        result = subprocess.run(
            [sys.executable, __file__, "--child", str(count), "--threads", str(threads), *(["--control"] if control else [])],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        rows.append(json.loads(result.stdout.strip().splitlines()[-1]))
    return rows


def main(counts: list[int], threads: int, control: bool) -> None:
    what = "control: one observer keeps every tensor" if control else "the package's observers"
    print(f"calibration peak RSS, CNN 4x conv64 on 16x3x32x32 batches, {threads} thread(s), {what}, one process per count")
    rows = measure(counts, threads, control)
    base = rows[0]["peak_rss_mib"]
    for row in rows:
        print(f"  {row['batches']:>5} batches: peak RSS {row['peak_rss_mib']:7.1f} MiB  ({row['peak_rss_mib'] - base:+7.1f} MiB)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[4, 16, 64, 256])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--control", action="store_true", help="one observer keeps every tensor it sees")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(child(args.child, args.threads, args.control)))
    else:
        main(args.batches, args.threads, args.control)
