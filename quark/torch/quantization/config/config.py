"""AMD Quark's PyTorch quantization config: Config, QuantizationConfig, QuantizationSpec.

Field names, order and defaults follow Quark, so Quark scripts build the same objects here.
Quark's newer names ``QConfig`` / ``QLayerConfig`` / ``QTensorConfig`` are plain aliases.

Each dataclass checks its own fields on construction (types, enum values, ranges) and raises a
``ValueError`` / ``TypeError`` naming the field, the value and what is allowed. Rules that need the
model (a name that matches no module, a group size that does not divide a weight) are checked
when the config is applied, before the model is touched.

Configs round-trip through ``to_dict`` / ``from_dict`` and JSON / YAML files (``save`` / ``load``).
Layer types serialise by class name; observers by their registered name (see
:func:`quark.torch.quantization.observer.register_observer`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, ClassVar

from quark.torch.quantization.config._fields import (
    CONFIG_VERSION,
    FileConfig,
    Serialisable,
    check_type,
    coerce_enum,
    config_to_dict,
    from_registry,
    read_file,
)
from quark.torch.quantization.config.algorithms import (
    AlgoConfig,
    AutoRoundConfig,
    AutoSmoothQuantConfig,
    AWQConfig,
    GPTAQConfig,
    GPTQConfig,
    OnlineRotationConfig,
    PreQuantOptConfig,
    QronosConfig,
    RotationConfig,
    SmoothQuantConfig,
    SVDQuantConfig,
    algo_from_dict,
    algo_list,
)
from quark.torch.quantization.config.type import (
    DeviceType,
    Dtype,
    QSchemeType,
    QuantizationMode,
    RoundType,
    ScaleType,
    TQTThresholdInitMeth,
    ZeroPointType,
)
from quark.torch.quantization.observer import OBSERVERS, ObserverBase

__all__ = [
    "AWQConfig",
    "AlgoConfig",
    "AutoRoundConfig",
    "AutoSmoothQuantConfig",
    "Config",
    "GPTAQConfig",
    "GPTQConfig",
    "OnlineRotationConfig",
    "PreQuantOptConfig",
    "QATSpec",
    "QConfig",
    "QLayerConfig",
    "QTensorConfig",
    "QronosConfig",
    "QuantizationConfig",
    "QuantizationSpec",
    "RotationConfig",
    "SVDQuantConfig",
    "SmoothQuantConfig",
    "TQTSpec",
    "load_pre_optimization_config_from_file",
    "load_quant_algo_config_from_file",
]

#: the tensor roles of a layer config, in field order; activations are the first two
ROLES = ("input_tensors", "output_tensors", "weight", "bias")
ACTIVATION_ROLES = ROLES[:2]
#: bit widths of integer weights and activations; a bias goes up to 32
MIN_BITS, MAX_BITS, MAX_BIAS_BITS = 2, 16, 32
#: Quark 0.13's default bound of its MX observer's buffer-reuse path (elements)
MAX_INPUT_NUMEL = 4 * 1024 * 1024


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
    """

    threshold_init_meth: TQTThresholdInitMeth | None = None

    def __post_init__(self) -> None:
        value = coerce_enum("TQTSpec", "threshold_init_meth", self.threshold_init_meth, TQTThresholdInitMeth)
        object.__setattr__(self, "threshold_init_meth", value)


QAT_SPECS: dict[str, type[QATSpec]] = {"TQTSpec": TQTSpec}


def check_tqt(owner: str, qat_spec: Any, *, scale_type: Any, symmetric: bool, qscheme: Any, is_dynamic: bool) -> None:
    """TQT learns one power-of-two threshold per tensor: reject specs that say otherwise."""
    if qat_spec is None:
        return
    if not isinstance(qat_spec, QATSpec):
        raise TypeError(f"{owner}.qat_spec={qat_spec!r}: expected TQTSpec(...) or None")
    problems = {
        "scale_type": (scale_type is not ScaleType.pof2, "ScaleType.pof2"),
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
        qat_spec: quantization-aware-training method, ``TQTSpec(threshold_init_meth=...)``.
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
        )



def _observer_from_name(name: str) -> type[ObserverBase]:
    try:
        return OBSERVERS[name]
    except KeyError:
        raise ValueError(
            f"QuantizationSpec.observer_cls={name!r} is not a registered observer; allowed: {sorted(OBSERVERS)} "
            "(register your own with quark.torch.quantization.observer.register_observer)"
        ) from None


