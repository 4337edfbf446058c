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
from typing import Any, ClassVar, TypeVar

from quark.common.utils.log import ScreenLogger
from quark.torch.quantization.config import datatype_specs as _datatype_specs
from quark.torch.quantization.config import tables as _tables
from quark.torch.quantization.config._fields import (
    CONFIG_VERSION,
    FileConfig,
    Serialisable,
    check_type,
    coerce_enum,
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
from quark.torch.quantization.config.algorithms.fields import check_fields
from quark.torch.quantization.config.datatype_specs import *  # Quark defines its helpers here
from quark.torch.quantization.config.spec import (
    ROLES,
    A2QSpec,
    QATSpec,
    QuantizationSpec,
    TQTSpec,
)
from quark.torch.quantization.config.tables import *  # Quark's string tables and lookups live here in Quark
from quark.torch.quantization.config.type import (
    ALL_DATA_TYPES,
    DeviceType,
    Dtype,
    QSchemeType,
    QuantFlow,
    QuantizationMode,
    RoundType,
    ScaleType,
    TQTThresholdInitMeth,
    ZeroPointType,
)
from quark.torch.quantization.observer import (
    OBSERVER_CLASSES,
    OBSERVER_MAP,
    PER_CHANNEL_OBSERVERS,
    PER_GROUP_OBSERVERS,
    PER_TENSOR_OBSERVERS,
    ObserverBase,
    PerBlockMXDiffsObserver,
    PerBlockMXObserver,
    PerChannelMinMaxObserver,
    PerGroupMinMaxObserver,
    PerTensorHistogramObserver,
    PerTensorHistogramObserverPro,
    PerTensorMinMaxObserver,
    PerTensorMSEObserver,
    PerTensorPercentileObserver,
    PlaceholderObserver,
)
from quark.torch.quantization.quark013_api import refuse

__all__ = [
    "A2QSpec",
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
        check_fields(self, QUARK013_CONFIG_FIELDS, "is not supported")

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


# the tensor spec lives in config/spec.py (under Quark 0.13's helpers); it is Quark's
# quark.torch.quantization.config.config.QuantizationSpec, so its messages and documentation say so
for _spec_class in (QATSpec, TQTSpec, A2QSpec, QuantizationSpec):
    _spec_class.__module__ = __name__
del _spec_class

# Quark >= 0.10 names; plain aliases, no deprecation warnings.
QConfig = Config
QLayerConfig = QuantizationConfig
QTensorConfig = QuantizationSpec


#: the type variables of Quark's config classes
QCT = TypeVar("QCT", bound=Config)
QLT = TypeVar("QLT", bound=QuantizationConfig)
QTT = TypeVar("QTT", bound=QuantizationSpec)

# AMD Quark 0.13's DataTypeSpec helpers (config/datatype_specs.py, built on config/spec.py), where Quark
# defines them; datatype_specs' own tables stay there
__all__ += _datatype_specs.__all__
__all__.remove("CONVERTERS")
__all__.remove("OCP_MX_HELPERS")
del CONVERTERS, OCP_MX_HELPERS  # noqa: F821  (imported by the * above)

# the rest of AMD Quark 0.13's public names of this module: its enums, observers, tables and lookups
# (docs/quark013.md, "quark.torch.quantization.config.config"); Quark's internals are refused by name
__all__ += _tables.__all__
__all__ += [
    "ALL_DATA_TYPES",
    "OBSERVER_CLASSES",
    "OBSERVER_MAP",
    "PER_CHANNEL_OBSERVERS",
    "PER_GROUP_OBSERVERS",
    "PER_TENSOR_OBSERVERS",
    "QCT",
    "QLT",
    "QTT",
    "DeviceType",
    "Dtype",
    "ObserverBase",
    "PerBlockMXDiffsObserver",
    "PerBlockMXObserver",
    "PerChannelMinMaxObserver",
    "PerGroupMinMaxObserver",
    "PerTensorHistogramObserver",
    "PerTensorHistogramObserverPro",
    "PerTensorMSEObserver",
    "PerTensorMinMaxObserver",
    "PerTensorPercentileObserver",
    "PlaceholderObserver",
    "QSchemeType",
    "QuantFlow",
    "QuantizationMode",
    "RoundType",
    "ScaleType",
    "ScreenLogger",
    "TQTThresholdInitMeth",
    "ZeroPointType",
]


def __getattr__(name: str) -> Any:
    """Quark's names of this module that are its internals: refused, naming the reason."""
    refuse(__name__, name)
