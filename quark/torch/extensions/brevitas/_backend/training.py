"""The QAT recipe of ``quark-brevitas train``: AdamW, a learning-rate schedule with linear warm-up,
weight decay on the layers' weights only (never on quantizer scales or thresholds, nor on biases
and batch norms), cross-entropy on ``(inputs, labels)`` batches, resumable between epochs.

The schedule is a factor of the learning rate at each optimizer step, from the position in the
run measured in epochs (fractional within an epoch when the batches have a length).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sized
from dataclasses import asdict, dataclass
from enum import Enum
from typing import Any

import torch
from brevitas.proxy.quant_proxy import QuantProxyFromInjector
from torch import nn

from quark.common.errors import RefusedError
from quark.torch.extensions.brevitas._backend.data import batches as progress_batches
from quark.torch.extensions.brevitas._backend.data import device_dtype, move


class Schedule(str, Enum):
    """How the learning rate moves after the warm-up."""

    cosine = "cosine"  # to zero at the last step (Loshchilov and Hutter, no restarts)
    constant = "constant"


#: schedule -> the factor at ``progress`` in [0, 1] of the run after the warm-up
SCHEDULES: dict[Schedule, Callable[[float], float]] = {
    Schedule.cosine: lambda progress: 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0))),
    Schedule.constant: lambda progress: 1.0,
}


@dataclass(frozen=True)
class Recipe:
    """What ``train`` trains with; stored in each checkpoint it writes, so ``--resume`` goes on alike."""

    epochs: int
    lr: float = 1e-3
    schedule: Schedule = Schedule.cosine
    warmup_epochs: float = 0.0
    weight_decay: float = 0.0

    def factor(self, position: float) -> float:
        """The learning-rate factor at ``position`` epochs into the run."""
        if position < self.warmup_epochs:
            return (position + 1e-3) / self.warmup_epochs
        span = max(self.epochs - self.warmup_epochs, 1e-9)
        return SCHEDULES[self.schedule]((position - self.warmup_epochs) / span)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"schedule": self.schedule.value}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Recipe:
        return cls(**(data | {"schedule": Schedule(data["schedule"])}))


class BadBatch(RefusedError):
    """A training batch that is not ``(inputs, labels)``."""


def decayed(model: nn.Module) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
    """(the layers' weights, everything else that trains): quantizer parameters, biases and
    normalisation parameters are not decayed."""
    quantizer_params = {id(p) for m in model.modules() if isinstance(m, QuantProxyFromInjector) for p in m.parameters()}
    decay, rest = [], []
    for p in model.parameters():
        if p.requires_grad:
            (decay if p.ndim > 1 and id(p) not in quantizer_params else rest).append(p)
    return decay, rest


def optimizer_for(model: nn.Module, recipe: Recipe) -> torch.optim.Optimizer:
    decay, rest = decayed(model)
    groups = [{"params": decay, "weight_decay": recipe.weight_decay}, {"params": rest, "weight_decay": 0.0}]
    return torch.optim.AdamW([g for g in groups if g["params"]], lr=recipe.lr)


def train_epoch(
    model: nn.Module,
    batches: Iterable[Any],
    optimizer: torch.optim.Optimizer,
    recipe: Recipe,
    epoch: int,
    *,
    progress: bool = True,
) -> float:
    """One pass (``epoch`` from 1) with the schedule applied per step; the mean training loss."""
    model.train()
    device, dtype = device_dtype(model)
    length = len(batches) if isinstance(batches, Sized) else None
    total, count = 0.0, 0
    for step, batch in enumerate(progress_batches(batches, progress=progress, desc=f"epoch {epoch}")):
        if not (isinstance(batch, (tuple, list)) and len(batch) == 2):
            raise BadBatch(f"a training batch must be (inputs, labels); got {type(batch).__name__}")
        x, y = batch
        position = epoch - 1 + (step / length if length else 0.0)
        for group in optimizer.param_groups:
            group["lr"] = recipe.lr * recipe.factor(position)
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(move(x, device, dtype)), y.to(device))
        loss.backward()
        optimizer.step()
        total, count = total + loss.item(), count + 1
    return total / max(count, 1)
