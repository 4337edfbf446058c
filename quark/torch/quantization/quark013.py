"""AMD Quark 0.13's config API, name by name, and what this package does with each: the table of
``docs/quark013.md`` (``python -m quark.torch.quantization.quark013 > docs/quark013.md``;
``tests/config/test_quark013_doc.py`` keeps the file in sync and checks that every name is here).

Hand-written rows say what a name is; the rows of the ``DataTypeSpec`` helpers, the observers and
the algorithm configs are computed from the code itself (each helper's spec is normalised for a
weight and for an activation; an observer's or algorithm's refusal is its own ``refused`` text), so
the table cannot drift from the behaviour. Pure config: no Brevitas.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import MISSING, dataclass, fields
from typing import Any

from quark.torch.quantization.config.algorithms import AWQConfig, GPTQConfig, SmoothQuantConfig
from quark.torch.quantization.config.algorithms.quark013 import QUARK013_ALGORITHMS
from quark.torch.quantization.config.config import QUARK013_CONFIG_FIELDS
from quark.torch.quantization.config.datatype_specs import DATA_TYPE_SPECS
from quark.torch.quantization.observer import OBSERVERS
from quark.torch.quantization.quark013_api import API_NAMES, IMPORTED
from quark.torch.quantization.tensor_quant import normalise

HONOURED, MAPPED, BETTER, REFUSED = "honoured", "mapped", "better than Quark 0.13", "refused"


@dataclass(frozen=True)
class Row:
    name: str
    status: str
    what: str


#: the public names of AMD Quark 0.13's ``quark.torch.quantization.config.config`` beyond the helpers
#: (every one importable from this package's ``config.config``, and in the table)
QUARK013_NAMES = (
    "QConfig",
    "QLayerConfig",
    "QTensorConfig",
    "Config",
    "QuantizationConfig",
    "QuantizationSpec",
    "DataTypeSpec",
    "TwoStageSpec",
    "ProgressiveSpec",
    "ScaleQuantSpec",
    "QATSpec",
    "TQTSpec",
    "load_pre_optimization_config_from_file",
    "load_quant_algo_config_from_file",
    "PreQuantOptConfig",
    "AlgoConfig",
    "SmoothQuantConfig",
    "RotationConfig",
    "OnlineRotationConfig",
    "AutoSmoothQuantConfig",
    "AWQConfig",
    "GPTQConfig",
    "GPTAQConfig",
    "QronosConfig",
    "SVDQuantConfig",
    "AutoRoundConfig",
)

_CLASSES, _SPEC_FIELDS = "Config classes and functions", "QTensorConfig fields, dtypes and scale types"

#: the hand-written rows (section, name, status, what): Quark 0.13's config classes and functions, and
#: the spec fields, dtypes and scale types beyond this package's earlier ones
_HAND_WRITTEN: tuple[tuple[str, str, str, str], ...] = (
    (_CLASSES, "QConfig / Config", HONOURED, "the model's config; Quark 0.13's fields below"),
    (_CLASSES, "QLayerConfig / QuantizationConfig", HONOURED, "per-layer specs; a list of specs (two-stage) is refused by role"),
    (_CLASSES, "QTensorConfig / QuantizationSpec", HONOURED, "one tensor's spec; Quark 0.13's fields below"),
    (_CLASSES, "DataTypeSpec", HONOURED, "base of the helpers: `to_quantization_spec()` builds Quark's QTensorConfig"),
    (_CLASSES, "TwoStageSpec / ProgressiveSpec / ScaleQuantSpec", REFUSED, "build Quark's list of two specs; a layer config refuses the list by role (one stage per tensor here)"),
    (_CLASSES, "QATSpec / TQTSpec", HONOURED, "TQT: trained power-of-two thresholds (`_3SD`, `_LL_J` / `_KL_J`)"),
    (_CLASSES, "PreQuantOptConfig / AlgoConfig", HONOURED, "bases of the algorithm configs; a subclass overriding `apply` runs in its phase"),
    (_CLASSES, "load_pre_optimization_config_from_file / load_quant_algo_config_from_file", HONOURED, "the config a JSON / YAML file names"),
    (_SPEC_FIELDS, "scale_format", HONOURED, "`'e8m0'`: OCP MX (with PerBlockMXObserver and per_group 32); `'float32'`: per-group minifloats' float scales; `'e5m3'`, `'e4m3'` refused"),
    (_SPEC_FIELDS, "scale_calculation_mode", HONOURED, "OCP MX's shared exponent: `'even'` (Quark's default: the block maximum rounded to the element's precision first), `'floor'` (the OCP spec; None means it here), `'ceil'`; MX6 / MX9 / BFP16 take None or `'even'` (Quark's kernels do not read it); other formats None"),
    (_SPEC_FIELDS, "is_scale_quant", REFUSED, "True is refused (scale quantization, ScaleQuantSpec's second stage); False accepted"),
    (_SPEC_FIELDS, "enable_buffer_reuse / max_input_numel", HONOURED, "accepted: a memory option of Quark's MX observer and its bound; no effect on the numbers (this package's MX keeps no observer buffers)"),
    (_SPEC_FIELDS, "block_size (and QSchemeType.per_block)", REFUSED, "2-D weight blocks have no quantizer here; use per_group"),
    (_SPEC_FIELDS, "ScaleType.float on mx / mx6 / mx9 / bfp16 and OCP MX", HONOURED, "the e8m0 shared scale is a power of two: the same quantizer as ScaleType.pof2, bit for bit"),
    (_SPEC_FIELDS, "ScaleType.float8_e8m0fnu", HONOURED, "on block formats (OCP MX, MX6 / MX9, BFP16), as pof2; refused elsewhere (use pof2)"),
    (_SPEC_FIELDS, "ScaleType.float8_e5m3", REFUSED, "AMD FP4's unsigned e5m3 group scales have no quantizer here"),
    (_SPEC_FIELDS, "Dtype.bfp16", HONOURED, "8-element blocks, one 8-bit exponent, 8-bit two's complement elements (AMD's BFP16)"),
    (_SPEC_FIELDS, "Dtype.fp8_e5m3", REFUSED, "an unsigned float; Quark names it for AmdFP4Spec's scales; no signed tensor format"),
)
CLASSES: tuple[Row, ...] = tuple(Row(*row) for section, *row in _HAND_WRITTEN if section == _CLASSES)
SPEC_FIELDS: tuple[Row, ...] = tuple(Row(*row) for section, *row in _HAND_WRITTEN if section == _SPEC_FIELDS)

#: what Quark's algorithm configs run on here (the refused ones say why themselves)
ALGORITHMS_ON: dict[str, str] = {
    "SmoothQuantConfig": "this package's SmoothQuant on the float model (scaling pairs found or from `scaling_layers`, kept only where they preserve the function)",
    "AWQConfig": "this package's AWQ (scale search and clipping) on Brevitas quantizers",
    "GPTQConfig": "Brevitas' GPTQ, block by block, with Quark's damp_percent, desc_act, static_groups, block_size, scope",
    "RotationConfig": "Brevitas' online Hadamard rotation (LayerwiseActivationRotation) in front of the layers online R1 (`scaling_layers`' target_modules) and R4 (`<model_decoder_layers>.<i>.<mlp>.down_proj`) name",
    "QronosConfig": "Brevitas' Qronos, block by block, with Quark's desc_act, alpha, beta, block_size, scope",
}


def _helper_kwargs(helper: type) -> dict:
    given = {"ch_axis": 1, "group_size": 32, "block_size": 16}
    return {f.name: given[f.name] for f in fields(helper) if f.name in given and f.default is MISSING and f.default_factory is MISSING}


def _outcome(spec, role: str) -> str:
    try:
        return normalise(spec, role, "x").describe()
    except (ValueError, TypeError) as error:
        return "refused: " + str(error).removeprefix("x: ")


#: helpers whose Quark 0.13 conversion fails and this one's does not (docs: what it does instead)
BETTER_HELPERS: dict[str, str] = {
    "MX6Spec": "block_size is passed on as the block (16); Quark 0.13 drops it and refuses its own spec",
    "MX9Spec": "block_size is passed on as the block (16); Quark 0.13 drops it and refuses its own spec",
    "Uint4PerChannelSpec": "is_dynamic=None (its default) is static; Quark 0.13 refuses its own spec",
    "OCP_MXSpec": "to_quantization_spec() says which helper to use; Quark 0.13 fails inside vars()",
}


def helper_rows() -> list[Row]:
    rows = []
    for name, helper in DATA_TYPE_SPECS.items():
        if name == "OCP_MXSpec":
            rows.append(Row(name, BETTER, BETTER_HELPERS[name]))
            continue
        spec = helper(**_helper_kwargs(helper)).to_quantization_spec()
        weight, act = _outcome(spec, "weight"), _outcome(spec, "input_tensors")
        refused = weight.startswith("refused") and act.startswith("refused")
        status = REFUSED if refused else (BETTER if name in BETTER_HELPERS else HONOURED)
        what = weight if refused else f"weight: {weight}; activations: {act}"
        if name in BETTER_HELPERS:
            what = f"{BETTER_HELPERS[name]}; {what}"
        rows.append(Row(name, status, what))
    return rows


#: Quark 0.13's observers (earlier ones included), in its order
QUARK_OBSERVERS = (
    "PlaceholderObserver",
    "PerTensorMinMaxObserver",
    "PerChannelMinMaxObserver",
    "PerGroupMinMaxObserver",
    "PerTensorPercentileObserver",
    "PerTensorMSEObserver",
    "PerTensorHistogramObserver",
    "PerTensorHistogramObserverPro",
    "PerTensorPowOf2MinMaxObserver",
    "PerTensorPowOf2MinMSEObserver",
    "PerChannelPowOf2MinMaxObserver",
    "PerChannelPowOf2MinMSEObserver",
    "PerBlockMXObserver",
    "PerBlockMXDiffsObserver",
    "PerBlockBFPObserver",
    "PerBlock2DMinMaxObserver",
    "LSQObserver",
    "TQTObserver",
)

#: what each observer does here (refusals come from the observer class)
OBSERVERS_DO: dict[str, str] = {
    "PlaceholderObserver": "bfloat16 / float16 casts",
    "PerTensorMinMaxObserver": "min / max over all calibration data",
    "PerChannelMinMaxObserver": "min / max per channel (weights)",
    "PerGroupMinMaxObserver": "min / max per group (weights)",
    "PerTensorPercentileObserver": "the percentile of a histogram",
    "PerTensorMSEObserver": "the range of least quantization MSE on the spec's grid",
    "PerTensorHistogramObserver": "the range of least L2 error of a histogram (exhaustive search)",
    "PerTensorHistogramObserverPro": "torch's HistogramObserver (256 bins, its non-linear search), as Quark wraps it; activations",
    "PerTensorPowOf2MinMaxObserver": "power-of-two scale of each batch's min / max, the most common one kept (as Quark); weights: min / max with a power-of-two scale",
    "PerTensorPowOf2MinMSEObserver": "each batch's best of five powers of two by squared error, the most common kept (as Quark); weights and biases (symmetric): the same search on the tensor, at every forward",
    "PerChannelPowOf2MinMaxObserver": "per-channel min / max with power-of-two scales (weights)",
    "PerBlockMXObserver": "OCP MX blocks (with scale_format='e8m0'), or per-group minifloat abs-max scales",
    "PerBlockBFPObserver": "MX6 / MX9 / BFP16 blocks",
    "LSQObserver": "LSQ: a trained scale from 2 mean|x| / sqrt(qmax) (calibration data; weights: the weight), gradient scaled by 1 / sqrt(numel qmax), used as |s|; per tensor or channel, zero point 0",
    "TQTObserver": "selects TQT with qat_spec=TQTSpec (threshold from `_3SD` / `_LL_J`, or abs-max without one)",
}


def _class_row(cls: Any, status: str, what: Callable[[Any], str]) -> Row:
    """A class's row: refused with its own reason (its ``refused``), else ``status`` and ``what(cls)``."""
    if cls.refused:
        return Row(cls.__name__, REFUSED, cls.refused)
    return Row(cls.__name__, status, what(cls))


