"""The rewriters' table (``rewrite.REWRITERS``): one rewriter per QuantizationMode / Backend, selected by
the config's mode; adding a backend is one registration, none of these tests edits api.py.
"""

from __future__ import annotations

from typing import ClassVar

import pytest
from _shared.configs import INT8
from _shared.models import mlp
from torch import nn

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

        def connect(self, model, plans, sites):
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
