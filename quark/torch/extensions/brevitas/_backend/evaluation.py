"""Float and quantized model side by side on the same batches: top-1 / top-k accuracy where the
batches carry labels, and always how far the quantized outputs are from the float ones.

A batch is labelled when it is ``(inputs, labels)`` with ``labels`` a 1-D integer tensor, one per
sample (a classifier's DataLoader); any other batch (a tensor, a dict of keyword inputs) is
compared without labels. The accuracy loop of ``quark-brevitas train`` and ``evaluate`` is this one.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from brevitas.quant_tensor import QuantTensor
from torch import nn

from quark.torch.extensions.brevitas._backend.data import batches as progress_batches
from quark.torch.extensions.brevitas._backend.data import device_dtype, model_inputs, move

#: the k of top-k accuracy reported beside top-1 (when the model has more than k outputs)
TOP_K = 5


@dataclass(frozen=True)
class Accuracy:
    """Top-1 and top-k accuracy in percent (``top_k`` None with k or fewer classes)."""

    top1: float
    top_k: float | None

    def __str__(self) -> str:
        return f"{self.top1:.2f} %" + ("" if self.top_k is None else f" (top-{TOP_K} {self.top_k:.2f} %)")


@dataclass(frozen=True)
class Evaluation:
    """What :func:`evaluate` measured on ``samples`` samples."""

    samples: int
    quantized_accuracy: Accuracy | None
    float_accuracy: Accuracy | None
    agreement: float | None
    output_db: float | None

    def report(self) -> str:
        lines = []
        if self.float_accuracy is not None:
            lines.append(f"float     {self.float_accuracy}")
        if self.quantized_accuracy is not None:
            lines.append(f"quantized {self.quantized_accuracy}")
        if self.agreement is not None:
            lines.append(f"top-1 agreement {100 * self.agreement:.2f} %, output SQNR {self.output_db:.1f} dB")
        lines.append(f"on {self.samples} samples" + ("" if self.quantized_accuracy else " (no labels: outputs compared only)"))
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        def accuracy(a: Accuracy | None) -> dict[str, float | None] | None:
            return None if a is None else {"top1": a.top1, f"top{TOP_K}": a.top_k}

        return {
            "samples": self.samples,
            "quantized": accuracy(self.quantized_accuracy),
            "float": accuracy(self.float_accuracy),
            "agreement": self.agreement,
            "output_db": self.output_db,
        }


@dataclass
class Energy:
    """Sums of squares of a reference and of its difference from a quantized tensor."""

    signal: float = 0.0
    noise: float = 0.0

    def add(self, reference: torch.Tensor, quantized: torch.Tensor) -> None:
        reference, quantized = reference.detach().double(), quantized.detach().double()
        self.signal += float(reference.square().sum())
        self.noise += float((quantized - reference).square().sum())

    @property
    def db(self) -> float:
        if self.noise == 0.0:
            return math.inf
        return 10.0 * math.log10(max(self.signal, 1e-300) / self.noise)


@contextlib.contextmanager
def in_eval(*models: nn.Module | None) -> Iterator[None]:
    """The given models (None skipped) in eval mode, each back in its own mode afterwards."""
    present = [m for m in models if m is not None]
    modes = [m.training for m in present]
    for m in present:
        m.eval()
    try:
        yield
    finally:
        for m, mode in zip(present, modes):
            m.train(mode)


def plain(tensor: Any) -> torch.Tensor:
    """A QuantTensor's value; any other object as it is."""
    return tensor.value if isinstance(tensor, QuantTensor) else tensor


def output_tensor(result: Any) -> torch.Tensor:
    """The tensor a model's output holds (a tensor, the first of a tuple, a ``logits`` attribute)."""
    result = plain(result)
    if isinstance(result, (tuple, list)):
        return output_tensor(result[0])
    if isinstance(result, dict):
        return output_tensor(next(iter(result.values())))
    if hasattr(result, "logits"):
        return result.logits
    return result


def split_labels(batch: Any) -> tuple[Any, torch.Tensor | None]:
    """``(inputs, labels)`` of a labelled batch; ``(batch, None)`` otherwise."""
    if isinstance(batch, (tuple, list)) and len(batch) == 2:
        inputs, labels = batch
        if isinstance(labels, torch.Tensor) and labels.ndim == 1 and not labels.is_floating_point():
            return inputs, labels
    return batch, None


class _Counter:
    """Correct top-1 / top-k predictions so far."""

    def __init__(self) -> None:
        self.top1 = self.top_k = self.total = 0
        self.has_top_k = False

    def add(self, logits: torch.Tensor, labels: torch.Tensor) -> None:
        labels = labels.to(logits.device)
        self.top1 += int((logits.argmax(-1) == labels).sum())
        if logits.shape[-1] > TOP_K:
            self.has_top_k = True
            self.top_k += int((logits.topk(TOP_K, dim=-1).indices == labels[:, None]).any(-1).sum())
        self.total += len(labels)

    def accuracy(self) -> Accuracy:
        total = max(self.total, 1)
        return Accuracy(100.0 * self.top1 / total, 100.0 * self.top_k / total if self.has_top_k else None)


@torch.no_grad()
def evaluate(
    qmodel: nn.Module,
    data: Iterable[Any],
    float_model: nn.Module | None = None,
    *,
    num_batches: int | None = None,
    progress: bool = True,
) -> Evaluation:
    """``qmodel`` (and ``float_model``) on ``data``: accuracies where labelled, output agreement."""
    models = [m for m in (qmodel, float_model) if m is not None]
    counters = {"quantized": _Counter(), "float": _Counter()}
    energy, agree, samples, labelled = Energy(), 0, 0, False
    with in_eval(*models):
        for batch in progress_batches(data, num_batches, progress=progress, desc="evaluate"):
            inputs, labels = split_labels(batch)
            outputs = {}
            for key, model in zip(("quantized", "float"), models):
                device, dtype = device_dtype(model)
                args, kwargs = model_inputs(model, move(inputs, device, dtype))
                outputs[key] = output_tensor(model(*args, **kwargs)).float().cpu()
            quantized = outputs["quantized"]
            samples += quantized.shape[0] if quantized.dim() else 1
            if labels is not None:
                labelled = True
                for key, logits in outputs.items():
                    counters[key].add(logits, labels)
            if "float" in outputs:
                energy.add(outputs["float"], quantized)
                if quantized.dim() >= 2:
                    agree += int((outputs["float"].argmax(-1) == quantized.argmax(-1)).sum())
    if not samples:
        raise ValueError("evaluate: data gave no batch")
    compared = float_model is not None
    return Evaluation(
        samples=samples,
        quantized_accuracy=counters["quantized"].accuracy() if labelled else None,
        float_accuracy=counters["float"].accuracy() if labelled and compared else None,
        agreement=agree / samples if compared else None,
        output_db=energy.db if compared else None,
    )


def accuracy(model: nn.Module, data: Iterable[Any]) -> float:
    """Top-1 accuracy in percent of one model on labelled batches."""
    result = evaluate(model, data, progress=False)
    if result.quantized_accuracy is None:
        raise ValueError("accuracy: the batches carry no labels; expected (inputs, integer labels)")
    return result.quantized_accuracy.top1
