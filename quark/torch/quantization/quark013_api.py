"""AMD Quark 0.13's public names, module by module, and what each is here.

Every public name of amd-quark 0.13's ``quark.torch``, ``quark.torch.quantization.config.config``,
``.config.type``, ``quark.torch.quantization.observer`` (and its ``observer``, ``tqt_observer``,
``lsq_observer`` modules) and ``quark.torch.export.api`` (recorded from the 0.13 wheel:
``tests/_reference/quark013_public_names.json``) is in :data:`API_NAMES`, with one of three statuses:

- **provided**: the name resolves here to an object of the same role;
- **refused**: the name exists; using it (or, for Quark's internals, reading it) raises
  :class:`QuarkFeatureRefused` / :class:`QuarkNameRefused` with the reason and what to use instead;
- **Quark's own import**: a name Quark's module imported for itself (``typing.Any``, ``torch``, ...),
  not Quark's API; reading it here says where to import it from, where this module does not happen
  to have it too.

``tests/integration/test_quark013_api.py`` checks the table against the recording and against the
modules (each provided name resolves, each refused one raises naming itself and its reason);
``docs/quark013.md`` is generated from it. Pure data and the refusal helpers: no Brevitas.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

from quark.common.errors import USAGE, QuarkBrevitasError

PROVIDED, REFUSED, IMPORTED = "provided", "refused", "Quark's own import"


class QuarkNameRefused(QuarkBrevitasError, ImportError):
    """A name of AMD Quark's API that this package does not have; the message says why and what to use.

    An ``ImportError`` (not an ``AttributeError``, which ``from module import name`` would replace by
    a bare "cannot import name"), so that the reason reaches the user at the import."""

    exit_status = USAGE


class QuarkFeatureRefused(QuarkBrevitasError, NotImplementedError):
    """A Quark function or class that this package names but does not run; the message says why and
    what to use instead."""

    exit_status = USAGE


def _rows(status: str, what: str, names: str) -> dict[str, tuple[str, str]]:
    return {name: (status, what) for name in names.split()}


def provided(names: str, what: str) -> dict[str, tuple[str, str]]:
    return _rows(PROVIDED, what, names)


def refused(names: str, why: str) -> dict[str, tuple[str, str]]:
    return _rows(REFUSED, why, names)


def imported(**origins: str) -> dict[str, tuple[str, str]]:
    """Quark's own imports: name -> the module it comes from."""
    return {
        name: (
            IMPORTED,
            f"Quark's module imports it from `{origin}` for its own use; not Quark's API: import it from `{origin}`",
        )
        for name, origin in origins.items()
    }


# -- reasons, shared by several names --------------------------------------------------------------

_KERNELS = (
    "Quark's own quantization kernels and their helpers (C++ / ROCm / CUDA emulation); here the numbers come from "
    "Brevitas' quantizers, configured by the spec (docs/config_reference.md)"
)
_INTERNAL = "an internal helper of Quark's implementation, not its documented API"
_LOGGER = "Quark's module logger; this package logs through `logging.getLogger(__name__)`; for a script's own: `quark.common.utils.log.ScreenLogger`"
_BASES = (
    "a base of Quark's config classes (`quark.common.config`); this package's configs have their own bases: subclass "
    "Config / QuantizationConfig / QuantizationSpec / AlgoConfig"
)
_LLM_EXPORT = (
    "part of Quark's Hugging Face / vLLM / diffusers export internals (packed QParamsLinear layers, weight conversions, "
    "device maps); use `export_safetensors` / `import_model_from_safetensors` (Quark's format, any nn.Module here)"
)
_EXPORTERS = "an internal class of Quark's exporters; call `export_onnx`, `export_safetensors`, `save_params` (this module)"
_NATIVE = (
    "Quark's native inference kernels (ROCm / CUDA fp8, MXFP4 and FlyDSL GEMMs) have no counterpart here: the quantized model "
    "runs in PyTorch with Brevitas' fake quantization; deploy with `export_onnx` (ONNX Runtime, AMD NPUs) or the "
    "extension's QONNX export (FINN)"
)
_GGUF = (
    "GGUF files serve llama.cpp's LLM runtime; export with `export_onnx` (ONNX Runtime, AMD NPUs), `export_safetensors`, "
    "or the extension's QONNX export (FINN)"
)
_SUBPACKAGE = "Quark's subpackage `quark.torch.{}` ({}) is not in this package; {}"

