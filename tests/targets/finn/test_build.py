"""The FINN target as a build FINN's own builder runs.

- The package's QONNX of the digits MLP, CNN and residual CNN, quantized with the Brevitas extension's
  plain config in graph mode (no target, no rounding chosen: half-even), taken through FINN's *stock*
  builder steps (``step_qonnx_to_finn``, ``step_tidy_up``, ``step_streamline``, ``step_convert_to_hw``,
  ``step_create_dataflow_partition``), computes torch's outputs on the whole test set; so does the
  package's own ``export_finn_dataflow`` with its defaults.
- FINN's ``build_dataflow_cfg`` runs the package's steps beside its own and gives the partition the
  package's runner gives; a step that changes the outputs fails naming itself.
- The dataflow directory's ``build.py --check`` names only Vivado as missing; FINN's builder with its
  ``build_config.json`` runs here up to code generation, applying the folding file; ``quark-brevitas
  verify`` passes on its files.

FINN's builder imports its simulator (``finn.xsi``), which needs Vivado: the tests put a stand-in
module in ``sys.modules`` (the package itself never does)."""

from __future__ import annotations

import json
import subprocess
import sys
import types

import numpy as np
import onnx
import pytest
import torch
from torch import nn

pytest.importorskip("finn.transformation.fpgadataflow.create_dataflow_partition", reason="finn-plus is not installed")
pytest.importorskip("mashumaro", reason="FINN's builder's dependencies are not installed (the finn extra)")

from quark.torch.examples import digits
from quark.torch.extensions.brevitas import config as bcfg
from quark.torch.extensions.brevitas import finn_steps
from quark.torch.extensions.brevitas.api import ModelExporter, ModelQuantizer
from quark.torch.quantization.config.type import ScaleType

NETWORKS = {
    "mlp": lambda: nn.Sequential(nn.Flatten(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10)),
    "cnn": digits.cnn,
    "resnet": digits.ResidualCNN,
}


@pytest.fixture
def finn_builder(monkeypatch, tmp_path):
    """FINN's builder modules, imported with a stand-in for its Vivado simulator and FINN's settings
    from the environment (as FINN's command line sets them)."""
    xsi = types.ModuleType("finn.xsi")
    xsi.SimEngine = type("SimEngine", (), {})
    monkeypatch.setitem(sys.modules, "finn.xsi", xsi)
    monkeypatch.setenv("FINN_BUILD_DIR", str(tmp_path / "finn_work"))
    monkeypatch.setenv("XILINX_VIVADO", str(tmp_path / "no_vivado"))  # FINN's report names the tool version
    (tmp_path / "finn_work").mkdir()
    from finn.builder import build_dataflow, build_dataflow_config, build_dataflow_steps

    return types.SimpleNamespace(run=build_dataflow, config=build_dataflow_config, steps=build_dataflow_steps)


@pytest.fixture(scope="module")
def plain_models():
    """The three networks trained on real digits and quantized with the extension's plain W4A4
    power-of-two config in graph mode; with the test images and the quantized model's outputs."""
    data = digits.load(0)
    x_test = torch.stack([x for x, _ in data.test])
    spec = bcfg.QuantizationSpec(bit_width=4, scale_type=ScaleType.pof2)
    config = bcfg.Config(global_quant_config=bcfg.QuantizationConfig(weight=spec, input_tensors=spec), backend=bcfg.Backend.fx)
    models = {}
    for name, build in NETWORKS.items():
        torch.manual_seed(0)
        model = digits.train(build(), data, epochs=3, seed=0)
        qmodel = ModelQuantizer(config).quantize_model(model, data.loader("train"), progress=False, check_algorithms=False)
        with torch.no_grad():
            models[name] = (qmodel, x_test, qmodel(x_test).numpy())
    return models


def _executed(model, x: np.ndarray) -> np.ndarray:
    from quark.torch.extensions.brevitas._backend.targets.finn import execute

    return execute.execute(model, [x]).outputs[0]


@pytest.mark.slow
@pytest.mark.parametrize("name", list(NETWORKS))
def test_finn_stock_steps_and_the_own_build_keep_the_plain_config_exact(plain_models, finn_builder, tmp_path, name):
    from qonnx.core.modelwrapper import ModelWrapper

    qmodel, x, expected = plain_models[name]
    path = tmp_path / "model.qonnx.onnx"
    ModelExporter(path).export_qonnx_model(qmodel, x[:1])  # FINN's graphs: one sample, a float input
    cfg = finn_builder.config.DataflowBuildConfig(
        output_dir=str(tmp_path / "stock"), synth_clk_period_ns=10.0, fpga_part="xc7z020clg400-1",
        generate_outputs=[], save_intermediate_models=True,
    )  # fmt: skip
    model = ModelWrapper(str(path))
    for step in ("step_qonnx_to_finn", "step_tidy_up", "step_streamline", "step_convert_to_hw"):
        model = finn_builder.steps.build_dataflow_step_lookup[step](model, cfg)
        assert np.array_equal(_executed(model, x.numpy()), expected), f"FINN's {step} changed the outputs"
    finn_builder.steps.step_create_dataflow_partition(model, cfg)
    parent = ModelWrapper(str(tmp_path / "stock" / "intermediate_models" / "dataflow_parent.onnx"))
    assert np.array_equal(_executed(parent, x.numpy()), expected)
    own = ModelExporter(tmp_path / "own").export_finn_dataflow(qmodel, x)  # the defaults: no integer input
    assert own.verification.passed and own.verification.max_abs_diff == 0.0
    assert own.verification.identical_predictions == len(x) == 359