class LayerConfigBase(Serialisable):
    """Shared behaviour of the layer configs of both flavours (each lists the spec classes it takes,
    its own first)."""

    spec_classes: ClassVar[tuple[type, ...]]
    roles: ClassVar[tuple[str, ...]] = ROLES

    def __post_init__(self) -> None:
        owner = type(self).__name__
        for role in self.roles:
            value = getattr(self, role)
            if isinstance(value, dict):
                setattr(self, role, self._spec_class_of(value).from_dict(value))
            elif isinstance(value, list):
                raise TypeError(
                    f"{owner}.{role}: a list of {len(value)} specs (AMD Quark's two-stage ProgressiveSpec / "
                    "ScaleQuantSpec) is not supported: this package quantizes each tensor in one stage; allowed: one "
                    "QuantizationSpec or None"
                )
            elif value is not None and not isinstance(value, self.spec_classes):
                allowed = " or ".join(f"{c.__module__}.{c.__name__}" for c in self.spec_classes)
                raise TypeError(f"{owner}.{role}={value!r}: expected {allowed} or None")
        self.target_device = coerce_enum(owner, "target_device", self.target_device, DeviceType)

    @classmethod
    def _spec_class_of(cls, data: dict[str, Any]) -> type:
        """The spec class whose fields hold every key of ``data`` (else the own one, which names the misfit)."""
        return next((c for c in cls.spec_classes if set(data) <= {f.name for f in fields(c)}), cls.spec_classes[0])



@dataclass(eq=True)
class QuantizationConfig(LayerConfigBase):
    """Specs of the tensors of one layer; a role left None is not quantized (or inherited, see Config).

    Args:
        input_tensors, output_tensors, weight, bias: :class:`QuantizationSpec` of each role.
        target_device: deployment target; ``DeviceType.IPU`` is checked at export.
    """

    input_tensors: QuantizationSpec | None = None
    output_tensors: QuantizationSpec | None = None
    weight: QuantizationSpec | None = None
    bias: QuantizationSpec | None = None
    target_device: DeviceType | None = None

    spec_classes: ClassVar[tuple[type, ...]] = (QuantizationSpec,)


