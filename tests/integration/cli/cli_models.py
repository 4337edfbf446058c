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
