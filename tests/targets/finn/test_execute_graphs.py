"""The batched executor on real FINN graphs, tensor by tensor against FINN's Python execution (qonnx's
``execute_onnx`` with its full execution context, one sample at a time), identical (atol=0): the
demo network's (``examples/digits_qat_finn.py``: digits' ResidualCNN, graph-mode FINN preset W4A4,
integer input), the FINN zoo's (``_shared/finn_zoo.py``, ``benchmarks/finn_zoo.py``: TFC, CNV,
ResNet-like, concatenation, MobileNet-like; TFC with FINN's top-1 LabelSelect; TFC-W1A1 with
FINN's XNOR-popcount MVAUs; a global average pool as FINN's GlobalAccPool) and the graph-mode
zoo's (``_shared/zoo.py``, ``benchmarks/graph_finn_zoo.py``). Each network's streamlined graph (FINN's hand-off), its
hardware-layer parent graph and the dataflow partition inside it, on real digits and on random
inputs of the input's range; and the parent's outputs on 64 test images through :func:`execute`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np
import pytest
import torch
from torch import nn

pytest.importorskip(
    "finn.transformation.fpgadataflow.create_dataflow_partition", reason="finn-plus is not installed"
)

from _shared import finn_zoo
from _shared.zoo import GRAPH_ZOO, ZOO, calibration, with_statistics
from qonnx.core.modelwrapper import ModelWrapper
from qonnx.core.onnx_exec import execute_onnx
from qonnx.custom_op.registry import getCustomOp

from quark.torch.examples import digits
from quark.torch.extensions.brevitas._backend.export.verify import execute_qonnx
from quark.torch.extensions.brevitas._backend.targets.finn import dataflow as finn_dataflow
from quark.torch.extensions.brevitas._backend.targets.finn import execute, interface
from quark.torch.extensions.brevitas._backend.targets.finn.build_config import FinnBuildConfig
from quark.torch.extensions.brevitas.api import ModelExporter, ModelQuantizer
from quark.torch.extensions.brevitas.presets import finn
from quark.torch.quantization.config.config import TQTSpec
from quark.torch.quantization.config.type import TQTThresholdInitMeth

SAMPLES = 8  # real and random samples compared tensor by tensor (FINN runs each alone)
OUTPUT_SAMPLES = 64  # test images through the whole parent graph


@dataclass
class Graphs:
    """A network's FINN graphs and inputs of its (integer or float) network input."""

    streamlined: ModelWrapper
    parent: ModelWrapper
    partition: ModelWrapper
    real: np.ndarray
    random: np.ndarray
    op_types: set[str]  # hardware layers and host nodes of the parent and partition


def _digits() -> tuple[torch.Tensor, torch.Tensor]:
    train, test = finn_zoo.digits_batches()
    return torch.cat(train), test


def _global_pool_net() -> nn.Module:
    """Convolutions, a global average pool (FINN's GlobalAccPool and a scale folded downstream), a head."""
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10),
    )  # fmt: skip


def _binary_tfc() -> nn.Module:
    """FINN's TFC-W1A1 shape: bipolar weights and activations (FINN's XNOR-popcount MVAUs)."""
    import brevitas.nn as qnn
    from brevitas.quant import SignedBinaryActPerTensorConst, SignedBinaryWeightPerTensorConst

    def linear(cin: int, cout: int) -> qnn.QuantLinear:
        return qnn.QuantLinear(cin, cout, bias=False, weight_quant=SignedBinaryWeightPerTensorConst)

    def sign() -> qnn.QuantIdentity:
        return qnn.QuantIdentity(act_quant=SignedBinaryActPerTensorConst, return_quant_tensor=True)

    return nn.Sequential(
        nn.Flatten(), finn_zoo._input_quant(), linear(64, 64), nn.BatchNorm1d(64), sign(),
        linear(64, 64), nn.BatchNorm1d(64), sign(), linear(64, 10),
    )  # fmt: skip


def _graph_mode(model: nn.Module, calib, unsigned=("ReLU",)) -> nn.Module:
    config = finn(unsigned=unsigned, qat_spec=TQTSpec(TQTThresholdInitMeth._3SD))
    return ModelQuantizer(config).quantize_model(model.eval(), calib, progress=False)


def _build(name: str, directory) -> tuple[nn.Module, torch.Tensor, bool, int | None]:
    """(quantized model, real inputs, integer network input?, top_k) of a network."""
    train, test = _digits()
    if name == "demo":  # examples/digits_qat_finn.py's network and config, briefly trained
        data = digits.load(0)
        torch.manual_seed(0)
        model = digits.train(digits.ResidualCNN(), data, epochs=3, seed=0)
        config = finn(weight_bits=4, act_bits=4, qat_spec=TQTSpec(TQTThresholdInitMeth._3SD))
        return (
            ModelQuantizer(config).quantize_model(model, data.loader("train"), progress=False),
            test,
            True,
            None,
        )
    if name == "tfc-w1a1":
        return finn_zoo.calibrated(_binary_tfc, list(train[:256].split(64))), test, False, None
    if name == "tfc-top1":
        return (
            finn_zoo.calibrated(partial(finn_zoo.tfc, head_bias=False), list(train[:256].split(64))),
            test,
            False,
            1,
        )
    if name == "global-pool":
        torch.manual_seed(0)
        return _graph_mode(_global_pool_net(), list(train[:256].split(64))), test, True, None
    if name.startswith("graph-"):
        entry = ZOO[name.removeprefix("graph-")]
        unsigned = ("ReLU6",) if entry is ZOO["mobilenet"] else ("ReLU",)
        model = _graph_mode(with_statistics(name.removeprefix("graph-")), calibration(entry), unsigned)
        real = torch.cat([entry.sample(torch.Generator().manual_seed(s)) for s in range(8)])
        return model, real, True, None
    return finn_zoo.calibrated(name, list(train[:256].split(64))), test, False, None


