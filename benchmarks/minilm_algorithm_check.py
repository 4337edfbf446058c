"""Does ``quantize_model``'s check name the algorithms that make all-MiniLM-L6-v2 worse (issue 22)?

all-MiniLM-L6-v2 in graph mode at ``presets.a8w8(graph=True)`` (integer attention), with no site at
16 bits and with the sites the logged mixing run promoted (``benchmarks/logs/npu_precisions_mixed.json``,
its calibration too), each with one algorithm of ``--algorithms``: the cosine of the sentence
embeddings with float on the held-out sentences (the last ``--test``, as ``npu_precisions.py``),
with and without the algorithm, and what ``ModelQuantizer.algorithm_check`` said (the
``AlgorithmWorseWarning`` when it warned).

    .venv/bin/python benchmarks/minilm_algorithm_check.py [--algorithms Qronos GPTQ] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import logging
import time
import warnings
from pathlib import Path

import torch

from quark.torch.examples import minilm
from quark.torch.extensions.brevitas import presets
from quark.torch.extensions.brevitas._backend import mixing as numerics
from quark.torch.extensions.brevitas.api import AlgorithmWorseWarning, ModelQuantizer
from quark.torch.extensions.brevitas.mixing import METRICS, _mixed_config
from quark.torch.quantization.config.algorithms import extension

MIXED_LOG = Path(__file__).parent / "logs" / "npu_precisions_mixed.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algorithms", nargs="+", default=["Qronos", "GPTQ"], help="configs of the extension's algos")
    parser.add_argument("--calib", type=int, default=128)
    parser.add_argument("--test", type=int, default=316)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    logging.disable(logging.WARNING)
    model, tokenizer = minilm.load()
    encoder = minilm.traceable(model)
    total = len(minilm.sentences(10**6))
    calib = minilm.batches(tokenizer, minilm.sentences(args.calib))
    test = minilm.batches(tokenizer, minilm.sentences(args.test, offset=total - args.test))
    reference = numerics.outputs(encoder, test, minilm.embed)
    logged = json.loads(MIXED_LOG.read_text())["rows"]["mixed a8w8/a16w8"]["mix"]
    base = {0: presets.a8w8(graph=True), len(logged["promoted"]): presets.a8w8(graph=True, calibration=logged.get("calibration", "minmax"))}
    print(
        f"all-MiniLM-L6-v2, graph mode A8W8; calibration {args.calib} sentences, held-out: the last {args.test}; "
        f"mixed sites from {MIXED_LOG.name} ({logged.get('calibration', 'minmax')}); {args.threads} thread(s)"
    )
    for sites, config in base.items():
        planner = ModelQuantizer(config)
        planner.quantize_model(encoder, calib[:1], progress=False, check_algorithms=False)
        plans = {p.name: p for p in planner.plans}
        config = _mixed_config(config, plans, logged["promoted"] if sites else [])
        plain = ModelQuantizer(config).quantize_model(encoder, calib, progress=False)
        without = METRICS["cosine"](reference, numerics.outputs(plain, test, minilm.embed))
        for name in args.algorithms:
            start = time.perf_counter()
            config.algo_config = [getattr(extension, name)()]
            quantizer = ModelQuantizer(config)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                qmodel = quantizer.quantize_model(encoder, calib, progress=False)
            with_ = METRICS["cosine"](reference, numerics.outputs(qmodel, test, minilm.embed))
            warned = any(issubclass(w.category, AlgorithmWorseWarning) for w in caught)
            print(
                f"{sites:>2} sites at 16 bits, {name:<8} held-out cosine {without:.5f} without, {with_:.5f} with; "
                f"warned: {'yes' if warned else 'no'}; check: {quantizer.algorithm_check}; {time.perf_counter() - start:.0f} s",
                flush=True,
            )


if __name__ == "__main__":
    main()
