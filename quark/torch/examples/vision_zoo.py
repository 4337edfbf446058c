"""Real torchvision and timm CNN architectures, randomly initialised, for small inputs (no downloads).

Each :class:`ZooEntry` names a builder and the input shape it is meant for. ``build()`` seeds torch,
builds the network with random weights and ``num_classes`` outputs (10: the inputs are CIFAR-sized),
then sets its batch-norm statistics from a few batches of random images: batch norm runs in train
mode with ``momentum=None`` (a cumulative average over the batches, not a 0.1-weighted running one)
and the network is returned in eval mode. Without this the random network's activations explode or
vanish layer after layer (running mean 0, variance 1 at every batch norm), which no quantizer
calibrates meaningfully.

Importing this module imports neither torchvision nor timm; the first ``build()`` does, through
:func:`import_model_libraries`. Needs ``pip install --no-deps torchvision timm``.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

import torch
from torch import nn

from quark.torch.examples.compat import declare_missing_torchvision_ops


def missing_libraries() -> list[str]:
    """The model libraries not installed (without importing them)."""
    return [name for name in ("torchvision", "timm") if importlib.util.find_spec(name) is None]


def import_model_libraries():
    """(torchvision.models, timm), torchvision made importable first (see :mod:`.compat`)."""
    declare_missing_torchvision_ops()
    import timm
    import torchvision.models

    return torchvision.models, timm


@dataclass(frozen=True)
class ZooEntry:
    """A network: where it comes from, how it is built, which input shape it takes (one sample, CHW)."""

    name: str
    library: str  # "torchvision" or "timm"
    architecture: str  # the library's name for it
    input_shape: tuple[int, int, int] = (3, 32, 32)
    kwargs: tuple[tuple[str, object], ...] = ()

    def build(self, seed: int = 0, num_classes: int = 10, bn_batches: int = 4, bn_batch_size: int = 8) -> nn.Module:
        """Random weights (``seed``), batch-norm statistics from ``bn_batches`` random batches; eval mode."""
        tv_models, timm = import_model_libraries()
        torch.manual_seed(seed)
        options = {"num_classes": num_classes, **dict(self.kwargs)}
        if self.library == "torchvision":
            model = getattr(tv_models, self.architecture)(weights=None, **options)
        else:
            model = timm.create_model(self.architecture, pretrained=False, **options)
        generator = torch.Generator().manual_seed(seed + 1)
        batches = [torch.rand(bn_batch_size, *self.input_shape, generator=generator) for _ in range(bn_batches)]
        return set_batch_norm_statistics(model, batches)

    def sample(self, batch: int = 1, seed: int = 0) -> torch.Tensor:
        """Random images in [0, 1) of this entry's input shape."""
        return torch.rand(batch, *self.input_shape, generator=torch.Generator().manual_seed(seed))


def set_batch_norm_statistics(model: nn.Module, batches: list[torch.Tensor]) -> nn.Module:
    """Batch norm's running statistics as the cumulative mean over ``batches`` (train mode,
    ``momentum=None``, gradients off); momentum restored, the model returned in eval mode."""
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    momenta = [m.momentum for m in norms]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None
    model.train()
    with torch.no_grad():
        for batch in batches:
            model(batch)
    for m, momentum in zip(norms, momenta):
        m.momentum = momentum
    return model.eval()


def _entries() -> dict[str, ZooEntry]:
    tv = [
        "resnet18",
        "resnet50",
        "mobilenet_v2",
        "mobilenet_v3_small",
        "efficientnet_b0",
        "squeezenet1_1",
        "shufflenet_v2_x0_5",
        "regnet_x_400mf",
        "densenet121",
    ]
    timm = ["resnet10t", "efficientnet_lite0", "mobilenetv4_conv_small"]
    entries = [ZooEntry(n, "torchvision", n) for n in tv] + [ZooEntry(n, "timm", n) for n in timm]
    return {e.name: e for e in entries}


#: name -> entry; every entry takes 3x32x32 images (the networks downsample 32x to 1x1 before their
#: global pooling; squeezenet1_1's 3x3 max pools leave 1x1 too)
ZOO: dict[str, ZooEntry] = _entries()


def build(name: str, **kwargs) -> nn.Module:
    """``ZOO[name].build(**kwargs)``."""
    return ZOO[name].build(**kwargs)

