"""The targets' table (``_backend/targets/TARGETS``): one Target per device (IPU, FINN), each with the
format it takes, its rules before export and its checks on the written graph; what every target
refuses (a quantizer not built from a Quark spec) is refused by each."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from quark.torch.extensions.brevitas.api import (
    ModelExporter,
)


@pytest.mark.parametrize("target, method", [("IPU", "export_onnx_model"), ("FINN", "export_qonnx_model")])
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
