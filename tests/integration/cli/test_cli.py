"""The command line: each subcommand end to end, exit statuses, and one-line errors for mistakes."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from _shared import REPO

from quark.torch.extensions.brevitas.cli import main
from quark.torch.extensions.brevitas.cli.inputs import load_checkpoint

MODEL = "integration.cli.cli_models:mlp"
W8A8 = """
global_quant_config:
  weight: {dtype: int8, qscheme: per_channel, ch_axis: 0, observer_cls: PerChannelMinMaxObserver}
  input_tensors: {dtype: int8, scale_type: pof2}
"""
EXTENSION = """
global_quant_config:
  weight: {bit_width: 4, qscheme: per_channel, scale_type: pof2}
  input_tensors: {bit_width: 8, scale_type: pof2}
pre_quant_opt_config: []
"""


@pytest.fixture
def files(tmp_path):
    data = np.random.default_rng(0).random((40, 1, 4, 4), dtype=np.float32)
    np.savez(tmp_path / "calib.npz", images=data)
    (tmp_path / "w8a8.yaml").write_text(W8A8)
    (tmp_path / "ext.yaml").write_text(EXTENSION)
    return tmp_path


def run(*args) -> int:
    return main([str(a) for a in args])


def test_quantize_train_export_verify(files, capsys):
    ckpt, qat_ckpt, onnx_file = files / "q.pt", files / "qat.pt", files / "out" / "model.onnx"
    assert run("quantize", "--config", files / "w8a8.yaml", "--model", MODEL, "--data", files / "calib.npz", "-o", ckpt, "-q") == 0
    out = capsys.readouterr().out
    assert "int8 sym per_channel axis=0 float minmax" in out and "quantized 2 of 2 layers" in out
    qmodel, config, spec = load_checkpoint(str(ckpt))
    assert spec == MODEL and type(qmodel[1]).__name__ == "QuantLinear" and config.global_quant_config.weight.dtype.name == "int8"

    assert run("train", "--checkpoint", ckpt, "--data-module", "integration.cli.cli_models:loaders", "--epochs", 2, "-o", qat_ckpt, "-q", "--freeze") == 0
    assert capsys.readouterr().out.count("held-out accuracy") == 2

    assert run("export", "--checkpoint", qat_ckpt, "--format", "qonnx", "--data", files / "calib.npz", "-o", onnx_file, "-q") == 0
    assert "-> PASS" in capsys.readouterr().out and onnx_file.exists()
    assert run("verify", "--checkpoint", qat_ckpt, "--onnx", onnx_file, "--data", files / "calib.npz") == 0
    # a different model's weights: verification fails with status 1
    assert run("verify", "--checkpoint", ckpt, "--onnx", onnx_file, "--data", files / "calib.npz") == 1
    assert "failed: the exported qonnx graph" in capsys.readouterr().err


def test_checkpoint_reloads_bit_exactly(files):
    ckpt = files / "q.pt"
    run("quantize", "--config", files / "ext.yaml", "--model", MODEL, "--data", files / "calib.npz", "-o", ckpt, "-q")
    a, _, _ = load_checkpoint(str(ckpt))
    b, _, _ = load_checkpoint(str(ckpt))
    x = torch.rand(3, 1, 4, 4)
    assert torch.equal(a(x), b(x))


def test_qdq_export_and_extension_flavour(files, capsys):
    ckpt = files / "q.pt"
    assert run("quantize", "--config", files / "ext.yaml", "--model", MODEL, "--data", files / "calib.npz", "-o", ckpt, "-q") == 0
    assert "int4 sym per_channel pof2" in capsys.readouterr().out  # read as the extension's flavour
    assert run("export", "--checkpoint", ckpt, "--format", "qdq", "--data", files / "calib.npz", "-o", files / "m.onnx", "-q") == 0


def test_dict_data_feeds_keyword_inputs(files):
    np.savez(files / "kw.npz", images=np.random.default_rng(0).random((8, 1, 4, 4), dtype=np.float32), scale=np.ones((8, 1), np.float32))
    cfg = files / "w8a8.yaml"
    assert run("quantize", "--config", cfg, "--model", "integration.cli.cli_models:keyword_model", "--data", files / "kw.npz", "-o", files / "k.pt", "-q") == 0


def test_support_prints_the_tables(capsys):
    assert run("support") == 0
    out = capsys.readouterr().out
    assert "| `int8` |" in out and "| refused | allowed | why |" in out and "QuantLinear" in out
    assert run("support", "bogus") == 2
    assert "unknown section; sections: formats, rules, export" in capsys.readouterr().err


@pytest.mark.parametrize(
    "args, message",
    [
        (["--config", "missing.yaml"], r"--config missing.yaml: file not found"),
        (["--config", "{bad}"], r"--config .*bad.yaml: .*is not a valid YAML config"),
        (["--config", "{unknown}"], r"--config .*unknown.yaml: global_quant_config.weight.bits: unknown field; did you mean dtype\?"),
        (["--model", "no_such_module:f"], r"--model 'no_such_module:f': no module 'no_such_module' \(neither installed nor in "),
        (["--model", "integration.cli.cli_models"], r"--model 'integration.cli.cli_models': expected module:attribute"),
        (["--model", "integration.cli.cli_models:NOT_A_MODEL"], r"expected a torch.nn.Module .*got int"),
        (["--data", "{wrong_shape}"], r"--data .*wrong.npz: the model does not accept its batches \(batch shape \(8, 3, 5\)\)"),
        (["--data", "{text}"], r"--data .*calib.txt: expected a .npz or .pt file, or a folder of images"),
        (["--batch-size", "0"], r"--batch-size 0: must be a positive integer"),
    ],
)
def test_mistakes_are_one_line_errors_with_status_2(files, capsys, args, message):
    import re

    (files / "bad.yaml").write_text("global_quant_config: [unclosed")
    (files / "unknown.yaml").write_text("global_quant_config:\n  weight: {dtype: int8, bits: 4}\n")
    np.savez(files / "wrong.npz", x=np.zeros((8, 3, 5), np.float32))
    (files / "calib.txt").write_text("1 2 3")
    paths = {"bad": files / "bad.yaml", "unknown": files / "unknown.yaml", "wrong_shape": files / "wrong.npz", "text": files / "calib.txt"}
    defaults = {"--config": files / "w8a8.yaml", "--model": MODEL, "--data": files / "calib.npz", "-o": files / "q.pt"}
    given = dict(zip(args[::2], args[1::2]))
    merged = {**defaults, **{k: str(v).format(**paths) for k, v in given.items()}}
    status = run("quantize", *[x for kv in merged.items() for x in kv], "-q")
    err = capsys.readouterr().err
    assert status == 2
    assert re.search(message, err), err
    assert "Traceback" not in err and err.count("\n") <= 2
    assert not (files / "q.pt").exists()


def test_debug_shows_the_traceback(files, capsys):
    assert run("quantize", "--config", files / "missing.yaml", "--model", MODEL, "-o", files / "q.pt", "--debug") == 2
    assert "Traceback" in capsys.readouterr().err
    assert run("quantize", "--config", files / "missing.yaml", "--model", MODEL, "-o", files / "q.pt", "-v") == 2
    assert "Traceback" not in capsys.readouterr().err


def test_module_entry_point_and_help():
    result = subprocess.run([sys.executable, "-m", "quark.torch.extensions.brevitas", "--help"], capture_output=True, text=True, check=False)
    assert result.returncode == 0
    assert "quantize" in result.stdout and "exit status: 0 done, 1 verification failed" in result.stdout
    for command in ("quantize", "train", "export", "verify", "support"):
        sub = subprocess.run([sys.executable, "-m", "quark.torch.extensions.brevitas", command, "--help"], capture_output=True, text=True, check=False)
        assert sub.returncode == 0 and "usage: quark-brevitas " + command in sub.stdout
    bad = subprocess.run([sys.executable, "-m", "quark.torch.extensions.brevitas", "nope"], capture_output=True, text=True, check=False)
    assert bad.returncode == 2 and "invalid choice" in bad.stderr


def test_checkpoint_of_another_kind_is_refused(files, capsys):
    torch.save({"weights": torch.zeros(2)}, files / "other.pt")
    status = run("export", "--checkpoint", files / "other.pt", "--format", "qonnx", "--data", files / "calib.npz", "-o", files / "m.onnx")
    assert status == 2
    assert "not a checkpoint written by quark-brevitas quantize / train" in capsys.readouterr().err


def test_images_folder_is_calibration_data(files):
    from PIL import Image

    folder = files / "images"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for i in range(6):
        Image.fromarray((rng.random((4, 4)) * 255).astype(np.uint8)).save(folder / f"{i}.png")
    assert run("quantize", "--config", files / "w8a8.yaml", "--model", MODEL, "--data", folder, "-o", files / "q.pt", "-q") == 0
    (folder / "big.png").write_bytes(Path(folder / "0.png").read_bytes())
    Image.fromarray(np.zeros((5, 5), np.uint8)).save(folder / "odd.png")
    assert run("quantize", "--config", files / "w8a8.yaml", "--model", MODEL, "--data", folder, "-o", files / "q2.pt", "-q") == 2


def test_every_subcommand_and_option_is_documented():
    from quark.torch.extensions.brevitas.cli import parser

    doc = (REPO / "docs" / "cli.md").read_text()
    top = parser()
    commands = top._subparsers._group_actions[0].choices  # argparse keeps its subparsers here
    for name, sub in commands.items():
        assert f"`{name}`" in doc, name
        for action in sub._actions:
            long = [o for o in action.option_strings if o.startswith("--") and o != "--help"]
            assert not long or any(o in doc for o in long), (name, long)


@pytest.mark.slow
def test_finn_preset_config_file_to_a_finn_dataflow_directory(files, capsys):
    """A saved ``presets.finn()`` config (graph mode) from the command line to FINN's dataflow."""
    pytest.importorskip("finn.transformation.fpgadataflow.create_dataflow_partition", reason="finn-plus is not installed")
    from quark.torch.extensions.brevitas.presets import finn

    finn(weight_bits=4, act_bits=4).save(files / "finn.yaml")
    ckpt, out = files / "q.pt", files / "dataflow"
    assert run("quantize", "--config", files / "finn.yaml", "--model", MODEL, "--data", files / "calib.npz", "-o", ckpt, "-q") == 0
    capsys.readouterr()
    args = ("export", "--checkpoint", ckpt, "--format", "finn", "--data", files / "calib.npz", "-o", out, "-q")
    assert run(*args, "--integer-input", "--target-fps", 10_000) == 0
    printed = capsys.readouterr().out
    assert "one partition of" in printed and "-> PASS" in printed
    assert {"estimate.md", "folding_config.json", "dataflow_partition.onnx"} <= {p.name for p in out.iterdir()}
    # the directory's own files verify, whatever the batch size of --data
    for name in ("model.qonnx.onnx", "model_integer_input.qonnx.onnx"):
        verify = ("verify", "--checkpoint", ckpt, "--onnx", out / name, "--data", files / "calib.npz")
        assert run(*verify, "--batch-size", 7) == 0, capsys.readouterr().err
    # a partial folding entry from a file sets what it names and keeps the rest
    import json

    folding = json.loads((out / "folding_config.json").read_text())
    layer = next(name for name in folding if name.startswith("MVAU"))
    (files / "folding.json").write_text(json.dumps({layer: {"PE": 1}}))
    again = files / "dataflow2"
    flags = ("--integer-input", "--target-fps", 10_000, "--folding", files / "folding.json", "--mvau-wwidth-max", 36)
    assert run("export", "--checkpoint", ckpt, "--format", "finn", "--data", files / "calib.npz", "-o", again, "-q", *flags) == 0
    applied = json.loads((again / "folding_config.json").read_text())
    assert applied[layer]["PE"] == 1 and applied[layer]["SIMD"] == folding[layer]["SIMD"]
    capsys.readouterr()
    assert run("export", "--checkpoint", ckpt, "--format", "finn", "--data", files / "calib.npz", "-o", files / "x",
               "--folding", files / "nope.json") == 2  # fmt: skip
    assert "--folding" in capsys.readouterr().err


