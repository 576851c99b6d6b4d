"""The records the stages write (run.json, the parity report, summary.json) carry
schema_version and fit their types in ``amptool.documents.records``, as real runs write them."""
from __future__ import annotations

import dataclasses
import json
import typing
from pathlib import Path

import pytest
from typer.testing import CliRunner

from amptool.cli import app
from amptool.documents import records
from amptool.documents.door import field_docs, misfit
from amptool.documents.manifest import Manifest

RECORDS = (records.RunRecord, records.ParityReportRecord, records.SummaryRecord,
           records.GoldenMeta)


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


@pytest.mark.parametrize("record", RECORDS, ids=lambda c: c.__name__)
def test_every_field_has_a_docstring_and_a_version(record):
    for name, cls in _nested(record, {}).items():
        missing = {f.name for f in dataclasses.fields(cls)} - set(field_docs(cls))
        assert not missing, f"{name}: fields without a docstring: {sorted(missing)}"
    assert "schema_version" in {f.name for f in dataclasses.fields(record)}


def _fits(doc: dict, cls: type, version: int, where: str) -> None:
    assert doc.get("schema_version") == version, where
    found = misfit(doc, cls, "")
    assert found is None, f"{where}: {found.text()}"


@pytest.mark.slow  # the docs' pipelines, run once per session
@pytest.mark.parametrize("name,out,code", [("quickstart", "runs/pipeline", 0),
                                           ("trap", "runs/ci-trap", 1)])
def test_a_pipeline_writes_records_that_fit(shared, name, out, code):
    from docruns import DOC_RUNS, cli_run

    run = cli_run(shared, DOC_RUNS[name])
    assert run.exit_code == code, run.output[-3000:]
    folder = run.cwd / out
    read = lambda rel: json.loads((folder / rel).read_text())  # noqa: E731
    _fits(read("summary.json"), records.SummaryRecord, records.SUMMARY_VERSION, "summary")
    _fits(read("parity.json"), records.ParityReportRecord, records.PARITY_REPORT_VERSION,
          "parity.json")
    _fits(read("train/run.json"), records.RunRecord, records.RUN_VERSION, "run.json")
    manifests = sorted((folder / "export").glob("*.json"))
    assert manifests
    for path in manifests:
        _fits(read(path.relative_to(folder)), Manifest, 1, path.name)


@pytest.mark.slow  # exports a real network (once per session)
def test_parity_json_carries_the_version(simplecnn_export):
    result = CliRunner().invoke(app, ["parity", simplecnn_export[("MINDIR", "fp32")],
                                      simplecnn_export[("MINDIR", "fp16")], "--json",
                                      "--samples", "64"])
    assert result.exit_code in (0, 1), result.output
    report = json.loads(result.stdout)
    _fits(report, records.ParityReportRecord, records.PARITY_REPORT_VERSION, "--json")


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
    _fits(meta, records.GoldenMeta, records.GOLDEN_VERSION, "golden meta")
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


def test_the_committed_schemas_name_the_versions():
    folder = Path(__file__).resolve().parents[2] / "docs" / "reference" / "schemas"
    for name, version in [("run", records.RUN_VERSION),
                          ("parity-report", records.PARITY_REPORT_VERSION),
                          ("summary", records.SUMMARY_VERSION),
                          ("golden-meta", records.GOLDEN_VERSION)]:
        schema = json.loads((folder / f"{name}.schema.json").read_text())
        assert schema["properties"]["schema_version"]["const"] == version, name