def _observer_does(cls: Any) -> str:
    return OBSERVERS_DO[cls.__name__] + (f"; refused for weights: {cls.not_for_weights}" if cls.not_for_weights else "")


def observer_rows() -> list[Row]:
    return [_class_row(OBSERVERS[name], HONOURED, _observer_does) for name in QUARK_OBSERVERS]


def _algorithm_runs(cls: Any) -> str:
    what = f"runs as {ALGORITHMS_ON[cls.__name__]}"
    refusals = [f"`{field}` allows {allowed}" for field, (_, allowed) in cls.unsupported_values.items()]
    if refusals:
        what += "; other values of these fields are refused: " + "; ".join(refusals)
    return what


def algorithm_rows() -> list[Row]:
    rows = [_class_row(cls, MAPPED, _algorithm_runs) for cls in (SmoothQuantConfig, AWQConfig, GPTQConfig, *QUARK013_ALGORITHMS)]
    rows.append(Row("OnlineRotationConfig", HONOURED, "RotationConfig's online_config: shared_parallel accepted (one Hadamard matrix either way); online_rotation_layers refused"))
    return rows


def config_field_rows() -> list[Row]:
    return [
        Row(f"QConfig.{name}", REFUSED, f"its default is accepted (Quark's files load), other values refused; allowed: {allowed}")
        for name, (_, allowed) in QUARK013_CONFIG_FIELDS.items()
    ] + [
        Row("QConfig.keep_prequantized_layers", HONOURED, "True or False: this package loads no pre-quantized layers to keep")
    ]


