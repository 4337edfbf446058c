"""Config files on the command line: reading one with errors in YAML terms, and writing a starter.

Reading (:func:`load_config`): before the config classes see the file, the data is walked against
them, so that a mistake is named by its YAML path (``global_quant_config.weight.observer``), with
the value, what is allowed in the file's spelling (``per_tensor``, not ``QSchemeType.per_tensor``)
and the closest known field or value. What the walk does not check (the classes' own rules) is
found by building each part alone and reported at the deepest part that fails, in the same terms.

Writing (:func:`starter`): ``quark-brevitas init`` renders a preset as a commented, minimal YAML
(fields at their defaults left out, enums and classes by name, no nulls) that loads back to the same
config.
"""

from __future__ import annotations

import difflib
import re
import sys
from collections.abc import Callable
from dataclasses import MISSING, dataclass, fields, is_dataclass
from enum import Enum
from typing import Any

from quark.torch.extensions.brevitas.cli.errors import UsageError, one_line
from quark.torch.extensions.brevitas.config import Config as ExtConfig
from quark.torch.quantization.config import type as types
from quark.torch.quantization.config._fields import coerce_enum, read_file
from quark.torch.quantization.config.algorithms import ALGO_CONFIGS
from quark.torch.quantization.config.config import Config as MainConfig
from quark.torch.quantization.config.spec import QAT_SPECS
from quark.torch.quantization.observer import OBSERVERS

#: config flavour -> its Config class
FLAVOURS: dict[str, type] = {"quark": MainConfig, "brevitas": ExtConfig}
#: fields holding lists of algorithm configs (``name`` picks the class in ALGO_CONFIGS)
ALGORITHM_FIELDS = ("algo_config", "pre_quant_opt_config")
#: names people write for a field -> the field (offered when difflib finds nothing close)
ALIASES = {
    "bits": ("bit_width", "dtype"),
    "bitwidth": ("bit_width", "dtype"),
    "observer": ("observer_cls",),
    "granularity": ("qscheme",),
    "scheme": ("qscheme",),
    "rounding": ("round_method",),
    "round": ("round_method",),
    "axis": ("ch_axis",),
    "dynamic": ("is_dynamic",),
    "activation": ("input_tensors", "output_tensors"),
    "input": ("input_tensors",),
    "output": ("output_tensors",),
    "weights": ("weight",),
    "mode": ("quant_mode", "backend"),
    "device": ("target_device",),
}


def load_config(path: str, flavour: str = "auto") -> Any:
    """A config of either flavour from a YAML or JSON file (``flavour`` auto: the extension's when
    the file has a ``backend`` key or its specs a ``bit_width``, else the main API's)."""
    import os

    if not os.path.isfile(path):
        raise UsageError(f"--config {path}: file not found")
    try:
        data = read_file(path)
    except (ValueError, TypeError, OSError) as error:
        raise UsageError(f"--config {path}: {one_line(error)}") from error
    cls = FLAVOURS[flavour_of(data) if flavour == "auto" else flavour]
    return build(cls, data, f"--config {path}")


def flavour_of(data: dict[str, Any]) -> str:
    """The extension's when the file has its ``backend`` key, or has none of the main API's keys and
    its specs use ``bit_width``; else the main API's."""
    if "backend" in data:
        return "brevitas"
    if data.keys() & {"quant_mode", "layer_quant_config", "layer_type_quant_config", "exclude"}:
        return "quark"
    layer = data.get("global_quant_config")
    specs = [v for v in layer.values() if isinstance(v, dict)] if isinstance(layer, dict) else []
    return "brevitas" if any("bit_width" in spec for spec in specs) else "quark"


def build(cls: type, data: Any, where: str) -> Any:
    """``cls.from_dict(data)``; a mistake is a ``UsageError`` naming its YAML path."""
    problems: list[str] = []
    _walk(cls, data, "", problems)
    if problems:
        more = f" (and {len(problems) - 1} more: {'; '.join(problems[1:3])})" if len(problems) > 1 else ""
        raise UsageError(f"{where}: {problems[0]}{more}")
    try:
        return cls.from_dict(data)
    except (ValueError, TypeError, KeyError) as error:
        path, failing_cls, message = _deepest_failure(cls, data, "", error)
        raise UsageError(f"{where}: {_in_yaml_terms(message, failing_cls, path)}") from error


# -- the walk ---------------------------------------------------------------------------------------


def yaml_path(parent: str, key: Any) -> str:
    key = str(key)
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
        return f"{parent}.{key}" if parent else key
    return f"{parent}[{key!r}]"


