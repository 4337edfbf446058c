"""``_backend.training``: the schedule against its formulas, what is decayed, the per-step rate."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from quark.torch.extensions.brevitas import presets
from quark.torch.extensions.brevitas._backend.training import (
    BadBatch,
    Recipe,
    Schedule,
    decayed,
    optimizer_for,
    train_epoch,
)
from quark.torch.extensions.brevitas.api import ModelQuantizer


@pytest.mark.parametrize("position", [0.0, 0.3, 1.0, 2.5, 3.9, 4.0])
def test_cosine_after_a_warm_up_follows_the_formula(position):
    recipe = Recipe(epochs=4, warmup_epochs=1.0)
    expected = (position + 1e-3) / 1.0 if position < 1 else 0.5 * (1 + math.cos(math.pi * (position - 1) / 3))
    assert recipe.factor(position) == pytest.approx(expected)
    assert Recipe(epochs=4, schedule=Schedule.constant).factor(position) == 1.0


def test_recipe_round_trips_through_a_dict():
    recipe = Recipe(epochs=3, lr=0.01, schedule=Schedule.constant, warmup_epochs=0.5, weight_decay=1e-4)
    assert Recipe.from_dict(recipe.to_dict()) == recipe and recipe.to_dict()["schedule"] == "constant"


def _quantized() -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 4 * 4, 3))
    data = [torch.rand(8, 1, 6, 6) for _ in range(2)]
    return ModelQuantizer(presets.finn(bias_correction=False)).quantize_model(model, data, progress=False)


def test_only_the_layers_weights_are_decayed():
    model = _quantized()
    decay, rest = decayed(model)
    weights = {id(m.weight) for m in model.modules() if isinstance(m, (nn.Conv2d, nn.Linear))}
    assert {id(p) for p in decay} == weights
    assert {id(p) for p in rest} == {id(p) for p in model.parameters() if p.requires_grad} - weights
    groups = optimizer_for(model, Recipe(epochs=1, weight_decay=0.1)).param_groups
    assert [g["weight_decay"] for g in groups] == [0.1, 0.0]


def test_the_rate_follows_the_schedule_per_step():
    model = _quantized()
    recipe = Recipe(epochs=2, lr=0.1)
    optimizer = optimizer_for(model, recipe)
    batches = [(torch.rand(8, 1, 6, 6), torch.randint(0, 3, (8,))) for _ in range(4)]
    seen = []
    optimizer.register_step_post_hook(lambda opt, *_: seen.append(opt.param_groups[0]["lr"]))
    for epoch in (1, 2):
        assert math.isfinite(train_epoch(model, batches, optimizer, recipe, epoch, progress=False))
    assert seen == pytest.approx([0.1 * recipe.factor(step / 4) for step in range(8)])
    with pytest.raises(BadBatch, match=r"must be \(inputs, labels\)"):
        train_epoch(model, [torch.rand(8, 1, 6, 6)], optimizer, recipe, 1, progress=False)
