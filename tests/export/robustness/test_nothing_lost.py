"""Point 2 of issue 11: nothing lost (exports): a QAT step interrupted by Ctrl-C leaves a model that still
exports; exports are written atomically, so a failed or interrupted write leaves neither a truncated file
nor a destroyed previous one."""

from __future__ import annotations

import pytest
import torch
from _shared import leftovers
from _shared.configs import W8A8_IO
from _shared.models import batches, mlp
from _shared.quantize import assert_unchanged, quantize, snapshot

from quark.torch.extensions.brevitas._backend.export import handlers
from quark.torch.extensions.brevitas._backend.export.errors import ExportFailedError, ExportVerificationError
from quark.torch.extensions.brevitas._backend.export.formats import ExportFormat
from quark.torch.extensions.brevitas.api import ModelExporter
from quark.torch.quantization.config.config import Config, QuantizationConfig, QuantizationSpec, TQTSpec
from quark.torch.quantization.config.type import Dtype, ScaleType


def _ctrl_c(*_):
    raise KeyboardInterrupt


def test_ctrl_c_during_a_qat_step_leaves_the_quantized_model_usable(onnx_path):
    torch.manual_seed(0)
    tqt = QuantizationSpec(dtype=Dtype.int8, scale_type=ScaleType.pof2, qat_spec=TQTSpec())
    qmodel = quantize(Config(QuantizationConfig(weight=tqt, input_tensors=tqt)), mlp(seed=0), batches(3)).train()
    optimizer = torch.optim.SGD(qmodel.parameters(), lr=0.01)
    x, y = torch.randn(8, 12), torch.randn(8, 4)
    hook = qmodel[2].register_full_backward_hook(_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        torch.nn.functional.mse_loss(qmodel(x), y).backward()  # Ctrl-C half-way through backward
    hook.remove()
    state = {k: v.clone() for k, v in qmodel.state_dict().items()}
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(qmodel(x), y).backward()  # the loop goes on
    optimizer.step()
    assert any(not torch.equal(state[k], v) for k, v in qmodel.state_dict().items())
    assert ModelExporter(onnx_path).export_qonnx_model(qmodel.eval(), torch.randn(2, 12)).passed


@pytest.fixture(scope="module")
def qmodel():
    return quantize(W8A8_IO, mlp(seed=0), batches(3))


def partial_writer(error: BaseException) -> type:
    """The QCDQ export manager, but writing half a file and then failing, as a crash or Ctrl-C would."""

    class PartialWriter(handlers.MANAGERS[(ExportFormat.qcdq, False)]):
        @classmethod
        def export(cls, module, args, export_path, **kwargs):
            with open(export_path, "wb") as f:
                f.write(b"\x08\x07partial")
            raise error

    return PartialWriter


@pytest.mark.parametrize(
    ("error", "raised"),
    [(KeyboardInterrupt(), KeyboardInterrupt), (OSError("No space left on device"), ExportFailedError)],
    ids=["ctrl-c", "disk-full"],
)
def test_an_interrupted_export_keeps_the_previous_file_and_leaves_no_partial_one(qmodel, onnx_path, monkeypatch, error, raised):
    assert ModelExporter(onnx_path).export_onnx_model(qmodel, torch.randn(2, 12)).passed
    previous = onnx_path.read_bytes()
    before = snapshot(qmodel)
    monkeypatch.setitem(handlers.MANAGERS, (ExportFormat.qcdq, False), partial_writer(error))
    with pytest.raises(raised):
        ModelExporter(onnx_path).export_onnx_model(qmodel, torch.randn(2, 12))
    assert onnx_path.read_bytes() == previous
    assert leftovers(onnx_path.parent) == []
    assert_unchanged(before, qmodel)


def test_a_graph_that_fails_verification_is_kept_aside_and_the_previous_file_stays(qmodel, onnx_path, monkeypatch):
    from quark.torch.extensions.brevitas._backend.export import verify

    assert ModelExporter(onnx_path).export_onnx_model(qmodel, torch.randn(2, 12)).passed
    previous = onnx_path.read_bytes()
    monkeypatch.setitem(verify.RUNNERS, ExportFormat.qcdq, lambda model, feeds: [f[:, :4] * 0 + 1e3 for f in feeds])
    with pytest.raises(ExportVerificationError, match=r"the graph is kept at .*model.rejected.onnx for inspection; .*model.onnx is unchanged"):
        ModelExporter(onnx_path).export_onnx_model(qmodel, torch.randn(2, 12))
    assert onnx_path.read_bytes() == previous
    assert (onnx_path.parent / "model.rejected.onnx").stat().st_size > 0
    assert leftovers(onnx_path.parent) == []