def _names(enum_cls: type[Enum]) -> list[str]:
    return list(enum_cls.__members__)


def closest(word: str, candidates: list[str]) -> str | None:
    """The candidate nearest ``word`` (spelling, case, ``-``/``_``/spaces ignored), or an alias."""

    def norm(s: str) -> str:
        return re.sub(r"[\s_\-]+", "", str(s).lower())

    by_norm = {norm(c): c for c in candidates}
    if norm(word) in by_norm:
        return by_norm[norm(word)]
    match = difflib.get_close_matches(norm(word), list(by_norm), n=1, cutoff=0.6)
    if match:
        return by_norm[match[0]]
    for alias in ALIASES.get(norm(word), ()):
        if alias in candidates:
            return alias
    containing = [c for c in candidates if norm(word) in norm(c) or (len(norm(c)) > 3 and norm(c) in norm(word))]
    return containing[0] if len(containing) == 1 else None


def _suggest(word: str, candidates: list[str]) -> str:
    best = closest(word, candidates)
    return f"; did you mean {best}?" if best else ""


def _element_type(owner: type, declared: Any) -> type | None:
    """The config class or enum a field holds (alone, in a list or as dict values), from its
    annotation (a string under ``from __future__ import annotations``)."""
    namespace = vars(sys.modules[owner.__module__])
    for token in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", str(declared)):
        candidate = namespace.get(token, getattr(types, token, None))
        if isinstance(candidate, type) and (is_dataclass(candidate) or issubclass(candidate, Enum)):
            return candidate
    return None


def _container(declared: Any) -> str:
    text = str(declared).replace("typing.", "")
    return "dict" if text.startswith("dict[") else "list" if text.startswith("list[") else "one"


def _spec_classes(owner: type, element: type | None) -> tuple[type, ...]:
    return getattr(owner, "spec_classes", None) or ((element,) if element else ())


def _walk(cls: type, data: Any, path: str, problems: list[str]) -> None:
    """Check ``data`` against ``cls``'s fields: unknown keys, enum values, registered names; the
    rest is the classes' own checks (see :func:`_deepest_failure`)."""
    if not is_dataclass(cls):
        return
    known = [f.name for f in fields(cls)]
    if not isinstance(data, dict):
        problems.append(f"{path or 'the file'}: expected a mapping of {', '.join(known)}; got {_shown(data)}")
        return
    for key in data:
        if key not in known:
            problems.append(f"{yaml_path(path, key)}: unknown field{_suggest(key, known)} (fields here: {', '.join(known)})")
    declared = {f.name: f.type for f in fields(cls)}
    for key, value in data.items():
        if key not in declared or value is None:
            continue
        here = yaml_path(path, key)
        element = _element_type(cls, declared[key])
        if key == "observer_cls":
            if isinstance(value, str) and value not in OBSERVERS:
                problems.append(f"{here}: {value!r} is not an observer{_suggest(value, sorted(OBSERVERS))} (allowed: {', '.join(sorted(OBSERVERS))})")
        elif key in ALGORITHM_FIELDS:
            items = value if isinstance(value, list) else [value]
            for i, item in enumerate(items):
                _walk_named(item, f"{here}[{i}]" if isinstance(value, list) else here, ALGO_CONFIGS, problems)
        elif key == "qat_spec":
            _walk_named(value, here, QAT_SPECS, problems)
        elif key in getattr(cls, "roles", ()):
            if isinstance(value, dict):
                candidates = _spec_classes(cls, element)
                spec_cls = cls._spec_class_of(value) if hasattr(cls, "_spec_class_of") else candidates[0]
                unknown = [k for k in value if k not in {f.name for c in candidates for f in fields(c)}]
                pool = sorted({f.name for c in candidates for f in fields(c)})
                for k in unknown:
                    problems.append(f"{yaml_path(here, k)}: unknown field{_suggest(k, pool)} (spec fields: {', '.join(pool)})")
                if not unknown:
                    _walk(spec_cls, value, here, problems)
            else:
                problems.append(f"{here}: expected a spec (a mapping with dtype, ...); got {_shown(value)}")
        elif element is not None and issubclass(element, Enum):
            _check_enum(here, value, element, problems)
        elif element is not None and _container(declared[key]) == "dict":
            if not isinstance(value, dict):
                problems.append(f"{here}: expected a mapping of names to configs; got {_shown(value)}")
                continue
            for name, item in value.items():
                _walk(element, item, yaml_path(here, name), problems)
        elif element is not None and _container(declared[key]) == "one":
            _walk(element, value, here, problems)


