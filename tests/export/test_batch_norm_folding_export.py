"""Batch norm folded during QAT (``TQTSpec.fold_batch_norm``) exports as merged batch norm: the
QONNX and QCDQ graphs equal those of a model whose batch norm was merged before quantization (same
nodes, same initializers), and a trained folded model's export is verified against torch (executed
by qonnx / onnxruntime) and leaves the model as it was."""

from __future__ import annotations

import onnx
import pytest
import torch
from onnx import numpy_helper
from torch import nn

from quark.torch.extensions.brevitas._backend.folding import FoldedBatchNorm
from quark.torch.extensions.brevitas.api import ModelExporter, ModelQuantizer
from quark.torch.quantization.config.algorithms import MergeBatchNorm
from quark.torch.quantization.config.config import Config, QuantizationConfig, QuantizationSpec, TQTSpec
from quark.torch.quantization.config.type import Dtype, QuantizationMode, ScaleType, TQTThresholdInitMeth

MODES = {"layerwise": QuantizationMode.eager_mode, "graph": QuantizationMode.fx_graph_mode}
FORMATS = ["export_qonnx_model", "export_onnx_model"]


def model_and_batches() -> tuple[nn.Module, list[torch.Tensor]]:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 6, 3, padding=1),
        nn.BatchNorm2d(6),
        nn.ReLU(),
        nn.Conv2d(6, 8, 3, padding=1, bias=False),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(8 * 6 * 6, 16),
        nn.BatchNorm1d(16),
        nn.ReLU(),
        nn.Linear(16, 4),
    )
    batches = [torch.rand(16, 1, 6, 6) for _ in range(3)]
    model.train()
    with torch.no_grad():
        for x in batches:
            model(x)
    return model.eval(), batches


def config(mode: QuantizationMode, merge: bool = False, **fields) -> Config:
    def tqt(dtype: Dtype) -> QuantizationSpec:
        spec = TQTSpec(TQTThresholdInitMeth._3SD, **fields)
        return QuantizationSpec(dtype=dtype, symmetric=True, scale_type=ScaleType.pof2, qat_spec=spec)

    return Config(
        global_quant_config=QuantizationConfig(weight=tqt(Dtype.int4), input_tensors=tqt(Dtype.uint8)),
        quant_mode=mode,
        pre_quant_opt_config=[MergeBatchNorm()] if merge else [],
    )


def graph_of(path) -> tuple[list[str], dict]:
    graph = onnx.load(str(path)).graph
    return [n.op_type for n in graph.node], {i.name: numpy_helper.to_array(i) for i in graph.initializer}


@pytest.mark.parametrize("method", FORMATS)
@pytest.mark.parametrize("mode", MODES)
def test_the_export_is_that_of_batch_norm_merged_before_quantization(mode, method, tmp_path):
    model, batches = model_and_batches()
    folded = ModelQuantizer(config(MODES[mode])).quantize_model(model, batches, progress=False)
    merged = ModelQuantizer(config(MODES[mode], merge=True)).quantize_model(model, batches, progress=False)
    assert sum(isinstance(m, FoldedBatchNorm) for m in folded.modules()) == 3
    x = batches[0]
    getattr(ModelExporter(tmp_path / "folded.onnx"), method)(folded, x)
    getattr(ModelExporter(tmp_path / "merged.onnx"), method)(merged, x)
    nodes, weights = graph_of(tmp_path / "folded.onnx")
    merged_nodes, merged_weights = graph_of(tmp_path / "merged.onnx")
    assert "BatchNormalization" not in nodes
    assert nodes == merged_nodes
    assert weights.keys() == merged_weights.keys()
    assert all((weights[k] == merged_weights[k]).all() for k in weights)


@pytest.mark.parametrize("method", FORMATS)
@pytest.mark.parametrize("mode", MODES)
def test_a_trained_folded_model_exports_verified_and_stays_folded(mode, method, tmp_path):
    model, batches = model_and_batches()
    # statistics never frozen: the batch-statistics forward trains, the export is merged batch norm
    cfg = config(MODES[mode], freeze_batch_norm_steps=None)
    qmodel = ModelQuantizer(cfg).quantize_model(model, batches, progress=False).train()
    optimizer = torch.optim.Adam(qmodel.parameters(), lr=1e-2)
    for x in batches:
        optimizer.zero_grad()
        qmodel(x).square().mean().backward()
        optimizer.step()
    state = {k: v.clone() for k, v in qmodel.state_dict().items()}
    report = getattr(ModelExporter(tmp_path / "m.onnx"), method)(qmodel, torch.cat(batches))
    assert report.passed and all(o.max_abs_diff == 0 for o in report.outputs)
    assert "BatchNormalization" not in graph_of(tmp_path / "m.onnx")[0]
    assert qmodel.training and sum(isinstance(m, FoldedBatchNorm) for m in qmodel.modules()) == 3
    after = qmodel.state_dict()
    assert after.keys() == state.keys() and all(torch.equal(after[k], state[k]) for k in state)