@dataclass(eq=True)
class Config(FileConfig):
    """Quantization of a whole model.

    For every module and tensor role the effective spec is ``layer_quant_config`` (by name,
    wildcards allowed) over ``layer_type_quant_config`` (by class or class name) over
    ``global_quant_config``; a role left None at a level inherits from the level below it.
    Modules matched by ``exclude`` (names, wildcards allowed) stay float.

    Args:
        global_quant_config: default for every supported layer.
        layer_type_quant_config: per layer type, keyed by ``nn.Module`` subclass or class name.
        layer_quant_config: per module name pattern (``fnmatch`` wildcards).
        exclude: module name patterns left unquantized.
        algo_config: algorithms run on the quantized model (GPTQ, AWQ, ...): None, one, or a list.
        pre_quant_opt_config: transforms run on the float model first (SmoothQuant, the Brevitas
            extension's ``Preprocess()``): None, one, or a list; empty by default.
            Each algorithm runs in the phase its implementation registered (see ``algorithms``).
        quant_mode: eager (module swap) or graph mode.

    AMD Quark 0.13's fields for KV caches, shared scales, softmax, mixture-of-experts and
    pre-quantized checkpoints (``kv_cache_quant_config``, ``kv_cache_group``, ``min_kv_scale``,
    ``kv_cache_post_rope``, ``shared_scale_groups``, ``softmax_quant_spec``,
    ``sync_moe_expert_input_amax``, ``keep_prequantized_layers``) take their defaults (so Quark's
    configs and files load); other values are refused naming the field (``QUARK013_CONFIG_FIELDS``).
    """

    global_quant_config: QuantizationConfig
    layer_type_quant_config: dict[Any, QuantizationConfig] = field(default_factory=dict)
    layer_quant_config: dict[str, QuantizationConfig] = field(default_factory=dict)
    exclude: list[str] = field(default_factory=list)
    algo_config: list[AlgoConfig] | None = None
    pre_quant_opt_config: list[AlgoConfig] = field(default_factory=list)
    quant_mode: QuantizationMode = QuantizationMode.eager_mode
    kv_cache_quant_config: dict[str, QuantizationConfig] = field(default_factory=dict)
    kv_cache_group: list[str] = field(default_factory=list)
    min_kv_scale: float = 0.0
    kv_cache_post_rope: bool = False
    shared_scale_groups: list[list[str]] = field(default_factory=list)
    softmax_quant_spec: QuantizationSpec | None = None
    sync_moe_expert_input_amax: bool = False
    keep_prequantized_layers: bool = True
    version: int = CONFIG_VERSION

    layer_config_class: ClassVar[type] = QuantizationConfig

    def __post_init__(self) -> None:
        owner = type(self).__name__
        layer_cls = self.layer_config_class
        self.global_quant_config = _layer(layer_cls, self.global_quant_config)
        for fname in ("layer_type_quant_config", "layer_quant_config"):
            if isinstance(getattr(self, fname), dict):
                setattr(self, fname, {k: _layer(layer_cls, v) for k, v in getattr(self, fname).items()})
        if type(self.global_quant_config) is not layer_cls:
            raise TypeError(
                f"{owner}.global_quant_config: expected {layer_cls.__module__}.{layer_cls.__name__}, "
                f"got {self.global_quant_config!r}"
            )
        for fname in ("layer_type_quant_config", "layer_quant_config"):
            mapping = getattr(self, fname)
            if not isinstance(mapping, dict):
                raise TypeError(f"{owner}.{fname}: expected a dict, got {type(mapping).__name__}")
            for key, value in mapping.items():
                if type(value) is not layer_cls:
                    raise TypeError(f"{owner}.{fname}[{key!r}]: expected {layer_cls.__name__}, got {value!r}")
                if fname == "layer_type_quant_config" and not (isinstance(key, (str, type))):
                    raise TypeError(f"{owner}.{fname} key {key!r}: expected an nn.Module class or class name")
                if fname == "layer_quant_config" and not isinstance(key, str):
                    raise TypeError(f"{owner}.{fname} key {key!r}: expected a module name pattern (str)")
        type_names = [k if isinstance(k, str) else getattr(k, "__name__", k) for k in self.layer_type_quant_config]
        duplicates = sorted({n for n in type_names if type_names.count(n) > 1})
        if duplicates:
            raise ValueError(f"{owner}.layer_type_quant_config names the same layer type twice: {duplicates}")
        if not isinstance(self.exclude, list) or not all(isinstance(e, str) for e in self.exclude):
            raise TypeError(f"{owner}.exclude={self.exclude!r}: expected a list of module name patterns")
        self.pre_quant_opt_config = algo_list(owner, "pre_quant_opt_config", self.pre_quant_opt_config) or []
        self.algo_config = algo_list(owner, "algo_config", self.algo_config)
        self.quant_mode = coerce_enum(owner, "quant_mode", self.quant_mode, QuantizationMode, optional=False)
        check_type(owner, "keep_prequantized_layers", self.keep_prequantized_layers, bool, optional=False)
        refused = [
            f"{owner}.{name}={getattr(self, name)!r} is not supported; allowed: {allowed}"
            for name, (ok, allowed) in QUARK013_CONFIG_FIELDS.items()
            if not ok(getattr(self, name))
        ]
        if refused:
            raise ValueError("; ".join(refused))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Config:
        """The config ``data`` describes (``to_dict``'s output, a file's, or Quark's, whose
        ``quant_method`` key is ignored)."""
        if isinstance(data, dict):
            data = {k: v for k, v in data.items() if k != "quant_method"}
        return super().from_dict(data)


_NO_KV_CACHE = "this package quantizes no KV cache (keys / values inside transformers' caches)"

#: AMD Quark 0.13's Config fields beyond this package's: field -> (is the value honoured?, what is
#: allowed and why). Their defaults are, so that Quark's configs and files load.
QUARK013_CONFIG_FIELDS: dict[str, tuple[Any, str]] = {
    "kv_cache_quant_config": (lambda v: v == {}, "{} (" + _NO_KV_CACHE + "; quantize a layer's outputs with output_tensors)"),
    "kv_cache_group": (lambda v: v == [], "[] (" + _NO_KV_CACHE + ")"),
    "min_kv_scale": (lambda v: v == 0.0, "0.0 (" + _NO_KV_CACHE + ")"),
    "kv_cache_post_rope": (lambda v: v is False, "False (" + _NO_KV_CACHE + ")"),
    "shared_scale_groups": (lambda v: v == [], "[] (one scale shared by parallel layers is not supported)"),
    "softmax_quant_spec": (
        lambda v: v is None,
        "None (softmax outputs are not quantized here; Brevitas' QuantMultiheadAttention keeps its softmax float)",
    ),
    "sync_moe_expert_input_amax": (lambda v: v is False, "False (mixture-of-experts layers are not quantized as such here)"),
    # True (Quark's default) and False both hold: this package loads no pre-quantized layers to keep
}


def load_pre_optimization_config_from_file(file_path: str) -> AlgoConfig:
    """Quark's loader: the pre-quantization algorithm config a JSON file describes (by its ``name``)."""
    return algo_from_dict("pre_quant_opt_config", read_file(_json(file_path)))


def load_quant_algo_config_from_file(file_path: str) -> AlgoConfig:
    """Quark's loader: the algorithm config a JSON file describes (by its ``name``)."""
    return algo_from_dict("algo_config", read_file(_json(file_path)))


