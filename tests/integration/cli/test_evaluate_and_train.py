"""``evaluate``, ``analyze`` and ``train``'s recipe through the command line: the schedule, a
checkpoint every epoch, ``--resume``, Ctrl-C keeping the last finished epoch, the output checked first."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

from quark.torch.extensions.brevitas._backend import training
from quark.torch.extensions.brevitas.cli import main
from quark.torch.extensions.brevitas.cli.inputs import load_checkpoint, read_checkpoint

MODEL = "integration.cli.cli_models:mlp"
LOADERS = "integration.cli.cli_models:loaders"
W8A8 = """
global_quant_config:
  weight: {dtype: int8, qscheme: per_channel, ch_axis: 0, observer_cls: PerChannelMinMaxObserver}
  input_tensors: {dtype: int8, scale_type: pof2}
"""


def run(*args) -> int:
    return main([str(a) for a in args])


@pytest.fixture
def checkpoint(tmp_path):
    from integration.cli.cli_models import loaders

    x = torch.cat([b[0] for b in loaders()[0]])
    y = torch.cat([b[1] for b in loaders()[0]])
    np.savez(tmp_path / "calib.npz", images=x.numpy())
    np.savez(tmp_path / "test.npz", x=x.numpy(), y=y.numpy())
    (tmp_path / "w8a8.yaml").write_text(W8A8)
    path = tmp_path / "q.pt"
    assert run("quantize", "--config", tmp_path / "w8a8.yaml", "--model", MODEL, "--data", tmp_path / "calib.npz", "-o", path, "-q") == 0
    return path


def _accuracy(model, x, y) -> float:
    with torch.no_grad():
        return 100.0 * float((model(x).argmax(-1) == y).float().mean())


def test_evaluate_reports_both_models_on_labelled_data(checkpoint, capsys):
    from integration.cli.cli_models import mlp

    capsys.readouterr()
    assert run("evaluate", "--checkpoint", checkpoint, "--data", checkpoint.parent / "test.npz", "--json", "-q") == 0
    result = json.loads(capsys.readouterr().out)
    with np.load(checkpoint.parent / "test.npz") as arrays:
        x, y = torch.as_tensor(arrays["x"]), torch.as_tensor(arrays["y"])
    qmodel, _, _ = load_checkpoint(str(checkpoint))
    assert result["samples"] == len(x)
    assert result["quantized"]["top1"] == pytest.approx(_accuracy(qmodel, x, y))
    assert result["float"]["top1"] == pytest.approx(_accuracy(mlp().eval(), x, y))
    assert result["quantized"]["top5"] is None  # 4 classes: top-5 says nothing
    with torch.no_grad():
        agree = float((qmodel(x).argmax(-1) == mlp().eval()(x).argmax(-1)).float().mean())
    assert result["agreement"] == pytest.approx(agree)


def test_evaluate_without_labels_compares_outputs(checkpoint, capsys):
    capsys.readouterr()
    assert run("evaluate", "--checkpoint", checkpoint, "--data", checkpoint.parent / "calib.npz") == 0
    out = capsys.readouterr().out
    assert "no labels: outputs compared only" in out and "top-1 agreement" in out


def test_evaluate_from_a_data_module_and_one_source_only(checkpoint, capsys):
    assert run("evaluate", "--checkpoint", checkpoint, "--data-module", LOADERS, "-q") == 0
    assert "quantized" in capsys.readouterr().out
    assert run("evaluate", "--checkpoint", checkpoint) == 2
    assert "give --data" in capsys.readouterr().err
    assert run("evaluate", "--checkpoint", checkpoint, "--data-module", LOADERS, "--data", checkpoint.parent / "test.npz") == 2


def test_evaluate_takes_every_batch_of_a_generator(checkpoint, capsys):
    capsys.readouterr()
    assert run("evaluate", "--checkpoint", checkpoint, "--data-module", "integration.cli.cli_models:generator_loaders", "--json", "-q") == 0
    assert json.loads(capsys.readouterr().out)["samples"] == 32  # both eval batches, the first too


def test_analyze_lists_every_quantizer_in_the_models_names(checkpoint, capsys):
    capsys.readouterr()
    assert run("analyze", "--checkpoint", checkpoint, "--data", checkpoint.parent / "test.npz", "--json", "-q") == 0
    result = json.loads(capsys.readouterr().out)
    where = {(q["module"], q["tensor"]) for q in result["quantizers"]}
    assert where == {("1", "weight"), ("1", "input"), ("3", "weight"), ("3", "input")}  # Flatten, Linear, ReLU, Linear
    alone = [q["alone_db"] for q in result["quantizers"]]
    assert alone == sorted(alone)


def test_train_records_the_recipe_and_decays_to_zero(checkpoint, capsys, monkeypatch):
    rates = []
    real = training.train_epoch

    def spy(model, batches, optimizer, recipe, epoch, **kw):
        loss = real(model, batches, optimizer, recipe, epoch, **kw)
        rates.append(optimizer.param_groups[0]["lr"])
        return loss

    monkeypatch.setattr(training, "train_epoch", spy)
    out = checkpoint.parent / "qat.pt"
    assert run("train", "--checkpoint", checkpoint, "--data-module", LOADERS, "--epochs", 2, "--lr", "0.01", "-o", out, "--json", "-q") == 0
    result = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert result["recipe"] == {"epochs": 2, "lr": 0.01, "schedule": "cosine", "warmup_epochs": 0.0, "weight_decay": 0.0}
    assert len(result["held_out_accuracy"]) == 2
    steps = 4  # batches per epoch: the last step of the run sits at 7/8 of it
    assert rates[-1] == pytest.approx(0.01 * 0.5 * (1 + np.cos(np.pi * (2 * steps - 1) / (2 * steps))))
    assert "training" not in read_checkpoint(str(out))  # finished: nothing to resume


def test_ctrl_c_keeps_the_last_finished_epoch_and_resume_goes_on(checkpoint, capsys, monkeypatch):
    real = training.train_epoch
    out = checkpoint.parent / "qat.pt"

    def interrupted(model, batches, optimizer, recipe, epoch, **kw):
        if epoch == 2:
            raise KeyboardInterrupt
        return real(model, batches, optimizer, recipe, epoch, **kw)

    monkeypatch.setattr(training, "train_epoch", interrupted)
    assert run("train", "--checkpoint", checkpoint, "--data-module", LOADERS, "--epochs", 3, "--schedule", "constant", "-o", out, "-q") == 130
    err = capsys.readouterr().err
    assert f"{out} holds epoch 1 of 3" in err and "--resume" in err
    state = read_checkpoint(str(out))
    assert state["training"]["epoch"] == 1 and state["training"]["recipe"]["schedule"] == "constant"

    monkeypatch.setattr(training, "train_epoch", real)
    # the recipe is the checkpoint's: a different one is refused, the same one accepted
    assert run("train", "--checkpoint", out, "--data-module", LOADERS, "--resume", "--epochs", 5, "-o", out) == 2
    assert "--epochs 5: --resume goes on with the recipe the checkpoint records" in capsys.readouterr().err
    assert run("train", "--checkpoint", out, "--data-module", LOADERS, "--resume", "--schedule", "constant", "-o", out, "--json", "-q") == 0
    result = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert len(result["held_out_accuracy"]) == 3 and result["recipe"]["schedule"] == "constant"
    assert run("train", "--checkpoint", out, "--data-module", LOADERS, "--resume", "-o", out) == 2
    assert "holds no training state" in capsys.readouterr().err


def test_train_refuses_an_unwritable_output_before_training(checkpoint, capsys, monkeypatch):
    called = []
    monkeypatch.setattr(training, "train_epoch", lambda *a, **k: called.append(1))
    monkeypatch.setattr(os, "access", lambda path, mode: False)  # as for a read-only folder (the tests run as root)
    assert run("train", "--checkpoint", checkpoint, "--data-module", LOADERS, "-o", checkpoint.parent / "ro" / "qat.pt") == 2
    assert "is not writable" in capsys.readouterr().err and not called


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--epochs", 0), "--epochs 0: must be > 0"),
        (("--lr", -1), "--lr -1: must be > 0"),
        (("--warmup-epochs", -1), "--warmup-epochs -1: must be >= 0"),
        (("--weight-decay", -0.1), "--weight-decay -0.1: must be >= 0"),
    ],
)
def test_train_recipe_flags_are_checked(checkpoint, capsys, flags, message):
    assert run("train", "--checkpoint", checkpoint, "--data-module", LOADERS, *flags, "-o", checkpoint.parent / "x.pt") == 2
    assert message in capsys.readouterr().err
