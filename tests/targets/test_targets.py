"""The targets' table (``_backend/targets/TARGETS``): one Target per device (IPU, FINN, hls4ml), each with the
format it takes, its rules before export and its checks on the written graph; what every target
refuses (a quantizer not built from a Quark spec) is refused by each."""

from __future__ import annotations

import pytest
import torch
from _shared.models import unit_batches
from _shared.quantize import quantized_on_unit_batches
from torch import nn

from quark.torch.extensions.brevitas._backend.targets import TARGETS
from quark.torch.extensions.brevitas.api import ExportFormat, ModelExporter, UnsupportedExportError
from quark.torch.extensions.brevitas.presets import finn, hls4ml, xint8
from quark.torch.quantization.config.type import DeviceType


@pytest.mark.parametrize(
    "target, method", [("IPU", "export_onnx_model"), ("FINN", "export_qonnx_model"), ("hls4ml", "export_qonnx_model")]
)
def test_targets_need_quantizers_built_from_quark_specs(onnx_path, target, method):
    import brevitas.nn as qnn

    from quark.torch.extensions.brevitas.api import TargetCheckError

    model = nn.Sequential(qnn.QuantIdentity(return_quant_tensor=False), nn.Linear(4, 2))
    with pytest.raises(
        TargetCheckError,
        match=rf"quantizer '0.act_quant' \(activation\): not built from a Quark spec; {target} allows quantizers built "
        "by ModelQuantizer",
    ):
        getattr(ModelExporter(onnx_path), method)(model, torch.randn(2, 4), target_device=target)


#: device -> (its preset, the export method of its format, the other format's)
TARGET_CASES = {
    DeviceType.IPU: (xint8, "export_onnx_model", "export_qonnx_model"),
    DeviceType.FINN: (finn, "export_qonnx_model", "export_onnx_model"),
    DeviceType.HLS4ML: (hls4ml, "export_qonnx_model", "export_onnx_model"),
}
METHOD_FORMAT = {"export_onnx_model": ExportFormat.qcdq, "export_qonnx_model": ExportFormat.qonnx}


def test_every_target_row_has_a_case():
    assert set(TARGET_CASES) == set(TARGETS)


@pytest.mark.parametrize("device", list(TARGET_CASES), ids=lambda d: d.name)
def test_every_target_row_exports_its_preset_in_its_format_with_its_graph_checks(tmp_path, device):
    """The preset's model exports in the target's format, verified, and every graph rule of the
    target ran on the written graph; the other format is refused for the target before export."""
    preset, method, other = TARGET_CASES[device]
    target = TARGETS[device]
    assert METHOD_FORMAT[method] is target.format
    qmodel = quantized_on_unit_batches(preset())
    x = unit_batches(1)[0]
    report = getattr(ModelExporter(tmp_path / "m.onnx"), method)(qmodel, x, target_device=device)
    assert report.passed and report.format is target.format
    applied = target.for_model(qmodel)  # the rules that follow the model's precision and mode
    assert report.target_checks[: len(applied.graph_rules)] == tuple(f"{applied.name}: {rule.allowed}" for rule in applied.graph_rules)
    with pytest.raises(UnsupportedExportError, match=rf"target_device={device.name} takes {target.format.value}: use ModelExporter.{method}"):
        getattr(ModelExporter(tmp_path / "other.onnx"), other)(qmodel, x, target_device=device)
    assert not (tmp_path / "other.onnx").exists()
