"""The bad inputs of issue 20, one test each: every one is one line on stderr with the documented
exit status (docs/cli.md, "Exit status"), no traceback, checked before the work it would spoil, and
nothing left behind."""

from __future__ import annotations

import contextlib
import json
import os

import numpy as np
import pytest
import torch
from _shared import REPO

from quark.torch.extensions.brevitas.cli import main

MODEL = "integration.cli.cli_models:mlp"
W8A8 = """
global_quant_config:
  weight: {dtype: int8, qscheme: per_channel, ch_axis: 0, observer_cls: PerChannelMinMaxObserver}
  input_tensors: {dtype: int8, scale_type: pof2}
"""


def run(*args) -> int:
    return main([str(a) for a in args])


def one_line_error(capsys, status: int, expected: int) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if not line.startswith("[")]  # progress lines start with [ s]
    assert status == expected, err
    assert "Traceback" not in err
    assert len(lines) == 1, err
    return lines[0]


@pytest.fixture
def files(tmp_path):
    np.savez(tmp_path / "calib.npz", images=np.random.default_rng(0).random((40, 1, 4, 4), dtype=np.float32))
    np.savez(tmp_path / "wrong.npz", images=np.zeros((8, 3, 5), np.float32))
    (tmp_path / "w8a8.yaml").write_text(W8A8)
    return tmp_path


@pytest.fixture
def checkpoint(files):
    assert run("quantize", "--config", files / "w8a8.yaml", "--model", MODEL, "--data", files / "calib.npz", "-o", files / "q.pt", "-q") == 0
    return files / "q.pt"


def test_verify_of_a_file_that_is_not_onnx(files, checkpoint, capsys):
    (files / "notonnx.onnx").write_text("this is not a protobuf")
    capsys.readouterr()
    status = run("verify", "--checkpoint", checkpoint, "--onnx", files / "notonnx.onnx", "--data", files / "calib.npz")
    line = one_line_error(capsys, status, 2)
    assert "--onnx" in line and "notonnx.onnx: not an ONNX file" in line


def test_a_config_given_as_checkpoint(files, capsys):
    status = run("export", "--checkpoint", files / "w8a8.yaml", "--format", "qonnx", "--data", files / "calib.npz", "-o", files / "m.onnx")
    line = one_line_error(capsys, status, 2)
    assert "--checkpoint" in line and "not a file written by torch.save (a text file, a config? configs go to quantize --config)" in line
    assert "weights_only" not in line


@pytest.fixture
def exports(monkeypatch) -> list[str]:
    """The ModelExporter methods the command called (recorded, not run)."""
    from quark.torch.extensions.brevitas.api import ModelExporter

    called: list[str] = []
    for method in ("export_finn_dataflow", "export_qonnx_model", "export_onnx_model"):
        monkeypatch.setattr(ModelExporter, method, lambda self, *a, _m=method, **k: called.append(_m))
    return called


def test_the_exports_fixture_sees_an_export(files, checkpoint, capsys, exports):
    """Guard: a command that reaches the export is recorded (whatever it does with the recorder's None)."""
    with contextlib.suppress(Exception):  # the recorder returns no report; only the call matters here
        run("export", "--checkpoint", checkpoint, "--format", "qonnx", "--data", files / "calib.npz", "-o", files / "seen.onnx", "-q")
    capsys.readouterr()
    assert exports == ["export_qonnx_model"]


def test_finn_output_that_is_an_existing_file_is_refused_before_any_work(files, checkpoint, capsys, exports):
    pytest.importorskip("finn.util.basic", reason="finn-plus is not installed")
    (files / "taken").write_text("keep me")
    capsys.readouterr()
    status = run("export", "--checkpoint", checkpoint, "--format", "finn", "--data", files / "calib.npz", "-o", files / "taken")
    line = one_line_error(capsys, status, 2)
    assert "-o" in line and "a file; --format finn writes a directory" in line
    assert (files / "taken").read_text() == "keep me"
    assert exports == []  # refused before the export


