"""Point 2 of issue 11: nothing lost.

Ctrl-C (``KeyboardInterrupt``) during calibration, an algorithm or a QAT step leaves the user's
model usable and says where it stopped; exports and saved configs are written atomically, so a
failed or interrupted write leaves neither a truncated file nor a destroyed previous one.
"""

from __future__ import annotations

import os

import pytest
import torch

from quark.torch.extensions.brevitas._backend.export import handlers
from quark.torch.extensions.brevitas._backend.export.errors import ExportFailedError, ExportVerificationError
from quark.torch.extensions.brevitas._backend.export.formats import ExportFormat
from quark.torch.extensions.brevitas.api import ModelExporter, QuantizationInterrupted
from quark.torch.quantization import files
from quark.torch.quantization.config.algorithms import PreQuantOptConfig
from quark.torch.quantization.config.config import Config, QuantizationConfig, QuantizationSpec, TQTSpec
from quark.torch.quantization.config.type import Dtype, ScaleType
from robustness.helpers import W8, W8A8, assert_unchanged, batches, mlp, quantize, snapshot


def ctrl_c_on_call(model: torch.nn.Module, call: int):
    """Press Ctrl-C (raise KeyboardInterrupt) when ``model`` is called the ``call``-th time (1-based).

    The hook is on the top module, which quantize_model's copy keeps (its layers are swapped)."""
    calls = []

    def hook(module, args):
        calls.append(1)
        if len(calls) == call:
            raise KeyboardInterrupt

    return model.register_forward_pre_hook(hook)


@pytest.mark.parametrize("inplace", [False, True], ids=["copy", "inplace"])
def test_ctrl_c_during_calibration_says_where_and_leaves_the_model_usable(inplace):
    model = mlp()
    before = snapshot(model)
    hook = ctrl_c_on_call(model, 3)
    with pytest.raises(
        QuantizationInterrupted, match=r"interrupted during calibration, batch 3 of 5, index 2; the model you passed"
    ) as error:
        quantize(model, batches(5), inplace=inplace)
    hook.remove()
    assert isinstance(error.value, KeyboardInterrupt)  # still ends a script as Ctrl-C does
    assert_unchanged(before, model)
    assert model(torch.randn(2, 12)).shape == (2, 4)  # usable: the float model as it was
    assert quantize(model, batches())(torch.randn(2, 12)).isfinite().all()  # and it quantizes again


class Interrupted(PreQuantOptConfig):
    """An algorithm of the user's own, interrupted half-way through changing the model."""

    name = "interrupted"

    def apply(self, model, calib_loader=None):
        torch.nn.init.zeros_(model[0].weight)
        raise KeyboardInterrupt


def test_ctrl_c_during_an_algorithm_names_it():
    model = mlp()
    before = snapshot(model)
    config = Config(W8A8.global_quant_config, pre_quant_opt_config=[Interrupted()])
    with pytest.raises(QuantizationInterrupted, match=r"interrupted during Interrupted \(before_quantization\); the model you passed is unchanged"):
        quantize(model, batches(), config)
    assert_unchanged(before, model)


def _ctrl_c(*_):
    raise KeyboardInterrupt


def test_ctrl_c_after_preprocess_in_place_names_what_stays_changed():
    """Preprocess edits the float model's weights (merged batch norm): with inplace=True that stays."""
    from quark.torch.extensions.brevitas import config as bcfg

    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU()).eval()
    config = bcfg.Config(bcfg.QuantizationConfig(weight=bcfg.QuantizationSpec(), input_tensors=bcfg.QuantizationSpec()))


    def loader():  # Ctrl-C while the loader makes the second batch
        yield torch.randn(2, 3, 8, 8)
        raise KeyboardInterrupt

    with pytest.raises(QuantizationInterrupted, match=r"interrupted during calibration, batch 1, index 0; inplace=True: the model's original layers are back in place, with the changes Preprocess made"):
        quantize(model, loader(), config, inplace=True)
    assert [type(m).__name__ for m in model] == ["Conv2d", "BatchNorm2d", "ReLU"]


def test_ctrl_c_during_a_qat_step_leaves_the_quantized_model_usable(onnx_path):
    torch.manual_seed(0)
    tqt = QuantizationSpec(dtype=Dtype.int8, scale_type=ScaleType.pof2, qat_spec=TQTSpec())
    qmodel = quantize(mlp(), batches(), Config(QuantizationConfig(weight=tqt, input_tensors=tqt))).train()
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


# -- atomic writes ----------------------------------------------------------------------------------


def _leftovers(directory) -> list[str]:
    return sorted(name for name in os.listdir(directory) if ".tmp" in name)


@pytest.fixture(scope="module")
def qmodel():
    return quantize(mlp(), batches())


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
    assert _leftovers(onnx_path.parent) == []
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
    assert _leftovers(onnx_path.parent) == []


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_an_interrupted_config_save_keeps_the_previous_file(tmp_path, monkeypatch, suffix):
    path = tmp_path / f"config{suffix}"
    W8A8.save(path)
    previous = path.read_text()
    other = Config(QuantizationConfig(weight=W8))

    def interrupted(temp):  # the new file is complete, the rename has not happened
        raise KeyboardInterrupt

    monkeypatch.setattr(files, "_fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        other.save(path)
    assert path.read_text() == previous
    assert _leftovers(tmp_path) == []
    monkeypatch.undo()
    other.save(path)
    assert Config.load(path) == other


def test_atomic_path_publishes_only_on_success(tmp_path):
    target = tmp_path / "out.bin"
    with files.atomic_path(target) as temp:
        assert os.path.dirname(temp) == str(tmp_path) and temp.endswith(".tmp.bin")
        with open(temp, "wb") as f:
            f.write(b"new")
        assert not target.exists()  # nothing under the final name until the block ends
    assert target.read_bytes() == b"new"
    with pytest.raises(RuntimeError), files.atomic_path(target) as temp:
        with open(temp, "wb") as f:
            f.write(b"half")
        raise RuntimeError
    assert target.read_bytes() == b"new"
    assert _leftovers(tmp_path) == []
