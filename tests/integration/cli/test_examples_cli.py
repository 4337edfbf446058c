"""examples/cli/journey.sh, the journey of docs/cli.md with the command line alone: a user's model
file and data -> configs from `init` -> a FINN dataflow directory and a QDQ file."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from _shared import REPO


@pytest.mark.slow
def test_the_command_line_journey(tmp_path):
    pytest.importorskip("finn.transformation.fpgadataflow.create_dataflow_partition", reason="finn-plus is not installed")
    pytest.importorskip("sklearn", reason="the example's data are scikit-learn's digits")
    if shutil.which("bash") is None:
        pytest.skip("the journey is a bash script")
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "PYTHON": sys.executable,
        "QUARK_BREVITAS": f"{sys.executable} -m quark.torch.extensions.brevitas",
    }
    work = tmp_path / "journey"
    result = subprocess.run(
        ["bash", str(REPO / "examples" / "cli" / "journey.sh"), str(work)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    finn = work / "out" / "finn"
    expected = {"README.md", "build.py", "build_config.json", "dataflow_parent.onnx", "dataflow_partition.onnx",
                "estimate.json", "estimate.md", "folding_config.json", "model.qonnx.onnx", "verification.json"}
    assert expected <= {p.name for p in finn.iterdir()}
    assert not [p for p in (work / "out").iterdir() if p.name.endswith(".partial")]
    verification = json.loads((finn / "verification.json").read_text())["hardware_graph"]
    assert verification["passed"] and verification["identical_predictions"] == verification["samples"] == 359
    estimate = json.loads((finn / "estimate.json").read_text())
    assert estimate["meets_target"] == (not estimate["layers_over_target"]) == (estimate["estimated_fps"] >= 10_000)
    modules = {layer["name"]: layer["module"] for layer in estimate["layers"]}
    assert [m for name, m in modules.items() if name.startswith("MVAU")] == ["conv0", "conv1", "head"]
    assert modules["Pool_hls_0"] == "pool"
    window = [name for name in modules if name.startswith("ConvolutionInputGenerator")][-1]
    assert modules[window] == "pool"  # the pool's sliding window is the pool's, not a batch norm's
    report = (finn / "estimate.md").read_text()
    assert ("target 10,000 fps: **met**" in report.lower()) == estimate["meets_target"]
    # the parent graph points at the partition where it now is (the directory was moved into place)
    import onnx

    parent = onnx.load(str(finn / "dataflow_parent.onnx"))
    paths = [a.s.decode() for n in parent.graph.node for a in n.attribute if a.name == "model"]
    assert paths == [str(finn / "dataflow_partition.onnx")]
    check = subprocess.run([sys.executable, str(finn / "build.py"), "--check"], capture_output=True, text=True, check=False)
    if shutil.which("vivado") is None:
        assert check.returncode == 2 and "vivado is not on PATH" in check.stderr
    assert (work / "out" / "mycnn.qdq.onnx").exists() and (work / "out" / "mycnn.qonnx.onnx").exists()
    assert result.stdout.count("-> PASS") >= 4  # qonnx, finn, qdq export, verify