def test_quantizers_finn_would_round_otherwise_are_written_as_thresholds(plain_models, tmp_path):
    """Half-even activation quantizers: MultiThresholds (FINN converts Quant nodes with ties up),
    weights stay Quant nodes (FINN folds them exactly); the input's ties (pixels k/16 at 1/8) hit."""
    qmodel, x, _ = plain_models["cnn"]
    path = tmp_path / "m.onnx"
    ModelExporter(path).export_qonnx_model(qmodel, x[:1])
    graph = onnx.load(str(path)).graph
    thresholds = [n for n in graph.node if n.op_type == "MultiThreshold"]
    assert len(thresholds) == 4 and len([n for n in graph.node if n.op_type == "Quant"]) == 4  # 4 weights
    pixels = np.unique(np.round(x.numpy() * 16))
    assert np.any(pixels % 2 == 1)  # odd k/16: ties at scale 1/8


def test_finn_builder_runs_the_package_steps_as_the_package_runner_does(plain_models, finn_builder, tmp_path):
    qmodel, x, expected = plain_models["cnn"]
    path = tmp_path / "model.qonnx.onnx"
    ModelExporter(path).export_qonnx_model(qmodel, x[:1])
    np.save(tmp_path / "input.npy", x[:4].numpy())
    np.save(tmp_path / "expected.npy", expected[:4])
    steps = [*finn_steps.FRONT_END, "step_create_dataflow_partition", "step_specialize_layers",
             "step_target_fps_parallelization", "step_apply_folding_config", "step_minimize_bit_width",
             "step_generate_estimate_reports"]  # fmt: skip
    cfg = finn_builder.config.DataflowBuildConfig(
        output_dir=str(tmp_path / "finn"), synth_clk_period_ns=10.0, fpga_part="xc7z020clg400-1", target_fps=5000,
        steps=steps, generate_outputs=["estimate_reports"], save_intermediate_models=True,
        verify_input_npy=str(tmp_path / "input.npy"), verify_expected_output_npy=str(tmp_path / "expected.npy"),
    )  # fmt: skip
    assert finn_builder.run.build_dataflow_cfg(str(path), cfg) == 0
    from qonnx.core.modelwrapper import ModelWrapper

    from quark.torch.extensions.brevitas._backend.targets.finn.checks import records

    finn_front_end = ModelWrapper(str(tmp_path / "finn" / "intermediate_models" / "step_quark_convert_to_hw.onnx"))
    checked = records(finn_front_end)
    assert [c.name for c in checked] == [s.__name__ for s in finn_steps.FRONT_END]
    assert all(c.max_abs_diff == 0.0 for c in checked)
    ours = ModelExporter(tmp_path / "own").export_finn_dataflow(qmodel, x[:4], finn_steps.FinnBuildConfig(target_fps=5000))
    finn_partition = ModelWrapper(str(tmp_path / "finn" / "intermediate_models" / "step_minimize_bit_width.onnx"))
    assert [n.op_type for n in finn_partition.graph.node] == [layer.op_type for layer in ours.estimate.layers]
    report = json.loads((tmp_path / "finn" / "report" / "estimate_layer_cycles.json").read_text())
    assert max(report.values()) == ours.estimate.max_cycles  # FINN's estimate of the same folding


def test_a_step_that_changes_the_outputs_fails_naming_itself(plain_models, finn_builder, tmp_path):
    qmodel, x, expected = plain_models["mlp"]
    path = tmp_path / "model.qonnx.onnx"
    ModelExporter(path).export_qonnx_model(qmodel, x[:1])
    np.save(tmp_path / "input.npy", x[:4].numpy())
    np.save(tmp_path / "expected.npy", expected[:4])
    from quark.torch.extensions.brevitas._backend.targets.finn.runner import load

    model = finn_steps.run(
        load(path),
        finn_steps.FinnBuildConfig(
            steps=("step_quark_prepare",), output_dir=str(tmp_path),
            verify_input_npy=str(tmp_path / "input.npy"), verify_expected_output_npy=str(tmp_path / "expected.npy"),
        ),
    )  # fmt: skip
    weight = next(t for t in model.graph.initializer if len(t.dims) == 2)
    values = onnx.numpy_helper.to_array(weight).copy()
    values[0, 0] += 1.0  # a step that changes what the graph computes
    model.set_initializer(weight.name, values)
    with pytest.raises(finn_steps.FinnError, match="step_quark_qonnx_to_finn' changed the outputs"):
        finn_steps.step_quark_qonnx_to_finn(
            model,
            finn_steps.FinnBuildConfig(
                steps=(), output_dir=str(tmp_path),
                verify_input_npy=str(tmp_path / "input.npy"), verify_expected_output_npy=str(tmp_path / "expected.npy"),
            ),
        )  # fmt: skip


