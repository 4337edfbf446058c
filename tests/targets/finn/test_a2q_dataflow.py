"""Accumulator-aware layers (``A2QSpec``) through FINN's dataflow on real digits: after FINN's
MinimizeAccumulatorWidth every MVAU's accumulator is within the promised width, checked by the
export and again here from the written partition alone (plain qonnx, the reference's extremes); the
result, ``estimate.md`` and ``estimate.json`` report each layer with its LUTs against the
unconstrained accumulator; a broken promise (a checkpoint trained at a wider accumulator loaded
into a model promising a narrower one) is caught, naming the layer, the promised and FINN's width.
"""

from __future__ import annotations

import copy
import json

import pytest
import torch
from _reference import a2q as R

pytest.importorskip(
    "finn.transformation.fpgadataflow.create_dataflow_partition",
    reason="finn-plus is not installed (pip install --no-deps finn-plus==1.6.1; see docs/export.md)",
)

from quark.torch.examples import digits
from quark.torch.extensions.brevitas._backend.accumulator import promises, worst_case_bits
from quark.torch.extensions.brevitas._backend.targets.finn.accumulators import signed_bits
from quark.torch.extensions.brevitas.api import FinnError, ModelExporter, ModelQuantizer
from quark.torch.extensions.brevitas.presets import finn
from quark.torch.quantization.config.algorithms import MergeBatchNorm

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def data():
    return digits.load(0)


@pytest.fixture(scope="module")
def float_cnn(data):
    torch.manual_seed(0)
    return digits.train(digits.cnn(), data, epochs=3, seed=0)


def _qat(float_cnn, data, **preset) -> torch.nn.Module:
    config = finn(4, 4, **preset)
    config.pre_quant_opt_config = [MergeBatchNorm()]
    qmodel = ModelQuantizer(config).quantize_model(copy.deepcopy(float_cnn), data.loader("train"), progress=False)
    digits.train(qmodel, data, epochs=1, lr=1e-3, seed=0)
    return qmodel.eval()


def _test_images(data, n: int = 48) -> torch.Tensor:
    return torch.stack([x for x, _ in data.test][:n])


@pytest.mark.parametrize("zero_centered", [True, False], ids=["a2q+", "a2q"])
def test_every_mvau_accumulator_is_within_its_promise(float_cnn, data, zero_centered, tmp_path):
    from qonnx.core.datatype import DataType
    from qonnx.core.modelwrapper import ModelWrapper
    from qonnx.custom_op.registry import getCustomOp

    qmodel = _qat(float_cnn, data, accumulator_bits=12, zero_centered=zero_centered, layer_accumulator_bits={"8": 14})
    promised = promises(qmodel)
    assert {n: p.accumulator_bits for n, p in promised.items()} == {"0": 12, "3": 12, "8": 14, "10": 12}
    result = ModelExporter(tmp_path / "finn").export_finn_dataflow(qmodel, _test_images(data), integer_input=True)
    checks = {c.module: c for c in result.accumulators}
    assert set(checks) == set(promised)
    for module, check in checks.items():
        assert check.holds and check.checked_bits <= promised[module].accumulator_bits
        assert check.method == ("A2Q+" if zero_centered else "A2Q")
        assert check.unconstrained_bits > check.promised_bits  # the bound is what keeps it narrow
        assert check.luts_saved >= 0 and check.luts_unconstrained >= check.luts
    assert sum(c.luts_saved for c in checks.values()) > 0

    # again, from the written partition alone: each MVAU's weights and input type, the reference's extremes
    partition = ModelWrapper(str(tmp_path / "finn" / "dataflow_partition.onnx"))
    by_node = {c.node: c for c in checks.values()}
    for node in partition.graph.node:
        if not node.op_type.startswith("MVAU"):
            continue
        op = getCustomOp(node)
        idt = DataType[op.get_nodeattr("inputDataType")]
        q = torch.from_numpy(partition.get_initializer(node.input[1]).T.copy())  # (out channels, dot length)
        check = by_node[node.name]
        assert R.fits(q, check.promised_bits, idt.bitwidth(), idt.signed())
        acc = op.get_nodeattr("accDataType")
        last = op.get_nodeattr("noActivation") and not partition.find_direct_successors(node)
        assert signed_bits(acc) <= check.promised_bits or (last and acc == "INT16")  # a last layer's bytes
        assert acc == check.acc_type

    report = str(result)
    assert "accumulators (A2QSpec): 4/4 within their promise" in report and "LUTs saved" in report
    for module in checks:
        assert f"{module} (MVAU" in report
    markdown = (tmp_path / "finn" / "estimate.md").read_text()
    assert "## Accumulators (A2QSpec)" in markdown and "LUTs saved on these layers" in markdown
    saved = json.loads((tmp_path / "finn" / "estimate.json").read_text())["accumulators"]
    assert {a["module"] for a in saved} == set(promised) and all(a["holds"] for a in saved)
    assert "Accumulators (A2QSpec): 4 of 4 layers within" in (tmp_path / "finn" / "README.md").read_text()


