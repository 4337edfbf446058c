"""PTQ algorithms on the real all-MiniLM-L6-v2: how close the quantized sentence embeddings stay
to the float ones, per configuration, with round-to-nearest (RTN) rows for reference.

Calibration: ``--calib`` sentences of CPython's documentation topics; evaluation: ``--eval``
*other* sentences (from ``--eval-offset`` on). Columns: mean and minimum cosine similarity of the
quantized embeddings to the float embeddings, nearest-neighbour agreement (the fraction of
evaluation sentences whose nearest other sentence is the same under both models), PTQ wall time
(``quantize_model``, algorithms included) and the process's peak resident memory during it.

    .venv/bin/python benchmarks/minilm_fidelity.py [--rows NAME ...] [--calib 128] [--eval 256]
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

import torch

from quark.torch.examples import minilm
from quark.torch.extensions.brevitas.algos import ActivationEqualization, HadamardRotation
from quark.torch.extensions.brevitas.api import ModelQuantizer
from quark.torch.quantization.config.algorithms import (
    AWQConfig,
    GPTQConfig,
    QronosConfig,
    RotationConfig,
    SmoothQuantConfig,
)
from quark.torch.quantization.config.config import Config, QuantizationConfig, QuantizationSpec
from quark.torch.quantization.config.type import Dtype, QSchemeType

W8 = QuantizationSpec(dtype=Dtype.int8)  # per tensor, symmetric, MinMax
A8 = QuantizationSpec(dtype=Dtype.uint8, symmetric=False)  # per tensor, asymmetric, MinMax
W4G32 = QuantizationSpec(dtype=Dtype.int4, qscheme=QSchemeType.per_group, ch_axis=1, group_size=32)
U4G32 = QuantizationSpec(
    dtype=Dtype.uint4, symmetric=False, qscheme=QSchemeType.per_group, ch_axis=1, group_size=32
)

SPEC_OF = {"W8A8 per tensor": (W8, A8), "W4 g32 sym": (W4G32, None), "W4 g32 asym": (U4G32, None)}
# the algorithms take their bit / sym / group_size from the weight spec (None)
GPTQ = GPTQConfig(bit=None, sym=None, group_size=None, desc_act=False)
GPTQ_ACT_ORDER = GPTQConfig(bit=None, sym=None, group_size=None, desc_act=True, static_groups=True)
AWQ = AWQConfig(bit=None, sym=None, group_size=None)
SMOOTH = SmoothQuantConfig(
    alpha=0.5
)  # folds only where the function is kept: v -> out in BERT's post-norm blocks
EQUALIZE = ActivationEqualization(alpha=0.5)  # the extension's: a scale in front of every Linear
ROTATE = HadamardRotation()  # beyond Quark: an online (float) Hadamard transform in front of every Linear
#: AMD Quark 0.13's configs as Quark's documentation writes them, on MiniLM's encoder layers
MINILM_LINEARS = [
    "attention.self.query",
    "attention.self.key",
    "attention.self.value",
    "attention.output.dense",
    "intermediate.dense",
    "output.dense",
]
_R1 = {"target_modules": [f"encoder.layer.layer_id.{name}" for name in MINILM_LINEARS]}
ROTATION = RotationConfig(  # online R1: a Hadamard rotation in front of every Linear of the encoder layers
    scaling_layers={"first_layer": [_R1], "middle_layers": [_R1]},
    model_decoder_layers="encoder.layer",
    online_r1_rotation=True,
)
QRONOS = QronosConfig(inside_layer_modules=MINILM_LINEARS, model_decoder_layers="encoder.layer")  # Quark's defaults

#: row name -> (configuration, pre_quant_opt_config, algo_config)
ROWS = {
    f"{spec} | {algo}": (spec, pre, post)
    for spec, algos in {
        "W8A8 per tensor": {
            "RTN": ([], None),
            "SmoothQuant": ([SMOOTH], None),
            "GPTQ": ([], [GPTQ]),
            "GPTQ act-order": ([], [GPTQ_ACT_ORDER]),
            "ActivationEqualization": ([EQUALIZE], None),
            "ActivationEqualization+GPTQ": ([EQUALIZE], [GPTQ]),
            "HadamardRotation": ([ROTATE], None),
            "HadamardRotation+GPTQ": ([ROTATE], [GPTQ]),
            "RotationConfig (online R1)": ([ROTATION], None),
            "QronosConfig": ([], [QRONOS]),
            "RotationConfig+QronosConfig": ([ROTATION], [QRONOS]),
        },
        "W4 g32 sym": {
            "RTN": ([], None),
            "GPTQ": ([], [GPTQ]),
            "AWQ": ([], [AWQ]),
            "AWQ+GPTQ": ([], [AWQ, GPTQ]),
            "HadamardRotation+GPTQ": ([ROTATE], [GPTQ]),
            "HadamardRotation+GPTQ act-order": ([ROTATE], [GPTQ_ACT_ORDER]),
            "QronosConfig": ([], [QRONOS]),
            "RotationConfig+QronosConfig": ([ROTATION], [QRONOS]),
        },
        "W4 g32 asym": {
            "RTN": ([], None),
            "GPTQ": ([], [GPTQ]),
            "GPTQ act-order": ([], [GPTQ_ACT_ORDER]),
            "AWQ": ([], [AWQ]),
            "HadamardRotation+GPTQ": ([ROTATE], [GPTQ]),
            "HadamardRotation+GPTQ act-order": ([ROTATE], [GPTQ_ACT_ORDER]),
            "QronosConfig": ([], [QRONOS]),
            "RotationConfig+QronosConfig": ([ROTATION], [QRONOS]),
        },
    }.items()
    for algo, (pre, post) in algos.items()
}


def config(spec: str, pre: list, post: list | None) -> Config:
    weight, inputs = SPEC_OF[spec]
    return Config(
        QuantizationConfig(weight=weight, input_tensors=inputs), pre_quant_opt_config=pre, algo_config=post
    )


def peak_rss_reset() -> None:
    Path("/proc/self/clear_refs").write_text("5")  # Linux: reset the peak resident set size


def peak_rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


@torch.no_grad()
def embeddings(model, data) -> torch.Tensor:
    return torch.cat([minilm.embed(model, batch) for batch in data])


def neighbour_agreement(reference: torch.Tensor, candidate: torch.Tensor) -> float:
    def nearest(e: torch.Tensor) -> torch.Tensor:
        sims = e @ e.T
        sims.fill_diagonal_(-2)
        return sims.argmax(1)

    return float((nearest(reference) == nearest(candidate)).float().mean())


def measure(rows: list[str], n_calib: int, n_eval: int, eval_offset: int, report=None) -> dict:
    """Per row: mean and minimum cosine, nearest-neighbour agreement, PTQ seconds and peak MiB;
    ``report(name, row)`` is called as each row is done."""
    warnings.simplefilter("ignore")  # transformers' deprecation notices are not ours to act on
    torch.set_num_threads(1)
    model, tokenizer = minilm.load()
    calib = minilm.batches(tokenizer, minilm.sentences(n_calib))
    test = minilm.batches(tokenizer, minilm.sentences(n_eval, offset=eval_offset))
    reference = embeddings(model, test)
    results = {}
    for name in rows:
        spec, pre, post = ROWS[name]
        peak_rss_reset()
        start = time.perf_counter()
        quantized = ModelQuantizer(config(spec, pre, post)).quantize_model(model, calib, progress=False)
        seconds = time.perf_counter() - start
        peak = peak_rss_mib()
        candidate = embeddings(quantized, test)
        cos = (candidate * reference).sum(-1)
        results[name] = {
            "mean_cosine": float(cos.mean()),
            "min_cosine": float(cos.min()),
            "nn_agreement": neighbour_agreement(reference, candidate),
            "ptq_s": seconds,
            "peak_mib": peak,
        }
        if report is not None:
            report(name, results[name])
    return {"calib": n_calib, "eval": n_eval, "eval_offset": eval_offset, "rows": results}


def main(rows: list[str], n_calib: int, n_eval: int, eval_offset: int) -> None:
    print(f"all-MiniLM-L6-v2, {n_calib} calibration sentences, {n_eval} other evaluation sentences, 1 thread")
    print(
        f"{'configuration | algorithm':<50} {'mean cos':>8} {'min cos':>8} {'NN agree':>8} {'PTQ s':>7} {'peak MiB':>8}"
    )

    def report(name: str, r: dict) -> None:
        print(
            f"{name:<50} {r['mean_cosine']:8.4f} {r['min_cosine']:8.4f} {r['nn_agreement']:8.3f} "
            f"{r['ptq_s']:7.1f} {r['peak_mib']:8.0f}",
            flush=True,
        )

    measure(rows, n_calib, n_eval, eval_offset, report)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", nargs="+", default=list(ROWS), choices=list(ROWS), metavar="ROW")
    parser.add_argument("--calib", type=int, default=128)
    parser.add_argument("--eval", type=int, default=256)
    parser.add_argument("--eval-offset", type=int, default=1000)
    args = parser.parse_args()
    main(args.rows, args.calib, args.eval, args.eval_offset)
