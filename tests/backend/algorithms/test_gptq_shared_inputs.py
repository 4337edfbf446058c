"""GPTQ processes the layers that read one tensor (a transformer's query, key and value) in one pass:
the same weights as one layer after the other, in fewer forward passes (issue 22's GPTQ time)."""

from __future__ import annotations

import torch
from _shared.configs import INT8, U8_ASYM
from torch import nn

from quark.torch.extensions.brevitas._backend.algorithms import gpxq
from quark.torch.extensions.brevitas.api import ModelQuantizer
from quark.torch.quantization.config.algorithms import GPTQConfig
from quark.torch.quantization.config.config import Config, QuantizationConfig


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(16, 16) for _ in range(4))

    def forward(self, x):
        attention = torch.softmax(self.q(x) @ self.k(x).transpose(-1, -2), -1)
        return x + self.o(attention @ self.v(x))


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(Block() for _ in range(2))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


DATA = [torch.randn(4, 8, 16, generator=torch.Generator().manual_seed(i)) for i in range(3)]
CONFIG = Config(
    QuantizationConfig(weight=INT8, input_tensors=U8_ASYM),
    algo_config=[GPTQConfig(bit=None, sym=None, group_size=None, desc_act=False)],
)


def _quantize(monkeypatch, grouped: bool) -> tuple[nn.Module, list]:
    passes = []
    original = gpxq.shared_input_groups

    def record(*args):
        groups = original(*args) if grouped else None
        passes.append(groups)
        return groups

    monkeypatch.setattr(gpxq, "shared_input_groups", record)
    torch.manual_seed(0)
    qmodel = ModelQuantizer(CONFIG).quantize_model(Encoder(), DATA, progress=False, check_algorithms=False)
    return qmodel, passes


def test_query_key_value_are_grouped_and_the_weights_are_the_same(monkeypatch):
    grouped, groups = _quantize(monkeypatch, grouped=True)
    sequential, _ = _quantize(monkeypatch, grouped=False)
    assert groups == [[["q", "k", "v"]], [["q", "k", "v"]]]  # one group per block: 2 passes instead of 4
    layers = {n: m for n, m in sequential.named_modules() if isinstance(m, nn.Linear)}
    for name, layer in grouped.named_modules():
        if isinstance(layer, nn.Linear):
            torch.testing.assert_close(layer.quant_weight().value, layers[name].quant_weight().value, atol=0, rtol=0)
    torch.manual_seed(0)
    rtn = ModelQuantizer(Config(CONFIG.global_quant_config)).quantize_model(Encoder(), DATA, progress=False)
    linears = {n: m for n, m in rtn.named_modules() if isinstance(m, nn.Linear)}
    moved = [
        not torch.equal(m.quant_weight().value, linears[n].quant_weight().value)
        for n, m in grouped.named_modules()
        if isinstance(m, nn.Linear)
    ]
    assert len(moved) == 8 and all(moved)  # GPTQ moved every layer's weights away from round-to-nearest


def test_grouping_needs_the_same_tensor_not_equal_values():
    block = Block()
    x = torch.randn(2, 3, 16)
    block.forward = lambda x: block.q(x) + block.k(x.clone())  # k reads a copy
    assert gpxq.shared_input_groups(block, {"q": block.q, "k": block.k}, (x,), {}) is None


def test_parallel_mode_needs_no_grouping(monkeypatch):
    """true_sequential=False already processes a block's layers in one pass."""
    calls = []
    monkeypatch.setattr(gpxq, "shared_input_groups", lambda *args: calls.append(args))
    config = Config(
        CONFIG.global_quant_config,
        algo_config=[GPTQConfig(bit=None, sym=None, group_size=None, desc_act=False, true_sequential=False)],
    )
    torch.manual_seed(0)
    ModelQuantizer(config).quantize_model(Encoder(), DATA, progress=False, check_algorithms=False)
    assert calls == []
