"""A user's model file for the command line: ``--model mycnn.py:build``.

``python mycnn.py`` trains the float CNN on scikit-learn's handwritten digits (a few seconds) and
writes what a user brings: the float weights (``mycnn_float.pt``), calibration images
(``calib.npz``) and held-out test images (``test.npz``). ``build`` returns the trained float model;
``loaders`` the (train, test) batches ``quark-brevitas train --data-module mycnn.py:loaders`` takes.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
WEIGHTS = os.path.join(HERE, "mycnn_float.pt")


class MyCNN(nn.Module):
    """Conv-BN-ReLU, a residual block, max pooling and a linear head, for 1x8x8 digits."""

    def __init__(self, channels: int = 16):
        super().__init__()
        self.conv0 = nn.Conv2d(1, channels, 3, padding=1)
        self.bn0 = nn.BatchNorm2d(channels)
        self.relu0 = nn.ReLU()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(channels)
        self.relu1 = nn.ReLU()
        self.relu2 = nn.ReLU()
        self.pool = nn.MaxPool2d(2)
        self.head = nn.Linear(channels * 4 * 4, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu0(self.bn0(self.conv0(x)))
        x = self.relu2(x + self.bn1(self.conv1(self.relu1(x))))
        return self.head(torch.flatten(self.pool(x), 1))


def _digits() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    from quark.torch.examples.digits import load

    data = load(seed=0)
    return (*data.train.tensors, *data.test.tensors)


def build() -> nn.Module:
    """The float model with its trained weights (``python mycnn.py`` writes them)."""
    model = MyCNN()
    if not os.path.exists(WEIGHTS):
        raise FileNotFoundError(f"{WEIGHTS}: run `python {__file__}` first to train the float model")
    model.load_state_dict(torch.load(WEIGHTS, weights_only=True))
    return model.eval()


def loaders() -> tuple[list, list]:
    """(train batches, test batches) of (images, labels) for ``quark-brevitas train``."""
    x_train, y_train, x_test, y_test = _digits()
    g = torch.Generator().manual_seed(0)
    order = torch.randperm(len(x_train), generator=g)
    train = [(x_train[i], y_train[i]) for i in order.split(64)]
    return train, list(zip(x_test.split(256), y_test.split(256)))


def main(out: str = HERE) -> None:
    x_train, y_train, x_test, _ = _digits()
    torch.manual_seed(0)
    model = MyCNN()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(15):
        model.train()
        for i in torch.randperm(len(x_train)).split(64):
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x_train[i]), y_train[i]).backward()
            optimizer.step()
    torch.save(model.state_dict(), os.path.join(out, os.path.basename(WEIGHTS)))
    np.savez(os.path.join(out, "calib.npz"), images=x_train[:256].numpy())
    np.savez(os.path.join(out, "test.npz"), images=x_test.numpy())
    print(f"wrote {os.path.basename(WEIGHTS)}, calib.npz (256 images), test.npz ({len(x_test)} images) in {out}")


if __name__ == "__main__":
    main(*sys.argv[1:])
