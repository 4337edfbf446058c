"""GPTQ time on the real all-MiniLM-L6-v2: 8-bit per-tensor weights with 8-bit activations (W8A8)
against 4-bit per-group weights (W4 g32, weight only), in the same process, one after the other.

    .venv/bin/python benchmarks/gptq_time.py [--calib 128] [--repeat 1]

Prints each configuration's ``quantize_model`` seconds (GPTQ included; the algorithm check off) and
the ratio W8A8 / W4 g32, and the mean cosine of the sentence embeddings on 256 other sentences
(to show that a change of speed leaves the result as it was).
"""

from __future__ import annotations

import argparse
import inspect
import time
import warnings

import torch

from quark.torch.examples import minilm
from quark.torch.extensions.brevitas.api import ModelQuantizer
from quark.torch.quantization.config.algorithms import GPTQConfig
from quark.torch.quantization.config.config import Config, QuantizationConfig, QuantizationSpec
from quark.torch.quantization.config.type import Dtype, QSchemeType

W8 = QuantizationSpec(dtype=Dtype.int8)
A8 = QuantizationSpec(dtype=Dtype.uint8, symmetric=False)
U4G32 = QuantizationSpec(dtype=Dtype.uint4, symmetric=False, qscheme=QSchemeType.per_group, ch_axis=1, group_size=32)
GPTQ = GPTQConfig(bit=None, sym=None, group_size=None, desc_act=False)
CONFIGS = {"W4 g32 asym": (U4G32, None), "W8A8 per tensor": (W8, A8)}


def main(n_calib: int, repeat: int) -> None:
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    model, tokenizer = minilm.load()
    calib = minilm.batches(tokenizer, minilm.sentences(n_calib))
    test = minilm.batches(tokenizer, minilm.sentences(256, offset=1000))
    options = {"progress": False}
    if "check_algorithms" in inspect.signature(ModelQuantizer.quantize_model).parameters:
        options["check_algorithms"] = False
    seconds = {}
    for run in range(repeat):
        for name, (weight, inputs) in CONFIGS.items():
            config = Config(QuantizationConfig(weight=weight, input_tensors=inputs), algo_config=[GPTQ])
            start = time.perf_counter()
            quantized = ModelQuantizer(config).quantize_model(model, calib, **options)
            seconds[name] = time.perf_counter() - start
            cosine = minilm.embedding_similarity(model, quantized, test)
            print(f"run {run}: {name:<16} {seconds[name]:7.1f} s  cosine {cosine:.4f}", flush=True)
        print(f"run {run}: W8A8 / W4 g32 = {seconds['W8A8 per tensor'] / seconds['W4 g32 asym']:.2f}", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calib", type=int, default=128)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    main(args.calib, args.repeat)
