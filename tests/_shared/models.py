"""Float models and their data, shared by the tiers (torch only).

- ``mlp()``, ``batches()`` and ``loader()``: the small MLP most tests quantize, random batches for it,
  and a DataLoader of (x, label);
- ``TwoInputs``, ``TokenModel``, ``SelfAttention``: models of two inputs, of token ids, of one
  ``nn.MultiheadAttention``;
- ``qat_model()``: the format tests' convolution and linear layer, wide enough for 16- and
  32-element blocks;
- the algorithm tests' tiny synthetic models: a BERT-like encoder (post-norm), a Llama-like
  decoder (pre-norm, RMSNorm, gated MLP), a small CNN, and transformers' GPT-2 with a random tiny
  config. Activations carry a few outlier channels, as real transformers' do.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

HIDDEN, HEADS, FFN, VOCAB, SEQ = 32, 4, 64, 50, 8


def mlp(sizes: tuple[int, int, int] = (12, 16, 4), seed: int | None = None) -> nn.Sequential:
    """Linear - ReLU - Linear of widths ``sizes``; ``seed``: ``torch.manual_seed(seed)`` first (None:
    the global generator as the caller left it)."""
    if seed is not None:
        torch.manual_seed(seed)
    inputs, hidden, outputs = sizes
    return nn.Sequential(nn.Linear(inputs, hidden), nn.ReLU(), nn.Linear(hidden, outputs))


def batches(n: int = 4, shape: tuple[int, ...] = (8, 12), seed: int = 0) -> list[torch.Tensor]:
    """``n`` standard normal batches of ``shape`` from their own generator (``mlp()``'s inputs by default)."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, generator=g) for _ in range(n)]


def unit_batches(n: int = 2, shape: tuple[int, ...] = (4, 8), seed: int = 0) -> list[torch.Tensor]:
    """``n`` batches uniform in [0, 1) (non-negative, as images are: FINN's integer input)."""
    g = torch.Generator().manual_seed(seed)
    return [torch.rand(*shape, generator=g) for _ in range(n)]


def loader(n_batches: int = 4, batch: int = 8) -> DataLoader:
    """A classification DataLoader of (x, label) for ``mlp()``, drawn from the global generator."""
    x = torch.randn(n_batches * batch, 12)
    y = torch.randint(0, 4, (n_batches * batch,))
    return DataLoader(TensorDataset(x, y), batch_size=batch)


class TwoInputs(nn.Module):
    """Two inputs of different widths, merged by addition."""

    def __init__(self, hidden: int = 16):
        super().__init__()
        self.a = nn.Linear(6, hidden)
        self.b = nn.Linear(3, hidden)
        self.head = nn.Linear(hidden, 2)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.a(x) + self.b(y)))


class TokenModel(nn.Module):
    """Token ids (and an optional attention mask) -> an embedding, a projection, a mean, 3 logits."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(50, 16)
        self.proj = nn.Linear(16, 16)
        self.out = nn.Linear(16, 3)

    def forward(self, input_ids, attention_mask=None):
        h = self.proj(self.embed(input_ids))
        if attention_mask is not None:
            h = h * attention_mask.unsqueeze(-1)
        return self.out(h.mean(dim=1))


class SelfAttention(nn.Module):
    """One ``nn.MultiheadAttention`` attending to its input (named ``name``)."""

    def __init__(self, mha: nn.MultiheadAttention, name: str = "mha"):
        super().__init__()
        self.name = name
        self.add_module(name, mha)

    def forward(self, x):
        return getattr(self, self.name)(x, x, x, need_weights=False)[0]


@torch.no_grad()
def outputs(model, data) -> torch.Tensor:
    """``model``'s outputs on every batch (dicts as keywords, a tuple's first element), concatenated."""
    return torch.cat(
        [model(**b) if isinstance(b, dict) else model(b[0] if isinstance(b, tuple) else b) for b in data]
    )


def error(model, reference, data) -> float:
    """Mean squared difference of ``model``'s outputs on ``data`` from ``reference``."""
    return float((outputs(model, data) - reference).pow(2).mean())


#: one layer each, for the algorithms that beat round-to-nearest (inputs: ``layer_data``)
ONE_LAYER = {
    "linear": lambda: nn.Sequential(nn.Linear(64, 64)),
    "conv": lambda: nn.Sequential(nn.Conv2d(16, 16, 3, padding=1)),
    "depthwise": lambda: nn.Sequential(nn.Conv2d(16, 16, 3, padding=1, groups=16)),
}


def layer_data(conv: bool = False, seed: int = 0) -> list[torch.Tensor]:
    """Inputs of ``ONE_LAYER``'s layers, correlated across features (``conv``: and neighbouring pixels)."""
    g = torch.Generator().manual_seed(seed)
    if conv:  # correlated across channels and neighbouring pixels, as images' features are
        mix = torch.randn(16, 16, generator=g) * 0.3
        smooth = lambda x: nn.functional.avg_pool2d(torch.einsum("nchw,cd->ndhw", x, mix), 3, stride=1)
        return [smooth(torch.randn(8, 16, 8, 8, generator=g)) for _ in range(4)]
    mix = torch.randn(64, 64, generator=g) * 0.3
    return [torch.randn(64, 64, generator=g) @ mix for _ in range(6)]


