"""Why the digits graph-mode QAT ended low: a fresh Adam every epoch against one Adam for the run.

The loop of ``digits_graph_qat.py --schedule restart`` and ``--schedule constant`` written out (seed
1, W4A4 ``_3SD``, batch norm kept, lr 1e-3, 8 epochs), with the test accuracy after every step of
the last epoch and the mean |parameter update| / lr of each of its steps. Adam's first steps after
a reset move every parameter by about lr (m / sqrt(v) is +-1 after one step).

    .venv/bin/python benchmarks/digits_qat_restart.py [--seed 1]
"""

from __future__ import annotations

import argparse
import copy
import logging

import torch
from torch import nn

from quark.torch.examples import digits
from quark.torch.extensions.brevitas.api import ModelQuantizer
from quark.torch.extensions.brevitas.presets import finn
from quark.torch.quantization.config.config import TQTSpec
from quark.torch.quantization.config.type import TQTThresholdInitMeth

LR, EPOCHS = 1e-3, 8


def qat(qmodel: nn.Module, data: digits.DigitsData, seed: int, restart: bool) -> tuple[list[float], list]:
    """Test accuracy after every epoch; (accuracy, mean |update| / lr) after every step of the last."""
    optimizer, per_epoch, last_epoch = None, [], []
    for epoch in range(EPOCHS):
        if restart or optimizer is None:  # digits.train(epochs=1, seed=seed + epoch) once per epoch
            optimizer = torch.optim.Adam(qmodel.parameters(), lr=LR)
        qmodel.train()
        for x, y in data.loader("train", shuffle=True, seed=seed + epoch if restart else seed):
            before = [p.detach().clone() for p in qmodel.parameters()]
            optimizer.zero_grad()
            nn.functional.cross_entropy(qmodel(x), y).backward()
            optimizer.step()
            if epoch == EPOCHS - 1:
                moved = torch.cat([(p.detach() - b).abs().flatten() for p, b in zip(qmodel.parameters(), before)])
                last_epoch.append((digits.accuracy(qmodel, data), float(moved.mean()) / LR))
        per_epoch.append(digits.accuracy(qmodel, data))
    return per_epoch, last_epoch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    seed = parser.parse_args().seed
    torch.set_num_threads(1)
    logging.getLogger("quark").setLevel(logging.ERROR)  # the float batch norms are named at every quantize
    torch.manual_seed(seed)
    data = digits.load(seed)
    model = digits.train(digits.ResidualCNN(), data, epochs=30, seed=seed)
    config = finn(weight_bits=4, act_bits=4, qat_spec=TQTSpec(TQTThresholdInitMeth._3SD))
    print(f"seed {seed}, W4A4 _3SD, batch norm kept, Adam lr {LR}, {EPOCHS} epochs; float {digits.accuracy(model, data):.2f} %")
    for label, restart in (("a fresh Adam every epoch", True), ("one Adam for the run", False)):
        qmodel = ModelQuantizer(config).quantize_model(copy.deepcopy(model), data.loader("train"), progress=False)
        per_epoch, last_epoch = qat(qmodel, data, seed, restart)
        print(f"{label}: test accuracy per epoch " + ", ".join(f"{a:.2f}" for a in per_epoch))
        print("  last epoch, test accuracy after each step: " + ", ".join(f"{a:.2f}" for a, _ in last_epoch))
        print("  last epoch, mean |update| / lr of each step: " + ", ".join(f"{u:.2f}" for _, u in last_epoch))


if __name__ == "__main__":
    main()