def _random_like(model: ModelWrapper, real: np.ndarray) -> np.ndarray:
    """Random inputs over the input's range: its integers, or floats around the images' [0, 1]."""
    datatype = model.get_tensor_datatype(model.graph.input[0].name)
    rng = np.random.default_rng(1)
    shape = (SAMPLES, *real.shape[1:])
    if datatype.is_integer():
        return rng.integers(int(datatype.min()), int(datatype.max()) + 1, size=shape).astype(np.float32)
    return rng.uniform(-0.5, 1.5, size=shape).astype(np.float32)


def graphs_of(name: str, directory) -> Graphs:
    model, x, integer, top_k = _build(name, directory)
    path = directory / f"{name}.onnx"
    ModelExporter(path).export_qonnx_model(model, x[:16])
    inputs = x.numpy()
    if integer:
        inputs = interface.integer_input(path).integers(inputs)
    streamlined = finn_dataflow.finn_handoff(path, inputs[:4], directory / f"{name}_streamlined.onnx")
    dataflow = finn_dataflow.dataflow_from_qonnx(path, inputs[:4], directory / name, FinnBuildConfig(top_k=top_k))
    parent = dataflow.parent
    streamlined = ModelWrapper(streamlined.path)
    ops = {n.op_type for g in (streamlined, parent, dataflow.partition) for n in g.graph.node}
    return Graphs(streamlined, parent, dataflow.partition, inputs, _random_like(parent, inputs), ops)


def finn_tensors(model: ModelWrapper, x: np.ndarray) -> dict[str, np.ndarray]:
    """Every tensor of FINN's execution, sample by sample, stacked (initializers left out)."""
    name = model.graph.input[0].name
    contexts = [
        execute_onnx(model, {name: x[k : k + 1]}, return_full_exec_context=True) for k in range(len(x))
    ]
    computed = [t for t in contexts[0] if t and model.get_initializer(t) is None]
    return {t: np.concatenate([c[t] for c in contexts]) for t in computed}


def assert_tensor_by_tensor(model: ModelWrapper, x: np.ndarray) -> dict[str, np.ndarray]:
    """Every tensor FINN computes equals the executor's (same dtype and shape, atol=0); FINN's tensors."""
    theirs = finn_tensors(model, x)
    ours = execute.run_program(execute.compile_graph(model), [x], chunk=3, keep=True)
    assert set(theirs) <= set(ours)
    for tensor, value in theirs.items():
        producer = model.find_producer(tensor)
        where = f"{tensor} ({producer.name if producer else 'graph input'})"
        assert ours[tensor].dtype == value.dtype and ours[tensor].shape == value.shape, where
        np.testing.assert_array_equal(ours[tensor], value, err_msg=where)
    return theirs


#: network -> op types its graphs (streamlined, parent, partition) must contain (the rows they exercise)
NETWORKS: dict[str, set[str]] = {
    "demo": {"MVAU", "ConvolutionInputGenerator", "FMPadding", "ElementwiseAdd", "DuplicateStreams", "Pool"},
    "tfc": {"MVAU", "Thresholding", "Flatten", "Mul", "Add"},
    "tfc-top1": {"MVAU", "LabelSelect"},
    "tfc-w1a1": {"MVAU", "XnorPopcountMatMul"},  # binaryXnorMode MVAUs (checked below)
    "cnv": {"MVAU", "Pool", "Thresholding", "Transpose"},
    "resnet": {"ElementwiseAdd", "DuplicateStreams"},
    "concat": {"StreamingConcat", "DuplicateStreams"},
    "mobilenet": {"VVAU", "MVAU"},
    "global-pool": {"GlobalAccPool"},
    **{f"graph-{name}": {"MVAU"} for name in GRAPH_ZOO},
}
FAST = ("tfc", "tfc-top1", "tfc-w1a1")  # the others take 10 to 30 s each on two shared cores


@pytest.mark.parametrize(
    "name", [n if n in FAST else pytest.param(n, marks=pytest.mark.slow) for n in NETWORKS]
)
def test_every_tensor_of_the_finn_graphs_equals_finns_execution(tmp_path, name):
    graphs = graphs_of(name, tmp_path)
    assert NETWORKS[name] <= graphs.op_types, graphs.op_types
    if name == "tfc-w1a1":
        mvaus = graphs.partition.get_nodes_by_op_type("MVAU")
        assert sum(getCustomOp(n).get_nodeattr("binaryXnorMode") for n in mvaus) == 2
    for x in (graphs.real[:SAMPLES], graphs.random):
        assert_tensor_by_tensor(graphs.streamlined, x)
        parent = assert_tensor_by_tensor(graphs.parent, x)
        sdp = graphs.parent.get_nodes_by_op_type("StreamingDataflowPartition")[0]
        assert_tensor_by_tensor(graphs.partition, parent[sdp.input[0]])
    # the parent graph's outputs on more test images, through the entry point the export uses
    x = graphs.real[:OUTPUT_SAMPLES]
    result = execute.execute(graphs.parent, [x])
    assert result.engine == execute.BATCHED, result.reason
    for ours, theirs in zip(result.outputs, execute_qonnx(graphs.parent, [x])):
        assert ours.dtype == theirs.dtype
        np.testing.assert_array_equal(ours, theirs)
