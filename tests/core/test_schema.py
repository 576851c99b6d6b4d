"""The typed JSON documents: a manifest is held to ``Manifest`` at the door (one line naming
the file and the field), old manifests are still read, newer ones refused, unknown keys
refused; the JSON Schema comes from the same types through pydantic."""
from __future__ import annotations

import copy
import dataclasses
import json
import math
import typing

import pytest

from schemas import problems

from amptool.documents.door import field_docs, from_json, json_schema, to_json
from amptool.documents.manifest import (MANIFEST, MANIFEST_VERSION, Manifest, manifest_path,
                                        read_manifest)
from amptool.errors import UsageError

POLICY = {"level": "O2", "dtype": "float16", "fp32_types": [], "fp32_cells": [],
          "fp16_cells": []}
MANIFEST_DOC = {
    "schema_version": 1, "format": "MINDIR", "precision": "fp16", "io_dtype": "fp32",
    "policy": POLICY, "source_policy": POLICY,
    "inputs": [{"name": "input0", "shape": [-1, 1, 28, 28], "dtype": "float32"}],
    "outputs": [{"name": "output0", "shape": [-1, 10], "dtype": "float32"}],
    "params": {"count": 10, "bytes": 20, "tensors": 2, "dtypes": {"float16": 10}},
    "file_size": 100, "sha256": "ab" * 32,
    "files": [{"path": "m.mindir", "size": 100, "sha256": "ab" * 32}], "total_size": 100,
    "checkpoint": {"path": "/runs/best.ckpt", "sha256": "cd" * 32},
    "model": {"name": "simplecnn", "spec": "simplecnn", "args": {}, "input_spec": None,
              "inputs": [{"name": "x", "shape": [-1, 1, 28, 28], "dtype": "float32"}],
              "input_shape": [1, 28, 28], "num_classes": 10},
    "preprocess": {"height": 28, "width": 28, "channels": 1, "mean": 0.3, "std": 0.32},
    "data": "digits", "val_fraction": 0.2, "batch": {"dynamic": True, "size": None},
    "mindspore_version": "2.10.0", "amptool_version": "0.1.0",
    "created": "2026-12-05T16:37:23Z", "encrypted": False, "export_seconds": 0.35,
    "deployment": {"needed": False, "kept_fp32": [], "precision_mode": None, "files": [],
                   "why": "every cell computes in float16"},
    "task": {"name": "cross-entropy", "kind": "cross-entropy", "targets": ["y"],
             "classifier": True},
}
"""A manifest as ``amptool export`` writes it."""
ADDED_SINCE = ("files", "total_size", "deployment", "task")
"""The keys manifests written before schema_version lack."""


def _write(tmp_path, doc) -> str:
    artefact = tmp_path / "m_fp16.mindir"
    manifest_path(artefact).write_text(json.dumps(doc))
    return artefact


def _refused(tmp_path, doc) -> str:
    with pytest.raises(UsageError) as err:
        read_manifest(_write(tmp_path, doc))
    text = str(err.value)
    assert "\n" not in text and "m_fp16.mindir.json" in text, text
    return text


def _edited(path: str, value=None, drop: bool = False) -> dict:
    doc = copy.deepcopy(MANIFEST_DOC)
    *parents, last = path.split(".")
    node = doc
    for key in parents:
        node = node[key]
    if drop:
        del node[last]
    else:
        node[last] = value
    return doc


def test_a_written_manifest_fits(tmp_path):
    assert problems(MANIFEST_DOC, "manifest") == []
    assert MANIFEST.json(read_manifest(_write(tmp_path, MANIFEST_DOC))) == MANIFEST_DOC
    assert to_json(from_json(Manifest, MANIFEST_DOC, "manifest")) == MANIFEST_DOC


@pytest.mark.parametrize("path,value,said", [
    ("params.bytes", "abc", "field 'params.bytes' should be an integer, got 'abc'"),
    ("params.bytes", True, "field 'params.bytes' should be an integer, got true"),
    ("format", "TFLITE", "field 'format' should be one of 'MINDIR', 'AIR' or 'ONNX', got 'TFLITE'"),
    ("encrypted", "no", "field 'encrypted' should be true or false, got 'no'"),
    ("inputs", {"x": 1}, "field 'inputs' should be a list, got an object"),
    ("model.num_classes", "10", "field 'model.num_classes' should be an integer, got '10'"),
    ("val_fraction", "0.2", "field 'val_fraction' should be a number, got '0.2'"),
    ("batch", None, "field 'batch' should be an object, got null"),
    ("params.dtypes", {"float16": 1.5}, "field 'params.dtypes.float16' should be an integer"),
])
def test_an_ill_typed_field_is_named(tmp_path, path, value, said):
    text = _refused(tmp_path, _edited(path, value))
    assert said in text and text.endswith("; export the artefact again"), text


def test_a_nested_list_item_is_named(tmp_path):
    doc = copy.deepcopy(MANIFEST_DOC)
    doc["inputs"][0]["shape"][1] = "one"
    assert "field 'inputs[0].shape[1]' should be an integer, got 'one'" in _refused(tmp_path,
                                                                                   doc)


@pytest.mark.parametrize("path", ["params.bytes", "format", "model.spec", "files",
                                  "deployment.why"])
def test_a_missing_field_is_named(tmp_path, path):
    assert f"field '{path}' is missing" in _refused(tmp_path, _edited(path, drop=True))


def test_a_newer_version_is_refused_with_upgrade(tmp_path):
    text = _refused(tmp_path, _edited("schema_version", MANIFEST_VERSION + 1))
    assert f"field 'schema_version' is {MANIFEST_VERSION + 1}, newer than" in text
    assert text.endswith("; upgrade amptool"), text


