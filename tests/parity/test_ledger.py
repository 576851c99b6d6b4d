"""``--ledger`` on ``amptool parity`` and ``amptool run``: one record per candidate, with the
bytes checked, the facts of the artefact, the versions, the git checkout and every figure;
a ledger that cannot take them (unreachable, locked, damaged) is one line and exit 2, with
every report still written."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from amptool.artefact.files import file_facts
from amptool.cli import app
from amptool.ledger.store import open_ledger

pytestmark = pytest.mark.slow  # parity and pipeline runs
runner = CliRunner()


def _invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def _error_lines(result) -> list:
    return [line for line in result.output.splitlines() if line.startswith("amptool: error:")]


def _git_checkout(folder: Path) -> str:
    """A git checkout on branch main with one commit; returns the commit."""
    folder.mkdir()
    for args in (["init", "-q", "-b", "main"], ["-c", "user.name=t", "-c", "user.email=t@t",
                                                 "commit", "-q", "--allow-empty", "-m", "x"]):
        subprocess.run(["git", *args], cwd=folder, check=True, capture_output=True)
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=folder, check=True,
                          capture_output=True, text=True).stdout.strip()


def test_parity_records_each_candidate_with_its_bytes_facts_and_figures(simplecnn, tmp_path,
                                                                        monkeypatch):
    commit = _git_checkout(tmp_path / "repo")
    monkeypatch.chdir(tmp_path / "repo")
    ledger, js = tmp_path / "ledger.db", tmp_path / "r.json"
    cands = [simplecnn["mindir_fp16"], simplecnn.get("onnx_fp32") or simplecnn["mindir_fp32"]]
    result = _invoke("parity", simplecnn["mindir_fp32"], *cands, "--samples", 48,
                     "--ledger", ledger, "--label", "nightly", "--json-out", js)
    assert result.exit_code == 0, result.output
    assert f"ledger: 2 record(s) appended to sqlite:///{ledger}" in result.output
    report = json.loads(js.read_text())
    with open_ledger(str(ledger)) as book:
        records = book.records()
    assert [r.artefact for r in records] == cands
    for rec, cand in zip(records, report["candidates"]):
        manifest = json.loads(Path(cand["path"] + ".json").read_text())
        assert rec.files == file_facts(cand["path"]) == cand["files"]
        assert rec.sha256 == manifest["sha256"]
        assert (rec.model, rec.precision, rec.policy, rec.facts_from) == (
            "simplecnn", manifest["precision"], manifest["policy"], "provenance")
        assert (rec.commit, rec.branch, rec.label) == (commit, "main", "nightly")
        assert (rec.amptool_version, rec.mindspore_version) == (
            manifest["amptool_version"], manifest["mindspore_version"])
        assert (rec.verdict, rec.samples, rec.reference_precision) == ("PASS", 48, "fp32")
        assert rec.outputs[0].to_dict()["figures"] == cand["outputs"][0]["metrics"]
        assert rec.outputs[0].thresholds == cand["outputs"][0]["thresholds"]
    # the config file's keys do the same
    config = tmp_path / "parity.yaml"
    config.write_text(f"ledger: sqlite:///{ledger}\nlabel: from-config\nsamples: 32\n")
    result = _invoke("parity", simplecnn["mindir_fp32"], simplecnn["mindir_fp16"],
                     "--config", config, "--quiet")
    assert result.exit_code == 0, result.output
    with open_ledger(str(ledger)) as book:
        last = book.records()[-1]
    assert (last.id, last.label, last.samples) == (3, "from-config", 32)


def _hold_lock(path: Path) -> subprocess.Popen:
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sqlite3, sys, time; c = sqlite3.connect(sys.argv[1], isolation_level=None); "
        "c.execute('BEGIN IMMEDIATE'); print('held', flush=True); time.sleep(60)"), str(path)],
        stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    return holder


@pytest.mark.parametrize("kind", ["unreachable", "locked", "damaged"])
def test_a_ledger_that_fails_costs_nothing_measured(kind, simplecnn, tmp_path):
    """parity --ledger: one line naming the ledger, exit 2; the report, its HTML page and the
    table are all there (a failed parity check too: the ledger's failure decides the code)."""
    holder = None
    if kind == "unreachable":
        url = "postgresql+psycopg://amptool:secret@127.0.0.1:9/ledger"
    elif kind == "locked":
        path = tmp_path / "busy.db"
        assert _invoke("parity", simplecnn["mindir_fp32"], simplecnn["mindir_fp16"],
                       "--samples", 16, "--ledger", path, "-q").exit_code == 0
        holder, url = _hold_lock(path), f"sqlite:///{path}?timeout=0.5"
    else:
        url = str(tmp_path / "damaged.db")
        Path(url).write_bytes(b"no database here, " * 100)
    js = tmp_path / "r.json"
    try:
        result = _invoke("parity", simplecnn["mindir_fp32"], simplecnn["mindir_fp16"],
                         "--samples", 32, "--ledger", url, "--json-out", js)
    finally:
        if holder is not None:
            holder.kill()
            holder.wait()
    assert result.exit_code == 2, result.output
    lines = _error_lines(result)
    assert len(lines) == 1 and "Traceback" not in result.output
    said = {"unreachable": "cannot be reached", "locked": "is locked by another writer",
            "damaged": "is damaged or not an SQLite database"}[kind]
    assert said in lines[0] and "secret" not in lines[0]
    assert json.loads(js.read_text())["passed"] is True
    assert "<!DOCTYPE html>" in js.with_suffix(".html").read_text()
    assert "parity PASSED" in result.output and "ledger: " not in result.output


def test_a_ledger_url_amptool_cannot_take_is_refused_before_any_work(simplecnn, tmp_path):
    js = tmp_path / "r.json"
    result = _invoke("parity", simplecnn["mindir_fp32"], simplecnn["mindir_fp16"],
                     "--ledger", "mysql://u@h/db", "--json-out", js)
    assert result.exit_code == 2 and not js.exists()
    assert "unknown scheme 'mysql://'" in _error_lines(result)[0]


def test_run_records_its_candidates_and_keeps_its_reports_when_the_ledger_fails(
        tiny_digits, tmp_path):
    out, ledger = tmp_path / "pipe", tmp_path / "ledger.db"
    args = ["run", "--data", tiny_digits, "--epochs", 1, "--samples", 32, "--onnx", "off", "-q"]
    result = _invoke(*args, "--out", out, "--ledger", ledger, "--label", "rc1")
    assert result.exit_code == 0, result.output
    assert f"ledger: 1 record(s) appended to sqlite:///{ledger}" in result.output
    with open_ledger(str(ledger)) as book:
        (rec,) = book.records()
    summary = json.loads((out / "summary.json").read_text())
    fp16 = next(r for r in summary["artefacts"] if r["precision"] == "fp16")
    assert (rec.artefact, rec.label, rec.verdict, rec.model) == (
        fp16["path"], "rc1", "PASS", "simplecnn")
    assert rec.files == file_facts(fp16["path"])
    # the Python API says the same of a ledger that fails, and hands back what it measured
    from amptool.ledger.url import LedgerError
    from amptool.pipeline import PipelineConfig, PipelineResult, run_pipeline
    from amptool.train.config import TrainConfig

    damaged = tmp_path / "damaged.db"
    damaged.write_bytes(b"x" * 4096)
    cfg = PipelineConfig(train=TrainConfig(data=tiny_digits, epochs=1), out=str(tmp_path / "api"),
                         samples=32, onnx="off", ledger=str(damaged))
    with pytest.raises(LedgerError, match="is damaged") as caught:
        run_pipeline(cfg)
    assert isinstance(caught.value.measured, PipelineResult) and caught.value.measured.passed
    for name in ("summary.json", "parity.json", "parity.xml"):
        assert (tmp_path / "api" / name).is_file()
    # and the command line writes report.html too, then exits 2
    result = _invoke(*args, "--out", tmp_path / "cli", "--ledger", damaged)
    assert result.exit_code == 2 and "is damaged" in _error_lines(result)[0]
    assert (tmp_path / "cli" / "report.html").is_file()
    assert "parity PASSED" in result.output
