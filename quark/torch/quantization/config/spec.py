"""How one tensor is quantized: AMD Quark's ``QuantizationSpec`` (``QTensorConfig``) and its QAT
specs (``TQTSpec``; this package's ``A2QSpec``), with the constants every layer of the config shares (the roles, the bit
widths). The layer and model configs (:mod:`.config`) and Quark 0.13's spec helpers
(:mod:`.datatype_specs`) build on it."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from quark.torch.quantization.config._fields import (
    Serialisable,
    check_type,
    coerce_enum,
    config_to_dict,
    from_registry,
)
from quark.torch.quantization.config.type import (
    Dtype,
    QSchemeType,
    RoundType,
    ScaleType,
    TQTThresholdInitMeth,
    ZeroPointType,
)
from quark.torch.quantization.observer import OBSERVERS, ObserverBase, TQTObserver


class Role(str, Enum):
    """The tensor roles of a layer config (its field names), in field order. A ``str``: plans key their
    ``specs`` / ``origins`` / ``upstream`` by the plain names (store ``Role.x.value``), and
    ``plan.specs[Role.weight]`` finds them. (``enum.StrEnum`` would need Python 3.11.)"""

    __str__ = str.__str__
    __format__ = str.__format__

    input_tensors = "input_tensors"
    output_tensors = "output_tensors"
    weight = "weight"
    bias = "bias"


#: the roles' names, in field order; activations are the first two
ROLES: tuple[str, ...] = tuple(role.value for role in Role)
ACTIVATION_ROLES = ROLES[:2]
#: bit widths of integer weights and activations; a bias goes up to 32
MIN_BITS, MAX_BITS, MAX_BIAS_BITS = 2, 16, 32
#: the one width below: bipolar tensors, {-1, +1} x scale (``Dtype.bipolar``, the extension's bit_width=1)
BIPOLAR_BITS = 1
#: TQTSpec's default: training steps after which a batch norm folded during QAT stops updating its
#: statistics. 0: frozen from the start (the layer computes merged batch norm at the float model's
#: statistics while weight, gamma and beta train): measured steadiest of never / 0 / 50 / 100 / 200
#: on the digits CNN, 30 seeds (benchmarks/qat_batch_norm.py; docs/qat.md "Batch norm kept during QAT")
FREEZE_BATCH_NORM_STEPS = 0
#: Quark 0.13's default bound of its MX observer's buffer-reuse path (elements)
MAX_INPUT_NUMEL = 4 * 1024 * 1024
#: accumulator widths an ``A2QSpec`` may promise (signed bits): 32 is Brevitas' default bound and
#: FINN's default accumulator (INT32), i.e. no constraint on the usual layers
MIN_ACCUMULATOR_BITS, MAX_ACCUMULATOR_BITS = 2, 32


@dataclass(eq=True, frozen=True)
class QATSpec:
    """Base of quantization-aware-training specs (``QuantizationSpec.qat_spec``)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON / YAML data, its class name first; ``from_dict`` reads it back."""
        return {"name": type(self).__name__, **config_to_dict(self)}

    @staticmethod
    def from_dict(data: dict[str, Any]) -> QATSpec:
        return from_registry("qat_spec", data, QAT_SPECS)


@dataclass(eq=True, frozen=True)
class TQTSpec(QATSpec):
    """Trained Quantization Thresholds (Jain et al., arXiv 1903.08066).

    A learned log2 threshold t per tensor; scale = 2^ceil(log2 t) / 2^(b-1) (signed) or / 2^b
    (unsigned). Needs ``scale_type=pof2``, ``symmetric=True``, ``qscheme=per_tensor``, static.

    Args:
        threshold_init_meth: ``_3SD`` or ``_LL_J`` (alias ``_KL_J``); None initialises the
            threshold from the spec's observer range (abs-max for MinMax).
        fold_batch_norm: on a weight spec: a batch norm that alone takes the layer's output
            (Conv1d / Conv2d / Conv3d / Linear -> BatchNorm1d / 2d / 3d) is folded into the layer
            during QAT (Jacob et al. 2018, PyTorch's ``ConvBn2d``): the quantized weight is
            ``weight * gamma / sqrt(running_var + eps)``, the output is rescaled to the batch's
            statistics while they train, and the export is that of merged batch norm. False keeps
            the batch norm a float layer after the quantized one. Not Quark's field (Quark keeps
            batch norm float); ignored on activation specs.
        freeze_batch_norm_steps: training steps (forward passes in training mode) after which the
            folded batch norm's statistics stop updating; from then on the layer computes exactly
            what merged batch norm does. 0 (the default, measured steadiest): frozen from the
            start, at the float model's statistics; None: never frozen by count (batch statistics
            with the running-statistics correction throughout).
        absorb_frozen_batch_norm: once the statistics are frozen, the batch norm is absorbed into
            the layer's own parameters (when the model is built if frozen from the start, else at
            the next training step): ``weight`` becomes
            ``w * gamma / sqrt(running_var + eps)`` and the bias the folded bias, in place (the
            same ``Parameter`` objects, so the optimizer goes on training them), and gamma and beta
            stop training (``requires_grad`` False; a ``DistributedDataParallel`` built before an
            absorption later in training needs ``find_unused_parameters=True``). The forward is unchanged bit for bit; the optimizer then steps the
            folded weight itself, as after merging batch norm before quantization, instead of w
            (Adam moves w by about its learning rate whatever the gradient's scale, so the folded
            weight moved ``gamma / sqrt(running_var + eps)`` times as far: 3 to 19 times on the
            digits CNN). True (the default) measured steadier; False trains w, gamma and beta
            through ``w * gamma / sqrt(running_var + eps)`` (the behaviour before).
    """

    threshold_init_meth: TQTThresholdInitMeth | None = None
    fold_batch_norm: bool = True
    freeze_batch_norm_steps: int | None = FREEZE_BATCH_NORM_STEPS
    absorb_frozen_batch_norm: bool = True

    def __post_init__(self) -> None:
        value = coerce_enum("TQTSpec", "threshold_init_meth", self.threshold_init_meth, TQTThresholdInitMeth)
        object.__setattr__(self, "threshold_init_meth", value)
        check_type("TQTSpec", "fold_batch_norm", self.fold_batch_norm, bool, optional=False)
        check_type("TQTSpec", "freeze_batch_norm_steps", self.freeze_batch_norm_steps, int)
        check_type("TQTSpec", "absorb_frozen_batch_norm", self.absorb_frozen_batch_norm, bool, optional=False)
        if self.freeze_batch_norm_steps is not None and self.freeze_batch_norm_steps < 0:
            raise ValueError(
                f"TQTSpec.freeze_batch_norm_steps={self.freeze_batch_norm_steps}: expected a number of steps >= 0 "
                "(0: frozen from the start) or None (never frozen by count)"
            )


@dataclass(eq=True, frozen=True)
class A2QSpec(QATSpec):
    """Accumulator-aware quantization of a layer's weights: A2Q (Colbert, Pappalardo and
    Petri-Koenig, ICCV 2023, arXiv 2308.13504) and A2Q+ (Colbert, Pappalardo, Petri-Koenig and
    Umuroglu, arXiv 2401.10432), on Brevitas' ``Int8AccumulatorAwareWeightQuant`` /
    ``Int8AccumulatorAwareZeroCenterWeightQuant``. Not AMD Quark's: this package's addition.

    The integer weights q of each output channel are trained under an L1-norm bound so that the dot
    product with any input on the layer's N-bit integer grid fits a signed P-bit accumulator,
    ``P = accumulator_bit_width``: A2Q ``||q||_1 <= (2^(P-1) - 1) * 2^(signed - N)``; A2Q+ zero-centres
    each channel and takes ``||q||_1 <= (2^P - 2) / (2^N - 1)``. The weights are
    ``w = g * v / ||v||_1`` per output channel with learned ``g`` (clamped to the bound) and a learned
    scale, rounded toward zero (no rounding step may raise a magnitude). After calibration the
    weights are projected onto the bound once (the A2Q+ paper's EP-init, Brevitas'
    ``apply_ep_init``).

    Applies to weight specs of a signed integer dtype, ``qscheme=per_channel`` along the output
    channels, symmetric, ``scale_type`` float (Brevitas' A2Q) or pof2 (the learned scale rounded to a
    power of two: FINN's integer graphs stay exact), ``round_method`` unset or
    ``RoundType.toward_zero``; the layer (Linear or Conv2d) needs a quantized integer input, whose
    bit width and sign the bound uses. The FINN export checks that every such layer's accumulator
    fits the promised width (``ModelExporter.export_finn_dataflow``).

    Args:
        accumulator_bit_width: the signed accumulator width P promised, 2..32.
        zero_centered: True (default): A2Q+ (zero-centred weights, the relaxed bound);
            False: A2Q.
    """

    accumulator_bit_width: int
    zero_centered: bool = True

    def __post_init__(self) -> None:
        check_type("A2QSpec", "accumulator_bit_width", self.accumulator_bit_width, int, optional=False)
        if not MIN_ACCUMULATOR_BITS <= self.accumulator_bit_width <= MAX_ACCUMULATOR_BITS:
            raise ValueError(
                f"A2QSpec.accumulator_bit_width={self.accumulator_bit_width}: allowed "
                f"{MIN_ACCUMULATOR_BITS}..{MAX_ACCUMULATOR_BITS} (signed accumulator bits)"
            )
        check_type("A2QSpec", "zero_centered", self.zero_centered, bool, optional=False)

    @property
    def method(self) -> str:
        """``"A2Q+"`` or ``"A2Q"``."""
        return "A2Q+" if self.zero_centered else "A2Q"


QAT_SPECS: dict[str, type[QATSpec]] = {"TQTSpec": TQTSpec, "A2QSpec": A2QSpec}


def check_tqt(
    owner: str, qat_spec: Any, *, scale_type: Any, symmetric: bool, qscheme: Any, is_dynamic: bool, quark_tqt: bool = False
) -> None:
    """TQT learns one power-of-two threshold per tensor: reject specs that say otherwise. Other QAT
    specs (``A2QSpec``) are checked where the role and dtype are known (the normalisers).

    ``quark_tqt``: the spec names AMD Quark's ``TQTObserver``, whose thresholds are powers of two
    whatever ``scale_type`` says (Quark's own vision example writes ``ScaleType.float`` with it):
    ``ScaleType.float`` is then taken as Quark takes it."""
    if qat_spec is None:
        return
    if not isinstance(qat_spec, QATSpec):
        raise TypeError(f"{owner}.qat_spec={qat_spec!r}: expected one of {sorted(QAT_SPECS)} (e.g. TQTSpec(...)) or None")
    if not isinstance(qat_spec, TQTSpec):
        return
    problems = {
        "scale_type": (
            scale_type is not ScaleType.pof2 and not (quark_tqt and scale_type is ScaleType.float),
            "ScaleType.pof2 (or ScaleType.float with observer_cls=TQTObserver, as AMD Quark writes it)",
        ),
        "symmetric": (not symmetric, "True"),
        "qscheme": (qscheme not in (None, QSchemeType.per_tensor), "QSchemeType.per_tensor"),
        "is_dynamic": (bool(is_dynamic), "False"),
    }
    for field_name, (bad, needed) in problems.items():
        if bad:
            raise ValueError(f"{owner}.qat_spec=TQTSpec needs {field_name}={needed}; TQT learns one power-of-two threshold per tensor")


@dataclass(eq=True)
class QuantizationSpec(Serialisable):
    """How one tensor is quantized.

    Args:
        dtype: element type (:class:`Dtype`).
        observer_cls: statistic that sets the range (an observer class from
            :mod:`quark.torch.quantization.observer`). None: MinMax of the qscheme.
        is_dynamic: compute the scale from each tensor at run time instead of from calibration.
        qscheme: per_tensor, per_channel or per_group. None: per_tensor.
        ch_axis: the channel axis (per_channel) or the axis split into groups (per_group).
        group_size: elements per group along ``ch_axis`` (per_group).
        symmetric: zero point fixed at 0 when True. None: True.
        round_method: rounding to the integer grid. None: half_even.
        scale_type: representation of the scale. None: float.
        zero_point_type: int32 (rounded) or float32 zero point of asymmetric quantization.
        qat_spec: quantization-aware-training method, ``TQTSpec(threshold_init_meth=...)``, or
            ``A2QSpec(accumulator_bit_width=...)`` on weights (accumulator-aware, this package's).
        mx_element_dtype: element type of ``Dtype.mx`` blocks (int8, fp8_e4m3, fp8_e5m2, fp6_e3m2,
            fp6_e2m3, fp4).
        scale_format: Quark 0.13's representation of block scales: ``"e8m0"`` (OCP MX: a power of
            two shared by each block), ``"float32"`` (per-group minifloats: amax / element max in
            the precision ``scale_type`` names); ``"e5m3"`` / ``"e4m3"`` are refused when applied.
        scale_calculation_mode: how an OCP MX block's shared exponent comes from its maximum:
            ``"even"`` (Quark's default: the maximum rounded to the element's precision first),
            ``"floor"`` (the OCP MX spec), ``"ceil"``; None: ``"floor"``.
        is_scale_quant, enable_buffer_reuse, max_input_numel: Quark 0.13's fields (a spec that
            quantizes another quantizer's scales; a memory option of Quark's MX observer, with its
            size bound): ``is_scale_quant=True`` is refused when applied, the other two have no
            effect on the numbers and are accepted.
        block_size: Quark 0.13's 2-D block (``qscheme=per_block``); refused when applied.
    """

    dtype: Dtype
    observer_cls: type[ObserverBase] | None = None
    is_dynamic: bool | None = None
    qscheme: QSchemeType | None = None
    ch_axis: int | None = None
    group_size: int | None = None
    symmetric: bool | None = None
    round_method: RoundType | None = None
    scale_type: ScaleType | None = None
    zero_point_type: ZeroPointType | None = ZeroPointType.int32
    qat_spec: QATSpec | None = None
    mx_element_dtype: Dtype | None = None
    scale_format: str | None = None
    scale_calculation_mode: str | None = None
    is_scale_quant: bool = False
    enable_buffer_reuse: bool = False
    max_input_numel: int = MAX_INPUT_NUMEL
    block_size: list[int] | None = None

    def __post_init__(self) -> None:
        owner = type(self).__name__
        check_type(owner, "scale_format", self.scale_format, str)
        check_type(owner, "scale_calculation_mode", self.scale_calculation_mode, str)
        check_type(owner, "is_scale_quant", self.is_scale_quant, bool, optional=False)
        check_type(owner, "enable_buffer_reuse", self.enable_buffer_reuse, bool, optional=False)
        check_type(owner, "max_input_numel", self.max_input_numel, int, optional=False)
        if self.max_input_numel <= 0:
            raise ValueError(f"{owner}.max_input_numel={self.max_input_numel}: must be a positive integer")
        if isinstance(self.block_size, tuple):
            self.block_size = list(self.block_size)
        if self.block_size is not None and not (
            isinstance(self.block_size, list) and all(type(v) is int and v > 0 for v in self.block_size)
        ):
            raise TypeError(f"{owner}.block_size={self.block_size!r}: expected None or a list of positive ints")
        self.mx_element_dtype = coerce_enum(owner, "mx_element_dtype", self.mx_element_dtype, Dtype)
        if isinstance(self.qat_spec, dict):
            self.qat_spec = QATSpec.from_dict(self.qat_spec)
        self.dtype = coerce_enum(owner, "dtype", self.dtype, Dtype, optional=False)
        if (self.dtype is Dtype.mx) != (self.mx_element_dtype is not None):
            raise ValueError(
                f"{owner}.mx_element_dtype={self.mx_element_dtype} with dtype={self.dtype}: "
                "Dtype.mx needs an element dtype, and only Dtype.mx takes one"
            )
        self.qscheme = coerce_enum(owner, "qscheme", self.qscheme, QSchemeType)
        self.round_method = coerce_enum(owner, "round_method", self.round_method, RoundType)
        self.scale_type = coerce_enum(owner, "scale_type", self.scale_type, ScaleType)
        self.zero_point_type = coerce_enum(owner, "zero_point_type", self.zero_point_type, ZeroPointType)
        if isinstance(self.observer_cls, str):
            self.observer_cls = _observer_from_name(self.observer_cls)
        if self.observer_cls is not None and not (
            isinstance(self.observer_cls, type) and issubclass(self.observer_cls, ObserverBase)
        ):
            raise TypeError(
                f"{owner}.observer_cls={self.observer_cls!r}: expected an observer class, one of {sorted(OBSERVERS)}"
            )
        check_type(owner, "is_dynamic", self.is_dynamic, bool)
        check_type(owner, "symmetric", self.symmetric, bool)
        check_type(owner, "ch_axis", self.ch_axis, int)
        check_type(owner, "group_size", self.group_size, int)
        if self.group_size is not None and self.group_size <= 0:
            raise ValueError(f"{owner}.group_size={self.group_size}: must be a positive integer")
        if self.qscheme in (QSchemeType.per_channel, QSchemeType.per_group) and self.ch_axis is None:
            raise ValueError(f"{owner}.ch_axis is required with qscheme={self.qscheme.name}")
        if self.qscheme is QSchemeType.per_group and self.group_size is None:
            raise ValueError(f"{owner}.group_size is required with qscheme=per_group")
        block = self.dtype.is_block and self.qscheme is None  # Quark's block formats: the block without a qscheme
        if self.group_size is not None and self.qscheme is not QSchemeType.per_group and not block:
            raise ValueError(
                f"{owner}.group_size={self.group_size} is only meaningful with qscheme=per_group, "
                f"got qscheme={self.qscheme.name if self.qscheme else None}"
            )
        qscheme = self.qscheme or QSchemeType.per_tensor  # None means per_tensor
        if self.ch_axis is not None and qscheme is QSchemeType.per_tensor and not block:
            raise ValueError(
                f"{owner}.ch_axis={self.ch_axis} is only meaningful with qscheme=per_channel or per_group, "
                f"got qscheme={self.qscheme.name if self.qscheme else None} (per_tensor)"
            )
        if self.observer_cls is not None and not block:
            obs_scheme = self.observer_cls.qscheme
            observes = self.observer_cls.observes
            if qscheme is QSchemeType.per_group and not (observes(QSchemeType.per_channel) or observes(QSchemeType.per_group)):
                raise ValueError(
                    f"{owner}.observer_cls={self.observer_cls.__name__}: qscheme=per_group takes a per-group "
                    "observer (PerGroupMinMaxObserver, PerBlockMXObserver, PerBlockBFPObserver) or "
                    "PerChannelMinMaxObserver (min/max per group)"
                )
            if qscheme is not QSchemeType.per_group and not observes(qscheme):
                raise ValueError(
                    f"{owner}.observer_cls={self.observer_cls.__name__} observes {obs_scheme.name} "
                    f"but qscheme={self.qscheme.name if self.qscheme else None} ({qscheme.name}); "
                    "use an observer of the same granularity or set qscheme accordingly"
                )

        check_tqt(
            owner,
            self.qat_spec,
            scale_type=self.scale_type,
            symmetric=self.symmetric is not False,
            qscheme=self.qscheme,
            is_dynamic=bool(self.is_dynamic),
            quark_tqt=self.observer_cls is TQTObserver,
        )



def _observer_from_name(name: str) -> type[ObserverBase]:
    try:
        return OBSERVERS[name]
    except KeyError:
        raise ValueError(
            f"QuantizationSpec.observer_cls={name!r} is not a registered observer; allowed: {sorted(OBSERVERS)} "
            "(register your own with quark.torch.quantization.observer.register_observer)"
        ) from None
