"""Config of AMD Quark's Brevitas extension: Backend, QuantType, ParamType, QuantizationSpec, ...

Same names, fields and defaults as ``quark.torch.extensions.brevitas.config`` in AMD Quark, so
scripts written for it run unchanged. Importable without Brevitas. The newer names
``QLayerConfig`` / ``QTensorConfig`` are silent aliases.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, ClassVar

from quark.torch.quantization.config._fields import (
    CONFIG_VERSION,
    FileConfig,
    Serialisable,
    check_type,
    coerce_enum,
)
from quark.torch.quantization.config.algorithms import AlgoConfig, Preprocess, algo_list
from quark.torch.quantization.config.config import LayerConfigBase
from quark.torch.quantization.config.spec import (
    BIPOLAR_BITS,
    MAX_BIAS_BITS,
    A2QSpec,
    QATSpec,
    TQTSpec,
    check_tqt,
)
from quark.torch.quantization.config.spec import QuantizationSpec as MainQuantizationSpec
from quark.torch.quantization.config.type import QSchemeType, ScaleType

__all__ = [
    "A2QSpec",
    "Backend",
    "Config",
    "ParamType",
    "QLayerConfig",
    "QTensorConfig",
    "QuantType",
    "QuantizationConfig",
    "QuantizationSpec",
    "TQTSpec",
]


class Backend(Enum):
    """How the model is rewritten.

    - ``layerwise``: supported layers are swapped for Brevitas layers, which quantize their own
      inputs, weights, biases (and outputs); what flows between them stays float.
    - ``fx``: graph mode (Brevitas' name for its FX graph quantization): the model is traced with
      ``torch.fx`` and every tensor between layers is quantized once, where it is produced (network
      input, activations, additions, concatenations); see
      :mod:`quark.torch.extensions.brevitas.graph`.
    """

    layerwise = "layerwise"
    fx = "fx"


class QuantType(Enum):
    """Integer or minifloat elements."""

    int_quant = "int_quant"
    float_quant = "float_quant"


class ParamType(Enum):
    """How scales are found: from statistics of the tensor, or by minimising the quantization MSE."""

    stats = "stats"
    mse = "mse"


@dataclass(eq=True, frozen=True)
class QuantizationSpec(Serialisable):
    """How one tensor is quantized (Brevitas extension flavour).

    Args:
        qscheme: per_tensor or per_channel (per_group with the main API's spec).
        symmetric: zero point fixed at 0 (signed grid) when True; unsigned grid with a zero
            point when False.
        scale_type: float or pof2 (also float16 / bfloat16 / float32).
        quant_type: int_quant; float_quant arrives with the minifloat formats.
        param_type: stats (weights: abs-max / min-max; activations: the 99.999th percentile,
            as Brevitas' defaults) or mse.
        bit_width: element bits, 2..16 for weights and activations, up to 32 for bias; 1 for
            bipolar weights and activations ({-1, +1} x scale: sign(x), scale from the mean |x|,
            symmetric). Ternary ({-1, 0, +1} x scale) is the main API's
            ``QuantizationSpec(dtype=Dtype.ternary)``, which this config accepts too.
        exponent_bit_width, mantissa_bit_width: minifloat layout (float_quant only).
        qat_spec: ``TQTSpec(threshold_init_meth=...)`` for trained power-of-two thresholds (needs
            ``scale_type=ScaleType.pof2`` and per-tensor symmetric quantization), or, on a weight,
            ``A2QSpec(accumulator_bit_width=...)`` for accumulator-aware weights (needs
            ``qscheme=QSchemeType.per_channel``, symmetric, float or pof2 scales).
    """

    qscheme: QSchemeType = QSchemeType.per_tensor
    symmetric: bool = True
    scale_type: ScaleType = ScaleType.float
    quant_type: QuantType = QuantType.int_quant
    param_type: ParamType = ParamType.stats
    bit_width: int = 8
    exponent_bit_width: int | None = None
    mantissa_bit_width: int | None = None
    qat_spec: TQTSpec | A2QSpec | None = None

    def __post_init__(self) -> None:
        owner = type(self).__name__
        if isinstance(self.qat_spec, dict):
            object.__setattr__(self, "qat_spec", QATSpec.from_dict(self.qat_spec))
        coerced = {
            "qscheme": coerce_enum(owner, "qscheme", self.qscheme, QSchemeType, optional=False),
            "scale_type": coerce_enum(owner, "scale_type", self.scale_type, ScaleType, optional=False),
            "quant_type": coerce_enum(owner, "quant_type", self.quant_type, QuantType, optional=False),
            "param_type": coerce_enum(owner, "param_type", self.param_type, ParamType, optional=False),
        }
        for name, value in coerced.items():
            object.__setattr__(self, name, value)
        check_type(owner, "symmetric", self.symmetric, bool, optional=False)
        check_type(owner, "bit_width", self.bit_width, int, optional=False)
        check_type(owner, "exponent_bit_width", self.exponent_bit_width, int)
        check_type(owner, "mantissa_bit_width", self.mantissa_bit_width, int)
        if not BIPOLAR_BITS <= self.bit_width <= MAX_BIAS_BITS:  # weights and activations: up to MAX_BITS (the plan checks)
            raise ValueError(f"{owner}.bit_width={self.bit_width}: allowed {BIPOLAR_BITS}..{MAX_BIAS_BITS} (1: bipolar)")
        if self.quant_type is QuantType.int_quant and (
            self.exponent_bit_width is not None or self.mantissa_bit_width is not None
        ):
            raise ValueError(
                f"{owner}: exponent_bit_width / mantissa_bit_width are only meaningful with "
                f"quant_type=QuantType.float_quant, got quant_type=QuantType.int_quant"
            )

        check_tqt(
            owner,
            self.qat_spec,
            scale_type=self.scale_type,
            symmetric=self.symmetric,
            qscheme=self.qscheme,
            is_dynamic=False,
        )


@dataclass(eq=True)
class QuantizationConfig(LayerConfigBase):
    """Specs of the tensors of a layer: input_tensors, output_tensors, weight, bias; each this
    module's QuantizationSpec or the main API's (for OCP MX, MX6 / MX9, casts, FNUZ FP8)."""

    input_tensors: QuantizationSpec | None = None
    output_tensors: QuantizationSpec | None = None
    weight: QuantizationSpec | None = None
    bias: QuantizationSpec | None = None
    target_device: Any = None

    # The main API's QuantizationSpec is welcome too: it names the formats this spec cannot (OCP MX,
    # MX6 / MX9, bfloat16 / float16 casts, FNUZ FP8), inside an extension Config and its Preprocess.
    spec_classes: ClassVar[tuple[type, ...]] = (QuantizationSpec, MainQuantizationSpec)


def _default_preprocess() -> list[AlgoConfig]:
    return [Preprocess()]


@dataclass(eq=True)
class Config(FileConfig):
    """Quantization of a whole model (Brevitas extension flavour).

    Args:
        global_quant_config: the :class:`QuantizationConfig` of every supported layer.
        pre_quant_opt_config: transforms run on the float model first; by default
            ``[Preprocess()]`` (as in Quark); ``[]`` turns it off.
        algo_config: algorithms run after calibration (GPTQ, GPFQ, BiasCorrection, ...).
        backend: ``Backend.layerwise`` (default) or ``Backend.fx`` (graph mode).
        version: of the file format (``to_dict`` / ``save`` write it, ``from_dict`` / ``load`` check it).
    """

    global_quant_config: QuantizationConfig
    pre_quant_opt_config: list[Any] = field(default_factory=_default_preprocess)
    algo_config: list[Any] = field(default_factory=list)
    backend: Backend = Backend.layerwise
    version: int = CONFIG_VERSION

    def __post_init__(self) -> None:
        owner = type(self).__name__
        if isinstance(self.global_quant_config, dict):
            self.global_quant_config = QuantizationConfig.from_dict(self.global_quant_config)
        if type(self.global_quant_config) is not QuantizationConfig:
            raise TypeError(
                f"{owner}.global_quant_config: expected quark.torch.extensions.brevitas.config.QuantizationConfig, "
                f"got {self.global_quant_config!r}"
            )
        self.backend = coerce_enum(owner, "backend", self.backend, Backend, optional=False)
        for fname in ("pre_quant_opt_config", "algo_config"):
            setattr(self, fname, algo_list(owner, fname, getattr(self, fname)) or [])


QTensorConfig = QuantizationSpec
QLayerConfig = QuantizationConfig
