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
``PerTensorHistogramObserverPro`` (torch's HistogramObserver, :mod:`.histogram_pro`),
``PerBlockMXBufferReuseObserver`` (``PerBlockMXObserver``'s memory option: the same class here); refused with their
reason when a spec is applied: ``PerChannelPowOf2MinMSEObserver``, ``PerBlock2DMinMaxObserver``,
``PerBlockMXDiffsObserver``.

Quark's layout is here too: the modules ``observer.observer``, ``observer.tqt_observer`` and
``observer.lsq_observer`` (where Quark's docs import the observers from), Quark's base name
``UniformScalingObserver`` (its scale-computing observers are registered as its subclasses) and
Quark's sets of observers by granularity (``PER_TENSOR_OBSERVERS``, ``OBSERVER_MAP``, ...).
"""

from quark.torch.quantization.observer.base import ObserverBase, UniformScalingObserver
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
    PerBlockMXBufferReuseObserver,
    PerBlockMXDiffsObserver,
    PerBlockMXObserver,
    PerGroupMinMaxObserver,
    PlaceholderObserver,
)
from quark.torch.quantization.observer.tqt import TQT3SDObserver, TQTJeffreysObserver, TQTObserver

__all__ = [
    "OBSERVERS",
    "OBSERVER_CLASSES",
    "OBSERVER_MAP",
    "PER_CHANNEL_OBSERVERS",
    "PER_GROUP_OBSERVERS",
    "PER_TENSOR_OBSERVERS",
    "PLACEHOLDER_OBSERVERS",
    "LSQObserver",
    "MeanAbsObserver",
    "ObserverBase",
    "PerBlock2DMinMaxObserver",
    "PerBlockBFPObserver",
    "PerBlockMXBufferReuseObserver",
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
    "UniformScalingObserver",
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


#: AMD Quark 0.13's sets of its observers by granularity, and its name map (as in Quark)
PLACEHOLDER_OBSERVERS = {PlaceholderObserver}
PER_CHANNEL_OBSERVERS = {
    PerChannelMinMaxObserver,
    PerChannelPowOf2MinMaxObserver,
    PerChannelPowOf2MinMSEObserver,
    LSQObserver,
}
PER_TENSOR_OBSERVERS = {
    PerTensorMinMaxObserver,
    PerTensorPowOf2MinMaxObserver,
    PerTensorPowOf2MinMSEObserver,
    PerTensorHistogramObserver,
    PerTensorHistogramObserverPro,
    PerTensorPercentileObserver,
    PerTensorMSEObserver,
    TQTObserver,
    LSQObserver,
}
PER_GROUP_OBSERVERS = {
    PerBlockMXObserver,  # and PerBlockMXBufferReuseObserver, the same class here
    PerBlockMXDiffsObserver,
    PerBlockBFPObserver,
    PerBlock2DMinMaxObserver,
    PerGroupMinMaxObserver,
}
OBSERVER_CLASSES = (
    PLACEHOLDER_OBSERVERS
    | PER_CHANNEL_OBSERVERS
    | PER_TENSOR_OBSERVERS
    | PER_GROUP_OBSERVERS
    | {UniformScalingObserver, ObserverBase}
)
OBSERVER_MAP = {cls.__name__: cls for cls in OBSERVER_CLASSES} | {"PerBlockMXBufferReuseObserver": PerBlockMXBufferReuseObserver}

#: Quark's UniformScalingObserver subclasses (the observers whose statistic gives a scale)
for _scaling in (
    PER_CHANNEL_OBSERVERS | PER_TENSOR_OBSERVERS | {PerGroupMinMaxObserver, PerBlock2DMinMaxObserver}
):
    UniformScalingObserver.register(_scaling)
del _scaling


def register_observer(cls: type[ObserverBase]) -> type[ObserverBase]:
    """Make a custom observer (e.g. a percentile subclass) usable by name in serialised configs."""
    if not (isinstance(cls, type) and issubclass(cls, ObserverBase)):
        raise TypeError(f"register_observer: expected a subclass of ObserverBase, got {cls!r}")
    OBSERVERS[cls.__name__] = cls
    return cls


# Quark's module layout (after the names above: these modules import the classes from their own files)
from quark.torch.quantization.observer import lsq_observer, observer, tqt_observer  # noqa: F401
