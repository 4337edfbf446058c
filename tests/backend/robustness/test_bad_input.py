"""Point 1 of issue 11: bad input gets one clear error and changes nothing (quantizing).

Every case checks the message (what is wrong, where, what is allowed) and that the model the
user passed is exactly as it was (state_dict, module tree, modes), also with ``inplace=True``.
Construction and config files: ``tests/config/robustness/``; export paths and inputs: ``tests/export/robustness/``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _shared.configs import W8A8_IO
from _shared.models import batches, mlp
from _shared.quantize import assert_unchanged, quantize, snapshot
from torch import nn

import quark.torch.extensions.brevitas.config as bcfg
from quark.torch.extensions.brevitas._backend.data import BatchError, CalibrationData
from quark.torch.extensions.brevitas.api import ModelQuantizer
from quark.torch.quantization.config.config import Config, QuantizationConfig, QuantizationSpec
from quark.torch.quantization.config.type import Dtype, QSchemeType, ScaleType


def _with(index: int, value: float, n: int = 3) -> list[torch.Tensor]:
    data = batches(n)
    data[index][2, 5] = value
    return data


# -- calibration data --------------------------------------------------------------------------------

BAD_DATA = [
    pytest.param(
        _with(1, float("nan")),
        r"^calibration, batch 2 of 3, index 1: input 0 \(float32\[8, 12\]\) holds 1 NaN and 0 inf values",
        id="nan",
    ),
    pytest.param(
        _with(2, float("-inf")),
        r"^calibration, batch 3 of 3, index 2: input 0 \(float32\[8, 12\]\) holds 0 NaN and 1 inf values",
        id="inf",
    ),
    pytest.param(
        [{"input": torch.full((2, 12), float("nan"))}],
        r"input 'input' \(float32\[2, 12\]\) holds 24 NaN",
        id="nan-keyword-input",
    ),
    pytest.param(
        [{"x": torch.randn(2, 12)}],
        r"the model raised TypeError on the batch \(no input; keys \['x'\] ignored: Sequential.forward takes \(input\)\)",
        id="keyword-the-model-does-not-take",
    ),
    pytest.param(
        [torch.randn(8, 10)],
        r"batch 1 of 1, index 0: the model raised RuntimeError on the batch \(input 0: float32\[8, 10\]\): "
        r"mat1 and mat2 shapes cannot be multiplied",
        id="wrong-shape",
    ),
    pytest.param(
        [torch.randint(0, 5, (8, 12))],
        r"the model raised RuntimeError on the batch \(input 0: int64\[8, 12\]\): mat1 and mat2 must have the same dtype",
        id="wrong-dtype",
    ),
    pytest.param(
        [torch.randn(8, 12, dtype=torch.complex64)],
        r"input 0: complex64\[8, 12\]",
        id="complex",
    ),
    pytest.param(["text"], r"batch of type str: expected a tensor, tuple, list or dict", id="string"),
    pytest.param(
        [np.zeros((8, 12), np.float32)], r"batch of type ndarray: .*convert NumPy arrays with torch.from_numpy", id="numpy"
    ),
]


@pytest.mark.parametrize("inplace", [False, True], ids=["copy", "inplace"])
@pytest.mark.parametrize(("data", "match"), BAD_DATA)
def test_bad_calibration_batch_is_named_and_the_model_is_unchanged(data, match, inplace):
    model = mlp(seed=0)
    before = snapshot(model)
    with pytest.raises(BatchError, match=match) as error:
        quantize(W8A8_IO, model, data, inplace=inplace)
    assert_unchanged(before, model)
    assert ("original layers are back in place" if inplace else "the model you passed is unchanged") in str(error.value)


def test_nan_in_a_target_the_model_never_sees_is_accepted():
    """Only the inputs the model is called with are checked: a classifier's (inputs, targets)."""
    targets = torch.full((8,), float("nan"))
    assert quantize(W8A8_IO, mlp(seed=0), [(b, targets) for b in batches(3)])(torch.randn(2, 12)).isfinite().all()


def test_empty_loader_is_named_and_the_model_is_unchanged():
    model = mlp(seed=0)
    before = snapshot(model)
    with pytest.raises(ValueError, match=r"^calibration received no batch \(calib_loader / dataloader is empty\), and 4 static "
                                         r"activation quantizers take their range from it .*Pass calibration batches$"):  # fmt: skip
        quantize(W8A8_IO, model, [], inplace=True)
    assert_unchanged(before, model)


def test_a_loader_that_is_not_iterable_is_named():
    with pytest.raises(TypeError, match=r"calib_loader of type int: expected a DataLoader or an iterable of batches"):
        quantize(W8A8_IO, mlp(seed=0), 5)


def test_a_model_that_is_not_a_module_is_named():
    with pytest.raises(TypeError, match=r"quantize_model\(model=...\): expected a torch.nn.Module, got OrderedDict"):
        quantize(W8A8_IO, mlp(seed=0).state_dict(), batches(3))


def test_a_generator_serves_one_pass_and_a_second_is_an_error():
    data = CalibrationData(iter(batches(2)))
    assert len(list(data.passes("calibration"))) == 2
    with pytest.raises(ValueError, match=r"calib_loader is an iterator \(list_iterator\), which can be read once, and 'GPTQ' needs another pass"):
        list(data.passes("GPTQ"))


def test_a_list_serves_every_pass():
    data = CalibrationData(batches(2), num_batches=1)
    assert [len(list(data.passes(d))) for d in ("a", "b")] == [1, 1]


