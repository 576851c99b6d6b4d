"""The door every JSON document amptool writes passes, out and back in.

A document type is a frozen dataclass deriving from ``Document`` (the types nested in it too);
pydantic validates, dumps and describes it through a ``TypeAdapter``, imported only when a
document is read, written or described. What amptool adds to pydantic's rules:

- one rule for keys: a key the type does not name is refused (``extra="forbid"``; the
  published schemas say ``additionalProperties: false``), and nothing is coerced
  (``strict``): ``"10"`` is no integer;
- ``Real``: a float as ``fileio.jsonable`` writes it, a number or one of the strings ``nan``,
  ``inf``, ``-inf`` (read back as that float);
- ``ADDED_FIELD``: a key documents written before ``schema_version`` existed (version 0) may
  lack; such a document reads it as None;
- ``optional_key()``: a key left out of the JSON while its field is None;
- ``read_document``: the version check (a newer ``schema_version`` refused with "upgrade
  amptool", none read as version 0) and one line naming the file and the field.
"""
from __future__ import annotations

import contextvars
import dataclasses
import functools
import json
from dataclasses import dataclass
from types import MappingProxyType
from typing import Annotated, Any, ClassVar, Dict, Optional

import amptool
from amptool.errors import UsageError
from amptool.files.fileio import jsonable
from amptool.stats.limits import DOCUMENT_RULES

SCHEMA_VERSION_KEY = "schema_version"
DRAFT = "https://json-schema.org/draft/2020-12/schema"
NOT_FINITE = ("nan", "inf", "-inf")
ADDED = "added"
ADDED_FIELD = MappingProxyType({ADDED: True})
"""The metadata of a field whose key documents of version 0 (no ``schema_version``) may lack,
read as None there: ``name: Optional[int] = field(metadata=ADDED_FIELD)`` (no default: every
document of a later version has the key)."""
OMIT = "omit_when_none"
RULES: Dict[str, Any] = DOCUMENT_RULES
"""pydantic's settings for every document type (a ``pydantic.ConfigDict``); the types of
``amptool.stats`` that documents hold carry them too."""


class _WrittenFloat:
    """pydantic's view of ``Real``: a JSON number, or a string of ``NOT_FINITE`` read as its
    float."""

    @classmethod
    def __get_pydantic_core_schema__(cls, source, handler):
        from pydantic_core import core_schema

        return core_schema.no_info_before_validator_function(
            _float_of_text, core_schema.float_schema(strict=True))

    @classmethod
    def __get_pydantic_json_schema__(cls, schema, handler):
        return {"anyOf": [{"type": "number"}, {"enum": list(NOT_FINITE)}]}


def _float_of_text(value):
    return float(value) if isinstance(value, str) and value in NOT_FINITE else value


Real = Annotated[float, _WrittenFloat]
"""A float as written: a number, or ``"nan"``, ``"inf"``, ``"-inf"``."""


def optional_key(follows: Optional[str] = None, default: Any = None) -> Any:
    """A field whose key the JSON leaves out while it is None; with ``follows``, while the
    field of that name is None (the key is then written even when its own value is None)."""
    return dataclasses.field(default=default, metadata={OMIT: follows or True})


class Document:
    """The base of every document type and of the types nested in one: pydantic's ``RULES``,
    the keys version 0 may lack (``ADDED_FIELD``) and the keys left out while None
    (``optional_key``)."""

    __pydantic_config__: ClassVar[Dict[str, Any]] = RULES

    @classmethod
    def __get_pydantic_core_schema__(cls, source, handler):
        from pydantic_core import core_schema

        schema = handler(source)
        fields = dataclasses.fields(cls)  # type: ignore[arg-type]
        omitted = tuple((f.name, f.metadata[OMIT]) for f in fields if OMIT in f.metadata)
        if omitted:
            def dump(value, serialize):
                data = serialize(value)
                for name, rule in omitted:
                    if getattr(value, name if rule is True else rule) is None:
                        del data[name]
                return data

            schema["serialization"] = core_schema.wrap_serializer_function_ser_schema(dump)
        added = {f.name for f in fields if f.metadata.get(ADDED)}
        if added and _LEGACY.get():  # version 0: each such key may be missing, read as None
            for item in schema["schema"]["fields"]:
                if item["name"] in added:
                    item["schema"] = core_schema.with_default_schema(item["schema"],
                                                                     default=None)
        return schema


_LEGACY: contextvars.ContextVar = contextvars.ContextVar("version_0", default=False)
"""Set while the adapter of version-0 documents is built."""


@functools.lru_cache(maxsize=None)
def adapter(kind: Any, legacy: bool = False) -> Any:
    """pydantic's ``TypeAdapter`` of ``kind``, built once (``legacy``: of documents without
    ``schema_version``, whose ``ADDED_FIELD`` keys may be missing)."""
    from pydantic import TypeAdapter

    token = _LEGACY.set(legacy)
    try:
        return TypeAdapter(kind)
    finally:
        _LEGACY.reset(token)


def to_json(obj: Any) -> Any:
    """``obj`` (a document or a part of one) as the values its JSON holds: dicts of its keys
    (optional keys left out as their fields say), lists; floats stay floats (``jsonable``
    writes NaN and Inf as strings)."""
    kind: Any = type(obj)
    return _lists(adapter(kind).dump_python(obj))


