"""Where an exported QDQ graph and its torch model part: every activation quantizer compared.

For each activation ``QuantizeLinear`` / ``DequantizeLinear`` pair the exporter wrote (its node name
carries the quantizer's module path; the n-th ``export_handler_n`` is the n-th call), the dequantized
values from ONNX Runtime (optimizations off) against the torch quantizer's output: the largest
difference and the fraction of elements that differ, in graph order. Used for docs/ipu.md's account of
the all-MiniLM-L6-v2 A8W8 graph (issue 22): one-LSB flips from float rounding, amplified by the
coarse attention-score step.

    .venv/bin/python benchmarks/qdq_divergence.py [--preset a8w8] [--calib 32] [--sentences 4]
"""

from __future__ import annotations

import argparse
import re
import tempfile
import warnings
from collections import defaultdict
from pathlib import Path

import numpy as np
import onnx
import torch

from quark.torch.examples import minilm
from quark.torch.extensions.brevitas import presets
from quark.torch.extensions.brevitas.api import ModelExporter, ModelQuantizer

HANDLER = re.compile(r"^/(?:model/)?(?P<path>.+)/export_handler(?:_(?P<call>\d+))?/DequantizeLinear$")


def activation_dequantizers(model: onnx.ModelProto) -> list[tuple[str, int, str]]:
    """(quantizer path as the exporter's scopes name it, call index, output tensor) in graph order."""
    found = []
    for node in model.graph.node:
        match = HANDLER.match(node.name) if node.op_type == "DequantizeLinear" else None
        if match and not re.search(r"(weight|bias)_quant$", match["path"]):
            found.append((match["path"].replace("/", "."), int(match["call"] or 0), node.output[0]))
    return found


def divergence(qmodel: torch.nn.Module, path: Path, feeds: dict[str, torch.Tensor]) -> list[tuple[str, int, float, float]]:
    """(quantizer, call, max |diff|, fraction of elements that differ) for every activation quantizer."""
    import onnxruntime as ort

    model = onnx.load(path)
    sites = activation_dequantizers(model)
    for _, _, output in sites:
        model.graph.output.append(onnx.helper.make_tensor_value_info(output, onnx.TensorProto.FLOAT, None))
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    produced = dict(zip([o.name for o in session.get_outputs()], session.run(None, {n: feeds[n].numpy() for n in names})))
    # the exporter's scopes drop the parents' names (layers.3.q.quant.act_quant is "q.quant.act_quant",
    # its 4th call): hook every module whose name ends with the scope, in call order
    captured: dict[str, list[np.ndarray]] = defaultdict(list)
    hooks = []
    for scope in {s for s, _, _ in sites}:
        for name, module in qmodel.named_modules():
            if name == scope or name.endswith("." + scope):
                hooks.append(module.register_forward_hook(lambda m, i, out, scope=scope: captured[scope].append(
                    (getattr(out, "value", out)).detach().float().numpy())))
    with torch.no_grad():
        qmodel(**{n: feeds[n] for n in names})
    for hook in hooks:
        hook.remove()
    rows = []
    for scope, call, output in sites:
        torch_values, graph_values = captured[scope][call], produced[output]
        rows.append((scope, call, float(np.abs(torch_values - graph_values).max()), float((torch_values != graph_values).mean())))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="a8w8", choices=["xint8", "a8w8", "a16w8"])
    parser.add_argument("--calib", type=int, default=32)
    parser.add_argument("--sentences", type=int, default=4, help="held-out sentences (the last of the text)")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    model, tokenizer = minilm.load()
    calib = minilm.batches(tokenizer, minilm.sentences(args.calib))
    total = len(minilm.sentences(10**6))
    (test,) = minilm.batches(tokenizer, minilm.sentences(args.sentences, offset=total - args.sentences), batch_size=args.sentences)
    qmodel = ModelQuantizer(getattr(presets, args.preset)(graph=True)).quantize_model(
        minilm.traceable(model), calib, progress=False, check_algorithms=False
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "minilm.onnx"
        ModelExporter(path).export_onnx_model(qmodel, test, verify=False)
        rows = divergence(qmodel.eval(), path, test)
    print(f"all-MiniLM-L6-v2, graph mode {args.preset}, {args.sentences} held-out sentences: ONNX Runtime vs torch")
    print(f"{'quantizer':<34} {'call':>4} {'max |diff|':>11} {'differ':>8}")
    for scope, call, diff, fraction in rows:
        print(f"{scope:<34} {call:>4} {diff:>11.4g} {fraction:>8.2%}")


if __name__ == "__main__":
    main()