@pytest.mark.parametrize("command", ["quantize", "export", "verify"])
def test_data_of_the_wrong_shape(files, checkpoint, capsys, command):
    capsys.readouterr()
    args = {
        "quantize": ("quantize", "--config", files / "w8a8.yaml", "--model", MODEL, "-o", files / "q2.pt"),
        "export": ("export", "--checkpoint", checkpoint, "--format", "qonnx", "-o", files / "m.onnx"),
        "verify": ("verify", "--checkpoint", checkpoint, "--onnx", files / "m.onnx"),
    }[command]
    if command == "verify":
        assert run("export", "--checkpoint", checkpoint, "--format", "qonnx", "--data", files / "calib.npz", "-o", files / "m.onnx", "-q") == 0
        capsys.readouterr()
    status = run(*args, "--data", files / "wrong.npz", "-q")
    line = one_line_error(capsys, status, 2)
    assert "--data" in line and "wrong.npz: the model does not accept its batches (batch shape (8, 3, 5))" in line
    assert not (files / "q2.pt").exists()
    if command == "export":
        assert not (files / "m.onnx").exists()


def test_a_static_config_without_data_names_the_option(files, capsys):
    status = run("quantize", "--config", files / "w8a8.yaml", "--model", MODEL, "-o", files / "q.pt")
    line = one_line_error(capsys, status, 2)
    assert "--data is required: this config calibrates global_quant_config.input_tensors on data" in line
    assert "calib_loader" not in line and not (files / "q.pt").exists()


def test_an_enum_value_is_named_by_its_yaml_path_and_spelling(files, capsys):
    (files / "bad.yaml").write_text("global_quant_config:\n  weight: {dtype: int8, qscheme: per_tensr}\n")
    status = run("quantize", "--config", files / "bad.yaml", "--model", MODEL, "--data", files / "calib.npz", "-o", files / "q.pt")
    line = one_line_error(capsys, status, 2)
    assert "global_quant_config.weight.qscheme: 'per_tensr' is not allowed; did you mean per_tensor?" in line
    assert "allowed: per_tensor, per_channel, per_group, per_block" in line and "QSchemeType" not in line


def test_an_unknown_key_is_named_by_its_yaml_path_with_the_closest_field(files, capsys):
    (files / "bad.yaml").write_text("global_quant_config:\n  weight: {dtype: int8, observer: PerTensorMinMaxObserver}\n")
    status = run("quantize", "--config", files / "bad.yaml", "--model", MODEL, "--data", files / "calib.npz", "-o", files / "q.pt")
    line = one_line_error(capsys, status, 2)
    assert "global_quant_config.weight.observer: unknown field; did you mean observer_cls?" in line


def test_a_rule_of_the_config_classes_is_named_by_its_yaml_path(files, capsys):
    (files / "bad.yaml").write_text("global_quant_config:\n  weight: {dtype: int8, qscheme: per_channel}\n")
    status = run("quantize", "--config", files / "bad.yaml", "--model", MODEL, "--data", files / "calib.npz", "-o", files / "q.pt")
    line = one_line_error(capsys, status, 2)
    assert "global_quant_config.weight.ch_axis is required with qscheme=per_channel" in line


def test_an_unknown_part_is_refused_before_the_export_and_leaves_nothing(files, checkpoint, capsys, exports):
    pytest.importorskip("finn.util.basic", reason="finn-plus is not installed")
    capsys.readouterr()
    status = run("export", "--checkpoint", checkpoint, "--format", "finn", "--data", files / "calib.npz", "-o", files / "out" / "badpart", "--part", "Pynq-Z9")
    line = one_line_error(capsys, status, 2)
    assert "--part Pynq-Z9" in line and "Pynq-Z1" in line  # the known boards are listed
    assert not (files / "out").exists()
    assert exports == []  # refused before the export


