"""Config files (YAML, TOML, JSON) load into frozen dataclasses; flags override files.

Unknown keys and bad values are all collected and reported in one error.
"""
from __future__ import annotations

import dataclasses
import json
import math
import sys
from pathlib import Path
from typing import Any, Callable, Mapping

from amptool.errors import UsageError

SHOWN = "shown"
"""Field metadata key: how a default decided at run time reads in --help and the reference."""


def decided_later(shown: str, default: Any = None) -> Any:
    """A config field whose ``default`` (None: not fixed) the run decides as ``shown`` says,
    e.g. ``decided_later("the cores, up to 8")``; --help and the reference show ``shown``."""
    return dataclasses.field(default=default, metadata={SHOWN: shown})


def read_config_file(path: str | Path) -> dict:
    """Read a YAML, TOML or JSON mapping; one clear error if it cannot be read."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"config file {path} does not exist", "check the --config path")
    text = path.read_text(encoding="utf-8", errors="replace")
    suffix = path.suffix.lower()
    try:
        if suffix == ".toml":
            if sys.version_info >= (3, 11):
                import tomllib
            else:
                import tomli as tomllib
            data = tomllib.loads(text)
        elif suffix == ".json":
            data = json.loads(text)
        elif suffix in (".yaml", ".yml"):
            import yaml
            data = yaml.safe_load(text)
        else:
            raise UsageError(f"config file {path} has an unknown extension '{suffix}'",
                             "use .yaml, .yml, .toml or .json")
    except UsageError:
        raise
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UsageError(f"config file {path} is malformed: {first}", "fix its syntax") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise UsageError(f"config file {path} must hold a mapping of keys to values",
                         "write key: value pairs at the top level")
    return data


def _coerce(value: Any, default: Any, name: str, errors: list[str]) -> Any:
    """Coerce a file value to the type of the field's default."""
    if default is None or value is None:
        return value
    kind = type(default)
    if kind is bool:
        if isinstance(value, bool):
            return value
        errors.append(f"{name} must be true or false, got {value!r}")
        return default
    if kind in (int, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            errors.append(f"{name} must be a number, got {value!r}")
            return default
        if kind is int and not (math.isfinite(value) and float(value) == int(value)):
            errors.append(f"{name} must be a whole number, got {value!r}")
            return default
        return kind(value)
    if kind is tuple:
        if isinstance(value, (list, tuple)):
            return tuple(value)
        errors.append(f"{name} must be a list, got {value!r}")
        return default
    if kind is str and not isinstance(value, str):
        errors.append(f"{name} must be a string, got {value!r}")
        return default
    return value


def build_config(cls, file_values: Mapping[str, Any] | None = None,
                 overrides: Mapping[str, Any] | None = None, source: str = "config"):
    """Defaults <- file values <- explicit overrides (None means 'not given')."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    errors: list[str] = []
    values: dict[str, Any] = {}
    for key, value in (file_values or {}).items():
        norm = key.replace("-", "_")
        if norm not in fields:
            errors.append(f"unknown key '{key}'")
            continue
        field = fields[norm]
        default = field.default if field.default is not dataclasses.MISSING else None
        values[norm] = _coerce(value, default, key, errors)
    if errors:
        known = ", ".join(sorted(fields))
        raise UsageError(f"{source}: " + "; ".join(errors), f"known keys: {known}")
    for key, value in (overrides or {}).items():
        if value is not None:
            values[key] = value
    return cls(**values)


def layered(build: Callable[[dict, dict, str], Any], path: str | Path | None = None,
            flags: Mapping[str, Any] | None = None) -> Any:
    """The one way every command and the Python API layer their settings: defaults, then
    the config file at ``path`` (YAML/TOML/JSON; None: no file), then ``flags`` (None: not
    given). ``build(file_values, flags, source)`` makes the config (``build_config`` for a
    plain dataclass), reporting every bad key or value of the file at once."""
    file_values = read_config_file(path) if path else {}
    return build(file_values, dict(flags or {}), f"config {path}" if path else "config")