@pytest.mark.slow
def test_the_dataflow_directory_is_a_build_finns_builder_runs(plain_models, tmp_path, monkeypatch):
    qmodel, x, _ = plain_models["cnn"]
    out = tmp_path / "finn"
    result = ModelExporter(out).export_finn_dataflow(qmodel, x, target_fps=2000)
    check = subprocess.run([sys.executable, "build.py", "--check"], cwd=out, capture_output=True, text=True, timeout=300, check=False)
    missing = [line for line in check.stderr.splitlines() if line.startswith("build.py: missing:")]
    assert check.returncode == 2 and missing, check.stderr
    assert all("Vivado" in line or "vivado" in line or "vitis_hls" in line for line in missing), missing
    # a user's edit of the folding file reaches FINN's build
    folding = json.loads((out / "folding_config.json").read_text())
    layer = next(name for name in folding if name.startswith("MVAU"))
    folding[layer]["PE"] = 1
    folding[layer]["SIMD"] = 1
    (out / "folding_config.json").write_text(json.dumps(folding))
    xsi = types.ModuleType("finn.xsi")
    xsi.SimEngine = type("SimEngine", (), {})
    monkeypatch.setitem(sys.modules, "finn.xsi", xsi)
    monkeypatch.setenv("XILINX_VIVADO", str(tmp_path / "no_vivado"))  # FINN's report names the tool version
    monkeypatch.chdir(out)
    monkeypatch.syspath_prepend(str(out))
    import build  # the directory's build.py

    assert build.main(["--stop-step", "step_hw_codegen"]) == 0
    from qonnx.core.modelwrapper import ModelWrapper
    from qonnx.custom_op.registry import getCustomOp

    applied = ModelWrapper(str(out / "finn_build" / "intermediate_models" / "step_apply_folding_config.onnx"))
    node = next(n for n in applied.graph.node if n.name == layer)
    assert getCustomOp(node).get_nodeattr("PE") == 1 and getCustomOp(node).get_nodeattr("SIMD") == 1
    assert result.files["build_config"] and (out / "finn_build" / "intermediate_models" / "step_hw_codegen.onnx").is_file()
    del sys.modules["build"]


def test_folding_entries_set_only_what_they_name():
    folding = finn_steps.Folding.of({"MVAU_hls_0": {"PE": 2}})
    assert folding.to_dict() == {"MVAU_hls_0": {"PE": 2}}
    assert folding.merged(finn_steps.Folding.of({"MVAU_hls_0": {"SIMD": 4}})).to_dict() == {"MVAU_hls_0": {"PE": 2, "SIMD": 4}}
    with pytest.raises(finn_steps.FinnConfigError, match=r"folding\['MVAU_hls_0'\]: unknown attribute\(s\) \['PEE'\]"):
        finn_steps.Folding.of({"MVAU_hls_0": {"PEE": 2}})


def test_the_build_config_names_the_field_and_round_trips():
    config = finn_steps.FinnBuildConfig(part="Pynq-Z1", clock_mhz=150, target_fps=1000, folding={"MVAU_hls_1": {"SIMD": 3}})
    assert finn_steps.FinnBuildConfig.from_json(config.to_json()) == config
    assert config.fpga_part == "xc7z020clg400-1"
    for field, value, message in (
        ("clock_mhz", -1, "clock_mhz=-1: expected a number > 0"),
        ("target_fps", 0, "target_fps=0: expected a number > 0 or None"),
        ("stop_step", "step_nope", "stop_step='step_nope': not a step of this build"),
        ("steps", ("step_nope",), r"steps: unknown step\(s\) \['step_nope'\]"),
        ("mvau_wwidth_max", 0, "mvau_wwidth_max=0: expected an integer >= 1"),
    ):
        with pytest.raises(finn_steps.FinnConfigError, match=message):
            finn_steps.FinnBuildConfig(**{field: value})
    with pytest.raises(finn_steps.FinnConfigError, match="unknown field"):
        finn_steps.FinnBuildConfig.from_dict({"clock": 100})


def test_a_second_step_of_one_name_is_refused():
    from quark.torch.extensions.brevitas._backend.targets.finn import steps

    with pytest.raises(ValueError, match="'step_quark_prepare' is registered already"):

        def step_quark_prepare(model, cfg):
            return model

        steps.register(checked=False)(step_quark_prepare)
