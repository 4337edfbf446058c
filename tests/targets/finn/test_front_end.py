"""The FINN build's front end (``front_end``, through the hand-off's steps): QONNX exports of
FINN-style networks pass qonnx cleanup, ConvertQONNXtoFINN and Streamline with the outputs of the
QONNX graph (which equals torch), on real digits; the package's export of every rounding reaches FINN
exactly, a QONNX file that rounds otherwise than FINN is caught at the conversion, naming the step."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from _shared.models import unit_batches
from _shared.quantize import quantized_on_unit_batches
from _shared.zoo import ZOO
from torch import nn

from quark.torch.extensions.brevitas._backend.targets.finn import interface as finn_interface
from quark.torch.extensions.brevitas.api import (
    FinnError,
    ModelExporter,
    ModelQuantizer,
    finn_handoff,
)
from quark.torch.extensions.brevitas.presets import finn
from quark.torch.quantization.config.config import Config, QuantizationConfig, QuantizationSpec
from quark.torch.quantization.config.type import (
    Dtype,
    QSchemeType,
    RoundType,
    ScaleType,
)
from quark.torch.quantization.observer import PerChannelMinMaxObserver, PerTensorMinMaxObserver

pytest.importorskip(
    "finn.transformation.qonnx.convert_qonnx_to_finn",
    reason="finn-plus is not installed (pip install --no-deps finn-plus==1.6.1; see docs/export.md)",
)


def _finn_config(
    weight_dtype: Dtype, act_dtype: Dtype, per_channel: bool, rounding: RoundType = RoundType.half_even
) -> Config:
    """FINN-friendly: unsigned activations (inputs in [0, 1], after ReLU), zero points 0, pof2 scales."""
    if per_channel:
        weight = QuantizationSpec(
            dtype=weight_dtype,
            observer_cls=PerChannelMinMaxObserver,
            qscheme=QSchemeType.per_channel,
            ch_axis=0,
        )
    else:
        weight = QuantizationSpec(
            dtype=weight_dtype, observer_cls=PerTensorMinMaxObserver, scale_type=ScaleType.pof2
        )
    act = QuantizationSpec(
        dtype=act_dtype,
        observer_cls=PerTensorMinMaxObserver,
        scale_type=ScaleType.pof2,
        round_method=rounding,
    )
    return Config(global_quant_config=QuantizationConfig(weight=weight, input_tensors=act))


CASES = {
    "tfc-w4a4": ("tfc", _finn_config(Dtype.int4, Dtype.uint4, per_channel=False)),
    "cnv-w4a4": ("cnv", _finn_config(Dtype.int4, Dtype.uint4, per_channel=True)),
    # on the 2-bit grid (step 1/4) digits pixels k/16 fall on rounding ties: round them as FINN does
    "tfc-w2a2": ("tfc", _finn_config(Dtype.int2, Dtype.uint2, per_channel=False, rounding=RoundType.round)),
}


@pytest.fixture(scope="module")
def digits():
    from quark.torch.examples import digits as data

    return data.load(seed=0)


def _quantized(case: str, digits):
    name, config = CASES[case]
    torch.manual_seed(0)
    calib = [x for x, _ in digits.loader("train", batch_size=64)][:4]
    qmodel = ModelQuantizer(config).quantize_model(ZOO[name].build().eval(), calib, progress=False)
    return qmodel, next(iter(digits.loader("test", batch_size=16)))[0]


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
def test_finn_convert_and_streamline_keep_the_outputs(tmp_path, digits, case):
    qmodel, x = _quantized(case, digits)
    path = tmp_path / f"{case}.onnx"
    report = ModelExporter(path).export_qonnx_model(qmodel, x)
    assert report.passed
    assert "Shape" not in {
        n.op_type for n in onnx.load(str(path)).graph.node
    }  # nn.Flatten, no dynamic shapes

    finn = finn_handoff(path, x)
    assert [s.name for s in finn.steps] == [
        "step_quark_prepare", "step_quark_qonnx_to_finn", "step_quark_absorb_clips", "step_quark_streamline"
    ]  # fmt: skip
    converted, streamlined = finn.steps[1], finn.steps[3]
    assert "MultiThreshold" in converted.op_types and "Quant" not in converted.op_types
    assert {"MultiThreshold", "MatMul"} <= set(
        streamlined.op_types
    ) and "BatchNormalization" not in streamlined.op_types
    assert converted.max_abs_diff <= 1e-5 and streamlined.max_abs_diff <= 1e-5
    assert (tmp_path / f"{case}_finn.onnx").exists()


def test_every_rounding_reaches_finn_exactly_and_a_file_rounding_otherwise_is_caught(tmp_path, digits):
    """FINN's ConvertQONNXtoFINN ignores Quant's rounding_mode: its thresholds sit at (k + 1/2) x step
    and MultiThreshold counts x >= threshold, i.e. ties round up. A half-even 2-bit activation on
    digits pixels (k/16 on a grid of step 1/4: ties at 2/16, 6/16, ...): the package's export writes
    it as exact thresholds and the hand-off keeps the outputs; Brevitas' own QONNX export of the same
    model writes a Quant node with ROUND, which FINN changes, and the step says so."""
    from brevitas.export import export_qonnx

    config = _finn_config(Dtype.int2, Dtype.uint2, per_channel=False, rounding=RoundType.half_even)
    torch.manual_seed(0)
    calib = [x for x, _ in digits.loader("train", batch_size=64)][:4]
    qmodel = ModelQuantizer(config).quantize_model(ZOO["tfc"].build().eval(), calib, progress=False)
    assert qmodel[1].input_quant.scale().item() == 0.25
    x = next(iter(digits.loader("test", batch_size=16)))[0]
    assert ((x * 16) % 4 == 2).any()  # ties on the input grid
    path = tmp_path / "half_even.onnx"
    assert ModelExporter(path).export_qonnx_model(qmodel, x).passed
    report = finn_handoff(path, x)
    assert all(step.max_abs_diff == 0 for step in report.steps)
    elsewhere = tmp_path / "brevitas.onnx"
    export_qonnx(qmodel, x, str(elsewhere), keep_initializers_as_inputs=False)
    with pytest.raises(
        FinnError, match=r"FINN step 'step_quark_qonnx_to_finn' changed the outputs .*max \|diff\|.*round half up"
    ):
        finn_handoff(elsewhere, x)


def test_signed_activations_after_relu_reach_finn_as_thresholds(tmp_path, digits):
    """FINN converts only unsigned Quant nodes after a ReLU (Xilinx/finn#1031); the package's export of a
    signed one is thresholds, which FINN takes (the FINN target's rules still ask for unsigned ones: half
    of a signed grid after a ReLU is never used)."""
    config = _finn_config(Dtype.int2, Dtype.int2, per_channel=False)
    torch.manual_seed(0)
    calib = [x for x, _ in digits.loader("train", batch_size=64)][:2]
    qmodel = ModelQuantizer(config).quantize_model(ZOO["tfc"].build().eval(), calib, progress=False)
    x = next(iter(digits.loader("test", batch_size=4)))[0]
    path = tmp_path / "signed.onnx"
    assert ModelExporter(path).export_qonnx_model(qmodel, x).passed
    report = finn_handoff(path, x)
    assert all(step.max_abs_diff <= 1e-5 for step in report.steps)
    assert "Relu" not in report.steps[-1].op_types


def test_the_handoff_absorbs_relu6_clips_into_thresholds(tmp_path):
    """ReLU6 + quantizer becomes Clip -> MultiThreshold in FINN; the hand-off folds the clip into
    the thresholds, so streamlining leaves an integer dataflow that computes what torch does."""
    pytest.importorskip("finn.transformation.qonnx.convert_qonnx_to_finn", reason="finn-plus is not installed")
    from qonnx.core.modelwrapper import ModelWrapper

    from quark.torch.extensions.brevitas._backend.export.verify import execute_qonnx
    from quark.torch.extensions.brevitas.api import finn_handoff

    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU6(), nn.Linear(8, 8), nn.ReLU6(), nn.Linear(8, 3))
    qmodel = quantized_on_unit_batches(finn(unsigned=("ReLU6",)), model)
    x = unit_batches(1)[0] * 8  # large enough to clip at 6
    ModelExporter(tmp_path / "m.onnx").export_qonnx_model(qmodel, x)
    integer = finn_interface.integer_input(tmp_path / "m.onnx", tmp_path / "int.onnx")
    x_int = np.clip(np.floor(x.numpy() / integer.scale + 0.5), 0, 255).astype(np.float32)
    report = finn_handoff(tmp_path / "int.onnx", torch.from_numpy(x_int))
    assert "Clip" in report.steps[1].op_types and "Clip" not in report.steps[2].op_types
    streamlined = ModelWrapper(report.path)
    assert finn_interface.float_operations(streamlined) == []
    out = execute_qonnx(streamlined, [x_int])[0]  # the hand-off's graph takes one sample at a time
    np.testing.assert_array_equal(out, qmodel(x).detach().numpy())


class _Residual(nn.Module):
    """conv-bn-relu, conv-bn, the sum with the first's output, relu, pool, linear: the residual
    addition's operands and sum are signed FINN-preset quantizers (half-up, MultiThreshold in QONNX)."""

    def __init__(self):
        super().__init__()
        self.a = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.b = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8))
        self.head = nn.Sequential(nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4))

    def forward(self, x):
        y = self.a(x)
        return self.head(y + self.b(y))


def test_the_handoff_takes_the_thresholds_of_signed_half_up_quantizers(tmp_path):
    """A signed half-up quantizer is exported as a MultiThreshold (handlers._SpecRounding). The
    pipeline's batch size 1 drops the value_info of its thresholds, which qonnx's renaming then
    skipped: FINN's first new MultiThreshold took the same tensor name ('Found multiple
    get_by_name matches' in ConvertQONNXtoFINN's tidy-up). The hand-off keeps the outputs."""
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(1)
    qmodel = ModelQuantizer(finn()).quantize_model(
        _Residual().eval(), [torch.rand(8, 3, 8, 8, generator=generator) for _ in range(2)], progress=False
    )
    x = torch.rand(4, 3, 8, 8, generator=generator)
    ModelExporter(tmp_path / "m.onnx").export_qonnx_model(qmodel, x)
    exported = [n.op_type for n in onnx.load(str(tmp_path / "m.onnx")).graph.node]
    assert exported.count("MultiThreshold") == 3  # the addition's two operands and its sum
    report = finn_handoff(tmp_path / "m.onnx", x)
    assert [s.max_abs_diff for s in report.steps] == [0.0] * len(report.steps)
    assert "Quant" not in report.steps[-1].op_types