#: observer classes, by module: Quark 0.13 defines them in ``observer.observer``
_OBSERVERS = (
    "ObserverBase UniformScalingObserver PlaceholderObserver PerTensorMinMaxObserver PerTensorPowOf2MinMaxObserver "
    "PerTensorPowOf2MinMSEObserver PerChannelMinMaxObserver PerChannelPowOf2MinMaxObserver PerChannelPowOf2MinMSEObserver "
    "PerBlockMXObserver PerBlockMXBufferReuseObserver PerBlockMXDiffsObserver PerBlockBFPObserver PerGroupMinMaxObserver "
    "PerBlock2DMinMaxObserver PerTensorHistogramObserver PerTensorHistogramObserverPro PerTensorPercentileObserver "
    "PerTensorMSEObserver"
)
_OBSERVER_WHAT = (
    "the observer of that name (section 'Observers' below: what it computes here, or why a spec refuses it)"
)
_OBSERVER_SETS = (
    "OBSERVER_CLASSES OBSERVER_MAP PER_CHANNEL_OBSERVERS PER_GROUP_OBSERVERS PER_TENSOR_OBSERVERS"
)
_ENUMS = "Dtype QSchemeType RoundType ScaleType ZeroPointType TQTThresholdInitMeth QuantFlow DeviceType QuantizationMode"
_DATA_TYPES = (
    "Int8 UInt8 UInt16 Int16 Int32 UInt32 Int4 UInt4 Int3 Int2 UInt2 BFloat16 Float16 FP8_E5M2 FP8_E4M3 FP8_E5M3 "
    "FP6_E3M2 FP6_E2M3 FP4 MX MX6 MX9 BFP16"
)
_BASE_DATA_TYPES = (
    "BaseDtype BaseQSchemeType BaseRoundType BaseScaleType BaseZeroPointType BaseInt2 BaseUInt2 BaseInt3 BaseInt4 "
    "BaseUInt4 BaseInt8 BaseUInt8 BaseInt16 BaseUInt16 BaseInt32 BaseUInt32 BaseFloat16 BaseBFloat16 BaseBFP16 "
    "BaseFP8_E5M2 BaseFP8_E4M3 BaseFP8_E5M3 BaseFP6_E3M2 BaseFP6_E2M3 BaseFP4 BaseMX BaseMX6 BaseMX9"
)
_HELPERS = (
    "DataTypeSpec Uint4PerTensorSpec Uint4PerChannelSpec Uint4PerGroupSpec Int2PerGroupSpec Int3PerGroupSpec "
    "Int3PerChannelSpec Int4PerTensorSpec Int4PerChannelSpec Int4PerGroupSpec Uint8PerTensorSpec Uint8PerChannelSpec "
    "Uint8PerGroupSpec Int8PerTensorSpec Int8PerChannelSpec Int8PerGroupSpec FP8E4M3PerTensorSpec FP8E4M3PerChannelSpec "
    "FP8E4M3PerGroupSpec FP8E5M2PerTensorSpec FP8E5M2PerChannelSpec FP8E5M2PerGroupSpec FP8E5M3PerTensorSpec Float16Spec "
    "Bfloat16Spec OCP_MXSpec OCP_MXFP4Spec OCP_MXFP4DiffsSpec OCP_MXFP6E2M3Spec OCP_MXFP6E3M2Spec OCP_MXFP8E4M3Spec "
    "OCP_MXFP8E5M2Spec OCP_MXINT8Spec MX6Spec MX9Spec BFP16Spec FP4PerGroupSpec FP6E2M3PerGroupSpec FP6E3M2PerGroupSpec "
    "AmdFP4Spec"
)
_CONFIGS = (
    "Config QConfig QLayerConfig QTensorConfig TwoStageSpec ProgressiveSpec "
    "ScaleQuantSpec QATSpec TQTSpec AlgoConfig PreQuantOptConfig SmoothQuantConfig RotationConfig OnlineRotationConfig "
    "AutoSmoothQuantConfig AWQConfig GPTQConfig GPTAQConfig QronosConfig SVDQuantConfig AutoRoundConfig "
    "load_pre_optimization_config_from_file load_quant_algo_config_from_file"
)

