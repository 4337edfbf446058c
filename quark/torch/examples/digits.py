"""scikit-learn's ``load_digits()``: 1,797 real 8x8 handwritten digits, and a small CNN for them.

Deterministic: the split and the training depend only on ``seed``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


@dataclass
class DigitsData:
    train: TensorDataset
    test: TensorDataset

    def loader(self, split: str = "train", batch_size: int = 64, shuffle: bool = False, seed: int = 0) -> DataLoader:
        data = {"train": self.train, "test": self.test}[split]
        generator = torch.Generator().manual_seed(seed)
        return DataLoader(data, batch_size=batch_size, shuffle=shuffle, generator=generator)


def load(seed: int = 0, test_fraction: float = 0.2) -> DigitsData:
    """Digits as float images in [0, 1] of shape (N, 1, 8, 8) and int64 labels, split train/test."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    y = torch.tensor(digits.target, dtype=torch.int64)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
    n_test = int(len(x) * test_fraction)
    test, train = order[:n_test], order[n_test:]
    return DigitsData(TensorDataset(x[train], y[train]), TensorDataset(x[test], y[test]))


def cnn() -> nn.Module:
    """Conv-BN-ReLU x2, max-pool, two fully connected layers (36k parameters)."""
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * 4 * 4, 64),
        nn.ReLU(),
        nn.Linear(64, 10),
    )


class ResidualCNN(nn.Module):
    """Conv-BN-ReLU, a residual block (conv-BN-ReLU-conv-BN, add, ReLU), max pooling, a linear head.

    The network of the graph-mode and FINN-dataflow flows: every tensor between its layers can be
    put on an integer grid (``Backend.fx`` / ``QuantizationMode.fx_graph_mode``).
    """

    def __init__(self, channels: int = 16):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, channels, 3, padding=1), nn.BatchNorm2d(channels), nn.ReLU())
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(channels)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(channels)
        self.head = nn.Sequential(nn.MaxPool2d(2), nn.Flatten(), nn.Linear(channels * 4 * 4, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        x = F.relu(x + self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x))))))
        return self.head(x)


#: ``train(schedule=...)`` -> the learning-rate factor at step ``s`` of ``n``
SCHEDULES: dict[str | None, Callable[[int, int], float]] = {
    None: lambda s, n: 1.0,
    "cosine": lambda s, n: 0.5 * (1.0 + math.cos(math.pi * s / n)),
}


def train(
    model: nn.Module,
    data: DigitsData,
    epochs: int = 30,
    lr: float = 3e-3,
    seed: int = 0,
    schedule: str | None = None,
    on_epoch: Callable[[int, nn.Module], object] | None = None,
) -> nn.Module:
    """Adam + cross-entropy, one optimizer for the whole run; works for float and quantized models alike.

    Every epoch visits the training split in the same ``seed``-determined order.

    Args:
        schedule: ``None`` keeps ``lr``; ``"cosine"`` decays it per step from ``lr`` toward 0
            at the end of the run (Loshchilov and Hutter's cosine annealing, without restarts).
        on_epoch: called as ``on_epoch(epoch, model)`` after every epoch (``epoch`` from 1), e.g.
            to record the test accuracy; the model is back in training mode afterwards.
    """
    if schedule not in SCHEDULES:
        raise ValueError(f"train: schedule={schedule!r} is not one of {list(SCHEDULES)}")
    torch.manual_seed(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    steps = epochs * len(data.loader("train"))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: SCHEDULES[schedule](s, steps))
    for epoch in range(1, epochs + 1):
        model.train()
        for x, y in data.loader("train", shuffle=True, seed=seed):
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
            scheduler.step()
        if on_epoch is not None:
            on_epoch(epoch, model)
    return model.eval()


def accuracy(model: nn.Module, data: DigitsData, split: str = "test") -> float:
    """Top-1 accuracy in percent on ``split`` (the extension's ``api.evaluate``; the model's mode kept)."""
    from quark.torch.extensions.brevitas.api import evaluate

    return evaluate(model, data.loader(split, batch_size=256), progress=False).quantized_accuracy.top1


def trained_cnn(seed: int = 0, epochs: int = 30) -> tuple[nn.Module, DigitsData]:
    """A CNN trained on the digits training split, and the data."""
    data = load(seed)
    torch.manual_seed(seed)
    return train(cnn(), data, epochs=epochs, seed=seed), data


def pretrained_cnn() -> nn.Module:
    """The digits CNN trained with seed 0 (deterministic; a few seconds): a ``--model`` factory."""
    return trained_cnn(seed=0)[0]


def loaders(batch_size: int = 64) -> tuple[DataLoader, DataLoader]:
    """(train, test) loaders of the seed-0 split: a ``--data-module`` for ``quark-brevitas train``."""
    data = load(seed=0)
    return data.loader("train", batch_size=batch_size, shuffle=True), data.loader("test", batch_size=256)
