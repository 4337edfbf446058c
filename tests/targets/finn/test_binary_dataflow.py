"""A binary MLP (W1A1 through ``presets.finn``) through FINN's dataflow: one partition whose hidden
layers are XNOR-popcount MVAUs (``binaryXnorMode=1``), the estimate naming their arithmetic, and the
hardware graph executed in Python identical to torch."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
import torch
from _shared.quantize import quantize
from torch import nn

pytest.importorskip(
    "finn.transformation.fpgadataflow.create_dataflow_partition",
    reason="finn-plus is not installed (pip install --no-deps finn-plus==1.6.1; see docs/export.md)",
)

from qonnx.core.modelwrapper import ModelWrapper
from qonnx.custom_op.registry import getCustomOp

from quark.torch.extensions.brevitas import presets
from quark.torch.extensions.brevitas.api import ModelExporter

pytestmark = pytest.mark.slow  # about 30 s here (a loaded machine)


def _binary_mlp() -> nn.Module:
    torch.manual_seed(0)
    layers: list[nn.Module] = [nn.Flatten()]
    width = 64
    for _ in range(2):
        layers += [nn.Linear(width, 32), nn.BatchNorm1d(32), nn.ReLU()]
        width = 32
    layers.append(nn.Linear(width, 10))
    model = nn.Sequential(*layers)
    model.train()
    for _ in range(3):
        model(torch.rand(64, 1, 8, 8))  # batch norm statistics
    return model.eval()


def test_w1a1_reaches_xnor_popcount_layers_in_one_partition(tmp_path):
    model = quantize(presets.finn(weight_bits=1, act_bits=1), _binary_mlp(), [torch.rand(64, 1, 8, 8)])
    x = torch.rand(96, 1, 8, 8)
    result = ModelExporter(tmp_path).export_finn_dataflow(model, x)
    parent = onnx.load(result.files["parent"])
    assert [n.op_type for n in parent.graph.node].count("StreamingDataflowPartition") == 1
    partition = ModelWrapper(result.files["partition"])
    mvaus = [getCustomOp(n) for n in partition.graph.node if n.op_type.startswith("MVAU")]
    modes = [(m.get_nodeattr("binaryXnorMode"), m.get_nodeattr("inputDataType"), m.get_nodeattr("weightDataType")) for m in mvaus]
    # the first layer takes the 8-bit pixels (its bipolar weights as INT2 values -1 / +1), the others XNOR
    assert modes == [(0, "UINT8", "INT2"), (1, "BINARY", "BINARY"), (1, "BINARY", "BINARY")]
    # the estimate says so, per layer, in JSON and markdown
    layers = json.loads(Path(result.files["estimate_json"]).read_text())["layers"]
    arithmetic = [layer["arithmetic"] for layer in layers if layer["op_type"].startswith("MVAU")]
    assert arithmetic == ["UINT8 x INT2", "XNOR-popcount", "XNOR-popcount"]
    assert Path(result.files["estimate_md"]).read_text().count("| XNOR-popcount |") == 2
    # the hardware graph, executed in Python, against torch on every sample
    verification = result.verification
    assert verification.reference == "torch" and verification.samples == 96
    assert verification.passed and verification.predictions_identical