def _walk_named(value: Any, here: str, registry: dict[str, type], problems: list[str]) -> None:
    if not isinstance(value, dict):
        problems.append(f"{here}: expected a mapping with a name ({', '.join(sorted(registry))}); got {_shown(value)}")
        return
    name = value.get("name")
    if name not in registry:
        problems.append(
            f"{here}.name: {name!r} is not known{_suggest(str(name), sorted(registry))} (allowed: {', '.join(sorted(registry))})"
        )
        return
    cls = registry[name]
    data = value if "name" in {f.name for f in fields(cls)} else {k: v for k, v in value.items() if k != "name"}
    _walk(cls, data, here, problems)


def _check_enum(here: str, value: Any, enum_cls: type[Enum], problems: list[str]) -> None:
    try:
        coerce_enum("", "", value, enum_cls)
    except (ValueError, TypeError):
        allowed = _names(enum_cls)
        problems.append(f"{here}: {_shown(value)} is not allowed{_suggest(str(value), allowed)} (allowed: {', '.join(allowed)})")


def _shown(value: Any) -> str:
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 60 else text[:57] + "..."


# -- what the classes' own checks refuse, at the deepest part that fails -----------------------------


def _children(cls: type, data: dict[str, Any], path: str) -> list[tuple[type, Any, str]]:
    out = []
    declared = {f.name: f.type for f in fields(cls)}
    for key, value in data.items():
        if key not in declared or not isinstance(value, (dict, list)):
            continue
        here = yaml_path(path, key)
        element = _element_type(cls, declared[key])
        if key in getattr(cls, "roles", ()) and isinstance(value, dict):
            out.append((cls._spec_class_of(value) if hasattr(cls, "_spec_class_of") else element, value, here))
        elif key in ALGORITHM_FIELDS:
            for i, item in enumerate(value if isinstance(value, list) else [value]):
                if isinstance(item, dict) and item.get("name") in ALGO_CONFIGS:
                    out.append((ALGO_CONFIGS[item["name"]], item, f"{here}[{i}]" if isinstance(value, list) else here))
        elif key == "qat_spec" and isinstance(value, dict) and value.get("name") in QAT_SPECS:
            out.append((QAT_SPECS[value["name"]], value, here))
        elif element is not None and is_dataclass(element) and _container(declared[key]) == "dict" and isinstance(value, dict):
            out += [(element, item, yaml_path(here, name)) for name, item in value.items() if isinstance(item, dict)]
        elif element is not None and is_dataclass(element) and isinstance(value, dict):
            out.append((element, value, here))
    return out


def _from_dict(cls: type, data: dict[str, Any]) -> Any:
    if hasattr(cls, "from_dict"):  # registered classes read their own name
        return cls.from_dict(data)
    return cls(**{k: v for k, v in data.items() if k != "name" or "name" in {f.name for f in fields(cls)}})


def _deepest_failure(cls: type, data: Any, path: str, error: Exception) -> tuple[str, type, str]:
    """(YAML path, class, message) of the deepest part of ``data`` that fails on its own."""
    if isinstance(data, dict):
        for child_cls, child, here in _children(cls, data, path):
            try:
                _from_dict(child_cls, child)
            except (ValueError, TypeError, KeyError) as child_error:
                return _deepest_failure(child_cls, child, here, child_error)
    return path, cls, str(error.args[0]) if error.args else str(error)


def _in_yaml_terms(message: str, cls: type, path: str) -> str:
    """The config classes' message with the YAML path for ``Class.field`` and bare enum names."""
    message = one_line(message)
    name = cls.__name__
    for prefix in (f"{name}.from_dict: ", f"{name}: ", f"{name}."):
        if message.startswith(prefix):
            rest = message[len(prefix) :]
            message = f"{path}.{rest}" if prefix.endswith(".") and path else (f"{path}: {rest}" if path else rest)
            break
    else:
        message = f"{path}: {message}" if path else message
    enums = "|".join(n for n, v in vars(types).items() if isinstance(v, type) and issubclass(v, Enum))
    return re.sub(rf"\b(?:{enums})\.(\w+)", r"\1", message)


# -- init: a starter config --------------------------------------------------------------------------


@dataclass(frozen=True)
class Preset:
    """A starting point of ``quark-brevitas init``: what it is for and how its config is built."""

    summary: str
    make: Callable[..., Any]  # (weight_bits, act_bits, tqt, graph) -> Config
    widths: tuple[int, ...]  # what --bits / --weight-bits / --act-bits take (empty: they do not apply)
    graph: bool  # whether --graph applies
    tqt: bool = False  # whether --tqt applies (trained power-of-two thresholds)