class Overflow(nn.Module):
    """Finite inputs, but the second layer's input overflows float32."""

    def __init__(self):
        super().__init__()
        self.first, self.second = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x):
        return self.second(self.first(x) * 1e38)


def test_nan_or_inf_computed_by_the_model_names_the_quantizer():
    model = Overflow()
    before = snapshot(model)
    with pytest.raises(
        ValueError, match=r"quantizers observed NaN or inf during calibration: \['second.input_quant'\]; the calibration inputs are finite"
    ):
        quantize(Config(global_quant_config=QuantizationConfig(input_tensors=QuantizationSpec(dtype=Dtype.int8))), model, [torch.randn(2, 4) * 100])
    assert_unchanged(before, model)


# -- configs that do not fit the model ------------------------------------------------------------

BAD_CONFIGS = [
    pytest.param(
        lambda: Config(W8A8_IO.global_quant_config, layer_quant_config={"decoder.*": QuantizationConfig(weight=W8A8_IO.global_quant_config.weight)}),
        r"layer_quant_config pattern 'decoder.\*' matches no quantizable module; quantizable modules: 0, 2",
        id="layer-name-missing",
    ),
    pytest.param(
        lambda: Config(W8A8_IO.global_quant_config, exclude=["head"]),
        r"exclude pattern 'head' matches no module; modules: 0, 1, 2",
        id="exclude-missing",
    ),
    pytest.param(
        lambda: Config(W8A8_IO.global_quant_config, layer_type_quant_config={"Conv2d": W8A8_IO.global_quant_config}),
        r"layer_type_quant_config\['Conv2d'\] matches no module of the model; quantizable types present: \['Linear'\]",
        id="layer-type-missing",
    ),
    pytest.param(
        lambda: Config(
            QuantizationConfig(
                weight=QuantizationSpec(dtype=Dtype.int8, qscheme=QSchemeType.per_group, ch_axis=1, group_size=5)
            )
        ),
        r"group_size",
        id="group-does-not-divide",
    ),
    pytest.param(
        lambda: Config(
            QuantizationConfig(
                weight=QuantizationSpec(dtype=Dtype.int8, scale_type=ScaleType.float),
                input_tensors=QuantizationSpec(dtype=Dtype.int8),
                bias=QuantizationSpec(dtype=Dtype.int32, scale_type=ScaleType.pof2),
            )
        ),
        r"pof2",
        id="impossible-bias-scale",
    ),
    pytest.param(
        lambda: Config(QuantizationConfig(weight=QuantizationSpec(dtype=Dtype.int16))),
        None,
        id="int16-weight-is-fine",
    ),
]


@pytest.mark.parametrize(("make", "match"), BAD_CONFIGS)
def test_config_that_does_not_fit_the_model_is_named_before_it_is_touched(make, match):
    model = mlp(seed=0)
    before = snapshot(model)
    if match is None:  # the control: the same call succeeds with a config that fits
        assert quantize(make(), model, batches(3), inplace=False)(torch.randn(2, 12)).isfinite().all()
    else:
        with pytest.raises(ValueError, match=match):
            quantize(make(), model, batches(3), inplace=True)
    assert_unchanged(before, model)


def test_extension_bit_width_above_16_for_a_weight_is_refused_before_the_model_is_touched():
    model = mlp(seed=0)
    before = snapshot(model)
    config = bcfg.Config(bcfg.QuantizationConfig(weight=bcfg.QuantizationSpec(bit_width=24)), pre_quant_opt_config=[])
    with pytest.raises(ValueError, match=r"global_quant_config.weight: bit width 24 is not supported for weight; allowed 2..16"):
        ModelQuantizer(config).quantize_model(model, inplace=True)
    assert_unchanged(before, model)


# -- a config that quantizes nothing ---------------------------------------------------------------


class Recurrent(nn.Module):
    """Layers of no quantizable type (as GPT-2's transformers Conv1D is for this backend)."""

    def __init__(self):
        super().__init__()
        self.embed, self.lstm = nn.Embedding(10, 4), nn.LSTM(4, 4)

    def forward(self, ids):
        return self.lstm(self.embed(ids))[0]


def test_a_model_without_quantizable_layers_warns_naming_the_types_seen():
    model = Recurrent()
    before = snapshot(model)
    with pytest.warns(
        UserWarning,
        match=r"the config quantizes nothing in Recurrent: it has no layer of a quantizable type. "
        r"Layer types seen: Embedding \(1\), LSTM \(1\); quantizable types: Conv1d, .*Linear, MultiheadAttention",
    ):
        quantize(W8A8_IO, model, [torch.randint(0, 10, (2, 5))])
    assert_unchanged(before, model)


@pytest.mark.parametrize(
    ("config", "model", "reason"),
    [
        (Config(W8A8_IO.global_quant_config, exclude=["*"]), mlp, "every quantizable layer is excluded"),
        (Config(QuantizationConfig()), mlp, r"no spec of the config applies to its quantizable layers \(every role is None\)"),
        (W8A8_IO, lambda: nn.Linear(12, 4), r"the model itself is a Linear, and only its submodules are swapped: pass nn.Sequential\(model\)"),
    ],
)
def test_a_config_that_quantizes_nothing_says_why(config, model, reason):
    with pytest.warns(UserWarning, match=reason):
        quantize(config, model(), batches(3))


def test_a_config_that_quantizes_something_does_not_warn(recwarn):
    quantize(W8A8_IO, mlp(seed=0), batches(3))
    assert not [w for w in recwarn if "quantizes nothing" in str(w.message)]
