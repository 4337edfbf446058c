"""ModelExporter: both formats, every form of example inputs, the model left as it was (also after a
failed export), exporter settings pinned for torch 2.13, and the user-facing errors."""

from __future__ import annotations

import pytest
import torch
from _shared.configs import W8A8, W8A8_POF2
from _shared.graphs import op_types
from _shared.models import TwoInputs
from _shared.quantize import assert_unchanged, quantize, quantized_mlp, snapshot
from torch import nn

from quark.torch.extensions.brevitas.api import (
    ExportFailedError,
    ExportFormat,
    ModelExporter,
    UnsupportedExportError,
)

QDQ_OPS = {"QuantizeLinear", "DequantizeLinear"}


def test_quark_script_shape_writes_qcdq_that_onnxruntime_runs(onnx_path):
    """AMD Quark's call, unchanged: ModelExporter(path).export_onnx_model(model, args)."""
    qmodel = quantized_mlp()
    report = ModelExporter(str(onnx_path)).export_onnx_model(qmodel, torch.randn(3, 12))
    ops = set(op_types(onnx_path))
    assert QDQ_OPS <= ops and "Quant" not in ops
    assert report.format is ExportFormat.qcdq and report.runtime == "onnxruntime"
    assert report.verified and report.passed and report.opset == 17


def test_qonnx_method_writes_qonnx_nodes_that_qonnx_runs(onnx_path):
    qmodel = quantized_mlp()
    report = ModelExporter(onnx_path).export_qonnx_model(qmodel, torch.randn(3, 12))
    ops = set(op_types(onnx_path))
    assert "Quant" in ops and not ops & QDQ_OPS
    assert report.format is ExportFormat.qonnx and report.runtime == "qonnx" and report.passed


def _two_input_model():
    torch.manual_seed(0)
    batches = [(torch.randn(4, 6), torch.randn(4, 3)) for _ in range(3)]
    return quantize(W8A8, TwoInputs(), batches)


@pytest.mark.parametrize("method", ["export_onnx_model", "export_qonnx_model"])
@pytest.mark.parametrize("form", ["tuple", "dict", "tuple+dict"])
def test_args_forms_become_named_graph_inputs(onnx_path, method, form):
    import onnx

    qmodel = _two_input_model()
    x, y = torch.randn(2, 6), torch.randn(2, 3)
    args = {"tuple": (x, y), "dict": {"x": x, "y": y}, "tuple+dict": (x, {"y": y})}[form]
    report = getattr(ModelExporter(onnx_path), method)(qmodel, args)
    assert [i.name for i in onnx.load(str(onnx_path)).graph.input] == ["x", "y"]
    assert report.passed and [o.shape for o in report.outputs] == [(2, 2)]


