"""The vision zoo: every torchvision / timm entry builds and runs on its input shape; importing the
zoo (and quark) imports no model library, prints and warns nothing."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from quark.torch.examples import vision_zoo

MISSING = vision_zoo.missing_libraries()
needs_libraries = pytest.mark.skipif(
    bool(MISSING), reason=f"not installed: {', '.join(MISSING)} (pip install --no-deps torchvision timm)"
)


def test_import_is_silent_and_lazy():
    code = (
        "import sys, warnings\n"
        "warnings.simplefilter('error')\n"
        "import quark, quark.torch.examples.vision_zoo\n"
        "assert 'torchvision' not in sys.modules and 'timm' not in sys.modules, 'imported a model library'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


@needs_libraries
def test_torchvision_imports_beside_the_cpu_torch():
    """The zoo's import path declares torchvision's missing operators once, then torchvision and
    timm import in a fresh process (the registry's CUDA torchvision fails to import there alone)."""
    code = (
        "from quark.torch.examples import vision_zoo\n"
        "models, timm = vision_zoo.import_model_libraries()\n"
        "print(type(models.resnet18()).__name__, timm.__name__)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert (done.returncode, done.stdout.strip()) == (0, "ResNet timm"), done.stderr[-2000:]


@needs_libraries
@pytest.mark.parametrize("name", sorted(vision_zoo.ZOO))
def test_entry_builds_and_runs(name):
    entry = vision_zoo.ZOO[name]
    model = entry.build(seed=0)
    assert not model.training
    with torch.no_grad():
        out = model(entry.sample(batch=2))
    assert out.shape == (2, 10)
    assert torch.isfinite(out).all()
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    assert all(int(m.num_batches_tracked) == 4 for m in norms)  # statistics from the 4 random batches
    assert all(m.momentum is not None for m in norms)  # momentum restored after the cumulative average


@needs_libraries
@pytest.mark.parametrize("graph", [False, True], ids=["layerwise", "graph"])
def test_timm_linear_is_quantized_as_nn_linear(graph):
    """timm's ``Linear`` (an ``nn.Linear`` subclass, the classifier of its MobileNetV4) is a Linear site
    in both modes, matched by a ``layer_type_quant_config`` keyed ``nn.Linear``."""
    from quark.torch.extensions.brevitas.api import ModelQuantizer
    from quark.torch.extensions.brevitas.presets import xint8

    _, timm = vision_zoo.import_model_libraries()
    model = torch.nn.Sequential(timm.layers.Linear(12, 8), torch.nn.ReLU(), timm.layers.Linear(8, 3)).eval()
    quantizer = ModelQuantizer(xint8(graph=graph))
    qmodel = quantizer.quantize_model(model, [torch.randn(16, 12)], progress=False)
    assert [type(m).__name__ for m in (qmodel.get_submodule("0"), qmodel.get_submodule("2"))] == ["QuantLinear"] * 2
    assert {p.name: p.module_type for p in quantizer.plans if p.name in ("0", "2")} == {"0": torch.nn.Linear, "2": torch.nn.Linear}


@needs_libraries
def test_timm_batch_norm_act_folds_and_keeps_its_activation():
    """MergeBatchNorm folds timm's BatchNormAct2d (batch norm + activation in one module, which
    torch.fx traces through) into the convolution before it and keeps its activation: the folded
    float model computes what the original did, with no batch norm left."""
    from quark.torch.extensions.brevitas._backend.algorithms.batch_norm import merge_batch_norm
    from quark.torch.quantization.config.algorithms import MergeBatchNorm

    _, timm = vision_zoo.import_model_libraries()
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, bias=False), timm.layers.BatchNormAct2d(8, act_layer=torch.nn.ReLU)
    )
    batches = [torch.randn(4, 3, 10, 10) for _ in range(3)]
    vision_zoo.set_batch_norm_statistics(model, batches)
    x = torch.randn(4, 3, 10, 10)
    expected = model(x)
    assert (expected == 0).any()  # the activation acts
    folded = merge_batch_norm(MergeBatchNorm(), model, batches)
    assert not any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in folded.modules())
    torch.testing.assert_close(folded(x), expected, rtol=1e-5, atol=1e-5)


def _calibration(entry, batches: int = 2, batch: int = 8) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return [torch.rand(batch, *entry.input_shape, generator=generator) for _ in range(batches)]


def _unsigned(model) -> tuple[str, ...]:
    present = {type(m).__name__ for m in model.modules()}
    return tuple(t for t in ("ReLU", "ReLU6", "Sigmoid", "Hardsigmoid") if t in present)


@needs_libraries
@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet18", "squeezenet1_1"])
def test_torchvision_network_reaches_one_finn_partition(name, tmp_path):
    """torchvision's definition, graph mode + the FINN preset: one dataflow partition whose hardware
    graph equals torch on every input, no hardware layer on floats (benchmarks/vision_zoo.py: the zoo)."""
    from quark.torch.extensions.brevitas.api import ModelExporter, ModelQuantizer
    from quark.torch.extensions.brevitas.presets import finn

    entry = vision_zoo.ZOO[name]
    model = entry.build(seed=0)
    qmodel = ModelQuantizer(finn(unsigned=_unsigned(model))).quantize_model(model, _calibration(entry), progress=False)
    x = entry.sample(batch=4, seed=2)
    result = ModelExporter(tmp_path).export_finn_dataflow(qmodel, x, integer_input=True)
    assert result.verification.passed and result.verification.identical_predictions == 4
    assert result.float_layers == ()
    assert {o.split(" ")[0].rstrip("_0123456789") for o in result.outside} <= {"Transpose", "Flatten", "Mul", "Add"}


@needs_libraries
@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2", "mobilenetv4_conv_small"])
def test_xint8_graph_mode_exports_a_verified_npu_graph(name, tmp_path):
    """Graph mode + XINT8: the QDQ graph passes the IPU checks and equals torch in ONNX Runtime,
    also with ONNX Runtime's default optimizations where this machine's int8 kernels do not saturate
    (x86 without VNNI saturates them: then the report must say that the difference is the machine's)."""
    from quark.torch.extensions.brevitas._backend.export.verify import integer_kernels_saturate
    from quark.torch.extensions.brevitas.api import ModelExporter, ModelQuantizer
    from quark.torch.extensions.brevitas.presets import xint8

    entry = vision_zoo.ZOO[name]
    quantizer = ModelQuantizer(xint8(graph=True))
    qmodel = quantizer.quantize_model(entry.build(seed=0), _calibration(entry), progress=False)
    report = ModelExporter(tmp_path / "model.onnx").export_onnx_model(qmodel, entry.sample(batch=4, seed=2), plans=quantizer.plans)
    assert report.passed and report.max_abs_diff == 0.0
    assert len(report.target_checks) >= 4
    if integer_kernels_saturate():
        assert report.optimized_runtime_saturates and "saturate 16-bit sums" in str(report)
    else:
        assert report.optimized_runtime_diff == 0.0 and not report.optimized_runtime_saturates
