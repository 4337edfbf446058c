"""``TQTSpec`` in a config (``config/config.py``), both flavours: a trained power-of-two threshold
needs a symmetric, per-tensor, power-of-two, static spec, each refusal naming the field; the spec
round-trips through a dict."""

from __future__ import annotations

import pytest

from quark.torch.extensions.brevitas import config as X
from quark.torch.quantization.config.config import (
    Config,
    QuantizationConfig,
    QuantizationSpec,
    TQTSpec,
)
from quark.torch.quantization.config.spec import FREEZE_BATCH_NORM_STEPS
from quark.torch.quantization.config.type import (
    Dtype,
    QSchemeType,
    ScaleType,
    TQTThresholdInitMeth,
)
from quark.torch.quantization.tensor_quant import TQT_OBSERVERS, normalise


@pytest.mark.parametrize(
    "kwargs,field",
    [
        ({"scale_type": ScaleType.float}, "scale_type"),
        ({"scale_type": None}, "scale_type"),
        ({"symmetric": False}, "symmetric"),
        ({"qscheme": QSchemeType.per_channel, "ch_axis": 0}, "qscheme"),
        ({"is_dynamic": True}, "is_dynamic"),
    ],
)
def test_main_spec_rejects_tqt_that_cannot_hold(kwargs, field):
    base = {"dtype": Dtype.int8, "symmetric": True, "scale_type": ScaleType.pof2}
    with pytest.raises(ValueError, match=rf"qat_spec=TQTSpec needs {field}="):
        QuantizationSpec(**{**base, **kwargs}, qat_spec=TQTSpec(TQTThresholdInitMeth._3SD))
    QuantizationSpec(**{**base, **kwargs})  # fine without TQT


@pytest.mark.parametrize(
    "kwargs,field",
    [
        ({"scale_type": ScaleType.float}, "scale_type"),
        ({"symmetric": False}, "symmetric"),
        ({"qscheme": QSchemeType.per_channel}, "qscheme"),
    ],
)
def test_extension_spec_rejects_tqt_that_cannot_hold(kwargs, field):
    base = {"bit_width": 4, "scale_type": ScaleType.pof2}
    with pytest.raises(ValueError, match=rf"qat_spec=TQTSpec needs {field}="):
        X.QuantizationSpec(**{**base, **kwargs}, qat_spec=TQTSpec())
    X.QuantizationSpec(**{**base, **kwargs})


def test_qat_spec_must_be_a_qat_spec():
    with pytest.raises(TypeError, match="qat_spec"):
        QuantizationSpec(dtype=Dtype.int8, scale_type=ScaleType.pof2, qat_spec="TQT")
    with pytest.raises(ValueError, match="threshold_init_meth"):
        TQTSpec("_bogus")


def test_tqt_spec_round_trips_through_dict():
    spec = QuantizationSpec(dtype=Dtype.uint4, scale_type=ScaleType.pof2, qat_spec=TQTSpec(TQTThresholdInitMeth._LL_J))
    cfg = Config(global_quant_config=QuantizationConfig(input_tensors=spec))
    assert Config.from_dict(cfg.to_dict()) == cfg
    ext = X.QuantizationSpec(bit_width=2, scale_type=ScaleType.pof2, qat_spec=TQTSpec(TQTThresholdInitMeth._3SD))
    assert X.QuantizationSpec.from_dict(ext.to_dict()) == ext


#: TQT_OBSERVERS row -> the statistic its observer computes (Jain et al.'s 3 SD, Settle et al.'s LL_J)
TQT_OBSERVER_CASES = {TQTThresholdInitMeth._3SD: "3sd", TQTThresholdInitMeth._LL_J: "ll_j"}


def test_every_tqt_observer_row_has_a_case():
    assert set(TQT_OBSERVER_CASES) == set(TQT_OBSERVERS)


@pytest.mark.parametrize("init", list(TQT_OBSERVER_CASES), ids=lambda i: i.name)
def test_every_tqt_observer_row_initialises_the_threshold_of_its_spec(init):
    """A TQT spec with this initialisation observes with the row's observer, both flavours and roles."""
    for spec in (
        QuantizationSpec(dtype=Dtype.int8, scale_type=ScaleType.pof2, qat_spec=TQTSpec(init)),
        X.QuantizationSpec(bit_width=8, scale_type=ScaleType.pof2, qat_spec=TQTSpec(init)),
    ):
        for role in ("weight", "input_tensors"):
            tq = normalise(spec, role, "x")
            assert tq.tqt and tq.observer is TQT_OBSERVERS[init] and tq.statistic == TQT_OBSERVER_CASES[init]


@pytest.mark.parametrize(
    "kwargs,error,field",
    [
        ({"fold_batch_norm": "yes"}, TypeError, "fold_batch_norm"),
        ({"freeze_batch_norm_steps": True}, TypeError, "freeze_batch_norm_steps"),
        ({"freeze_batch_norm_steps": 2.5}, TypeError, "freeze_batch_norm_steps"),
        ({"freeze_batch_norm_steps": -1}, ValueError, "freeze_batch_norm_steps"),
        ({"absorb_frozen_batch_norm": 1}, TypeError, "absorb_frozen_batch_norm"),
        ({"absorb_frozen_batch_norm": None}, TypeError, "absorb_frozen_batch_norm"),
    ],
)
def test_batch_norm_fields_are_checked(kwargs, error, field):
    with pytest.raises(error, match=rf"TQTSpec\.{field}="):
        TQTSpec(TQTThresholdInitMeth._3SD, **kwargs)


def test_batch_norm_fields_round_trip_and_reach_only_the_weight():
    tqt = TQTSpec(
        TQTThresholdInitMeth._LL_J, fold_batch_norm=True, freeze_batch_norm_steps=7, absorb_frozen_batch_norm=False
    )
    spec = QuantizationSpec(dtype=Dtype.int4, symmetric=True, scale_type=ScaleType.pof2, qat_spec=tqt)
    cfg = Config(global_quant_config=QuantizationConfig(weight=spec, input_tensors=spec))
    assert Config.from_dict(cfg.to_dict()) == cfg
    weight = normalise(spec, "weight", "w")
    assert (weight.fold_batch_norm, weight.freeze_batch_norm_steps, weight.absorb_frozen_batch_norm) == (True, 7, False)
    activation = normalise(spec, "input_tensors", "x")
    assert (activation.fold_batch_norm, activation.freeze_batch_norm_steps) == (False, None)
    off = QuantizationSpec(
        dtype=Dtype.int4, symmetric=True, scale_type=ScaleType.pof2, qat_spec=TQTSpec(fold_batch_norm=False)
    )
    assert not normalise(off, "weight", "w").fold_batch_norm
    ext = X.QuantizationSpec(bit_width=4, scale_type=ScaleType.pof2, qat_spec=tqt)
    assert normalise(ext, "weight", "w").fold_batch_norm


def test_folding_is_the_default_of_a_tqt_spec():
    assert TQTSpec().fold_batch_norm is True
    assert TQTSpec().freeze_batch_norm_steps == FREEZE_BATCH_NORM_STEPS
    assert TQTSpec().absorb_frozen_batch_norm is True