#: module -> name -> (status, what): every public name of AMD Quark 0.13's module
API_NAMES: dict[str, dict[str, tuple[str, str]]] = {
    "quark.torch": {
        **provided(
            "ModelQuantizer",
            "Quark's entry point, on Brevitas: `ModelQuantizer(config, multi_device=False)`, "
            "`quantize_model(model, dataloader)`, `freeze(model)` (the extension's ModelQuantizer: one machinery)",
        ),
        **provided(
            "export_onnx",
            "QDQ ONNX written to `<output_dir>/quark_model.onnx`, executed in ONNX Runtime and compared with torch",
        ),
        **provided(
            "save_params load_params",
            "the quantized model's config and parameters (eager: `<model_type>.json` + "
            "`.safetensors`; fx_graph_mode: `<model_type>_quantized.pth`); reloaded bit-exactly",
        ),
        **provided(
            "export_safetensors import_model_from_safetensors",
            "Quark's format: `model.safetensors` (quantized "
            "weights, scales, zero points) and `config.json` with `quantization_config`; any nn.Module; reloaded bit-exactly",
        ),
        **provided("QuantFlow", "Quark's enum; `standard` is this package's flow"),
        **provided(
            "export quantization",
            "the subpackages (`quark.torch.export.api`, `quark.torch.quantization.config`, ...)",
        ),
        **refused(
            "LLMTemplate",
            "Quark's LLM templates pick schemes of its kernels for Hugging Face decoders by model type; "
            "build the Config with the DataTypeSpec helpers (`Int8PerTensorSpec(...).to_quantization_spec()`) or "
            "use the extension's presets",
        ),
        **refused(
            "ModelPruner",
            _SUBPACKAGE.format(
                "pruning", "LLM width pruning", "prune with `torch.nn.utils.prune` before quantizing"
            ),
        ),
        **refused("export_gguf", _GGUF),
        **refused("enable_native_inference disable_native_inference RuntimeOptions", _NATIVE),
        **refused(
            "algorithm",
            _SUBPACKAGE.format(
                "algorithm",
                "its algorithm implementations",
                "the algorithm configs of "
                "`quark.torch.quantization.config.config` run on Brevitas (docs/algorithms.md)",
            ),
        ),
        **refused(
            "integrations",
            _SUBPACKAGE.format(
                "integrations",
                "vLLM / Transformers integrations",
                "load the float model with transformers and quantize it with ModelQuantizer",
            ),
        ),
        **refused(
            "kernel", _SUBPACKAGE.format("kernel", "C++ / ROCm / CUDA kernels", "the numerics are Brevitas'")
        ),
        **refused(
            "pruning",
            _SUBPACKAGE.format(
                "pruning", "LLM width pruning", "prune with `torch.nn.utils.prune` before quantizing"
            ),
        ),
        **refused(
            "utils",
            _SUBPACKAGE.format(
                "utils", "its internal helpers", "its public helpers are not part of Quark's documented API"
            ),
        ),
    },
    "quark.torch.quantization.config.config": {
        **provided(
            _CONFIGS,
            "the config class or function of that name (section 'Config classes and functions' below)",
        ),
        **provided(_HELPERS, "the DataTypeSpec helper (section 'DataTypeSpec helpers' below)"),
        **provided(_ENUMS, "the enum of `config.type`, re-exported as in Quark"),
        **provided(
            "PerBlockMXDiffsObserver PerBlockMXObserver PerChannelMinMaxObserver PerGroupMinMaxObserver "
            "PerTensorHistogramObserver PerTensorHistogramObserverPro PerTensorMSEObserver PerTensorMinMaxObserver "
            "PerTensorPercentileObserver PlaceholderObserver ObserverBase",
            _OBSERVER_WHAT,
        ),
        **provided(
            _OBSERVER_SETS,
            "Quark's sets and name map of the observer classes (`quark.torch.quantization.observer`)",
        ),
        **provided(
            "PER_TENSOR_OBSERVER_METHOD_MAP SCALE_TYPE_MAP ROUND_METHOD_MAP ZERO_POINT_TYPE_MAP get_per_tensor_observer "
            "get_scale_type get_round_method get_zero_point_type",
            "the string -> observer / enum tables of the "
            "DataTypeSpec helpers, and Quark's lookups on them (an unknown string is a ValueError naming the allowed ones)",
        ),
        **provided(
            "ALL_DATA_TYPES MICROEXPONENT_DTYPES ONLY_DTYPE_CHANGE USING_NON_SCALED_QUANT QUARK_LAYER_TYPES",
            "Quark's dtype lists and layer-type map, with Quark's values",
        ),
        **provided(
            "QCT QLT QTT",
            "the type variables of Quark's config classes (bound to QConfig / QLayerConfig / QTensorConfig)",
        ),
        **provided("ScreenLogger", "`quark.common.utils.log.ScreenLogger`"),
        **refused("BaseAlgoConfig BaseConfigImpl BaseQConfig BaseQLayerConfig BaseQTensorConfig", _BASES),
        **refused(
            "DATA_TYPE_SPEC_DOCSTRING add_start_docstring dataclass_pretty_string",
            _INTERNAL + " (documentation and printing)",
        ),
        **refused("logger", _LOGGER),
        **imported(
            Any="typing",
            TYPE_CHECKING="typing",
            TypeVar="typing",
            abstractmethod="abc",
            annotations="__future__",
            cast="typing",
            dataclass="dataclasses",
            field="dataclasses",
            fields="dataclasses",
            json="json",
            nn="torch.nn",
        ),
    },
    "quark.torch.quantization.config.type": {
        **provided(
            _ENUMS,
            "the enum of that name, with Quark's members and values (and this package's extra ones: "
            "docs/config_reference.md)",
        ),
        **provided(
            _DATA_TYPES,
            "Quark's data-type class: `bitwidth`, `min_value`, `max_value`, `torch_packed_dtype` (Quark's values)",
        ),
        **provided(
            _BASE_DATA_TYPES,
            "`quark.common.data_type`'s base, as in Quark (`isinstance(Dtype.int8, BaseDtype)`)",
        ),
        **provided(
            "ALL_DATA_TYPES SUPPORT_DATA_TYPE TORCH_TO_DTYPE_MAP UNSUPPORTED_TYPES",
            "Quark's lists of dtypes and data-type classes",
        ),
        **imported(Enum="enum", auto="enum", torch="torch"),
    },
    "quark.torch.quantization.observer": {
        **provided(_OBSERVERS + " LSQObserver TQTObserver", _OBSERVER_WHAT),
        **provided(
            _OBSERVER_SETS + " PLACEHOLDER_OBSERVERS", "Quark's sets and name map of the observer classes"
        ),
        **provided(
            "observer tqt_observer lsq_observer", "the modules of Quark's layout (`observer.observer`, ...)"
        ),
    },
    "quark.torch.quantization.observer.observer": {
        **provided(_OBSERVERS, _OBSERVER_WHAT),
        **provided("Dtype QSchemeType ScaleType ZeroPointType", "the enum of `config.type`"),
        **provided(
            "BaseObserverBase",
            "`quark.common.data_type.BaseObserverBase`, the base of ObserverBase as in Quark",
        ),
        **provided("ScreenLogger", "`quark.common.utils.log.ScreenLogger`"),
        **refused(
            "calculate_qmin_qmax check_min_max_valid even_round fake_quantize_int get_dtype_params reshape_to_blocks "
            "safe_max safe_min t_exponent",
            _KERNELS,
        ),
        **refused("is_torch_greater_or_equal_2_5 log_errors quark", _INTERNAL),
        **refused("logger", _LOGGER),
        **imported(
            Any="typing",
            Counter="collections",
            HistogramObserver="torch.ao.quantization.observer",
            TYPE_CHECKING="typing",
            abstractmethod="abc",
            annotations="__future__",
            cast="typing",
            nn="torch.nn",
            os="os",
            torch="torch",
        ),
    },
    "quark.torch.quantization.observer.tqt_observer": {
        **provided(
            "TQTObserver",
            "selects TQT (`qat_spec=TQTSpec(...)`); in a quantized model, each trained threshold is a "
            "`TQTObserver` whose `_log_threshold` is the parameter Brevitas trains (log2 of the threshold)",
        ),
        **provided("TQTThresholdInitMeth", "the enum of `config.type`"),
        **provided("UniformScalingObserver", "the base of Quark's scale-computing observers"),
        **provided(
            "quantconfig", "`quark.torch.quantization.config.config`, under the name Quark imports it"
        ),
        **refused("get_num_bits", _KERNELS),
        **imported(Any="typing", TYPE_CHECKING="typing", annotations="__future__", np="numpy", torch="torch",
                   quantconfig="quark.torch.quantization.config.config"),
    },
    "quark.torch.quantization.observer.lsq_observer": {
        **provided(
            "LSQObserver",
            "LSQ's trained scale; in a quantized model, each trained scale is an `LSQObserver` whose "
            "`scale` is the parameter Brevitas trains",
        ),
        **provided("UniformScalingObserver", "the base of Quark's scale-computing observers"),
        **provided("ScreenLogger", "`quark.common.utils.log.ScreenLogger`"),
        **refused("calculate_qmin_qmax get_num_bits", _KERNELS),
        **refused("logger", _LOGGER),
        **imported(TYPE_CHECKING="typing", annotations="__future__", math="math", torch="torch"),
    },
    "quark.torch.export.api": {
        **provided(
            "export_onnx export_safetensors import_model_from_safetensors save_params",
            "as `quark.torch`'s (this is where Quark defines them)",
        ),
        **provided(
            "JsonExporterConfig",
            "Quark's json/safetensors export options (`weight_format`, `pack_method`), "
            "read by `ModelExporter`",
        ),
        **provided("QuantizationMode", "the enum of `config.type`"),
        **provided("ScreenLogger", "`quark.common.utils.log.ScreenLogger`"),
        **refused("export_gguf", _GGUF),
        **refused(
            "BaseExporter BaseImporter CustomSafetensorsExporter DiffusersSafetensorsExporter GgufExporter OnnxExporter "
            "QuarkSafetensorsExporter SafetensorsExporter SafetensorsImporter",
            _EXPORTERS,
        ),
        **refused(
            "ModelPostProcessor NativeModelInfoBuilder PretrainedConfig QParamsLinear QParamsLinearWithRotation "
            "QUARK_AWQ_WEIGHT_CONVERSIONS QUARK_WEIGHT_CONVERSIONS QuantConfigParser RotationProcessor "
            "clone_align_devices_hook convert_model_to_uint4_int4 create_auto_adjusted_device_map create_model_skeleton "
            "export_cache_state_dict_from_model export_hf_model export_onnx_model_optimization get_device_max_memory "
            "get_layer_quant_config import_model_with_cache_from_safetensors is_prequantized_linear restore_aux_files",
            _LLM_EXPORT,
        ),
        **refused(
            "NonScaledFakeQuantize ScaledFakeQuantize QuantMixin",
            "Quark's fake-quantization modules; here the "
            "quantized layers are Brevitas' (`brevitas.nn.QuantLinear`, ...) built by ModelQuantizer",
        ),
        **refused(
            "getattr_recursive setattr_recursive is_accelerate_available is_diffusers_available "
            "is_gguf_available_and_minimum_version is_safetensors_available is_transformers_available "
            "is_transformers_version_higher_or_equal",
            _INTERNAL,
        ),
        **provided("logger", "the module's logger (a `logging.Logger` of the standard library; Quark's is a ScreenLogger)"),
        **imported(
            ABC="abc",
            Any="typing",
            Path="pathlib",
            PreTrainedModel="transformers",
            TYPE_CHECKING="typing",
            abstractmethod="abc",
            annotations="__future__",
            chain="itertools",
            dataclasses="dataclasses",
            json="json",
            nn="torch.nn",
            re="re",
            save_file="safetensors.torch",
            shutil="shutil",
            tempfile="tempfile",
            torch="torch",
            tqdm="tqdm",
        ),
    },
}


