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