def test_a_broken_promise_is_caught_naming_the_layer(float_cnn, data, tmp_path):
    """A checkpoint trained at a 16-bit accumulator loaded into a model whose spec promises 10 bits:
    the checkpoint carries Brevitas' accumulator width, so the weights keep the wider bound."""
    wide = _qat(float_cnn, data, accumulator_bits=16)
    narrow_config = finn(4, 4, accumulator_bits=10)
    narrow_config.pre_quant_opt_config = [MergeBatchNorm()]
    narrow = ModelQuantizer(narrow_config).quantize_model(copy.deepcopy(float_cnn), calibrate=False, progress=False)
    narrow.load_state_dict(wide.state_dict())
    narrow.eval()
    assert {p.accumulator_bits for p in promises(narrow).values()} == {10}
    with pytest.raises(FinnError, match=r"accumulators beyond their promise") as caught:
        ModelExporter(tmp_path / "finn").export_finn_dataflow(narrow, _test_images(data), integer_input=True)
    message = str(caught.value)
    assert "module '3' (MVAU_hls_1, A2Q+): promised 10 signed bits (A2QSpec.accumulator_bit_width), FINN's accumulator INT" in message
    assert (tmp_path / "finn" / "estimate.md").exists()  # the files are written for inspection


def test_worst_case_is_finns_data_type_bound(float_cnn, data, tmp_path):
    """``worst_case_bits`` (the unconstrained accumulator of the report) is what FINN's
    MinimizeAccumulatorWidth gives with ``datatype_only=True`` for INT4 weights."""
    from qonnx.core.datatype import DataType
    from qonnx.core.modelwrapper import ModelWrapper
    from qonnx.custom_op.registry import getCustomOp

    qmodel = _qat(float_cnn, data, accumulator_bits=12)
    ModelExporter(tmp_path / "finn").export_finn_dataflow(qmodel, _test_images(data, 8), integer_input=True)
    partition = ModelWrapper(str(tmp_path / "finn" / "dataflow_partition.onnx"))
    seen = 0
    for node in partition.graph.node:
        if node.op_type.startswith("MVAU") and not getCustomOp(node).get_nodeattr("noActivation"):
            op = getCustomOp(node)
            op.set_nodeattr("weightDataType", "INT4")
            idt = DataType[op.get_nodeattr("inputDataType")]
            finn_bits = signed_bits(op.minimize_accumulator_width(partition, datatype_only=True).name)
            assert finn_bits == worst_case_bits(4, idt.bitwidth(), idt.signed(), op.get_nodeattr("MW"))
            seen += 1
    assert seen == 3


def test_a_depthwise_convolution_is_checked_on_its_vvau(data, tmp_path):
    """A depthwise convolution becomes a VVAU (weights per channel, not a matrix): found and checked."""
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
        nn.Conv2d(8, 8, 3, padding=1, groups=8), nn.BatchNorm2d(8), nn.ReLU(),
        nn.Conv2d(8, 16, 1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.MaxPool2d(2), nn.Flatten(), nn.Linear(16 * 16, 10),
    )  # fmt: skip
    model = digits.train(model, data, epochs=2, seed=0)
    config = finn(4, 4, accumulator_bits=10, layer_accumulator_bits={"0": 14})
    config.pre_quant_opt_config = [MergeBatchNorm()]
    qmodel = ModelQuantizer(config).quantize_model(model, data.loader("train"), progress=False)
    digits.train(qmodel, data, epochs=1, lr=1e-3, seed=0)
    result = ModelExporter(tmp_path / "finn").export_finn_dataflow(qmodel.eval(), _test_images(data, 16), integer_input=True)
    checks = {c.module: c for c in result.accumulators}
    assert checks["3"].node.startswith("VVAU") and checks["3"].dot_length == 9
    assert all(c.holds for c in checks.values()) and set(checks) == {"0", "3", "6", "11"}
    assert checks["0"].promised_bits == 14 and checks["3"].promised_bits == 10