def module_rows(module: str) -> list[Row]:
    """The rows of one of Quark 0.13's modules (:data:`API_NAMES`): names of the same status and text
    share a row; Quark's own imports (``typing.Any``, ``torch``, ...) share one."""
    groups: dict[tuple[str, str], list[str]] = {}
    imports = []
    for name, (status, what) in API_NAMES[module].items():
        if status == IMPORTED:
            imports.append(f"{name} ({what.split('`')[1]})")
        else:
            groups.setdefault((status, what), []).append(name)
    rows = [Row(" / ".join(names), status, what) for (status, what), names in groups.items()]
    if imports:
        what = (
            "names Quark's module imports for its own use (from the module in brackets), not Quark's API: "
            + ", ".join(imports)
            + "; reading one here, where this module does not have it too, says where to import it from"
        )
        rows.append(Row("(Quark's own imports)", IMPORTED, what))
    return rows


SECTIONS = {
    **{f"Module `{module}`": (lambda module=module: module_rows(module)) for module in API_NAMES},
    _CLASSES: lambda: list(CLASSES),
    "QConfig fields": config_field_rows,
    _SPEC_FIELDS: lambda: list(SPEC_FIELDS),
    "DataTypeSpec helpers (their spec, normalised for a weight and an activation)": helper_rows,
    "Observers": observer_rows,
    "Algorithm configs": algorithm_rows,
}