def test_finn_only_flags_with_another_format(files, checkpoint, capsys):
    capsys.readouterr()
    status = run("export", "--checkpoint", checkpoint, "--format", "qonnx", "--data", files / "calib.npz", "-o", files / "m.onnx", "--target-fps", 100)
    assert "--target-fps: only --format finn takes it" in one_line_error(capsys, status, 2)


@pytest.mark.parametrize("flag, value", [("--target-fps", "0"), ("--clock-mhz", "-5"), ("--top-k", "0")])
def test_finn_numbers_must_be_positive(files, checkpoint, capsys, flag, value):
    pytest.importorskip("finn.util.basic", reason="finn-plus is not installed")
    capsys.readouterr()
    status = run("export", "--checkpoint", checkpoint, "--format", "finn", "--data", files / "calib.npz", "-o", files / "d", flag, value)
    assert f"{flag} {float(value):g}: must be > 0" in one_line_error(capsys, status, 2)
    assert not (files / "d").exists()


@pytest.mark.slow
def test_a_failed_dataflow_export_leaves_nothing(files, checkpoint, capsys, monkeypatch):
    """A FINN step that fails after the QONNX export: status 1, no directory, no partial one."""
    pytest.importorskip("finn.transformation.fpgadataflow.create_dataflow_partition", reason="finn-plus is not installed")
    from quark.torch.extensions.brevitas._backend.targets.finn import dataflow
    from quark.torch.extensions.brevitas._backend.targets.finn.errors import FinnError

    def failing(*args, **kwargs):
        raise FinnError("FINN's estimate failed on the partition: simulated")

    finn_yaml = files / "finn.yaml"
    assert run("init", "--preset", "finn", "-o", finn_yaml) == 0
    assert run("quantize", "--config", finn_yaml, "--model", MODEL, "--data", files / "calib.npz", "-o", files / "f.pt", "-q") == 0
    monkeypatch.setattr(dataflow, "estimate", failing)  # after the build: the directory is written
    capsys.readouterr()
    status = run("export", "--checkpoint", files / "f.pt", "--format", "finn", "--data", files / "calib.npz", "-o", files / "out" / "finn", "-q")
    line = one_line_error(capsys, status, 1)
    assert "failed: FINN's estimate failed" in line
    assert not (files / "out").exists()
    assert not [p for p in os.listdir(files) if p.endswith(".partial")]


def test_model_file_paths_and_the_current_directory(files, capsys, monkeypatch):
    """``--model ./file.py:fn`` and ``file:fn`` from the current directory; the checkpoint rebuilds
    the model from another directory without PYTHONPATH; a missing file is one line."""
    folder = files / "project"
    folder.mkdir()
    (folder / "mycnn.py").write_text(
        "import torch\nfrom torch import nn\n\ndef build():\n    torch.manual_seed(0)\n"
        "    return nn.Sequential(nn.Flatten(), nn.Linear(16, 4))\n"
    )
    monkeypatch.chdir(folder)
    assert run("quantize", "--config", files / "w8a8.yaml", "--model", "./mycnn.py:build", "--data", files / "calib.npz", "-o", "a.pt", "-q") == 0
    assert run("quantize", "--config", files / "w8a8.yaml", "--model", "mycnn:build", "--data", files / "calib.npz", "-o", "b.pt", "-q") == 0
    state = torch.load(folder / "a.pt", weights_only=True)
    assert state["model_origin"]["file"] == str(folder / "mycnn.py")
    capsys.readouterr()
    assert run("quantize", "--config", files / "w8a8.yaml", "--model", "./nothere.py:build", "-o", "c.pt") == 2
    assert "--model './nothere.py:build': no file" in one_line_error(capsys, 2, 2)


