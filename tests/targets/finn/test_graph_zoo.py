"""Graph mode on the export zoo's FPGA shapes: a TFC-like MLP, a CNV-like CNN, a ResNet-like
network with batch norm, a network with a concatenation and a MobileNet-like network with
depthwise convolutions.

The FINN preset, PTQ and a few QAT steps, QONNX export verified, the network input made integer,
ConvertQONNXtoFINN and StreamlinePlus; the streamlined graph computes exactly what the torch model
does, and between the first and last compute layer only integer nodes remain. Then FINN's dataflow:
one partition, its execution equal to torch, an estimate for the part. (The NPU side:
``tests/targets/ipu/test_graph_zoo.py``.)
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from _shared.zoo import GRAPH_ZOO, ZOO, calibration, with_statistics

from quark.torch.extensions.brevitas._backend.targets.finn import interface as finn_interface
from quark.torch.extensions.brevitas.api import ModelExporter, ModelQuantizer
from quark.torch.extensions.brevitas.presets import finn
from quark.torch.quantization.config.config import TQTSpec
from quark.torch.quantization.config.type import TQTThresholdInitMeth

#: network -> activation types with non-negative outputs
UNSIGNED = {"mobilenet": ("ReLU6",)}
#: network -> float nodes FINN leaves between its first and last compute layer (ReLU6's Clip is
#: absorbed into the thresholds by the hand-off)
FLOAT_OPERATIONS = dict.fromkeys(GRAPH_ZOO, 0)


def _qat_steps(model: torch.nn.Module, name: str, steps: int = 3) -> None:
    g = torch.Generator().manual_seed(9)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model.train()
    for _ in range(steps):
        x = ZOO[name].sample(g)
        optimizer.zero_grad()
        F.cross_entropy(model(x), torch.randint(0, 10, (x.shape[0],), generator=g)).backward()
        optimizer.step()
    model.eval()


@pytest.mark.slow
@pytest.mark.parametrize("name", GRAPH_ZOO)
def test_finn_streamlines_the_graph_into_an_integer_dataflow_equal_to_torch(tmp_path, name):
    from quark.torch.extensions.brevitas.api import finn_handoff

    pytest.importorskip("finn.transformation.qonnx.convert_qonnx_to_finn", reason="finn-plus is not installed")
    config = finn(unsigned=UNSIGNED.get(name, ("ReLU",)), qat_spec=TQTSpec(TQTThresholdInitMeth._3SD))
    qmodel = ModelQuantizer(config).quantize_model(with_statistics(name), calibration(ZOO[name]), progress=False)
    _qat_steps(qmodel, name)
    x = ZOO[name].sample(torch.Generator().manual_seed(1))
    path = tmp_path / f"{name}.onnx"
    report = ModelExporter(path).export_qonnx_model(qmodel, x)
    assert report.passed and report.target_checks  # the FINN target's graph checks ran

    integer = finn_interface.integer_input(path, tmp_path / f"{name}_int.onnx")
    assert integer.datatype == "UINT8"
    x_int = torch.clamp(torch.floor(x / integer.scale + 0.5), 0, 255)
    handoff = finn_handoff(tmp_path / f"{name}_int.onnx", x_int)
    assert handoff.input_datatypes == ("UINT8",)
    from qonnx.core.modelwrapper import ModelWrapper

    from quark.torch.extensions.brevitas._backend.export.verify import execute_qonnx

    streamlined = ModelWrapper(handoff.path)
    produced = execute_qonnx(streamlined, [x_int.numpy()])[0]  # the hand-off's graph takes one sample at a time
    with torch.no_grad():
        expected = qmodel(x).numpy()
    np.testing.assert_array_equal(produced, expected)
    floats = finn_interface.float_operations(streamlined)
    assert len(floats) == FLOAT_OPERATIONS[name], floats
    assert "MultiThreshold" in handoff.steps[-1].op_types and "Quant" not in handoff.steps[-1].op_types


@pytest.mark.slow
@pytest.mark.parametrize("name", GRAPH_ZOO)
def test_graph_mode_reaches_one_finn_dataflow_partition_equal_to_torch(tmp_path, name):
    """Issue 12 from a float model and a Quark config: FINN preset, graph mode, QAT steps, then
    ``export_finn_dataflow`` with an integer input: one partition of hardware layers (only the input
    layout change on the host), its Python execution equal to torch, an estimate for the part."""
    pytest.importorskip("finn.transformation.fpgadataflow.create_dataflow_partition", reason="finn-plus is not installed")
    config = finn(unsigned=UNSIGNED.get(name, ("ReLU",)), qat_spec=TQTSpec(TQTThresholdInitMeth._3SD))
    qmodel = ModelQuantizer(config).quantize_model(with_statistics(name), calibration(ZOO[name]), progress=False)
    _qat_steps(qmodel, name)
    x = torch.cat([ZOO[name].sample(torch.Generator().manual_seed(s)) for s in range(2)])
    result = ModelExporter(tmp_path).export_finn_dataflow(qmodel.eval(), x, part="xc7z020clg400-1", integer_input=True)
    assert result.verification.passed and result.verification.samples == len(x)
    assert result.verification.max_abs_diff == 0.0
    # on the host: the input's layout change and the output's float scale and bias
    # (each named "<node> (<op>[, module '<torch module>'])")
    ops = [o.split(" (", 1)[1].split(",")[0].rstrip(")") for o in result.outside]
    assert all(op in ("Transpose", "Flatten", "Mul", "Add") for op in ops), result.outside
    assert result.estimate.fps > 0 and result.estimate.totals["LUT"] > 0