def _finn(weight_bits: int | None, act_bits: int | None, tqt: bool, graph: bool) -> Any:
    from quark.torch.extensions.brevitas import presets

    return presets.finn(weight_bits=weight_bits or 4, act_bits=act_bits or 4, qat_spec=_tqt() if tqt else None)


def _hls4ml(weight_bits: int | None, act_bits: int | None, tqt: bool, graph: bool) -> Any:
    from quark.torch.extensions.brevitas import presets

    return presets.hls4ml(weight_bits=weight_bits or 8, act_bits=act_bits or 8, qat_spec=_tqt() if tqt else None)


def _xint8(weight_bits: int | None, act_bits: int | None, tqt: bool, graph: bool) -> Any:
    from quark.torch.extensions.brevitas import presets

    return presets.xint8(graph=graph)


def _tqt() -> Any:
    from quark.torch.quantization.config.spec import TQTSpec

    return TQTSpec(types.TQTThresholdInitMeth._3SD)


def _integer(weight: int, act: int | None) -> Callable[..., Any]:
    """``w{weight}a{act}``: per-channel symmetric weights, per-tensor symmetric activations (float
    scales, MinMax), layer by layer; ``act`` None: weights only."""

    def make(weight_bits: int | None, act_bits: int | None, tqt: bool, graph: bool) -> Any:
        from quark.torch.quantization.config.config import QuantizationConfig, QuantizationSpec

        w = QuantizationSpec(
            dtype=f"int{weight}",
            observer_cls="PerChannelMinMaxObserver",
            qscheme="per_channel",
            ch_axis=0,
            symmetric=True,
        )
        a = (
            None
            if act is None
            else QuantizationSpec(dtype=f"int{act}", observer_cls="PerTensorMinMaxObserver", symmetric=True)
        )
        return MainConfig(
            global_quant_config=QuantizationConfig(weight=w, input_tensors=a),
            quant_mode="fx_graph_mode" if graph else "eager_mode",
        )

    return make


#: name -> preset, in the order --help lists them
PRESETS: dict[str, Preset] = {
    "finn": Preset(
        "FINN on FPGAs: graph mode, power-of-two scales, uint8 input, unsigned after ReLU, ties rounded up, "
        "bias correction (--bits, default 4; --tqt trains the thresholds)",
        _finn,
        widths=(2, 3, 4, 8),
        graph=False,
        tqt=True,
    ),
    "hls4ml": Preset(
        "hls4ml firmware on FPGAs: graph mode, power-of-two scales per tensor, uint8 input, unsigned after ReLU, "
        "half-even rounding, int32 bias, batch norm merged (--bits, default 8; --tqt trains the thresholds)",
        _hls4ml,
        widths=(2, 3, 4, 8, 16),
        graph=False,
        tqt=True,
    ),
    "xint8": Preset(
        "AMD NPUs (Ryzen AI) XINT8: int8 power-of-two weights and inputs, int32 bias, batch norm merged (--graph: "
        "every tensor, which residual additions need)",
        _xint8,
        widths=(),
        graph=True,
    ),
    "w8a8": Preset("int8 per-channel weights, int8 per-tensor inputs, float scales", _integer(8, 8), (), True),
    "w4a8": Preset("int4 per-channel weights, int8 per-tensor inputs, float scales", _integer(4, 8), (), True),
    "w8": Preset("int8 per-channel weights only (no calibration data needed)", _integer(8, None), (), True),
    "w4": Preset("int4 per-channel weights only (no calibration data needed)", _integer(4, None), (), True),
}

#: what a key means, written beside it in the starter file
NOTES = {
    "global_quant_config": "every supported layer, unless a level below says otherwise",
    "layer_type_quant_config": "per layer or operation type (class name): over the global one",
    "layer_quant_config": "per module name (wildcards allowed); overrides the levels above",
    "exclude": "module names left float",
    "pre_quant_opt_config": "run on the float model first",
    "algo_config": "run after calibration (bias correction, GPTQ, ...)",
    "GraphInput": "the network input",
    "ReLU": "ReLU outputs are never negative: an unsigned grid",
    "Add": "residual additions",
    "input_tensors": "the layer's input",
    "output_tensors": "the output",
    "weight": "the layer's weight",
    "bias": "int32, scale = input scale x weight scale (no observer)",
    "target_device": "export checks the graph for it",
    "observer_cls": "what sets the range from calibration data",
    "symmetric": "zero point 0",
    "ch_axis": "the output channels",
    "qat_spec": "train trains the threshold (TQT)",
    "threshold_init_meth": "initial threshold",
    "dtype": "the element type (all of them: quark-brevitas support formats)",
}
NOTE_COLUMN = 32
#: the longest line a starter file has (a terminal, a docs page)
WIDTH = 100