def qat_model() -> nn.Module:
    """Conv2d(32 -> 32) and Linear(128 -> 32): channel counts that hold 16- and 32-element blocks."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(32 * 4, 32))


class Attention(nn.Module):
    def __init__(self, names=("query", "key", "value", "out")):
        super().__init__()
        self.names = names
        for name in names:
            setattr(self, name, nn.Linear(HIDDEN, HIDDEN))

    def forward(self, x, attention_mask=None):
        q, k, v = (getattr(self, n)(x) for n in self.names[:3])
        split = lambda t: t.view(t.shape[0], t.shape[1], HEADS, -1).transpose(1, 2)
        mask = None if attention_mask is None else attention_mask[:, None, None, :].bool()
        out = F.scaled_dot_product_attention(split(q), split(k), split(v), attn_mask=mask)
        return getattr(self, self.names[3])(out.transpose(1, 2).reshape(x.shape))


class BertLayer(nn.Module):
    """Post-norm: each LayerNorm's output feeds the next linears and the residual."""

    def __init__(self):
        super().__init__()
        self.attention = Attention()
        self.attention_norm = nn.LayerNorm(HIDDEN)
        self.intermediate = nn.Linear(HIDDEN, FFN)
        self.output = nn.Linear(FFN, HIDDEN)
        self.output_norm = nn.LayerNorm(HIDDEN)

    def forward(self, x, attention_mask=None):
        x = self.attention_norm(x + self.attention(x, attention_mask))
        return (self.output_norm(x + self.output(F.gelu(self.intermediate(x)))),)


class RMSNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(HIDDEN))

    def forward(self, x):
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


class LlamaLayer(nn.Module):
    """Pre-norm: each norm's output feeds only linears; the residual takes the norm's input."""

    def __init__(self):
        super().__init__()
        self.input_layernorm = RMSNorm()
        self.self_attn = Attention(("q_proj", "k_proj", "v_proj", "o_proj"))
        self.post_attention_layernorm = RMSNorm()
        self.gate_proj = nn.Linear(HIDDEN, FFN, bias=False)
        self.up_proj = nn.Linear(HIDDEN, FFN, bias=False)
        self.down_proj = nn.Linear(FFN, HIDDEN, bias=False)

    def forward(self, x, attention_mask=None):
        x = x + self.self_attn(self.input_layernorm(x), attention_mask)
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class Encoder(nn.Module):
    """Token embedding, outlier channels, then ``layers``; forward(input_ids, attention_mask)."""

    def __init__(self, layer: type[nn.Module], depth: int = 2):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, HIDDEN)
        self.layers = nn.ModuleList(layer() for _ in range(depth))
        self.register_buffer("boost", torch.ones(HIDDEN))
        self.boost[:3] = torch.tensor([12.0, -9.0, 7.0])  # outlier channels, as in real transformers

    def forward(self, input_ids, attention_mask=None):
        x = self.embed(input_ids) * self.boost
        for layer in self.layers:
            out = layer(x, attention_mask=attention_mask)
            x = out[0] if isinstance(out, tuple) else out
        return x


def bert(seed: int = 0) -> Encoder:
    torch.manual_seed(seed)
    return Encoder(BertLayer).eval()


def llama(seed: int = 0) -> Encoder:
    torch.manual_seed(seed)
    return Encoder(LlamaLayer).eval()


def cnn(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 16, 3, padding=1, groups=16),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, 10),
    ).eval()


def token_batches(count: int = 4, batch: int = 4, seed: int = 1) -> list[dict[str, torch.Tensor]]:
    """Dict batches of token ids and attention masks (the last positions of some rows padded)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(count):
        ids = torch.randint(0, VOCAB, (batch, SEQ), generator=g)
        mask = torch.ones(batch, SEQ, dtype=torch.long)
        mask[0, -2:] = 0
        out.append({"input_ids": ids, "attention_mask": mask})
    return out


def image_batches(count: int = 4, batch: int = 8, seed: int = 1) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(images, targets) batches, as a classification DataLoader gives."""
    g = torch.Generator().manual_seed(seed)
    return [
        (torch.randn(batch, 3, 8, 8, generator=g), torch.randint(0, 10, (batch,), generator=g))
        for _ in range(count)
    ]


def image_loader(seed: int = 1) -> DataLoader:
    """A classification DataLoader of (images, targets) from ``image_batches``, as the extension's scripts use."""
    images = torch.cat([x for x, _ in image_batches(4, seed=seed)])
    targets = torch.randint(0, 10, (images.shape[0],))
    return DataLoader(TensorDataset(images, targets), batch_size=8)


def gpt2(seed: int = 0, layers: int = 2) -> nn.Module:
    """transformers' GPT-2 (Conv1D layers) with a tiny random config: no download."""
    from quark.torch.examples.compat import declare_missing_torchvision_ops

    declare_missing_torchvision_ops()  # transformers imports torchvision where installed
    from transformers import GPT2Config, GPT2Model

    torch.manual_seed(seed)
    config = GPT2Config(vocab_size=VOCAB, n_positions=SEQ, n_embd=HIDDEN, n_layer=layers, n_head=HEADS)
    return GPT2Model(config).eval()


def trained_batch_norm(model: nn.Module) -> nn.Module:
    """Non-trivial running statistics and affine parameters, so a wrong fold shows."""
    torch.manual_seed(0)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
            nn.init.uniform_(m.weight, 0.5, 1.5)
            nn.init.uniform_(m.bias, -0.2, 0.2)
    return model.eval()