@pytest.mark.slow
def test_hls4ml_preset_from_init_to_a_compiled_project(files, capsys):
    """``init --preset hls4ml``, ``quantize``, ``export --format hls4ml``: a compiled project equal to
    torch on every input of --data; its flags refused with other formats, before any work."""
    pytest.importorskip("hls4ml", reason="hls4ml is not installed")
    if shutil.which("g++") is None:
        pytest.skip("hls4ml's compile() needs g++")
    assert run("init", "--preset", "hls4ml", "--bits", 4) == 0
    (files / "hls4ml.yaml").write_text(capsys.readouterr().out)
    ckpt, out = files / "q.pt", files / "project"
    assert run("quantize", "--config", files / "hls4ml.yaml", "--model", MODEL, "--data", files / "calib.npz", "-o", ckpt, "-q") == 0
    capsys.readouterr()
    args = ("export", "--checkpoint", ckpt, "--format", "hls4ml", "--data", files / "calib.npz", "-o", out)
    assert run(*args, "--io-type", "io_stream", "--reuse-factor", 2) == 0, capsys.readouterr().err
    assert "40 samples, max |firmware - torch| 0" in capsys.readouterr().out
    assert {"hls4ml_prj", "hls4ml_config.json", "README.md", "model.qonnx.onnx"} <= {p.name for p in out.iterdir()}
    assert run(*args[:-2], "-o", files / "m.onnx", "--format", "qonnx", "--reuse-factor", 2) == 2
    assert "--reuse-factor: only --format hls4ml takes it" in capsys.readouterr().err