def starter(preset: str, *, weight_bits: int | None = None, act_bits: int | None = None, tqt: bool = False,
            graph: bool = False, command: str = "") -> tuple[Any, str]:
    """(config, its commented minimal YAML) for ``preset``."""
    row = PRESETS[preset]
    config = row.make(weight_bits, act_bits, tqt, graph)
    data = minimal(config)
    import textwrap

    header = [
        f"# {command or 'quark-brevitas init --preset ' + preset}",
        *textwrap.wrap(f"{preset}: {row.summary}", WIDTH - 2, initial_indent="# ", subsequent_indent="#   "),
        "# Fields left out take their defaults (all: docs/config_reference.md; quark-brevitas support).",
        "# Next: quark-brevitas quantize --config THIS.yaml --model model.py:build --data calib.npz -o q.pt",
    ]
    lines: list[str] = []
    _emit(data, 0, lines, path=(), noted=set())
    return config, "\n".join(header + lines) + "\n"


def minimal(obj: Any) -> Any:
    """``obj`` as YAML data without the fields at their defaults (a dataclass's ``name`` kept)."""
    if is_dataclass(obj) and not isinstance(obj, type):
        plain = obj.to_dict() if hasattr(obj, "to_dict") else {f.name: getattr(obj, f.name) for f in fields(obj)}
        out = {}
        for f in fields(obj):
            value = getattr(obj, f.name)
            default = f.default if f.default is not MISSING else (
                f.default_factory() if f.default_factory is not MISSING else MISSING
            )
            if f.name != "name" and default is not MISSING and value == default:
                continue
            out[f.name] = minimal(value) if value is not None else None
        if "name" in plain and "name" not in out:
            out = {"name": plain["name"], **out}
        return {k: v for k, v in out.items() if v is not None}
    if isinstance(obj, Enum):
        return obj.name
    if isinstance(obj, type):
        return obj.__name__
    if isinstance(obj, dict):
        return {(k if isinstance(k, str) else k.__name__): minimal(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [minimal(v) for v in obj]
    return obj


def _scalar(value: Any) -> str:
    import yaml

    text = yaml.safe_dump([value], default_flow_style=True, width=10_000).strip()
    return text[1:-1]


def _note(path: tuple[str, ...], key: str, value: Any, noted: set[str]) -> str:
    """The comment beside ``key``: what it means, or the values allowed; each key once per file."""
    if key == "input_tensors" and path and path[-1] == "GraphInput":
        return "  # the network input (uint8: FINN's drivers feed pixels)"
    if key in noted:
        return ""
    noted.add(key)
    note = NOTES.get(key)
    if note is None and isinstance(value, str):
        enum = next((e for e in _ENUM_FIELDS.get(key, ())), None)
        if enum is not None:
            note = "one of " + ", ".join(_names(enum))
    return f"  # {note}" if note else ""


#: field name -> its enum, for the allowed values beside a key
_ENUM_FIELDS: dict[str, tuple[type[Enum], ...]] = {
    "qscheme": (types.QSchemeType,),
    "scale_type": (types.ScaleType,),
    "round_method": (types.RoundType,),
    "quant_mode": (types.QuantizationMode,),
    "zero_point_type": (types.ZeroPointType,),
}


def _emit(data: dict[str, Any], indent: int, lines: list[str], path: tuple[str, ...], noted: set[str]) -> None:
    pad = "  " * indent
    for key, value in data.items():
        note = _note(path, key, value, noted)
        if isinstance(value, dict) and value:
            lines.append(_with_note(f"{pad}{_scalar(key)}:", note))
            _emit(value, indent + 1, lines, (*path, key), noted)
        elif isinstance(value, list) and any(isinstance(v, dict) for v in value):
            lines.append(_with_note(f"{pad}{_scalar(key)}:", note))
            for item in value:
                inner: list[str] = []
                _emit(item, indent + 2, inner, (*path, key), noted)
                inner[0] = f"{pad}  - " + inner[0].lstrip()
                lines += inner
        else:
            lines.append(_with_note(f"{pad}{_scalar(key)}: {_scalar(value)}", note))


def _with_note(text: str, note: str) -> str:
    if not note:
        return text
    line = f"{text.ljust(NOTE_COLUMN)}{note}"
    return line if len(line) <= WIDTH else f"{line[: WIDTH - 3]}..."
