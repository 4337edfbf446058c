"""Models and data modules the command-line tests name on the command line (module:attribute)."""

import torch
from _shared import models
from torch import nn


def mlp() -> nn.Module:
    """Flatten, then the shared MLP (16 -> 32 -> 4, seeded): one Sequential of four modules."""
    return nn.Sequential(nn.Flatten(), *models.mlp((16, 32, 4), seed=0))


def keyword_model() -> nn.Module:
    class TwoInputs(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(16, 4)

        def forward(self, images, scale):
            return self.fc(images.flatten(1)) * scale

    torch.manual_seed(0)
    return TwoInputs()


def loaders():
    g = torch.Generator().manual_seed(0)
    x = torch.rand(64, 1, 4, 4, generator=g)
    y = (x.flatten(1)[:, :4].argmax(1)).long()
    batches = list(zip(x.split(16), y.split(16)))
    return batches, batches[:2]


NOT_A_MODEL = 42


def outlier_mlp() -> nn.Module:
    """Three layers; one hidden unit of the second layer's input is 100x the others, so its 8-bit
    per-tensor input quantizer loses the small values (what A8/A16 mixing should find)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4))
    with torch.no_grad():
        model[1].weight[0] *= 100
        model[1].bias[0] = 50
    return model


def generator_loaders():
    """``loaders`` as one-shot generators (a data module that yields its batches)."""
    train, test = loaders()
    return (b for b in train), (b for b in test)
