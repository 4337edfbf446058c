"""Calibration observers, usable as ``QuantizationSpec.observer_cls``.

Each observer accumulates a statistic of the tensors it sees during calibration and reports the
range to quantize: ``calculate_range() -> (lo, hi)``, with ``lo <= 0 <= hi`` so that zero is
always representable. Weights use the same statistic, computed on the weight itself by Brevitas
at every forward (so it tracks the weight during QAT); observers are what static activations use.

Why our own accumulators: Brevitas' runtime-statistics scaling averages per-batch statistics,
which is not the MinMax of the calibration set that the Quark config asks for.

=============================== ======================================================
observer                        range over all calibration data
=============================== ======================================================
PerTensorMinMaxObserver         min / max
PerChannelMinMaxObserver        min / max per index of ``ch_axis``
PerTensorPercentileObserver     the ``percentile`` of |x| (symmetric) or the central
                                ``percentile`` interval of x (asymmetric), from a histogram
PerTensorMSEObserver            the clipping range minimising the quantization MSE of the
                                histogram on the integer grid of the spec
PerTensorHistogramObserver      Quark's name for the same objective (torch's
                                HistogramObserver minimises the L2 quantization error
                                of a histogram by a greedy search; this one searches
                                exhaustively, as PerTensorMSEObserver)
MeanAbsObserver                 the mean of |x|: the scale statistic of ``Dtype.bipolar``
                                and ``Dtype.ternary`` (:mod:`.binary`; beyond Quark);
                                ``UnitScaleObserver`` fixes a bipolar activation's
                                scale at 1 (FINN's bipolar activations)
=============================== ======================================================

Quark's observers of formats whose scales never come from calibration select a behaviour and
observe nothing: ``PlaceholderObserver`` (bfloat16 / float16 casts), ``PerGroupMinMaxObserver``
(per-group min / max, computed on the weight by its quantizer), ``PerBlockMXObserver`` (OCP MX
blocks) and ``PerBlockBFPObserver`` (MX6 / MX9 blocks); the block formats also take the MinMax
observers of their granularity (``PerGroupMinMaxObserver``, ``PerChannelMinMaxObserver``).

AMD Quark 0.13's observers, by its names (docs/quark013.md says what each does here):
``PerTensorPowOf2MinMaxObserver`` / ``PerChannelPowOf2MinMaxObserver`` /
``PerTensorPowOf2MinMSEObserver`` (power-of-two scales voted over the batches, :mod:`.pof2`),
``LSQObserver`` (learned step size, :mod:`.lsq`), ``TQTObserver`` (selects TQT),
``PerTensorHistogramObserverPro`` (torch's HistogramObserver, :mod:`.histogram_pro`); refused with
their reason when a spec is applied: ``PerChannelPowOf2MinMSEObserver``,
``PerBlock2DMinMaxObserver``, ``PerBlockMXDiffsObserver``.
"""

from quark.torch.quantization.observer.base import ObserverBase
from quark.torch.quantization.observer.binary import MeanAbsObserver, UnitScaleObserver
from quark.torch.quantization.observer.histogram import (
    PerTensorHistogramObserver,
    PerTensorMSEObserver,
    PerTensorPercentileObserver,
)
from quark.torch.quantization.observer.histogram_pro import PerTensorHistogramObserverPro
from quark.torch.quantization.observer.lsq import LSQObserver
from quark.torch.quantization.observer.minmax import PerChannelMinMaxObserver, PerTensorMinMaxObserver
from quark.torch.quantization.observer.pof2 import (
    PerChannelPowOf2MinMaxObserver,
    PerChannelPowOf2MinMSEObserver,
    PerTensorPowOf2MinMaxObserver,
    PerTensorPowOf2MinMSEObserver,
)
from quark.torch.quantization.observer.selectors import (
    PerBlock2DMinMaxObserver,
    PerBlockBFPObserver,
    PerBlockMXDiffsObserver,
    PerBlockMXObserver,
    PerGroupMinMaxObserver,
    PlaceholderObserver,
)
from quark.torch.quantization.observer.tqt import TQT3SDObserver, TQTJeffreysObserver, TQTObserver

__all__ = [
    "OBSERVERS",
    "LSQObserver",
    "MeanAbsObserver",
    "ObserverBase",
    "PerBlock2DMinMaxObserver",
    "PerBlockBFPObserver",
    "PerBlockMXDiffsObserver",
    "PerBlockMXObserver",
    "PerChannelMinMaxObserver",
    "PerChannelPowOf2MinMSEObserver",
    "PerChannelPowOf2MinMaxObserver",
    "PerGroupMinMaxObserver",
    "PerTensorHistogramObserver",
    "PerTensorHistogramObserverPro",
    "PerTensorMSEObserver",
    "PerTensorMinMaxObserver",
    "PerTensorPercentileObserver",
    "PerTensorPowOf2MinMSEObserver",
    "PerTensorPowOf2MinMaxObserver",
    "PlaceholderObserver",
    "TQT3SDObserver",
    "TQTJeffreysObserver",
    "TQTObserver",
    "UnitScaleObserver",
    "register_observer",
]

#: name -> class, for serialisation and for the translation tables: Quark's observers, and a user's own
#: added with :func:`register_observer`.
OBSERVERS: dict[str, type[ObserverBase]] = {
    cls.__name__: cls
    for cls in (
        PerTensorMinMaxObserver,
        PerChannelMinMaxObserver,
        PerGroupMinMaxObserver,
        PerTensorPercentileObserver,
        PerTensorMSEObserver,
        PerTensorHistogramObserver,
        PlaceholderObserver,
        PerBlockMXObserver,
        PerBlockBFPObserver,
        # AMD Quark 0.13
        PerTensorPowOf2MinMaxObserver,
        PerTensorPowOf2MinMSEObserver,
        PerChannelPowOf2MinMaxObserver,
        PerChannelPowOf2MinMSEObserver,
        LSQObserver,
        TQTObserver,
        PerTensorHistogramObserverPro,
        PerBlock2DMinMaxObserver,
        PerBlockMXDiffsObserver,
        # binary and ternary networks (beyond Quark)
        MeanAbsObserver,
        UnitScaleObserver,
    )
}


def register_observer(cls: type[ObserverBase]) -> type[ObserverBase]:
    """Make a custom observer (e.g. a percentile subclass) usable by name in serialised configs."""
    if not (isinstance(cls, type) and issubclass(cls, ObserverBase)):
        raise TypeError(f"register_observer: expected a subclass of ObserverBase, got {cls!r}")
    OBSERVERS[cls.__name__] = cls
    return cls