def refuse(module: str, name: str) -> NoReturn:
    """For a module's ``__getattr__``: raise :class:`QuarkNameRefused` for a refused name or one of
    Quark's own imports of ``module`` (naming it and why), else the usual ``AttributeError``."""
    status, what = API_NAMES.get(module, {}).get(name, (PROVIDED, ""))
    if status != PROVIDED:
        raise QuarkNameRefused(f"{module}.{name}: {what}", name=name)
    raise AttributeError(f"module {module!r} has no attribute {name!r}")


def refused_function(module: str, name: str) -> Callable[..., NoReturn]:
    """A function of Quark's that exists here by name and raises :class:`QuarkFeatureRefused` when called."""
    why = API_NAMES[module][name][1]

    def function(*args: Any, **kwargs: Any) -> NoReturn:
        raise QuarkFeatureRefused(f"{name}: {why}")

    function.__name__ = function.__qualname__ = name
    function.__module__ = module
    function.__doc__ = f"Refused: {why}."
    return function


class _RefusedClassType(type):
    def __getattr__(cls, attribute: str) -> NoReturn:
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        raise QuarkFeatureRefused(f"{cls.__name__}.{attribute}: {cls.refusal}")

    def __call__(cls, *args: Any, **kwargs: Any) -> NoReturn:
        raise QuarkFeatureRefused(f"{cls.__name__}(...): {cls.refusal}")


def refused_class(module: str, name: str) -> type:
    """A class of Quark's that exists here by name: building it or reading its attributes
    (``LLMTemplate.get(...)``) raises :class:`QuarkFeatureRefused`."""
    why = API_NAMES[module][name][1]
    return _RefusedClassType(name, (), {"refusal": why, "__module__": module, "__doc__": f"Refused: {why}."})
