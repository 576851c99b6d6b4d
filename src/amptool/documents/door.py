"""Typed JSON documents: frozen dataclasses describe what amptool writes (manifests, reports);
``check_document`` holds a document to them at the door and ``json_schema`` publishes them.

A field's type is one of str, int, float, bool, ``Real`` (a number, or the strings ``nan``,
``inf``, ``-inf`` that ``fileio.jsonable`` writes), ``Any``, a nested dataclass,
``Optional[X]`` (null allowed), ``List[X]``, ``Dict[str, X]``, ``Literal[...]`` or a ``Union``.
A field without a default is a key every document has; a field with a default is a key a
document may leave out; a field whose metadata is ``ADDED_FIELD`` is a key documents written before
``schema_version`` existed (version 0) may lack. Keys the types do not name are accepted and
ignored: a document stays readable when a release of the same version adds a key.
"""
from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal, Optional, Union

import amptool
from amptool.errors import UsageError

SCHEMA_VERSION_KEY = "schema_version"
ADDED = "added"
"""Field metadata: the key is missing from documents without a ``schema_version``."""
DRAFT = "https://json-schema.org/draft/2020-12/schema"
NOT_FINITE = ("nan", "inf", "-inf")
Real = Union[float, Literal["nan", "inf", "-inf"]]
"""A float as ``fileio.jsonable`` writes it: a number, or nan/inf as a string."""


ADDED_FIELD = MappingProxyType({ADDED: True})
"""The metadata of a field whose key documents of version 0 (no ``schema_version``) may lack:
``name: int = field(metadata=ADDED_FIELD)`` (a plain ``dataclasses.field`` call, so that type
checkers see the field has no default)."""


@dataclass(frozen=True)
class Misfit:
    """Where a document departs from its type."""

    field: str
    """The key's path: ``params.bytes``, ``inputs[0].shape[1]``."""
    expected: str
    """What the type wants there (empty when the key is missing)."""
    got: Any = None
    """The value found."""

    def text(self) -> str:
        if not self.expected:
            return f"field '{self.field}' is missing"
        return f"field '{self.field}' should be {self.expected}, got {shown(self.got)}"


def shown(value) -> str:
    """A found value, short: strings quoted, objects and lists named."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def expected(kind) -> str:
    """What ``kind`` wants, in words."""
    if kind == Real:
        return "a number"
    origin, args = shape_of(kind)
    if origin is Union:
        return " or ".join(expected(a) for a in args)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin is list:
        return "a list"
    if origin is dict or dataclasses.is_dataclass(kind):
        return "an object"
    return {str: "a string", int: "an integer", float: "a number", bool: "true or false",
            type(None): "null"}.get(kind, "a value")


def hints(cls: type) -> dict:
    return typing.get_type_hints(cls)


def shape_of(kind) -> tuple:
    """(origin, args) of ``kind``, a bare ``list``/``tuple``/``dict`` and ``Tuple[X, ...]``
    read as the JSON they hold: a list of X, an object."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if kind in (list, tuple, dict):
        return (dict if kind is dict else list), ()
    if origin is tuple:
        return list, (args[0],) if len(args) == 2 and args[1] is Ellipsis else ()
    return origin, args


def misfit(value, kind, where: str, legacy: bool = False) -> Optional[Misfit]:
    """The first place ``value`` departs from ``kind`` (``where``: its path), or None."""
    origin, args = shape_of(kind)
    if kind is Any:
        return None
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        return _object_misfit(value, kind, where, legacy)
    if origin is Union:
        if any(misfit(value, a, where, legacy) is None for a in args):
            return None
        others = [a for a in args if a is not type(None)]
        inner = misfit(value, others[0], where, legacy) if len(others) == 1 else None
        deeper = inner is not None and inner.field != where  # the value's own key fits
        return inner if deeper else Misfit(where, expected(kind), value)
    if origin is Literal:
        same = any(value == a and type(value) is type(a) for a in args)
        return None if same else Misfit(where, expected(kind), value)
    if origin in (list, dict):
        return _container_misfit(value, origin, args, where, legacy)
    return None if _scalar_fits(value, kind) else Misfit(where, expected(kind), value)


def _scalar_fits(value, kind) -> bool:
    if kind is bool or isinstance(value, bool):
        return kind is bool and isinstance(value, bool)
    if kind is float:
        return isinstance(value, (int, float))
    return isinstance(value, kind)


def _container_misfit(value, origin, args, where: str, legacy: bool) -> Optional[Misfit]:
    if not isinstance(value, origin):
        return Misfit(where, "a list" if origin is list else "an object", value)
    if origin is list:
        items = ((f"{where}[{i}]", v) for i, v in enumerate(value))
        kind = args[0] if args else Any
    else:
        items = ((f"{where}.{k}" if where else str(k), v) for k, v in value.items())
        kind = args[1] if args else Any
    for path, item in items:
        found = misfit(item, kind, path, legacy)
        if found:
            return found
    return None


