"""``quark-brevitas init`` (a commented, minimal YAML that loads back to the preset), the YAMLs in
examples/cli (kept equal to init's output), and the command line's manners: --help fast and with
defaults, --version, quiet by default, a warning said once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from _shared import REPO

from quark.torch.extensions.brevitas.cli import PRESET_NAMES, main, parser
from quark.torch.extensions.brevitas.cli.configs import FLAVOURS, PRESETS, build, starter

CLI = [sys.executable, "-m", "quark.torch.extensions.brevitas"]
ENV = {**os.environ, "PYTHONPATH": str(REPO)}
#: examples/cli's YAML files and the init command each is the output of
EXAMPLE_YAMLS = {
    "finn_w4a4.yaml": ["--preset", "finn", "--bits", "4"],
    "finn_w4a4_tqt.yaml": ["--preset", "finn", "--bits", "4", "--tqt"],
    "xint8.yaml": ["--preset", "xint8"],
    "w8a8.yaml": ["--preset", "w8a8"],
}


def test_the_parser_lists_every_preset():
    assert tuple(PRESETS) == PRESET_NAMES


@pytest.mark.parametrize("preset", PRESET_NAMES)
def test_init_writes_a_minimal_yaml_that_loads_back(preset, tmp_path, capsys):
    assert main(["init", "--preset", preset]) == 0
    text = capsys.readouterr().out
    config, expected = starter(preset, command=f"quark-brevitas init --preset {preset}")
    assert text == expected
    assert "null" not in text and "Type." not in text  # no nulls, enums by their names
    assert text.count("#") >= 5  # commented
    assert max(len(line) for line in text.splitlines()) <= 100  # fits a terminal and a docs page
    assert build(FLAVOURS["quark"], yaml.safe_load(text), "init") == config
    (tmp_path / "c.yaml").write_text(text)
    from quark.torch.extensions.brevitas.cli.configs import load_config

    assert load_config(str(tmp_path / "c.yaml")) == config


def test_init_bits_and_tqt_reach_every_spec(capsys):
    assert main(["init", "--preset", "finn", "--weight-bits", "8", "--act-bits", "2", "--tqt"]) == 0
    data = yaml.safe_load(capsys.readouterr().out)
    gqc = data["global_quant_config"]
    assert gqc["weight"]["dtype"] == "int8" and gqc["input_tensors"]["dtype"] == "int2"
    assert data["layer_type_quant_config"]["ReLU"]["output_tensors"]["dtype"] == "uint2"
    assert gqc["weight"]["qat_spec"] == {"name": "TQTSpec", "threshold_init_meth": "_3SD"}


@pytest.mark.parametrize(
    "args, message",
    [
        (["--preset", "finn", "--bits", "5"], "--bits 5: the finn preset allows 2, 3, 4 or 8"),
        (["--preset", "finn", "--bits", "16"], "--bits 16: the finn preset allows 2, 3, 4 or 8"),
        (["--preset", "hls4ml", "--act-bits", "5"], "--act-bits 5: the hls4ml preset allows 2, 3, 4, 8 or 16"),
        (["--preset", "w8a8", "--bits", "4"], "--bits: the w8a8 preset has its bit widths in its name"),
        (["--preset", "xint8", "--tqt"], "--tqt: trained power-of-two thresholds are part of the finn and hls4ml presets"),
        (["--preset", "finn", "-o", "cfg.txt"], "-o cfg.txt: init writes YAML"),
    ],
)
def test_init_refuses_what_a_preset_does_not_take(args, message, capsys):
    assert main(["init", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


@pytest.mark.parametrize("name", sorted(EXAMPLE_YAMLS))
def test_the_example_yamls_are_inits_output(name, tmp_path):
    out = tmp_path / name
    assert main(["init", *EXAMPLE_YAMLS[name], "-o", str(out), "-q"]) == 0
    assert (REPO / "examples" / "cli" / name).read_text() == out.read_text(), (
        f"examples/cli/{name}: regenerate with quark-brevitas init {' '.join(EXAMPLE_YAMLS[name])} -o examples/cli/{name}"
    )


def test_help_imports_neither_torch_nor_the_backend():
    """Lazy imports keep --help fast (benchmarks/cli_startup.py times it): both entry points answer,
    and building the parser leaves torch unimported."""
    script = Path(sys.executable).parent / "quark-brevitas"  # the console script `pip install` writes
    for command in [CLI, [str(script)]] if script.exists() else [CLI]:
        result = subprocess.run([*command, "--help"], capture_output=True, text=True, env=ENV, check=False)
        assert result.returncode == 0 and "quark-brevitas" in result.stdout
    probe = "import sys; from quark.torch.extensions.brevitas.cli import parser; parser(); print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=ENV, check=True).stdout.strip() == "False"


def test_version_and_defaults_in_help():
    result = subprocess.run([*CLI, "--version"], capture_output=True, text=True, env=ENV, check=False)
    assert result.returncode == 0 and result.stdout.startswith("quark-brevitas ")
    commands = parser()._subparsers._group_actions[0].choices  # argparse keeps its subparsers here
    train = commands["train"].format_help()
    assert "(default: 1)" in " ".join(train.split()) and "(default: 0.001)" in " ".join(train.split())
    assert "--batch-size" not in train  # train's batches are its --data-module's
    export = " ".join(commands["export"].format_help().split())
    assert "(default: no folding, PE = SIMD = 1)" in export and "(default: 100)" in export
    assert "(default: 32)" in export  # --batch-size


def test_quiet_by_default_and_a_warning_once(tmp_path):
    """Quantize then export a graph-mode checkpoint (a batch norm after the ReLU stays a float operation:
    nothing before it to fold into): the float-operations warning is said by
    quantize once and not again by export (which rebuilds the model); -q says nothing."""
    np.savez(tmp_path / "calib.npz", images=np.random.default_rng(0).random((16, 1, 4, 4), dtype=np.float32))
    (tmp_path / "model.py").write_text(
        "import torch\nfrom torch import nn\n\ndef build():\n    torch.manual_seed(0)\n"
        "    return nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.BatchNorm2d(4), nn.Flatten(), nn.Linear(16, 3))\n"
    )
    assert main(["init", "--preset", "finn", "-o", str(tmp_path / "finn.yaml"), "-q"]) == 0
    quantize = [*CLI, "quantize", "--config", "finn.yaml", "--model", "model.py:build", "--data", "calib.npz", "-o", "q.pt"]
    first = subprocess.run(quantize, cwd=tmp_path, capture_output=True, text=True, env=ENV, check=False)
    assert first.returncode == 0, first.stderr
    warnings = [line for line in first.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == len(set(warnings)) and any("leaves these operations float" in w for w in warnings)
    export = [*CLI, "export", "--checkpoint", "q.pt", "--format", "qonnx", "--data", "calib.npz", "-o", "m.onnx"]
    second = subprocess.run(export, cwd=tmp_path, capture_output=True, text=True, env=ENV, check=False)
    assert second.returncode == 0, second.stderr
    assert "warning:" not in second.stderr and "UserWarning" not in second.stderr, second.stderr
    quiet = subprocess.run([*quantize[:-1], "q2.pt", "-q"], cwd=tmp_path, capture_output=True, text=True, env=ENV, check=False)
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr
