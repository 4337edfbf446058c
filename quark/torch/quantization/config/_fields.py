"""Field coercion and serialisation helpers shared by both config flavours.

Configs accept enum members or their value / name as a string (what JSON and YAML files hold);
anything else is rejected with an error naming the class, the field, the value and the allowed
values. Kept free of torch and Brevitas imports.
"""

from __future__ import annotations

import json
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


def enum_to_json(value: Any) -> Any:
    return value.value if isinstance(value, Enum) else value


def check_unknown_keys(owner: str, data: dict[str, Any], known: set[str]) -> None:
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"{owner}: unknown keys {unknown}; allowed: {sorted(known)}")


def from_fields(cls: type, data: Any) -> Any:
    """``cls(**data)`` for a dataclass, after checking ``data`` is a mapping of its field names."""
    from dataclasses import fields

    require_mapping(cls.__name__, data)
    check_unknown_keys(cls.__name__, data, {f.name for f in fields(cls)})
    return cls(**data)


def from_registry(owner: str, data: Any, registry: dict[str, type]) -> Any:
    """Build the dataclass that ``data["name"]`` names in ``registry`` from the rest of ``data``."""
    require_mapping(owner, data)
    data = dict(data)
    name = data.pop("name", None)
    if name not in registry:
        raise ValueError(f"{owner} name={name!r} is not known; allowed: {sorted(registry)}")
    return from_fields(registry[name], data)


def named_dict(obj: Any, name: str) -> dict[str, Any]:
    """A dataclass as a dict, its registry ``name`` first (a deep copy: editing it leaves ``obj`` alone)."""
    import copy
    from dataclasses import fields

    return copy.deepcopy({"name": name, **{f.name: enum_to_json(getattr(obj, f.name)) for f in fields(obj)}})


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


class FileConfig:
    """``save`` / ``load`` of a config class with ``to_dict`` / ``from_dict``, as JSON or YAML by suffix."""

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
