"""Every script in examples/ runs, end to end, and does what its docstring says."""

from __future__ import annotations

import importlib.util
from collections import Counter
from pathlib import Path

import pytest
from _shared import REPO

EXAMPLES = REPO / "examples"


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_example_has_a_test():
    tested = {name.removeprefix("test_") for name in globals() if name.startswith("test_")}
    assert {p.stem for p in EXAMPLES.glob("*.py")} <= tested


def test_ipu_transformers_resnet(tmp_path):
    result = load("ipu_transformers_resnet").main(["--output", str(tmp_path / "resnet.onnx")])
    assert result["report"].passed
    assert "IPU: Q/DQ scales exact powers of two, zero points 0" in result["report"].target_checks
    assert result["cosine"] > 0.98 and result["agreement"] >= 0.9
    assert (tmp_path / "resnet.onnx").stat().st_size > 0


@pytest.mark.slow
def test_digits_ptq(capsys):
    load("digits_ptq").main()
    out = capsys.readouterr().out
    assert "float model: test accuracy" in out and out.count("test accuracy") == 3


@pytest.mark.slow
def test_digits_qat_finn(tmp_path, capsys):
    """The whole journey, shortened (10 float epochs, 1 QAT epoch): FINN's hardware layers give
    torch's predictions on the whole test set, both exports are verified, the report says so."""
    out = tmp_path / "journey"
    result = load("digits_qat_finn").main(["--epochs", "1", "--float-epochs", "10", "--out", str(out)])
    printed = capsys.readouterr().out
    accuracy = result["accuracy"]
    assert list(accuracy) == ["float", "PTQ", "QAT epoch 1", "XINT8 PTQ (QDQ)"]
    assert min(accuracy.values()) > 90.0  # real digits, trained: far above chance (10 %)
    assert result["qonnx"].passed and result["qdq"].passed
    assert "round_method=half_up" in result["w4_qdq"]  # why the W4A4 model does not go to QDQ
    dataflow, fpga = result["dataflow"], result["fpga"]
    verification = dataflow.verification
    assert fpga["input"] == "UINT8"  # integer pixels in (integer_input=True): the input scale folds into layer 1
    assert not any("Thresholding" in layer for layer in dataflow.float_layers)
    # on the host: the input's layout change and the output's float scale and bias
    assert fpga["partitions"] == 1 and set(fpga["outside"]) <= {"StreamingDataflowPartition", "Transpose", "Mul", "Add"}
    layers = Counter()  # generic layer types: FINN specializes to _hls or _rtl by datatype
    for op_type, count in fpga["inside"].items():
        layers[op_type.removesuffix("_hls").removesuffix("_rtl")] += count
    assert layers["MVAU"] == 4  # three convolutions and the head
    assert layers["ElementwiseAdd"] >= 1 and layers["DuplicateStreams"] == 1  # the residual block
    assert verification.samples == result["test_images"] == 359
    assert verification.identical_predictions == 359 and verification.passed
    assert dataflow.estimate.fits and dataflow.estimate.meets_target
    assert fpga["parameters"]["weights"] == {"INT4": result["quantized_weights"]}
    for field in (
        "float ", "PTQ ", "QAT epoch 1", "identical predictions 359/359", "cycles per frame", "fps; latency",
        "LUT ", "BRAM_18K ", "inside (", "outside (host)", "files:", "W4A4 to QDQ: refused",
    ):
        assert field in printed, field
    for path in result["files"].values():
        assert Path(path).exists(), path
    written = {p.name for p in (out / "finn").iterdir()}
    assert {"estimate.md", "folding_config.json", "dataflow_partition.onnx"} <= written


@pytest.mark.slow
def test_minilm_smoothquant_gptq():
    """One transformer block, few sentences (for time); the held-out fidelity still has to improve
    on round-to-nearest by a margin (measured: mean cosine 0.968 -> 0.991, minimum 0.956 -> 0.981)."""
    result = load("minilm_smoothquant_gptq").main(["--layers", "1", "--calib", "16", "--eval", "32"])
    rtn, tuned = result["RTN"], result["SmoothQuant+GPTQ"]
    assert 0.5 < rtn["mean_cosine"] < 1 and 0.5 < tuned["mean_cosine"] <= 1
    assert tuned["mean_cosine"] > rtn["mean_cosine"] + 0.01
    assert tuned["min_cosine"] > rtn["min_cosine"]


@pytest.mark.slow
def test_quark_extension_script(tmp_path):
    path = tmp_path / "digits.onnx"
    result = load("quark_extension_script").main(["--output", str(path)])
    assert result["quant_accuracy"] > result["float_accuracy"] - 3 and result["float_accuracy"] > 90
    from quark.torch.extensions.brevitas.api import ModelExporter

    report = ModelExporter(path).verify(result["quant_model"], result["example"])  # the file, run again
    assert report.passed


def test_quark013_configs(capsys):
    """Every config written as AMD Quark 0.13 writes it quantizes the digits CNN and keeps it accurate."""
    accuracy = load("quark013_configs").main(["--float-epochs", "10"])
    assert len(accuracy) == 11 and accuracy["float"] > 95.0
    assert all(value > accuracy["float"] - 2.0 for value in accuracy.values()), accuracy
    assert "Linear: OCP MXFP4" in capsys.readouterr().out
