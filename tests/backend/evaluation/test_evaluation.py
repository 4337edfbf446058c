"""``_backend.evaluation``: accuracies and agreement against counts written from the definitions."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from quark.torch.extensions.brevitas._backend.evaluation import TOP_K, accuracy, evaluate


class Fixed(nn.Module):
    """Returns the logits it was built with, batch by batch (the input is the batch index)."""

    def __init__(self, logits: torch.Tensor):
        super().__init__()
        self.logits = logits

    def forward(self, index: torch.Tensor) -> torch.Tensor:
        return self.logits[index]


def _data(seed: int = 0, classes: int = 10, n: int = 50):
    g = torch.Generator().manual_seed(seed)
    reference = torch.randn(n, classes, generator=g)
    noisy = reference + 0.8 * torch.randn(n, classes, generator=g)
    labels = torch.randint(0, classes, (n,), generator=g)
    index = torch.arange(n)
    batches = [(index[i : i + 16], labels[i : i + 16]) for i in range(0, n, 16)]
    return Fixed(reference), Fixed(noisy), reference, noisy, labels, batches


def test_accuracies_agreement_and_sqnr_follow_their_definitions():
    float_model, qmodel, reference, noisy, labels, batches = _data()
    result = evaluate(qmodel, batches, float_model, progress=False)
    top1 = lambda logits: 100.0 * float((logits.argmax(-1) == labels).sum()) / len(labels)
    top_k = lambda logits: 100.0 * sum(int(label in row.topk(TOP_K).indices) for row, label in zip(logits, labels)) / len(labels)
    assert result.samples == len(labels)
    assert result.quantized_accuracy.top1 == pytest.approx(top1(noisy)) and result.float_accuracy.top1 == pytest.approx(top1(reference))
    assert result.quantized_accuracy.top_k == pytest.approx(top_k(noisy)) and result.float_accuracy.top_k == pytest.approx(top_k(reference))
    assert result.agreement == pytest.approx(float((noisy.argmax(-1) == reference.argmax(-1)).float().mean()))
    sqnr = 10 * math.log10(float(reference.double().square().sum() / (noisy.double() - reference.double()).square().sum()))
    assert result.output_db == pytest.approx(sqnr)
    assert accuracy(qmodel, batches) == pytest.approx(top1(noisy))


def test_few_classes_have_no_top_k_and_unlabelled_data_no_accuracy():
    float_model, qmodel, _, _, _, batches = _data(classes=TOP_K)
    assert evaluate(qmodel, batches, float_model, progress=False).quantized_accuracy.top_k is None
    unlabelled = [index for index, _ in batches]
    result = evaluate(qmodel, unlabelled, float_model, progress=False)
    assert result.quantized_accuracy is None and result.float_accuracy is None and result.agreement is not None
    assert "no labels" in result.report()
    with pytest.raises(ValueError, match="carry no labels"):
        accuracy(qmodel, unlabelled)


def test_no_batch_is_an_error_and_modes_are_restored():
    float_model, qmodel, *_ = _data()
    qmodel.train(), float_model.eval()
    with pytest.raises(ValueError, match="gave no batch"):
        evaluate(qmodel, [], float_model, progress=False)
    assert qmodel.training and not float_model.training
