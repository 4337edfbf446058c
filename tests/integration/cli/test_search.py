"""``quark-brevitas search`` end to end on the tiny MLP (issue 19): pareto.json's fields, chosen.yaml
loadable as a Quark Config, each point's checkpoint in the command line's format (``export`` loads
it, its accuracy reproduces), the LUT claims against the full FINN estimate, the cache a second
run reuses, and the mistakes in the command line named by their argument."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

pytest.importorskip(
    "finn.transformation.fpgadataflow.create_dataflow_partition",
    reason="finn-plus is not installed (pip install --no-deps finn-plus==1.6.1; see docs/export.md)",
)

from integration.cli.cli_models import mlp
from quark.torch.extensions.brevitas import search
from quark.torch.extensions.brevitas.api import ModelQuantizer
from quark.torch.extensions.brevitas.cli import main
from quark.torch.extensions.brevitas.cli.inputs import load_checkpoint
from quark.torch.quantization.config.config import Config

MODEL = "integration.cli.cli_models:mlp"
RESOURCES = ("LUT", "BRAM_18K", "URAM", "DSP")


def _write_inputs(folder) -> dict[str, str]:
    g = torch.Generator().manual_seed(0)
    paths = {}
    for name, n in (("train", 256), ("val", 128)):
        x = torch.rand(n, 1, 4, 4, generator=g)
        y = x.flatten(1)[:, :4].argmax(1)  # the brightest of the first four pixels
        paths[name] = str(folder / f"{name}.npz")
        np.savez(paths[name], x=x.numpy(), y=y.numpy())
    paths["float"] = str(folder / "float.pt")
    torch.save(mlp().state_dict(), paths["float"])
    return paths


def _args(paths, out, *extra) -> list[str]:
    return [
        "search", "--model", MODEL, "--checkpoint", paths["float"], "--data", paths["train"],
        "--eval-data", paths["val"], "--part", "xc7z020clg400-1", "--target-fps", "100000", "--bits", "2,4",
        "--qat-epochs", "1", "--points", "4", "--upto", "W4A4", "-q", "-o", str(out), *extra,
    ]


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    folder = tmp_path_factory.mktemp("search")
    paths = _write_inputs(folder)
    out = folder / "out"
    assert main(_args(paths, out)) == 0
    return paths, out, json.loads((out / "pareto.json").read_text())


def _batches(path):
    arrays = np.load(path)
    return [(torch.from_numpy(arrays["x"][i : i + 32]), torch.from_numpy(arrays["y"][i : i + 32]).long()) for i in range(0, len(arrays["x"]), 32)]


@pytest.mark.slow
def test_pareto_json_lists_every_point_with_the_fields_the_issue_names(searched):
    _, out, data = searched
    assert {"part", "target_fps", "clock_mhz", "metric", "bits", "qat_epochs", "points", "chosen", "fronts"} <= set(data)
    names = [p["name"] for p in data["points"]]
    assert {"W2A2", "W4A4"} <= set(names) and len(names) == len(set(names))
    for point in data["points"]:
        assert {"name", "accuracy", "fps", "uniform", "config", "checkpoint", *RESOURCES} <= set(point)
        assert point["uniform"] == (point["name"] in ("W2A2", "W4A4"))
        assert 0 <= point["accuracy"] <= 100 and point["fps"] >= 100_000
        assert not point["checkpoint"].startswith("/") and (out / point["checkpoint"]).is_file()
        # the LUT claim (the cost model) against FINN's full estimate of the same network
        assert point["predicted"]["LUT"] == pytest.approx(point["estimated"]["LUT"], rel=0.05)
        assert {r: point[r] for r in RESOURCES} == point["estimated"]
    assert data["chosen"] in names
    assert (out / "pareto.png").stat().st_size > 10_000


@pytest.mark.slow
def test_chosen_yaml_is_a_quark_config_with_a_width_per_layer(searched):
    paths, out, data = searched
    chosen = Config.load(out / "chosen.yaml")
    assert isinstance(chosen, Config) and chosen.layer_quant_config
    point = next(p for p in data["points"] if p["name"] == data["chosen"])
    for variable, bits in point["widths"].items():
        site, kind = variable.rsplit(":", 1)
        entry = chosen.layer_quant_config[site]
        spec = entry.weight if kind == "weight" else entry.output_tensors or entry.input_tensors
        assert spec.dtype.value.endswith(str(bits)), (variable, spec.dtype)
    model = mlp()
    model.load_state_dict(torch.load(paths["float"], weights_only=True))
    ModelQuantizer(chosen).quantize_model(model, _batches(paths["train"]), progress=False)


@pytest.mark.slow
def test_each_points_checkpoint_reloads_with_its_accuracy_and_exports(searched, tmp_path):
    paths, out, data = searched
    evaluation = _batches(paths["val"])
    for point in data["points"]:
        qmodel, _config, spec = load_checkpoint(str(out / point["checkpoint"]))
        assert spec == MODEL
        assert search.accuracy(qmodel, evaluation) == point["accuracy"], point["name"]
    np.savez(tmp_path / "x.npz", x=np.load(paths["val"])["x"][:8])
    checkpoint = out / data["points"][0]["checkpoint"]
    onnx = tmp_path / "point.onnx"
    assert main(["export", "--checkpoint", str(checkpoint), "--format", "qonnx", "--data", str(tmp_path / "x.npz"), "-q", "-o", str(onnx)]) == 0
    assert main(["verify", "--checkpoint", str(checkpoint), "--onnx", str(onnx), "--data", str(tmp_path / "x.npz"), "-q"]) == 0


@pytest.mark.slow
def test_a_second_run_with_the_same_arguments_reuses_the_cost_model_and_sensitivities(searched, monkeypatch):
    paths, out, first = searched
    assert sorted(p.name.split("-")[0] for p in (out / "cache").iterdir()) == ["cost", "sensitivity"]

    def refuse(*args, **kwargs):
        raise AssertionError("recomputed although cached")

    monkeypatch.setattr(search, "build_cost_model", refuse)
    monkeypatch.setattr(search, "sensitivities", refuse)
    assert main(_args(paths, out)) == 0
    again = json.loads((out / "pareto.json").read_text())
    assert again["cached"] == ["cost", "sensitivity"]
    assert again["fronts"] == first["fronts"]


@pytest.mark.parametrize(
    "change, expected",
    [
        ({"--bits": "1,2"}, "--bits 1,2: widths of 2 bits and up"),
        ({"--bits": "two"}, "--bits two: expected comma-separated integers"),
        ({"--part": "xc7nope"}, "--part xc7nope:"),
        ({"--target-fps": "0"}, "--target-fps 0: must be > 0"),
        ({"--qat-epochs": "-1"}, "--qat-epochs -1: must be >= 0"),
        ({"--points": "0"}, "--points 0: expected an integer >= 1 or 'all'"),
        ({"--upto": "W3A3"}, "--upto W3A3: a uniform baseline of --bits 2,4: W2A2, W4A4"),
        ({"--data": "EVAL_X_ONLY"}, "expected x (inputs) and y (integer labels)"),
        ({"--eval-data": "MISSING"}, "--eval-data MISSING: expected an existing .npz file"),
        ({"--checkpoint": "WRONG_MODEL"}, "does not fit the model integration.cli.cli_models:mlp builds"),
    ],
    ids=lambda v: str(v)[:30],
)
def test_mistakes_name_the_argument_before_any_work(tmp_path, capsys, change, expected):
    paths = _write_inputs(tmp_path)
    np.savez(tmp_path / "x_only.npz", x=np.zeros((4, 1, 4, 4), dtype=np.float32))
    torch.save(torch.nn.Linear(3, 2).state_dict(), tmp_path / "wrong.pt")
    files = {"EVAL_X_ONLY": str(tmp_path / "x_only.npz"), "MISSING": "missing.npz", "WRONG_MODEL": str(tmp_path / "wrong.pt")}
    args = _args(paths, tmp_path / "out")
    for option, value in change.items():
        args[args.index(option) + 1] = files.get(value, value)
    assert main(args) == 2
    err = capsys.readouterr().err
    assert expected.replace("MISSING", "missing.npz") in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()
