"""Point 5 of issue 11: under load (the config layer): the observers' state does not grow with the number
of batches (calibration statistics are running, not stored)."""

from __future__ import annotations

import pytest
import torch

from quark.torch.quantization.observer import (
    OBSERVERS,
    TQT3SDObserver,
    TQTJeffreysObserver,
)
from quark.torch.quantization.observer.selectors import _SelectorObserver

#: every observer that accumulates statistics (the selectors of Quark's names, e.g. PerBlockMXObserver,
#: only choose a format whose scale the quantizer computes: they never observe)
#: (AMD Quark's power-of-two observers vote: they keep a count per (power-of-two scale, zero point)
#: grid that a batch chose, no tensor: at most 255 exponents x 2^bits zero points, whatever the data)
ALL_OBSERVERS = [
    cls
    for _, cls in sorted(OBSERVERS.items())
    if not issubclass(cls, _SelectorObserver) and not getattr(cls, "power_of_two", False)
] + [TQT3SDObserver, TQTJeffreysObserver]


def _state_bytes(observer) -> int:
    tensors = [*observer.buffers(), *(v for v in vars(observer).values() if isinstance(v, torch.Tensor))]
    return sum(t.numel() * t.element_size() for t in tensors)


@pytest.mark.parametrize("observer_cls", ALL_OBSERVERS, ids=lambda c: c.__name__)
def test_observer_state_does_not_grow_with_the_number_of_batches(observer_cls):
    g = torch.Generator().manual_seed(0)
    data = [torch.randn(16, 64, generator=g) * 2.0 ** (i % 9) for i in range(64)]  # ranges that keep growing
    sizes = []
    for count in (1, 64):
        observer = observer_cls(symmetric=False, ch_axis=1)
        for x in data[:count]:
            observer(x)
        sizes.append(_state_bytes(observer))
    assert sizes[0] > 0 and sizes[0] == sizes[1]