def _lists(value):
    if isinstance(value, dict):
        return {k: _lists(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_lists(v) for v in value]
    return value


def from_json(kind: Any, data: Any, where: str) -> Any:
    """``data`` (a dict as ``to_json`` gives it) read into ``kind`` by a document's rules; a
    ValueError names ``where`` and the field that does not fit."""
    from pydantic import ValidationError

    try:
        return adapter(kind).validate_json(json.dumps(jsonable(data)))
    except ValidationError as exc:
        raise ValueError(f"{where}: {misfit(exc)}") from None


@dataclass(frozen=True)
class Door:
    """One kind of document: its type, how a reader names it and what it tells the user."""

    kind: Any
    """The document's type."""
    what: str
    """The document in an error: ``manifest``, ``run record``."""
    fix: str
    """What to do about a document that does not fit: ``export the artefact again``."""
    version: int
    """The ``schema_version`` this release writes, the newest it reads."""
    title: str
    """Its JSON Schema's title."""
    schema: str
    """Its JSON Schema's file name in docs/reference/schemas."""

    def json(self, doc: Any) -> dict:
        """``doc`` (of ``kind``; a dict is held to ``kind`` first) as its file holds it: every
        writer of the document writes, and every ``--json`` prints, what this gives (NaN and
        Inf as strings)."""
        if isinstance(doc, dict):
            doc = from_json(self.kind, doc, self.what)
        return jsonable(to_json(doc))


def read_document(door: Door, text: str | bytes, path: Any) -> Any:
    """The document of ``door`` that ``text`` (read from ``path``) holds, or one UsageError
    naming the file and the field. A newer ``schema_version`` is refused with the fix
    "upgrade amptool"; a document without one (written before it existed) is version 0."""
    from pydantic import ValidationError

    doc = json.loads(text)
    if not isinstance(doc, dict):
        raise UsageError(f"{door.what} {path} is not a JSON object", door.fix)
    version = doc.get(SCHEMA_VERSION_KEY, 0)
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise UsageError(f"{door.what} {path}: field '{SCHEMA_VERSION_KEY}' should be a whole "
                         f"number, got {shown(version)}", door.fix)
    if version > door.version:
        raise UsageError(f"{door.what} {path}: field '{SCHEMA_VERSION_KEY}' is {version}, "
                         f"newer than amptool {amptool.__version__} reads ({door.version})",
                         "upgrade amptool")
    try:
        return adapter(door.kind, legacy=version == 0).validate_json(text)
    except ValidationError as exc:
        raise UsageError(f"{door.what} {path}: {misfit(exc)}", door.fix) from None


WORDS = {"int_type": "an integer", "float_type": "a number", "string_type": "a string",
         "bool_type": "true or false", "list_type": "a list", "tuple_type": "a list",
         "dict_type": "an object", "dataclass_type": "an object", "none_required": "null"}
"""What a pydantic error type says the field should be."""


def misfit(error: Any) -> str:
    """Where a document departs from its type (the first place pydantic found), in words:
    ``field 'params.bytes' should be an integer, got 'abc'``."""
    first = error.errors()[0]
    where = "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in first["loc"])
    field = f"field '{where.lstrip('.')}'"
    kind = first["type"]
    if kind == "missing":
        return f"{field} is missing"
    if kind in ("unexpected_keyword_argument", "extra_forbidden"):
        return f"{field} is not a key of this document"
    if kind == "literal_error":
        expected = f"one of {first['ctx']['expected']}"
    else:
        expected = WORDS.get(kind, "")
    if not expected:
        return f"{field}: {first['msg']}"
    return f"{field} should be {expected}, got {shown(first['input'])}"


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


# -- JSON Schema -----------------------------------------------------------------------------

def json_schema(door: Door) -> dict:
    """The JSON Schema (draft 2020-12) of ``door``'s documents at its version, from pydantic:
    nested types under ``$defs``, each field's docstring as its description."""
    schema = adapter(door.kind).json_schema(schema_generator=_generator())
    prop = schema["properties"][SCHEMA_VERSION_KEY]
    schema["properties"][SCHEMA_VERSION_KEY] = {"type": "integer", "const": door.version,
                                                **_described(prop)}
    if SCHEMA_VERSION_KEY not in schema["required"]:
        schema["required"].insert(0, SCHEMA_VERSION_KEY)
    first = ("description", "type", "additionalProperties", "properties", "required")
    return {"$schema": DRAFT, "title": door.title, **{k: schema[k] for k in first},
            **{k: v for k, v in schema.items() if k not in first}}


def _described(prop: dict) -> dict:
    return {"description": prop["description"]} if "description" in prop else {}


@functools.lru_cache(maxsize=None)
def _generator() -> type:
    from pydantic.json_schema import GenerateJsonSchema

    class Generate(GenerateJsonSchema):
        """No titles; each field's docstring (an inherited field's too) on one line."""

        def field_title_should_be_set(self, schema) -> bool:
            return False

        def dataclass_schema(self, schema):
            out = super().dataclass_schema(schema)
            out.pop("title", None)
            docs = field_docs(schema["cls"])
            for name, prop in out.get("properties", {}).items():
                text = prop.get("description") or docs.get(name)
                if text:
                    prop["description"] = _one_line(text)
            if "description" in out:
                out["description"] = _one_line(out["description"])
            return out

    return Generate


def _one_line(text: str) -> str:
    return " ".join(text.split()).replace("``", "`")


def field_docs(cls: type) -> dict:
    """Field name -> the docstring written under it in the class body or a base class's."""
    import ast
    import inspect
    import textwrap

    docs: dict = {}
    for klass in reversed([k for k in cls.__mro__ if dataclasses.is_dataclass(k)]):
        tree = ast.parse(textwrap.dedent(inspect.getsource(klass))).body[0]
        assert isinstance(tree, ast.ClassDef)
        body = tree.body
        docs.update({node.target.id: _one_line(after.value.value)
                     for node, after in zip(body, body[1:])
                     if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                     and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                     and isinstance(after.value.value, str)})
    return docs


def schema_text(door: Door) -> str:
    """``json_schema`` as the committed file holds it."""
    return json.dumps(json_schema(door), indent=2) + "\n"