def _object_misfit(value, cls: type, where: str, legacy: bool) -> Optional[Misfit]:
    if not isinstance(value, dict):
        return Misfit(where, "an object", value)
    types = hints(cls)
    for f in dataclasses.fields(cls):
        path = f"{where}.{f.name}" if where else f.name
        if f.name not in value:
            if required(f, legacy):
                return Misfit(path, "")
            continue
        found = misfit(value[f.name], types[f.name], path, legacy)
        if found:
            return found
    return None


def required(f: dataclasses.Field, legacy: bool = False) -> bool:
    """Whether every document has the key (of version 0 when ``legacy``)."""
    if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING:
        return False
    return not (legacy and f.metadata.get(ADDED))


@dataclass(frozen=True)
class Door:
    """How a reader names a kind of document and what it tells the user to do."""

    what: str
    """The document in an error: ``manifest``, ``run record``."""
    fix: str
    """What to do about a document that does not fit: ``export the artefact again``."""
    version: int
    """The newest ``schema_version`` this release reads (and writes)."""


def check_document(doc, cls: type, door: Door, path) -> None:
    """Refuse ``doc`` (read from ``path``) unless it fits ``cls``: one UsageError naming the
    file and the field. A newer ``schema_version`` is refused with the fix "upgrade
    amptool"; a document without one (written before it existed) is read as version 0."""
    if not isinstance(doc, dict):
        raise UsageError(f"{door.what} {path} is not a JSON object", door.fix)
    version = doc.get(SCHEMA_VERSION_KEY, 0)
    if misfit(version, int, SCHEMA_VERSION_KEY) or version < 0:
        raise UsageError(f"{door.what} {path}: "
                         f"{Misfit(SCHEMA_VERSION_KEY, 'a whole number', version).text()}",
                         door.fix)
    if version > door.version:
        raise UsageError(f"{door.what} {path}: field '{SCHEMA_VERSION_KEY}' is {version}, "
                         f"newer than amptool {amptool.__version__} reads ({door.version})",
                         "upgrade amptool")
    found = misfit(doc, cls, "", legacy=not version)
    if found:
        raise UsageError(f"{door.what} {path}: {found.text()}", door.fix)


# -- JSON Schema -----------------------------------------------------------------------------

def json_schema(cls: type, version: int, title: str) -> dict:
    """The JSON Schema (draft 2020-12) of documents of ``cls`` at ``version``: nested
    dataclasses under ``$defs``, each field's docstring as its description."""
    defs: dict = {}
    root = _object_schema(cls, defs)
    if SCHEMA_VERSION_KEY in root["properties"]:
        root["properties"][SCHEMA_VERSION_KEY]["const"] = version
    schema = {"$schema": DRAFT, "title": title, **root}
    if defs:
        schema["$defs"] = dict(sorted(defs.items()))
    return schema


def _object_schema(cls: type, defs: dict) -> dict:
    import inspect

    docs, types = field_docs(cls), hints(cls)
    properties = {}
    for f in dataclasses.fields(cls):
        properties[f.name] = {**type_schema(types[f.name], defs),
                              **({"description": docs[f.name]} if f.name in docs else {})}
    return {"description": " ".join((inspect.getdoc(cls) or "").split()).replace("``", "`"),
            "type": "object",
            "properties": properties,
            "required": [f.name for f in dataclasses.fields(cls) if required(f)]}


def type_schema(kind, defs: dict) -> dict:
    """The JSON Schema of one type; a dataclass goes into ``defs`` once, by its name."""
    origin, args = shape_of(kind)
    if kind is Any:
        return {}
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        name = kind.__name__
        if name not in defs:
            defs[name] = {}
            defs[name] = _object_schema(kind, defs)
        return {"$ref": f"#/$defs/{name}"}
    if origin is Union:
        return {"anyOf": [type_schema(a, defs) for a in args]}
    if origin is Literal:
        return {"enum": list(args)}
    if origin is list:
        return {"type": "array", **({"items": type_schema(args[0], defs)} if args else {})}
    if origin is dict:
        return {"type": "object",
                **({"additionalProperties": type_schema(args[1], defs)} if args else {})}
    return {"type": {str: "string", int: "integer", float: "number", bool: "boolean",
                     type(None): "null"}[kind]}


def field_docs(cls: type) -> dict:
    """Field name -> the docstring written under it in the class body (or a base class's),
    on one line."""
    import ast
    import inspect
    import textwrap

    docs: dict = {}
    for klass in reversed([k for k in cls.__mro__ if dataclasses.is_dataclass(k)]):
        tree = ast.parse(textwrap.dedent(inspect.getsource(klass))).body[0]
        assert isinstance(tree, ast.ClassDef)
        body = tree.body
        docs.update({node.target.id: " ".join(after.value.value.split()).replace("``", "`")
                     for node, after in zip(body, body[1:])
                     if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                     and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                     and isinstance(after.value.value, str)})
    return docs


def schema_text(cls: type, version: int, title: str) -> str:
    """``json_schema`` as the committed file holds it."""
    import json

    return json.dumps(json_schema(cls, version, title), indent=2) + "\n"

