"""The documents the stages write (run.json, the parity report, summary.json, a golden file's
meta, the search result) carry schema_version and fit their published schemas, as real runs
write them."""
from __future__ import annotations

import dataclasses
import json
from collections import Counter
import typing
from pathlib import Path

import pytest
from typer.testing import CliRunner

from schemas import assert_fits, documents_under, read

from amptool.cli import app
from amptool.convert.result import SEARCH
from amptool.documents.diff import DIFF
from amptool.documents.door import field_docs, read_document
from amptool.documents.manifest import MANIFEST
from amptool.documents.parity import PARITY_REPORT
from amptool.documents.provenance import PROVENANCE
from amptool.documents.records import GOLDEN, RUN
from amptool.documents.summary import SUMMARY

DOORS = (MANIFEST, RUN, PARITY_REPORT, SUMMARY, GOLDEN, SEARCH, DIFF, PROVENANCE)


def _nested(cls: type, seen: dict) -> dict:
    """Every dataclass ``cls`` nests, by name (``cls`` too)."""
    seen[cls.__name__] = cls
    stack = list(typing.get_type_hints(cls).values())
    while stack:
        kind = stack.pop()
        stack += typing.get_args(kind)
        if dataclasses.is_dataclass(kind) and kind.__name__ not in seen:
            _nested(kind, seen)
    return seen


@pytest.mark.parametrize("door", DOORS, ids=lambda d: d.schema)
def test_every_field_has_a_docstring_and_a_version(door):
    for name, cls in _nested(door.kind, {}).items():
        missing = {f.name for f in dataclasses.fields(cls)} - set(field_docs(cls))
        assert not missing, f"{name}: fields without a docstring: {sorted(missing)}"
    assert "schema_version" in {f.name for f in dataclasses.fields(door.kind)}


def _fits(doc: dict, door, where: str) -> None:
    """``doc`` fits its published schema and reads back through its door unchanged."""
    assert doc.get("schema_version") == door.version, where
    assert_fits(doc, door.schema.replace(".schema.json", ""), where)
    assert door.json(read_document(door, json.dumps(doc), where)) == doc, where


@pytest.mark.slow  # the docs' pipelines, run once per session
@pytest.mark.parametrize("name,out,code", [("quickstart", "runs/pipeline", 0),
                                           ("trap", "runs/ci-trap", 1)])
def test_a_pipeline_writes_records_that_fit(shared, name, out, code):
    from docruns import DOC_RUNS, cli_run

    run = cli_run(shared, DOC_RUNS[name])
    assert run.exit_code == code, run.output[-3000:]
    folder = run.cwd / out
    read = lambda rel: json.loads((folder / rel).read_text())  # noqa: E731
    _fits(read("summary.json"), SUMMARY, "summary")
    _fits(read("parity.json"), PARITY_REPORT, "parity.json")
    _fits(read("train/run.json"), RUN, "run.json")
    manifests = sorted((folder / "export").glob("*.json"))
    assert manifests
    for path in manifests:
        _fits(read(path.relative_to(folder)), MANIFEST, path.name)


@pytest.mark.slow  # exports a real network (once per session)
def test_parity_json_carries_the_version(simplecnn_export):
    result = CliRunner().invoke(app, ["parity", simplecnn_export[("MINDIR", "fp32")],
                                      simplecnn_export[("MINDIR", "fp16")], "--json",
                                      "--samples", "64"])
    assert result.exit_code in (0, 1), result.output
    report = json.loads(result.stdout)
    _fits(report, PARITY_REPORT, "--json")


def _golden_meta(path: Path) -> dict:
    import numpy as np

    with np.load(path) as z:
        return json.loads(z["meta"].tobytes().decode("utf-8"))


def _rewrite_meta(src: Path, dst: Path, meta: dict) -> Path:
    import numpy as np

    with np.load(src) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode("utf-8"), dtype=np.uint8)
    np.savez(dst, **arrays)
    return dst


@pytest.mark.slow  # exports a real network (once per session)
def test_a_golden_file_fits_and_a_hand_edited_one_is_refused(simplecnn_export, tmp_path):
    ref, cand = simplecnn_export[("MINDIR", "fp32")], simplecnn_export[("MINDIR", "fp16")]
    golden = tmp_path / "golden.npz"
    cli = CliRunner()
    saved = cli.invoke(app, ["parity", ref, cand, "--samples", "32", "--save-outputs",
                             str(golden), "-q"])
    assert saved.exit_code == 0, saved.output
    meta = _golden_meta(golden)
    _fits(meta, GOLDEN, "golden meta")
    old = {k: v for k, v in meta.items() if k not in ("schema_version", "target_names",
                                                       "labels_from", "task")}
    read = cli.invoke(app, ["parity", "--load-outputs",
                            str(_rewrite_meta(golden, tmp_path / "old.npz", old)), cand, "-q"])
    assert read.exit_code == 0, read.output
    for edit, said, fix in [
            ({"format": None}, "field 'format' should be a string, got null", "make it with"),
            ({"schema_version": 9}, "field 'schema_version' is 9, newer than",
             "upgrade amptool")]:
        bad = _rewrite_meta(golden, tmp_path / "bad.npz", {**meta, **edit})
        result = cli.invoke(app, ["parity", "--load-outputs", str(bad), cand])
        assert result.exit_code == 2, result.output
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert len(lines) == 1, result.output
        assert lines[0].startswith(f"amptool: error: golden outputs file {bad}: {said}")
        assert f"; {fix}" in lines[0], lines[0]


def test_the_committed_schemas_name_the_versions_and_refuse_unknown_keys():
    folder = Path(__file__).resolve().parents[2] / "docs" / "reference" / "schemas"
    assert sorted(p.name for p in folder.glob("*.schema.json")) == sorted(d.schema for d in DOORS)
    for door in DOORS:
        schema = json.loads((folder / door.schema).read_text())
        assert schema["properties"]["schema_version"]["const"] == door.version, door.schema
        objects = [schema] + list(schema.get("$defs", {}).values())
        assert all(o.get("additionalProperties") is False for o in objects
                   if o.get("type") == "object" and "properties" in o), door.schema


@pytest.mark.slow  # trains and exports the sample networks (once per session)
def test_every_document_the_session_keeps_fits(shared, simplecnn_export):
    """The runs, exports and pipelines the session shares, whichever process wrote them (a
    test's own process, an amptool subprocess, an msrun worker), fit the published schemas."""
    found: Counter = Counter()
    for kind, path in documents_under(shared.root):
        assert_fits(read(path, kind), kind, str(path))
        found[kind] += 1
    assert found["manifest"] >= len(simplecnn_export) and found["run"] >= 1, found