def _json(file_path: str) -> str:
    if not str(file_path).endswith((".json", ".yaml", ".yml")):
        raise ValueError(f"algorithm config file {file_path!r}: suffix must be .json, .yaml or .yml")
    return file_path


def _layer(layer_cls: type, value: Any) -> Any:
    """A layer config, built from its dict form (``to_dict``'s output) where it is one."""
    return layer_cls.from_dict(value) if isinstance(value, dict) else value


# Quark >= 0.10 names; plain aliases, no deprecation warnings.
QConfig = Config
QLayerConfig = QuantizationConfig
QTensorConfig = QuantizationSpec


# AMD Quark 0.13's DataTypeSpec helpers live in their own module (they build the QuantizationSpec
# above) and are reachable from here, where Quark defines them, loaded on first use (a plain import
# here would be circular).
if TYPE_CHECKING:  # for readers and type checkers; at run time __getattr__ below loads them
    from quark.torch.quantization.config.datatype_specs import (
        DATA_TYPE_SPECS,
        AmdFP4Spec,
        Bfloat16Spec,
        BFP16Spec,
        DataTypeSpec,
        Float16Spec,
        FP4PerGroupSpec,
        FP6E2M3PerGroupSpec,
        FP6E3M2PerGroupSpec,
        FP8E4M3PerChannelSpec,
        FP8E4M3PerGroupSpec,
        FP8E4M3PerTensorSpec,
        FP8E5M2PerChannelSpec,
        FP8E5M2PerGroupSpec,
        FP8E5M2PerTensorSpec,
        FP8E5M3PerTensorSpec,
        Int2PerGroupSpec,
        Int3PerChannelSpec,
        Int3PerGroupSpec,
        Int4PerChannelSpec,
        Int4PerGroupSpec,
        Int4PerTensorSpec,
        Int8PerChannelSpec,
        Int8PerGroupSpec,
        Int8PerTensorSpec,
        MX6Spec,
        MX9Spec,
        OCP_MXFP4DiffsSpec,
        OCP_MXFP4Spec,
        OCP_MXFP6E2M3Spec,
        OCP_MXFP6E3M2Spec,
        OCP_MXFP8E4M3Spec,
        OCP_MXFP8E5M2Spec,
        OCP_MXINT8Spec,
        OCP_MXSpec,
        ProgressiveSpec,
        ScaleQuantSpec,
        TwoStageSpec,
        Uint4PerChannelSpec,
        Uint4PerGroupSpec,
        Uint4PerTensorSpec,
        Uint8PerChannelSpec,
        Uint8PerGroupSpec,
        Uint8PerTensorSpec,
    )

__all__ += [
    "DATA_TYPE_SPECS",
    "AmdFP4Spec",
    "BFP16Spec",
    "Bfloat16Spec",
    "DataTypeSpec",
    "FP4PerGroupSpec",
    "FP6E2M3PerGroupSpec",
    "FP6E3M2PerGroupSpec",
    "FP8E4M3PerChannelSpec",
    "FP8E4M3PerGroupSpec",
    "FP8E4M3PerTensorSpec",
    "FP8E5M2PerChannelSpec",
    "FP8E5M2PerGroupSpec",
    "FP8E5M2PerTensorSpec",
    "FP8E5M3PerTensorSpec",
    "Float16Spec",
    "Int2PerGroupSpec",
    "Int3PerChannelSpec",
    "Int3PerGroupSpec",
    "Int4PerChannelSpec",
    "Int4PerGroupSpec",
    "Int4PerTensorSpec",
    "Int8PerChannelSpec",
    "Int8PerGroupSpec",
    "Int8PerTensorSpec",
    "MX6Spec",
    "MX9Spec",
    "OCP_MXFP4DiffsSpec",
    "OCP_MXFP4Spec",
    "OCP_MXFP6E2M3Spec",
    "OCP_MXFP6E3M2Spec",
    "OCP_MXFP8E4M3Spec",
    "OCP_MXFP8E5M2Spec",
    "OCP_MXINT8Spec",
    "OCP_MXSpec",
    "ProgressiveSpec",
    "ScaleQuantSpec",
    "TwoStageSpec",
    "Uint4PerChannelSpec",
    "Uint4PerGroupSpec",
    "Uint4PerTensorSpec",
    "Uint8PerChannelSpec",
    "Uint8PerGroupSpec",
    "Uint8PerTensorSpec",
]


def __getattr__(name: str) -> Any:
    from quark.torch.quantization.config import datatype_specs

    if name in datatype_specs.__all__:
        return getattr(datatype_specs, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