@pytest.mark.parametrize("value", ["1", 1.0, -1, None])
def test_an_ill_typed_version_is_refused(tmp_path, value):
    doc = _edited("schema_version", value)
    assert "field 'schema_version' should be a whole number" in _refused(tmp_path, doc)


def test_an_old_manifest_without_version_is_read(tmp_path):
    doc = copy.deepcopy(MANIFEST_DOC)
    for key in ("schema_version",) + ADDED_SINCE:
        del doc[key]
    for key in ("args", "input_spec", "inputs"):
        del doc["model"][key]
    old = read_manifest(_write(tmp_path, doc))
    assert old.schema_version is None and old.files is None and old.model.inputs is None
    assert old.params.count == 10 and old.deployment is None
    del doc["params"]  # a key the first manifests had is still required
    assert "field 'params' is missing" in _refused(tmp_path, doc)


def test_a_versioned_manifest_needs_the_added_keys(tmp_path):
    for key in ADDED_SINCE:
        assert f"field '{key}' is missing" in _refused(tmp_path, _edited(key, drop=True))


def test_unknown_keys_are_refused_by_the_door_and_the_schema(tmp_path):
    for doc, key in [(dict(MANIFEST_DOC, later_key={"any": 1}), "later_key"),
                     (dict(MANIFEST_DOC, model=dict(MANIFEST_DOC["model"], extra=[1])),
                      "model.extra")]:
        assert f"field '{key}' is not a key of this document" in _refused(tmp_path, doc)
        assert problems(doc, "manifest"), key


def test_non_finite_figures_are_read_as_the_floats_written(tmp_path):
    doc = dict(MANIFEST_DOC, val_fraction="nan", export_seconds="inf")
    manifest = from_json(Manifest, doc, "manifest")
    assert math.isnan(manifest.val_fraction) and manifest.export_seconds == float("inf")
    assert MANIFEST.json(manifest) == doc and problems(doc, "manifest") == []
    assert "field 'val_fraction' should be a number, got 'NaN'" in _refused(
        tmp_path, dict(MANIFEST_DOC, val_fraction="NaN"))


def test_optional_keys_may_be_absent_or_set(tmp_path):
    doc = copy.deepcopy(MANIFEST_DOC)
    doc["model"].update(class_logits=[0], file="model/net.py", sha256="ef" * 32)
    doc["task"]["ignore_index"] = -100
    doc["model"]["inputs"][0]["range"] = [0, 10]
    assert MANIFEST.json(read_manifest(_write(tmp_path, doc))) == doc
    assert "field 'task.ignore_index'" in _refused(tmp_path, _edited("task.ignore_index", "x"))


def _dataclasses(cls: type, seen: dict) -> dict:
    """Every dataclass ``cls`` nests, by name."""
    seen[cls.__name__] = cls
    for kind in typing.get_type_hints(cls).values():
        stack = [kind]
        while stack:
            k = stack.pop()
            stack += typing.get_args(k)
            if dataclasses.is_dataclass(k) and k.__name__ not in seen:
                _dataclasses(k, seen)
    return seen


def test_the_schema_comes_from_the_types():
    schema = json_schema(MANIFEST)
    assert schema["properties"]["schema_version"] == {
        "type": "integer", "const": MANIFEST_VERSION,
        "description": field_docs(Manifest)["schema_version"]}
    assert set(schema["required"]) == {f.name for f in dataclasses.fields(Manifest)}
    assert schema["additionalProperties"] is False
    model = schema["$defs"]["ModelRecord"]
    assert "class_logits" in model["properties"] and "class_logits" not in model["required"]
    assert model["additionalProperties"] is False
    assert schema["properties"]["task"] == {
        "anyOf": [{"$ref": "#/$defs/Task"}, {"type": "null"}],
        "description": field_docs(Manifest)["task"]}
    assert schema["properties"]["export_seconds"]["anyOf"] == [
        {"type": "number"}, {"enum": ["nan", "inf", "-inf"]}]
    for name, cls in _dataclasses(Manifest, {}).items():
        undocumented = {f.name for f in dataclasses.fields(cls)} - set(field_docs(cls))
        assert not undocumented, f"{name}: fields without a docstring: {undocumented}"
        assert name == "Manifest" or name in schema["$defs"]


def test_pydantic_stays_off_the_start_up_path():
    import subprocess
    import sys

    code = ("import sys; import amptool.cli, amptool.documents.records, amptool.convert.result; "
            "assert not [m for m in sys.modules if m.startswith('pydantic')], 'pydantic'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_the_suite_holds_what_a_writer_writes_to_the_published_schema(monkeypatch):
    """tests/conftest.py checks every document a writer gives (``Door.json``) against the
    committed schema: a writer planting a key, or leaving one out, fails the test it ran in."""
    from amptool.documents import door
    from amptool.documents.door import Door

    assert hasattr(Door.json, "unchecked"), "the session's check is not installed"
    assert MANIFEST.json(MANIFEST_DOC) == MANIFEST_DOC
    real = door.to_json
    for plant in (lambda d: {**d, "later_key": 1},
                  lambda d: {k: v for k, v in d.items() if k != "sha256"},
                  lambda d: {**d, "model": {**d["model"], "num_classes": "10"}}):
        monkeypatch.setattr(door, "to_json", lambda obj, plant=plant: plant(real(obj)))
        with pytest.raises(AssertionError, match="its published schema refuses"):
            MANIFEST.json(MANIFEST_DOC)
