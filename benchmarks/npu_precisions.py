"""The NPU's precisions on the real all-MiniLM-L6-v2 (issue 22): every preset, and A8/A16 mixing.

Data: calibration = the first ``--calib`` sentences of CPython's documentation topics; held-out
test = the *last* ``--test`` sentences of the same text (chosen by position, not by looking at
them); the mixing search's evaluation set = every sentence between the two (2,209 by default), or
``--mix-eval`` sentences from ``--mix-eval-offset`` on. Metric: mean cosine similarity of the
sentence embeddings (attention-masked mean of the last hidden state, L2-normalised) with the float
transformers model's.

Rows:

- ``layerwise``: the preset on transformers' ``BertModel`` as it is (the inputs of the 37 Linear
  layers quantized; LayerNorm, Softmax, GELU, the attention products and the residual additions
  float): the torch model's cosine.
- ``graph``: the preset in graph mode on ``examples.minilm.traceable`` (same weights): every
  activation site quantized (``QuantPoint``s, LayerNorm, Softmax, GELU, additions). Exported as a
  QDQ graph at opset 17 (the IPU target's checks, integer-only rule included, run on it), executed
  in ONNX Runtime (optimizations off) on every held-out sentence: the cosine of the *ONNX Runtime*
  embeddings with float, and their cosine with the torch model's.
- ``mixed``: ``mix(presets.a8w8(graph=True, calibration=...), ...)`` to ``--target`` on the mixing
  evaluation set (activation ranges by ``--mixed-calibration``, MSE by default), then as ``graph``.

    .venv/bin/python benchmarks/npu_precisions.py [--rows ...] [--target 0.995] [--mixed-calibration mse] [--threads 1] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import warnings
from pathlib import Path

import torch

from quark.torch.examples import minilm
from quark.torch.extensions.brevitas import presets
from quark.torch.extensions.brevitas.api import ModelExporter, ModelQuantizer
from quark.torch.extensions.brevitas.mixing import mix

BATCH = 4  # the exported graph's static batch
SENSITIVITY_BATCHES = 2  # the mixing search's sensitivities on the first 32 calibration sentences
ROWS = [
    "layerwise xint8",
    "layerwise a8w8",
    "layerwise a16w8",
    "layerwise bf16",
    "layerwise bfp16",
    "graph xint8",
    "graph a8w8",
    "graph a16w8",
    "graph bf16",
    "mixed a8w8/a16w8",
]


def embeddings_onnxruntime(path: Path, data: list[dict]) -> torch.Tensor:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    out = []
    for batch in data:
        (hidden,) = session.run(None, {n: batch[n].numpy() for n in names})
        hidden = torch.from_numpy(hidden)
        mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        out.append(torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1))
    return torch.cat(out)


@torch.no_grad()
def embeddings(model, data) -> torch.Tensor:
    return torch.cat([minilm.embed(model, b) for b in data])


def sites_at_16(plans) -> tuple[int, int]:
    """(activation sites whose own quantizer is 16-bit, activation sites with a quantizer of their own)."""
    own = {
        (p.name, s.bit_width)
        for p in plans
        for role in ("input_tensors", "output_tensors")
        if (s := p.specs.get(role)) is not None and role not in p.upstream
    }
    sites = {name for name, _ in own}
    return len({name for name, bits in own if bits == 16}), len(sites)


def measure(args, out: Path) -> dict:
    rows, n_calib, n_test, target = args.rows, args.calib, args.test, args.target
    warnings.simplefilter("ignore")
    torch.set_num_threads(args.threads)
    model, tokenizer = minilm.load()
    encoder = minilm.traceable(model)
    total = len(minilm.sentences(10**6))
    mix_offset = n_calib if args.mix_eval_offset is None else args.mix_eval_offset
    n_mix_eval = total - n_test - mix_offset if args.mix_eval is None else args.mix_eval
    if mix_offset < n_calib or mix_offset + n_mix_eval > total - n_test:
        raise SystemExit(f"--mix-eval {n_mix_eval} from --mix-eval-offset {mix_offset} overlaps the calibration or test sentences")
    calib = minilm.batches(tokenizer, minilm.sentences(n_calib))
    mix_eval = minilm.batches(tokenizer, minilm.sentences(n_mix_eval, offset=mix_offset))
    test = minilm.batches(tokenizer, minilm.sentences(n_test, offset=total - n_test), batch_size=BATCH)
    reference = embeddings(model, test)
    results = {}
    for row in rows:
        kind, name = row.split(" ", 1)
        start = time.perf_counter()
        result: dict = {}
        if kind == "layerwise":
            quantizer = ModelQuantizer(getattr(presets, name)())
            qmodel = quantizer.quantize_model(model, calib, progress=False, check_algorithms=False)
        else:
            if kind == "mixed":
                found = mix(
                    presets.a8w8(graph=True, calibration=args.mixed_calibration),
                    encoder,
                    calib,
                    mix_eval,
                    metric="cosine",
                    target=target,
                    output_fn=minilm.embed,
                    sensitivity_batches=SENSITIVITY_BATCHES,
                )
                result["mix"] = {
                    "calibration": args.mixed_calibration,
                    "promoted": found.promoted,
                    "search_cosine": found.metric_search,
                    "mix_eval_cosine": found.metric_mixed,
                    "met_on_mix_eval": found.met,
                    "values_16bit": found.values_16bit,
                    "evaluations": found.evaluations,
                    "ranking": found.ranking,
                    "sensitivities": [(c.name, c.gain) for c in found.sites],
                    "bytes_per_sample": found.bytes_per_sample,
                }
                found.config.save(out / "minilm_mixed.yaml")
                config = found.config
            else:
                config = getattr(presets, name)(graph=True)
            quantizer = ModelQuantizer(config)
            qmodel = quantizer.quantize_model(encoder, calib, progress=False, check_algorithms=False)
        candidate = embeddings(qmodel, test)
        result["cosine"] = float((candidate * reference).sum(-1).mean())
        result["min_cosine"] = float((candidate * reference).sum(-1).min())
        result["sites_16"], result["sites"] = sites_at_16(quantizer.plans)
        if kind != "layerwise":
            path = out / f"minilm_{kind}_{name.replace('/', '_')}.onnx"
            try:
                report = ModelExporter(path).export_onnx_model(qmodel, test[0], verify=False)
                result["ipu_checks"] = list(report.target_checks)
                ort_embeddings = embeddings_onnxruntime(path, test)
                result["onnxruntime_cosine"] = float((ort_embeddings * reference).sum(-1).mean())
                result["onnxruntime_vs_torch_cosine"] = float((ort_embeddings * candidate).sum(-1).mean())
                result["onnxruntime_vs_torch_max_abs"] = float((ort_embeddings - candidate).abs().max())
            except Exception as error:  # noqa: BLE001  a refused export is a result of the row
                result["export_error"] = f"{type(error).__name__}: {str(error)[:600]}"
        result["seconds"] = time.perf_counter() - start
        results[row] = result
        print(f"{row:<20} {json.dumps(result, default=str)}", flush=True)
    return {"calib": n_calib, "mix_eval": n_mix_eval, "mix_eval_offset": mix_offset, "test": n_test, "rows": results}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", nargs="+", default=ROWS, choices=ROWS, metavar="ROW")
    parser.add_argument("--calib", type=int, default=128)
    parser.add_argument("--mix-eval", type=int, default=None, help="default: every sentence between calibration and test")
    parser.add_argument("--mix-eval-offset", type=int, default=None, help="default: right after the calibration sentences")
    parser.add_argument("--mixed-calibration", choices=sorted(presets.CALIBRATIONS), default="mse")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--test", type=int, default=316)
    parser.add_argument("--target", type=float, default=0.995)
    parser.add_argument("--out", type=Path, default=None, help="where the ONNX files and results.json go (default: a temporary folder)")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="npu_precisions_"))
    out.mkdir(parents=True, exist_ok=True)
    print(f"all-MiniLM-L6-v2; calibration {args.calib}, mixing evaluation {args.mix_eval or 'between'} "
          f"(offset {args.mix_eval_offset or args.calib}), held-out test: the last {args.test} sentences; "
          f"mixed row calibrated by {args.mixed_calibration}; {args.threads} thread(s); files in {out}")
    results = measure(args, out)
    (out / "results.json").write_text(json.dumps(results, indent=2, default=str))


if __name__ == "__main__":
    main()