def test_example_inputs_take_the_models_dtype_and_integer_inputs_stay_integer(onnx_path):
    class Tokens(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(20, 8)
            self.proj = nn.Linear(8, 3)

        def forward(self, ids, weight):
            return self.proj(self.embed(ids)) * weight

    torch.manual_seed(0)
    qmodel = quantize(W8A8, Tokens(), [(torch.randint(0, 20, (2, 5)), torch.ones(2, 5, 1)) for _ in range(3)])
    ids, weight = torch.randint(0, 20, (2, 5)), torch.rand(2, 5, 1, dtype=torch.float64)
    report = ModelExporter(onnx_path).export_onnx_model(qmodel, (ids, weight))
    import onnx

    types = [i.type.tensor_type.elem_type for i in onnx.load(str(onnx_path)).graph.input]
    assert types == [onnx.TensorProto.INT64, onnx.TensorProto.FLOAT]
    assert report.passed


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_example_inputs_move_to_the_models_device(onnx_path):
    qmodel = quantized_mlp().cuda()
    report = ModelExporter(onnx_path).export_onnx_model(qmodel, torch.randn(3, 12))  # CPU input
    assert report.passed and next(qmodel.parameters()).is_cuda


@pytest.mark.parametrize("method", ["export_onnx_model", "export_qonnx_model"])
def test_export_leaves_training_mode_parameters_and_modules_unchanged(onnx_path, method):
    qmodel = quantized_mlp().train()
    qmodel[0].weight.requires_grad_(False)
    x = torch.randn(3, 12)
    before, out_before = snapshot(qmodel), qmodel.eval()(x)
    qmodel.train()
    getattr(ModelExporter(onnx_path), method)(qmodel, x)
    assert_unchanged(before, qmodel)
    torch.testing.assert_close(qmodel.eval()(x), out_before, atol=0, rtol=0)


class FailsInExport(nn.Module):
    """Raises inside torch.onnx.export while ``fail`` is set (Brevitas is then in export mode)."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner
        self.fail = True

    def forward(self, x):
        if self.fail and torch.onnx.is_in_onnx_export():
            raise RuntimeError("boom")
        return self.inner(x)


@pytest.mark.parametrize("method", ["export_onnx_model", "export_qonnx_model"])
def test_failed_export_restores_the_model_and_the_next_export_succeeds(onnx_path, method):
    model = FailsInExport(quantized_mlp()).train()
    before = snapshot(model)
    fmt = "qcdq" if method == "export_onnx_model" else "qonnx"
    with pytest.raises(
        ExportFailedError, match=rf"{fmt} export with the TorchScript exporter .* failed: RuntimeError: boom"
    ):
        getattr(ModelExporter(onnx_path), method)(model, torch.randn(3, 12))
    assert_unchanged(before, model)
    model.fail = False
    assert getattr(ModelExporter(onnx_path), method)(model, torch.randn(3, 12)).passed
    assert_unchanged(before, model)


def test_second_export_to_another_format_gets_that_formats_handlers(tmp_path):
    """Brevitas keeps export handlers on the model and reuses them; the session removes them."""
    qmodel = quantized_mlp()
    x = torch.randn(3, 12)
    ModelExporter(tmp_path / "a.onnx").export_onnx_model(qmodel, x)
    ModelExporter(tmp_path / "b.onnx").export_qonnx_model(qmodel, x)
    assert "Quant" in op_types(tmp_path / "b.onnx") and not QDQ_OPS & set(op_types(tmp_path / "b.onnx"))
    assert not any(hasattr(m, "export_handler") and m.export_handler is not None for m in qmodel.modules())


# -- exporter settings for torch 2.13 ------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("method", ["export_onnx_model", "export_qonnx_model"])
def test_dynamo_exporter_writes_opset_18_and_verifies(onnx_path, method, capsys):
    qmodel = quantized_mlp(W8A8)
    report = getattr(ModelExporter(onnx_path, dynamo=True), method)(qmodel, torch.randn(3, 12))
    assert report.opset == 18 and report.passed and "dynamo" in report.exporter


def test_dynamo_exporter_cannot_write_opset_17(onnx_path):
    with pytest.raises(ValueError, match=r"opset_version=17.*writes opset 18 or later"):
        ModelExporter(onnx_path, dynamo=True, opset_version=17)


def test_dynamo_qcdq_with_quantized_bias_is_refused_before_export(onnx_path):
    qmodel = quantized_mlp(W8A8_POF2)
    with pytest.raises(
        UnsupportedExportError,
        match=r"quantizer '0.bias_quant' \(bias\): int32 bias; qcdq allows float biases \(or dynamo=False\)",
    ):
        ModelExporter(onnx_path, dynamo=True).export_onnx_model(qmodel, torch.randn(3, 12))


def test_torchscript_qcdq_stores_integer_weights(onnx_path):
    """The default exporter writes int8 weights + DequantizeLinear (dynamo writes float + Q + DQ)."""
    from _shared.graphs import initializers

    ModelExporter(onnx_path).export_onnx_model(quantized_mlp(W8A8), torch.randn(3, 12))
    weights = [v for k, v in initializers(onnx_path).items() if v.ndim == 2]
    assert weights and all(str(w.dtype) == "int8" for w in weights)


# -- user errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"dynamo": "yes"}, TypeError, r"ModelExporter\(dynamo='yes'\): expected True or False"),
        ({"opset_version": 9}, ValueError, r"opset_version=9.*writes opset 13 or later"),
    ],
)
def test_bad_exporter_settings(onnx_path, kwargs, error, match):
    with pytest.raises(error, match=match):
        ModelExporter(onnx_path, **kwargs)


@pytest.mark.parametrize(
    "call, error, match",
    [
        (
            lambda e, m: e.export_onnx_model(m, [1.0, 2.0]),
            TypeError,
            r"positional inputs must be tensors, got \['float', 'float'\]",
        ),
        (lambda e, m: e.export_onnx_model(m, 3), TypeError, r"export args of type int: expected a tensor"),
        (
            lambda e, m: e.export_onnx_model("model", torch.randn(1, 12)),
            TypeError,
            r"model must be an nn.Module, got str",
        ),
        (
            lambda e, m: e.export_onnx_model(m, torch.randn(1, 12), tolerance_lsb=-1),
            ValueError,
            r"tolerance_lsb=-1",
        ),
        (
            lambda e, m: e.export_onnx_model(m, torch.randn(1, 12), target_device="gpu"),
            ValueError,
            r"target_device='gpu'\): expected one of \['CPU', 'IPU', 'FINN', 'HLS4ML'\]",
        ),
    ],
)
def test_bad_export_calls(onnx_path, call, error, match):
    with pytest.raises(error, match=match):
        call(ModelExporter(onnx_path), quantized_mlp())


def test_unverified_export_reports_so(onnx_path):
    report = ModelExporter(onnx_path).export_onnx_model(quantized_mlp(), torch.randn(2, 12), verify=False)
    assert onnx_path.exists() and not report.verified and not report.passed and report.outputs == ()


def test_model_outputs_other_than_tensors_are_refused(onnx_path):
    class DictOutput(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = quantized_mlp()

        def forward(self, x):
            return {"logits": self.inner(x)}

    with pytest.raises(
        TypeError, match=r"model output of type dict: expected tensors, tuples or lists of tensors"
    ):
        ModelExporter(onnx_path).export_onnx_model(DictOutput(), torch.randn(2, 12))


def test_graph_outputs_that_do_not_match_the_model_are_named(onnx_path, monkeypatch):
    from quark.torch.extensions.brevitas._backend.export import verify

    monkeypatch.setitem(verify.RUNNERS, ExportFormat.qcdq, lambda model, feeds: [feeds[0][:, :3]])
    with pytest.raises(
        RuntimeError, match=r"output 'output': the exported graph gives shape \(2, 3\), torch \(2, 4\)"
    ):
        ModelExporter(onnx_path).export_onnx_model(quantized_mlp(), torch.randn(2, 12))
    monkeypatch.setitem(verify.RUNNERS, ExportFormat.qcdq, lambda model, feeds: [])
    with pytest.raises(RuntimeError, match=r"the exported graph has 0 outputs, the torch model 1"):
        ModelExporter(onnx_path).export_onnx_model(quantized_mlp(), torch.randn(2, 12))


