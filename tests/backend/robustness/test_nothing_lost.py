"""Point 2 of issue 11: nothing lost (quantizing).

Ctrl-C (``KeyboardInterrupt``) during calibration or an algorithm leaves the user's model usable
and says where it stopped. Atomic writes of configs: ``tests/config/robustness/``; a QAT step
interrupted, and exports written atomically: ``tests/export/robustness/``.
"""

from __future__ import annotations

import pytest
import torch
from _shared.configs import W8A8_IO
from _shared.models import batches, mlp
from _shared.quantize import assert_unchanged, quantize, snapshot

from quark.torch.extensions.brevitas.api import QuantizationInterrupted
from quark.torch.quantization.config.algorithms import PreQuantOptConfig
from quark.torch.quantization.config.config import Config


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
    model = mlp(seed=0)
    before = snapshot(model)
    hook = ctrl_c_on_call(model, 3)
    with pytest.raises(
        QuantizationInterrupted, match=r"interrupted during calibration, batch 3 of 5, index 2; the model you passed"
    ) as error:
        quantize(W8A8_IO, model, batches(5), inplace=inplace)
    hook.remove()
    assert isinstance(error.value, KeyboardInterrupt)  # still ends a script as Ctrl-C does
    assert_unchanged(before, model)
    assert model(torch.randn(2, 12)).shape == (2, 4)  # usable: the float model as it was
    assert quantize(W8A8_IO, model, batches(3))(torch.randn(2, 12)).isfinite().all()  # and it quantizes again


class Interrupted(PreQuantOptConfig):
    """An algorithm of the user's own, interrupted half-way through changing the model."""

    name = "interrupted"

    def apply(self, model, calib_loader=None):
        torch.nn.init.zeros_(model[0].weight)
        raise KeyboardInterrupt


def test_ctrl_c_during_an_algorithm_names_it():
    model = mlp(seed=0)
    before = snapshot(model)
    config = Config(W8A8_IO.global_quant_config, pre_quant_opt_config=[Interrupted()])
    with pytest.raises(QuantizationInterrupted, match=r"interrupted during Interrupted \(before_quantization\); the model you passed is unchanged"):
        quantize(config, model, batches(3))
    assert_unchanged(before, model)


def test_ctrl_c_after_preprocess_in_place_names_what_stays_changed():
    """Preprocess edits the float model's weights (merged batch norm): with inplace=True that stays."""
    from quark.torch.extensions.brevitas import config as bcfg

    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU()).eval()
    config = bcfg.Config(bcfg.QuantizationConfig(weight=bcfg.QuantizationSpec(), input_tensors=bcfg.QuantizationSpec()))


    def loader():  # Ctrl-C while the loader makes the second batch
        yield torch.randn(2, 3, 8, 8)
        raise KeyboardInterrupt

    with pytest.raises(QuantizationInterrupted, match=r"interrupted during calibration, batch 1, index 0; inplace=True: the model's original layers are back in place, with the changes Preprocess made"):
        quantize(config, model, loader(), inplace=True)
    assert [type(m).__name__ for m in model] == ["Conv2d", "BatchNorm2d", "ReLU"]
