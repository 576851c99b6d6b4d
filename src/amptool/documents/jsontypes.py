"""Typed results to JSON and back: ``to_json`` turns a result (a dataclass) into the dict its
JSON document holds, ``from_json`` reads such a dict back into the dataclass. Every stage's
result is written and read by these two, so its keys are named in one place: its fields.

A field's key is its name. A field made by ``optional_key()`` is left out of the JSON while
it is None (with ``follows``: while the field it names is None), so a key that only some
results have stays absent from the others. ``from_json`` refuses a key the type does not
name and a missing key without a default: a key renamed on one side fails where the result
is read, not in a reader three stages on.

Types read: nested dataclasses, ``Optional[X]``, ``List[X]``, ``Tuple[X, ...]`` (a JSON list
read as a tuple), ``Dict[str, X]``, ``Any`` and plain values (taken as they are).
"""
from __future__ import annotations

import dataclasses
import functools
import typing
from typing import Any, Optional, Union

OMIT = "omit_when_none"
"""Field metadata: True (the key is left out while the field is None) or the name of the
field whose None leaves it out."""


def optional_key(follows: Optional[str] = None, default: Any = None) -> Any:
    """A field whose key the JSON leaves out while it is None; with ``follows``, while the
    field of that name is None (the key is then written even when its own value is None)."""
    return dataclasses.field(default=default, metadata={OMIT: follows or True})


def to_json(obj: Any) -> Any:
    """``obj`` as JSON-ready values: a dataclass as a dict of its fields' keys (optional
    keys left out as their fields say), tuples as lists, dicts and lists item by item."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_json(getattr(obj, f.name)) for f in dataclasses.fields(obj)
                if not omitted(obj, f)}
    if isinstance(obj, (list, tuple)):
        return [to_json(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_json(v) for k, v in obj.items()}
    return obj


def omitted(obj: Any, f: dataclasses.Field) -> bool:
    """Whether field ``f`` of ``obj`` is left out of its JSON."""
    rule = f.metadata.get(OMIT)
    if rule is None:
        return False
    return getattr(obj, f.name if rule is True else rule) is None


def from_json(cls: type, data: Any, where: Optional[str] = None) -> Any:
    """``data`` (a dict as ``to_json`` writes it) read into dataclass ``cls``. ValueError
    naming the key (``where``: the document's name) for a key ``cls`` does not name, a
    missing one, or an object where none fits."""
    return _read(data, cls, where or cls.__name__)


def _read(value: Any, kind: Any, where: str) -> Any:
    if value is None:
        return value
    how, inner = _plan(kind)
    if how == "object":
        return _read_object(value, inner, where)
    if how == "list":
        if not isinstance(value, (list, tuple)):
            raise ValueError(f"{where}: expected a list, got {type(value).__name__}")
        item, as_tuple = inner
        if _plan(item)[0] == "plain":
            items = list(value)
        else:
            items = [_read(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if as_tuple else items
    if how == "dict":
        return {k: _read(v, inner, f"{where}.{k}") for k, v in value.items()}
    return value


@functools.lru_cache(maxsize=None)
def _plan(kind: Any) -> tuple:
    """How a value of ``kind`` is read, worked out once a type: (``object``, the dataclass),
    (``list``, (the item's type, whether a tuple)), (``dict``, the value's type) or
    (``plain``, None): taken as it is."""
    if kind is Any:
        return "plain", None
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        return "object", kind
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin is Union:
        others = [a for a in args if a is not type(None)]
        return _plan(others[0]) if len(others) == 1 else ("plain", None)
    if origin in (list, tuple) or kind in (list, tuple):
        return "list", (args[0] if args else Any, tuple in (origin, kind))
    if origin is dict or kind is dict:
        return "dict", args[1] if args else Any
    return "plain", None


def _read_object(value: Any, cls: type, where: str) -> Any:
    if not isinstance(value, dict):
        raise ValueError(f"{where}: expected an object, got {type(value).__name__}")
    names, required = _keys(cls)
    if not names.issuperset(value):
        unknown = sorted(set(value) - names)
        raise ValueError(f"{where}: key(s) {', '.join(unknown)} not in {cls.__name__}")
    missing = [name for name in required if name not in value]
    if missing:
        raise ValueError(f"{where}: key(s) {', '.join(missing)} missing for {cls.__name__}")
    types = _hints(cls)
    return cls(**{k: v if v is None or _plan(types[k])[0] == "plain"
                  else _read(v, types[k], f"{where}.{k}") for k, v in value.items()})


@functools.lru_cache(maxsize=None)
def _keys(cls: type) -> tuple:
    """(every key of ``cls``, the keys without a default), once a class."""
    fields = dataclasses.fields(cls)
    return (frozenset(f.name for f in fields),
            tuple(f.name for f in fields if f.default is dataclasses.MISSING
                  and f.default_factory is dataclasses.MISSING))


@functools.lru_cache(maxsize=None)
def _hints(cls: type) -> dict:
    return typing.get_type_hints(cls)
