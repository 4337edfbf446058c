"""Field coercion and serialisation helpers shared by both config flavours.

Configs accept enum members or their value / name as a string (what JSON and YAML files hold);
anything else is rejected with an error naming the class, the field, the value and the allowed
values. Kept free of torch and Brevitas imports.
"""

from __future__ import annotations

import copy
import json
from dataclasses import fields
from enum import Enum
from pathlib import Path
from typing import Any, TypeVar

E = TypeVar("E", bound=Enum)


def coerce_enum(owner: str, field: str, value: Any, enum_cls: type[E], optional: bool = True) -> E | None:
    """Return ``value`` as a member of ``enum_cls``; accept members, values and names."""
    if value is None:
        if optional:
            return None
        raise ValueError(f"{owner}.{field} is required; allowed: {allowed(enum_cls)}")
    if isinstance(value, enum_cls):
        return value
    if isinstance(value, str) and value in enum_cls.__members__:  # names, aliases included
        return enum_cls[value]
    for member in enum_cls:
        # type must match exactly: True == 1 and 2.0 == 2 must not select a member
        if type(value) is type(member.value) and value == member.value:
            return member
        if isinstance(value, str) and value in (member.name, member.name.lstrip("_")):
            return member
    raise ValueError(f"{owner}.{field}={value!r} is not valid; allowed: {allowed(enum_cls)}")


def allowed(enum_cls: type[Enum]) -> str:
    return ", ".join(f"{enum_cls.__name__}.{name}" for name in enum_cls.__members__)


def check_type(owner: str, field: str, value: Any, types: type | tuple[type, ...], optional: bool = True) -> None:
    if value is None and optional:
        return
    # bool is an int subclass; an int field must not accept True/False silently.
    if isinstance(value, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
        raise TypeError(f"{owner}.{field}={value!r}: expected {_type_names(types)}, got bool")
    if not isinstance(value, types):
        raise TypeError(f"{owner}.{field}={value!r}: expected {_type_names(types)}, got {type(value).__name__}")


def _type_names(types: type | tuple[type, ...]) -> str:
    return " or ".join(t.__name__ for t in (types if isinstance(types, tuple) else (types,)))


def to_plain(value: Any) -> Any:
    """``value`` as JSON / YAML data: enums and classes by name, configs by their ``to_dict``,
    containers element by element (a copy: editing it leaves the config alone)."""
    if isinstance(value, Enum):
        return value.name
    if isinstance(value, type):
        return value.__name__
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if isinstance(value, dict):
        return {to_plain(k): to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    return copy.deepcopy(value)


def config_to_dict(obj: Any) -> dict[str, Any]:
    """A config dataclass as JSON / YAML data, field by field (see :func:`to_plain`); its
    ``__post_init__`` takes every value back (names for enums and classes, dicts for configs)."""
    return {f.name: to_plain(getattr(obj, f.name)) for f in fields(obj)}


def check_unknown_keys(owner: str, data: dict[str, Any], known: set[str]) -> None:
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"{owner}: unknown keys {unknown}; allowed: {sorted(known)}")


def from_fields(cls: type, data: Any) -> Any:
    """``cls(**data)`` for a dataclass, after checking ``data`` is a mapping of its field names."""
    require_mapping(cls.__name__, data)
    check_unknown_keys(cls.__name__, data, {f.name for f in fields(cls)})
    return cls(**data)


def from_registry(owner: str, data: Any, registry: dict[str, type]) -> Any:
    """Build the dataclass that ``data["name"]`` names in ``registry`` from ``data`` (``name``
    passed on where the class has a field of that name)."""
    require_mapping(owner, data)
    data = dict(data)
    name = data.get("name")
    if name not in registry:
        raise ValueError(f"{owner} name={name!r} is not known; allowed: {sorted(registry)}")
    cls = registry[name]
    if "name" not in {f.name for f in fields(cls)}:
        del data["name"]
    return from_fields(cls, data)


def write_file(data: dict[str, Any], path: str | Path) -> None:
    """Write ``data`` as JSON or YAML, chosen by the file suffix, atomically (see :mod:`..files`)."""
    from quark.torch.quantization.files import write_text

    path = Path(path)
    if path.suffix in (".yaml", ".yml"):
        import yaml

        write_text(path, yaml.safe_dump(data, sort_keys=False))
    elif path.suffix == ".json":
        write_text(path, json.dumps(data, indent=2))
    else:
        raise ValueError(f"config file {str(path)!r}: suffix must be .json, .yaml or .yml")


def read_file(path: str | Path) -> dict[str, Any]:
    """Read a JSON or YAML config file.

    Files may come from anyone: YAML goes through the safe loader (plain data, no Python objects,
    no tags), and ``from_dict`` builds only registered classes; a file that does not parse is a
    ``ValueError`` naming it.
    """
    path = Path(path)
    if path.suffix in (".yaml", ".yml"):
        import yaml

        parse, errors = yaml.safe_load, yaml.YAMLError
    elif path.suffix == ".json":
        parse, errors = json.loads, json.JSONDecodeError
    else:
        raise ValueError(f"config file {str(path)!r}: suffix must be .json, .yaml or .yml")
    try:
        data = parse(path.read_text(encoding="utf-8"))
    except (errors, UnicodeDecodeError) as error:
        raise ValueError(f"config file {str(path)!r} is not a valid {path.suffix[1:].upper()} config: {error}") from None
    if not isinstance(data, dict):
        raise ValueError(f"config file {str(path)!r}: top level must be a mapping, got {type(data).__name__}")  # noqa: TRY004  the file's content, not an argument
    return data


class Serialisable:
    """``to_dict`` / ``from_dict`` of a config dataclass, field by field: what ``to_dict`` writes
    (:func:`config_to_dict`), the class's ``__post_init__`` takes back."""

    def to_dict(self) -> dict[str, Any]:
        """JSON / YAML data (enums and classes by name); ``from_dict`` reads it back."""
        return config_to_dict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Any:
        """The config ``data`` describes (as ``to_dict`` writes it, or by hand)."""
        return from_fields(cls, data)


#: version of the config files this release writes and reads
CONFIG_VERSION = 1


class FileConfig(Serialisable):
    """A whole-model config: versioned, ``save`` / ``load`` as JSON or YAML by suffix."""

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Any:
        require_mapping(cls.__name__, data, required=("global_quant_config",))
        version = data.get("version", CONFIG_VERSION)
        if version != CONFIG_VERSION:
            raise ValueError(
                f"{cls.__name__}.from_dict: version={version!r} is not supported; this release reads version {CONFIG_VERSION}"
            )
        return from_fields(cls, data)

    def save(self, path: str | Path) -> None:
        """Write the config to a ``.json`` or ``.yaml`` file."""
        write_file(self.to_dict(), path)  # type: ignore[attr-defined]

    @classmethod
    def load(cls, path: str | Path) -> Any:
        """Read a config written by :meth:`save` (or by hand)."""
        return cls.from_dict(read_file(path))  # type: ignore[attr-defined]


def require_mapping(owner: str, data: Any, required: tuple[str, ...] = ()) -> None:
    """``from_dict`` input must be a mapping holding the required keys."""
    if not isinstance(data, dict):
        raise TypeError(f"{owner}.from_dict: expected a mapping, got {type(data).__name__}")
    missing = [k for k in required if data.get(k) is None]
    if missing:
        raise ValueError(f"{owner}.from_dict: missing required {missing}")