def test_a_checkpoint_rebuilds_its_model_from_anywhere(files, tmp_path):
    """Another process, another directory, no PYTHONPATH entry for the model's folder."""
    import subprocess
    import sys

    folder = files / "project"
    folder.mkdir()
    (folder / "mycnn.py").write_text(
        "import torch\nfrom torch import nn\n\ndef build():\n    torch.manual_seed(0)\n"
        "    return nn.Sequential(nn.Flatten(), nn.Linear(16, 4))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cli = [sys.executable, "-m", "quark.torch.extensions.brevitas"]
    quantize = [*cli, "quantize", "--config", str(files / "w8a8.yaml"), "--model", "mycnn:build", "--data", str(files / "calib.npz"), "-o", "q.pt", "-q"]
    assert subprocess.run(quantize, cwd=folder, env=env, capture_output=True, check=False).returncode == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    export = [*cli, "export", "--checkpoint", str(folder / "q.pt"), "--format", "qdq", "--data", str(files / "calib.npz"), "-o", "m.onnx", "-q"]
    result = subprocess.run(export, cwd=elsewhere, env=env, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert (elsewhere / "m.onnx").exists()


def test_cuda_without_a_device(files, capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: --device cuda is allowed here")
    status = run("quantize", "--config", files / "w8a8.yaml", "--model", MODEL, "--data", files / "calib.npz", "-o", files / "q.pt", "--device", "cuda")
    assert "--device cuda: torch finds no CUDA device" in one_line_error(capsys, status, 2)


def test_json_output_for_ci(files, capsys):
    assert run("quantize", "--config", files / "w8a8.yaml", "--model", MODEL, "--data", files / "calib.npz", "-o", files / "q.pt", "--json") == 0
    result = json.loads(capsys.readouterr().out)
    assert result["command"] == "quantize" and result["status"] == 0 and result["quantized_layers"] == 2
    assert run("export", "--checkpoint", files / "q.pt", "--format", "qdq", "--data", files / "calib.npz", "-o", files / "m.onnx", "--json") == 0
    result = json.loads(capsys.readouterr().out)
    assert result["passed"] is True and result["max_abs_diff"] < 1e-6 and result["format"] == "qcdq"
    assert run("quantize", "--config", files / "missing.yaml", "--model", MODEL, "-o", files / "q.pt", "--json") == 2
    captured = capsys.readouterr()
    assert json.loads(captured.out) == {"command": "quantize", "status": 2, "error": f"--config {files / 'missing.yaml'}: file not found"}


def _package_errors():
    from quark.torch.extensions.brevitas._backend.qonnx_passes.execution import ExecutionError
    from quark.torch.extensions.brevitas._backend.targets.hls4ml.project import Hls4mlError
    from quark.torch.extensions.brevitas.api import (
        ExportVerificationError,
        FinnError,
        TargetCheckError,
        UnsupportedExportError,
    )
    from quark.torch.extensions.brevitas.cli.errors import Failed, UsageError
    from quark.torch.quantization.quark013_api import QuarkFeatureRefused

    refused = [TargetCheckError("x", []), UnsupportedExportError("x", []), UsageError("x"), QuarkFeatureRefused("x")]
    failed = [ExportVerificationError("x", None), FinnError("x"), Hls4mlError("x"), Failed("x")]
    internal = [(ExecutionError("x"), 3, "unexpected ExecutionError")]  # qonnx's bare Exception, mirrored
    return [(e, 2, "error") for e in refused] + [(e, 1, "failed") for e in failed] + internal


@pytest.mark.parametrize("error, status, word", _package_errors(), ids=lambda v: type(v).__name__ if isinstance(v, Exception) else None)
def test_the_package_errors_map_to_their_exit_status_by_class(error, status, word):
    """The command line reads the status from the error's class (quark.common.errors), not its name;
    a standard exception keeps the status of its kind."""
    from quark.torch.extensions.brevitas.cli import _classify

    assert _classify(error) == (status, word)
    assert _classify(KeyError("k")) == (3, "unexpected KeyError") and _classify(ValueError("v")) == (2, "error")