def rows() -> dict[str, list[Row]]:
    return {title: make() for title, make in SECTIONS.items()}


def markdown() -> str:
    out = []
    for title, section in rows().items():
        out += [f"## {title}", "", "| Quark 0.13 name | status | what this package does |", "|---|---|---|"]
        out += [f"| `{r.name}` | {r.status} | {r.what.replace('|', chr(92) + '|')} |" for r in section]
        out.append("")
    return "\n".join(out).rstrip("\n")


DOC_HEADER = """# AMD Quark 0.13 names

Generated by `python -m quark.torch.quantization.quark013` from the tables and the behaviour of the
code (`quark/torch/quantization/quark013.py`, `quark013_api.py`); `tests/config/test_quark013_doc.py`
keeps this file in sync.

The first sections take AMD Quark 0.13's modules one by one: every public name of `quark.torch`,
`quark.torch.quantization.config.config`, `.config.type`, `quark.torch.quantization.observer` (and its
`observer`, `tqt_observer`, `lsq_observer` modules) and `quark.torch.export.api`, recorded from the
amd-quark 0.13 wheel (`tests/_reference/quark013_public_names.json`;
`tests/backend/api/test_quark013_api.py` checks that each resolves here or refuses as the table says):

- **provided**: the name resolves here to an object of the same role;
- **refused**: the name exists; using it (for Quark's internals: importing it) raises an error naming it,
  the reason and what to use instead (`QuarkFeatureRefused`, `QuarkNameRefused`);
- **Quark's own import**: a name Quark's module imported for itself, not Quark's API.

The sections after them take the config API's classes, fields, helpers, observers and algorithm
configs, and what this package does with each:

- **honoured**: runs as Quark means it (numbers as in `config_reference.md`);
- **mapped**: runs on the Brevitas algorithm named, with the fields named; values no backend here
  runs are refused by field when the config is used (`ModelQuantizer(config)` or `apply`);
- **better than Quark 0.13**: Quark 0.13's own conversion fails; this one does what the name says;
- **refused**: an error when the config is used (a spec: when it is applied to a layer), naming the
  field, the value, the reason and what to use instead. The names exist, so Quark's scripts and
  files load up to that point.

The helpers are probed with `ch_axis=1`, `group_size=32`, `block_size=16`; "weight" and
"activations" are what their spec normalises to for a weight and for a layer input. Quark writes
per-group specs for weights; activations are quantized per tensor here (or in blocks).
"""

if __name__ == "__main__":
    print(DOC_HEADER + "\n" + markdown())
