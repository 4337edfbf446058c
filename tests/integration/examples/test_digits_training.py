"""``digits.train``: one Adam for the whole run, an optional cosine learning-rate decay, a per-epoch
callback; checked against a plain PyTorch loop and the cosine formula written out."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from torch import nn
from torch.optim.optimizer import register_optimizer_step_pre_hook

from quark.torch.examples import digits

LR, EPOCHS = 3e-3, 2


@pytest.fixture(scope="module")
def data():
    return digits.load(seed=0)


def linear() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 10))


def reference_train(model: nn.Module, data: digits.DigitsData, lr_at_step) -> None:
    """One Adam over every epoch, the learning rate set by hand before each step; the same batch
    order every epoch (the loader's generator is seeded with ``seed`` each epoch)."""
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    step = 0
    for _ in range(EPOCHS):
        for x, y in data.loader("train", shuffle=True, seed=0):
            optimizer.param_groups[0]["lr"] = lr_at_step(step)
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
            step += 1


@pytest.mark.parametrize(
    ("schedule", "lr_at_step"),
    [
        (None, lambda step, steps: LR),
        ("cosine", lambda step, steps: LR * (1 + math.cos(math.pi * step / steps)) / 2),
    ],
    ids=["constant", "cosine"],
)
def test_train_equals_a_plain_loop(data, schedule, lr_at_step):
    steps = EPOCHS * len(data.loader("train"))
    expected, trained = linear(), linear()
    reference_train(expected, data, lambda step: lr_at_step(step, steps))
    digits.train(trained, data, epochs=EPOCHS, lr=LR, seed=0, schedule=schedule)
    for name, value in expected.state_dict().items():
        torch.testing.assert_close(trained.state_dict()[name], value, rtol=1e-6, atol=1e-7, msg=name)
    assert not trained.training


def test_cosine_decays_to_near_zero_over_the_run(data):
    """The learning rate of every step, read from the optimizer as it steps."""
    seen: list[float] = []
    hook = register_optimizer_step_pre_hook(
        lambda optimizer, args, kwargs: seen.append(optimizer.param_groups[0]["lr"])
    )
    try:
        digits.train(linear(), data, epochs=EPOCHS, lr=LR, seed=0, schedule="cosine")
    finally:
        hook.remove()
    assert len(seen) == EPOCHS * len(data.loader("train"))
    assert seen[0] == LR and all(a > b for a, b in itertools.pairwise(seen))
    assert 0 < seen[-1] < 0.01 * LR  # the last step: (1 + cos(pi (n-1)/n)) / 2 of lr


def test_on_epoch_sees_every_epoch_and_training_resumes_after_it(data):
    calls: list[tuple[int, float]] = []

    def record(epoch: int, model: nn.Module) -> None:
        calls.append((epoch, digits.accuracy(model, data)))
        model.eval()  # training must go on in training mode all the same

    modes: list[bool] = []
    model = nn.Sequential(nn.Flatten(), nn.Dropout(0.0), nn.Linear(64, 10))
    model[1].register_forward_hook(
        lambda module, args, out: modes.append(module.training) if torch.is_grad_enabled() else None
    )
    digits.train(model, data, epochs=3, lr=LR, seed=0, on_epoch=record)
    assert [epoch for epoch, _ in calls] == [1, 2, 3]
    assert calls[-1][1] > 80.0  # a linear model on real digits, trained: far above chance
    assert len(modes) == 3 * len(data.loader("train")) and all(modes)


def test_unknown_schedule_is_named(data):
    model = linear()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match=r"schedule='step'.*\[None, 'cosine'\]"):
        digits.train(model, data, schedule="step")
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
