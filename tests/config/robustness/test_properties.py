"""Point 4 of issue 11: property-based tests (Hypothesis) over the config space and over tensors (the config layer).

- every spec either constructs or is refused with a ``ValueError`` / ``TypeError`` naming a field;
- ``to_dict`` / ``from_dict`` (and JSON / YAML text) round-trip every accepted config, both flavours;
- zeros, constants, huge, tiny and subnormal tensors never give a NaN, infinite or zero range in
  the observers.

Examples are derandomized (``_shared/strategies.py``) and bounded per test (``EXAMPLES``) to keep the suite fast;
``HYPOTHESIS_PROFILE=explore`` draws ten times as many, fresh.
"""

from __future__ import annotations

import json

import pytest
import torch
import yaml
from _shared.strategies import (
    ANY_SPEC_KWARGS,
    NAMES_A_FIELD,
    OBSERVER_CLASSES,
    examples,
    extension_configs,
    hard_tensors,
    main_configs,
)
from hypothesis import given
from hypothesis import strategies as st

from quark.torch.quantization.config.config import QuantizationSpec
from quark.torch.quantization.config.type import (
    Dtype,
)
from quark.torch.quantization.observer import (
    TQT3SDObserver,
    TQTJeffreysObserver,
)
from quark.torch.quantization.observer.selectors import _SelectorObserver

pytestmark = pytest.mark.slow  # Hypothesis: hundreds of examples per property, ~15 s


@examples("construct")
@given(ANY_SPEC_KWARGS)
def test_every_spec_constructs_or_is_refused_naming_a_field(kwargs):
    try:
        spec = QuantizationSpec(**kwargs)
    except (ValueError, TypeError) as error:
        assert NAMES_A_FIELD.search(str(error)), str(error)
        assert "QuantizationSpec" in str(error) or "qat_spec" in str(error), str(error)
    else:
        assert spec.dtype in Dtype


def _round_trips(config) -> None:
    cls = type(config)
    data = config.to_dict()
    again = cls.from_dict(data)
    assert again.to_dict() == data
    names_only = all(isinstance(k, str) for k in getattr(config, "layer_type_quant_config", {}))
    if names_only:  # layer types given as classes serialise by class name
        assert again == config
    assert cls.from_dict(json.loads(json.dumps(data))).to_dict() == data
    assert cls.from_dict(yaml.safe_load(yaml.safe_dump(data, sort_keys=False))).to_dict() == data


@examples("round_trip_main")
@given(main_configs())
def test_every_main_config_round_trips(config):
    _round_trips(config)


@examples("round_trip_extension")
@given(extension_configs())
def test_every_extension_config_round_trips(config):
    _round_trips(config)


GRIDS = st.sampled_from([(-128, 127), (0, 255), (-8, 7), (0, 15), (-2, 1), (-32768, 32767), (0, 65535)])


#: the observers that accumulate statistics (Quark's selector names, e.g. PerBlockMXObserver, never observe)
ALL_OBSERVERS = [o for o in OBSERVER_CLASSES if not issubclass(o, _SelectorObserver)] + [TQT3SDObserver, TQTJeffreysObserver]


@examples("observers")
@given(st.sampled_from(ALL_OBSERVERS), st.booleans(), GRIDS, st.lists(hard_tensors(), min_size=1, max_size=3))
def test_observers_give_finite_ranges_around_zero(observer_cls, symmetric, grid, tensors):
    qmin, qmax = grid
    observer = observer_cls(symmetric=symmetric, qmin=qmin, qmax=qmax, ch_axis=0)
    for t in tensors:
        observer(t)
    lo, hi = observer.calculate_range()
    assert bool(torch.isfinite(lo).all() and torch.isfinite(hi).all()), (lo, hi)
    assert bool((lo <= 0).all() and (hi >= 0).all()), (lo, hi)
