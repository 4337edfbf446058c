"""The rewriters' table (``rewrite.REWRITERS``): one rewriter per QuantizationMode / Backend, selected by
the config's mode; adding a backend is one registration, none of these tests edits api.py.
"""

from __future__ import annotations

from typing import ClassVar

import pytest
import torch
from _shared.configs import INT8
from _shared.models import batches, mlp
from _shared.quantize import quantize_with
from torch import nn

from quark.torch.extensions.brevitas import config as ext
from quark.torch.extensions.brevitas._backend.rewrite import REWRITERS
from quark.torch.extensions.brevitas.api import ModelQuantizer
from quark.torch.quantization.config.config import Config, QuantizationConfig
from quark.torch.quantization.config.type import QuantizationMode
from quark.torch.quantization.plan import module_sites


def test_graph_mode_without_a_rewriter_names_the_available_modes(monkeypatch):
    monkeypatch.delitem(REWRITERS, QuantizationMode.fx_graph_mode, raising=False)
    with pytest.raises(NotImplementedError, match=r"Config\.quant_mode=fx_graph_mode: no rewriter in this backend; available: \['eager_mode'\]"):
        ModelQuantizer(Config(QuantizationConfig(weight=INT8), quant_mode=QuantizationMode.fx_graph_mode))


def test_a_registered_rewriter_is_selected_by_the_config_mode(monkeypatch):
    class OnlyFirstLinear:
        """A no-op-ish backend: offers one site, rewrites nothing, records what it saw."""

        name = "test"
        supported_types = (nn.Linear,)
        seen: ClassVar[list] = []

        def prepare(self, model):
            return model

        def sites(self, model):
            return module_sites(model, self.supported_types)[:1]

        def connect(self, model, plans, sites, view):
            pass

        def rewrite(self, model, plans, sites):
            self.seen[:] = [(p.name, p.specs["weight"].bit_width) for p in plans]
            return model

    rewriter = OnlyFirstLinear()
    monkeypatch.setitem(REWRITERS, QuantizationMode.fx_graph_mode, rewriter)
    quantizer = ModelQuantizer(Config(QuantizationConfig(weight=INT8), quant_mode=QuantizationMode.fx_graph_mode))
    model = quantizer.quantize_model(mlp((8, 16, 4), seed=0), progress=False)
    assert rewriter.seen == [("0", 8)]
    assert [p.name for p in quantizer.plans] == ["0"]
    assert type(model[0]) is nn.Linear  # this backend rewrote nothing


#: mode -> (a config selecting it, the rewriter's name, the sites it plans on ``_Net``)
REWRITER_CASES = {
    QuantizationMode.eager_mode: (
        lambda: Config(QuantizationConfig(weight=INT8, input_tensors=INT8)),
        "layerwise",
        ["fc1", "fc2"],
    ),
    QuantizationMode.fx_graph_mode: (
        lambda: Config(QuantizationConfig(weight=INT8, input_tensors=INT8), quant_mode=QuantizationMode.fx_graph_mode),
        "fx",
        ["x", "fc1", "relu", "fc2"],
    ),
    ext.Backend.layerwise: (
        lambda: ext.Config(
            ext.QuantizationConfig(weight=ext.QuantizationSpec(), input_tensors=ext.QuantizationSpec()),
            pre_quant_opt_config=[],
            backend=ext.Backend.layerwise,
        ),
        "layerwise",
        ["fc1", "fc2"],
    ),
    ext.Backend.fx: (
        lambda: ext.Config(
            ext.QuantizationConfig(weight=ext.QuantizationSpec(), input_tensors=ext.QuantizationSpec()),
            pre_quant_opt_config=[],
            backend=ext.Backend.fx,
        ),
        "fx",
        ["x", "fc1", "relu", "fc2"],
    ),
}


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(8, 16), nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def test_every_rewriter_row_has_a_case():
    assert set(REWRITER_CASES) == set(REWRITERS)


@pytest.mark.parametrize("mode", list(REWRITER_CASES), ids=lambda m: f"{type(m).__name__}.{m.name}")
def test_every_rewriter_row_quantizes_with_its_rewriter(mode):
    """The mode selects its row's rewriter, which plans its sites and rewrites them: every planned
    layer is a Brevitas layer whose input and weight are quantized (graph mode: the input arrives
    quantized from the network input's site)."""
    make, name, planned = REWRITER_CASES[mode]
    torch.manual_seed(0)
    model = _Net().eval()
    quantizer, qmodel = quantize_with(make(), model, batches(2, (4, 8)))
    assert quantizer.rewriter is REWRITERS[mode] and quantizer.rewriter.name == name
    assert [p.name for p in quantizer.plans] == planned
    for layer in ("fc1", "fc2"):
        module = qmodel.get_submodule(layer)
        assert type(module).__name__ == "QuantLinear" and module.weight_quant.is_quant_enabled
    x = batches(1, (4, 8), seed=3)[0]
    out, ref = qmodel(x), model(x)
    assert torch.isfinite(out).all() and not torch.equal(out, ref)  # quantized ...
    assert (out - ref).abs().max() < 0.1 * ref.abs().max()  # ... the same function
