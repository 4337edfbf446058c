"""Float and block formats on real models: digits CNN test accuracy and all-MiniLM-L6-v2
embedding cosine similarity against the float model.

Configs (main Quark API): W-int8/A-int8 per tensor (reference point), W-fp8/A-fp8 (OCP e4m3, per
tensor), W-mxfp4 (OCP MX, fp4 elements, weights only), W-mx6 (shared micro-exponents, weights
only); the block formats on Linear layers (all of MiniLM's layers; the digits CNN's two fully
connected layers, its convolutions have too few input channels for the blocks). Digits: mean over seeds of the accuracy change; MiniLM: mean cosine similarity of sentence
embeddings of 128 held-out sentences (calibration: 64 others).

    .venv/bin/python benchmarks/formats_accuracy.py [--seeds 0 1 2] [--skip-minilm]
"""

from __future__ import annotations

import argparse
import statistics
import warnings

from quark.torch.examples import digits
from quark.torch.extensions.brevitas.api import ModelQuantizer
from quark.torch.quantization.config.config import Config, QuantizationConfig, QuantizationSpec
from quark.torch.quantization.config.type import Dtype


def config(weight: QuantizationSpec, inputs: QuantizationSpec | None = None) -> Config:
    return Config(global_quant_config=QuantizationConfig(weight=weight, input_tensors=inputs))


def linear_only(weight: QuantizationSpec) -> Config:
    """Block formats need the reduction axis to be a multiple of the block: the digits CNN's
    convolutions (1 and 16 input channels) cannot hold 32-element blocks, so Linear layers only."""
    return Config(global_quant_config=QuantizationConfig(), layer_type_quant_config={"Linear": QuantizationConfig(weight=weight)})


CONFIGS = {
    "W-int8 / A-int8": config(QuantizationSpec(dtype=Dtype.int8), QuantizationSpec(dtype=Dtype.int8)),
    "W-fp8 / A-fp8 (e4m3)": config(QuantizationSpec(dtype=Dtype.fp8_e4m3), QuantizationSpec(dtype=Dtype.fp8_e4m3)),
    "W-mxfp4 (Linear layers)": linear_only(QuantizationSpec(dtype=Dtype.mx, mx_element_dtype=Dtype.fp4)),
    "W-mx6 (Linear layers)": linear_only(QuantizationSpec(dtype=Dtype.mx6)),
}


def digits_changes(seeds: list[int]) -> dict:
    """Float accuracy per seed, and per config the accuracy change (points) per seed."""
    changes: dict[str, list[float]] = {name: [] for name in CONFIGS}
    floats = []
    for seed in seeds:
        model, data = digits.trained_cnn(seed)
        base = digits.accuracy(model, data)
        floats.append(base)
        calib = data.loader("train", batch_size=64)
        for name, cfg in CONFIGS.items():
            qmodel = ModelQuantizer(cfg).quantize_model(model, calib, progress=False)
            changes[name].append(digits.accuracy(qmodel, data) - base)
    return {"float_accuracy": floats, "accuracy_change": changes}


def minilm_cosines() -> dict[str, float]:
    """Per config, the mean cosine of MiniLM's embeddings to the float ones (128 held-out sentences)."""
    from quark.torch.examples import minilm

    model, tokenizer = minilm.load()
    calib = minilm.batches(tokenizer, minilm.sentences(64))
    test = minilm.batches(tokenizer, minilm.sentences(128, offset=64))
    rows = {}
    for name, cfg in CONFIGS.items():
        qmodel = ModelQuantizer(cfg).quantize_model(model, calib, progress=False)
        rows[name] = minilm.embedding_similarity(model, qmodel, test)
    return rows


def measure(seeds: list[int], with_minilm: bool = True) -> dict:
    warnings.simplefilter("ignore")  # transformers' deprecation notices are not ours to act on
    result = {"seeds": seeds, "digits": digits_changes(seeds)}
    if with_minilm:
        result["minilm_cosine"] = minilm_cosines()
    return result


def main(seeds: list[int], skip_minilm: bool) -> None:
    result = measure(seeds, not skip_minilm)
    found = result["digits"]
    print(f"digits CNN float accuracy per seed: {', '.join(f'{a:.2f}%' for a in found['float_accuracy'])}")
    table = {
        "digits accuracy change, mean (per seed), points": {
            name: f"{statistics.mean(v):+.2f} ({', '.join(f'{d:+.2f}' for d in v)})"
            for name, v in found["accuracy_change"].items()
        }
    }
    if "minilm_cosine" in result:
        table["all-MiniLM-L6-v2 embedding cosine vs float"] = {
            name: f"{cos:.4f}" for name, cos in result["minilm_cosine"].items()
        }
    width = max(map(len, CONFIGS))
    for column, rows in table.items():
        print(f"\n{'config':<{width}}  {column}")
        for name in CONFIGS:
            print(f"{name:<{width}}  {rows[name]}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--skip-minilm", action="store_true")
    args = parser.parse_args()
    main(args.seeds, args.skip_minilm)
