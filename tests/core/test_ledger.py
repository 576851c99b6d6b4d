"""The parity ledger's storage (amptool.ledger): records appended and read back, several
processes appending at once, an older ledger migrated in place, and each way a ledger fails
(missing, unreachable, locked, damaged, newer, foreign) as one line; on SQLite and, where a
server is given (``AMPTOOL_TEST_POSTGRES_URL``, which .ci/run sets), on PostgreSQL."""
from __future__ import annotations

import json
import sqlite3
import subprocess
import sys

import pytest
from ledgerkit import (appenders, candidate, postgres_database, postgres_server, report,
                       v1_ledger, v1_row)

from amptool.ledger.record import RecordContext
from amptool.ledger.store import RecordFilter, open_ledger, record_report
from amptool.ledger.url import LedgerError, ledger_url, shown

SERVER = postgres_server()
NO_SERVER = ("no PostgreSQL server: set AMPTOOL_TEST_POSTGRES_URL to a URL whose user may "
             "create databases (.ci/run starts Debian's postgresql and sets it)")


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.skipif(
    SERVER is None, reason=NO_SERVER))])
def ledger(request, tmp_path):
    """An empty ledger's URL (not yet made): an SQLite file, or a new PostgreSQL database."""
    if request.param == "sqlite":
        yield str(tmp_path / "ledger.db")
        return
    assert SERVER is not None
    with postgres_database(SERVER) as url:
        yield url


def _context(commit="c0ffee" * 6 + "ab", label=None) -> RecordContext:
    return RecordContext("2026-01-01T00:00:00+00:00", "0.1.0", "2.10.0", commit, "main", label)


def test_records_are_appended_and_read_back_whole(ledger):
    files = [{"path": "net_graph.mindir", "size": 10, "sha256": "a" * 64},
             {"path": "net_variables/data_0", "size": 99, "sha256": "b" * 64}]
    failing = candidate("bad.mindir", passed=False, metrics={
        "cosine": float("nan"), "nonfinite": 12, "p999_abs_scaled": float("inf")},
        files=[{"path": "bad.mindir", "size": 3, "sha256": "c" * 64}])
    rep = report(candidate("net_graph.mindir", files=files), failing)
    appended = record_report(ledger, rep, context=_context(label="nightly"))
    assert [r.id for r in appended] == [1, 2]
    with open_ledger(ledger) as book:
        assert book.migrated_from == 2 and book.count() == 2
        good, bad = book.records()
    assert (good.sha256, good.files, good.weights) == ("a" * 64, files, ("b" * 64,))
    assert (good.verdict, good.passed, good.model, good.reference_precision) == (
        "PASS", True, "simplecnn", "fp32")
    assert (good.commit, good.branch, good.label, good.samples) == (
        "c0ffee" * 6 + "ab", "main", "nightly", 200)
    assert good.outputs[0].figure("cosine") == 0.99995
    assert good.outputs[0].thresholds["min_cosine"] == 0.999
    assert not bad.passed and bad.verdict == "FAIL" and bad.failure().startswith("logits: cosine")
    nan, inf = bad.outputs[0].figure("cosine"), bad.outputs[0].figure("p999_abs_scaled")
    assert nan != nan and inf == float("inf")  # non-finite figures survive the round trip


def test_filters_and_figures_read_what_matches(ledger):
    for i in range(5):
        rep = report(candidate(f"a{i}.mindir", passed=i != 3, metrics={
            "cosine": 1 - i * 1e-5, "p999_abs_scaled": 0.001 * (i + 1), "nonfinite": 0},
            files=[{"path": f"a{i}.mindir", "size": 1, "sha256": f"{i:064x}"}]))
        record_report(ledger, rep, context=_context(commit=str(i) * 40, label=f"l{i % 2}"))
    with open_ledger(ledger) as book:
        assert [r.id for r in book.records(RecordFilter(last=2))] == [4, 5]
        assert [r.id for r in book.records(RecordFilter(label="l1"))] == [2, 4]
        assert [r.id for r in book.records(RecordFilter(verdict="fail"))] == [4]
        assert [r.id for r in book.records(RecordFilter(commit="2" * 12))] == [3]
        assert [r.id for r in book.records(RecordFilter(format="mindir", precision="FP16",
                                                        model="simplecnn"))] == [1, 2, 3, 4, 5]
        assert book.records(RecordFilter(model="lenet5")) == []
        heads, values = book.figures(RecordFilter(last=3), ["p999_abs_scaled"])
        assert [(h.id, h.passed, h.where) for h in heads] == [
            (3, True, "2" * 10 + " l0"), (4, False, "3" * 10 + " l1"), (5, True, "4" * 10 + " l0")]
        assert values == [(i, "logits", "p999_abs_scaled", pytest.approx(0.001 * i))
                          for i in (3, 4, 5)]
        assert [r.id for r in book.of_bytes(f"{4:064x}")] == [5]
        assert book.of_bytes(f"{4:064x}", ["f" * 64]) == []  # other weight files: other bytes


@pytest.mark.slow
def test_parallel_writers_lose_nothing(ledger, tmp_path):
    """Six processes append 15 records each at the same moment (as parallel CI jobs do):
    every record arrives once, none is refused."""
    results = appenders(ledger, 6, 15, tmp_path)
    assert all(code == 0 for code, _ in results), [err for _, err in results]
    with open_ledger(ledger) as book:
        found = book.records()
    assert len(found) == 90 and sorted(r.id for r in found) == list(range(1, 91))
    assert {(r.label, r.artefact) for r in found} == {
        (f"w{n}", f"w{n}-{i}.mindir") for n in range(6) for i in range(15)}
    if not ledger.startswith("postgresql"):
        mode = sqlite3.connect(ledger).execute("PRAGMA journal_mode").fetchone()[0]
        assert mode == "wal"
        # the planted fault: writers that do not wait for the lock are refused
        (tmp_path / "planted").mkdir()
        refused = appenders(f"sqlite:///{tmp_path / 'planted' / 'l.db'}?timeout=0", 6, 15,
                            tmp_path / "planted")
        assert any("is locked by another writer" in err for _, err in refused)


def test_a_version_1_ledger_is_migrated_in_place_with_nothing_lost(ledger):
    url = ledger_url(ledger)
    rows = [v1_row(i, 0.001 * (i + 1), passed=i != 1) for i in range(3)]
    v1_ledger(url, rows)
    with open_ledger(ledger) as book:  # a reader migrates it (under the write lock)
        assert book.migrated_from == 1
        found = book.records()
        _, figure_rows = book.figures(RecordFilter(), [])
    assert [r.sha256 for r in found] == [row["sha256"] for row in rows]
    for rec, row in zip(found, rows):
        assert rec.outputs[0].to_dict() == json.loads(row["outputs"])[0]
        assert (rec.commit, rec.branch, rec.passed, rec.policy, rec.files) == (
            row["commit"], "main", row["passed"], {"level": "O2"}, json.loads(row["files"]))
        assert rec.reference_precision is None and rec.facts_from is None  # added columns
    assert {r[2]: r[3] for r in figure_rows if r[0] == 3} == {  # the interval is no figure row
        "cosine": pytest.approx(1 - 2e-6), "p999_abs_scaled": pytest.approx(0.003),
        "nonfinite": 0.0}
    appended = record_report(ledger, report(candidate("new.mindir", files=[
        {"path": "new.mindir", "size": 1, "sha256": "e" * 64}])), context=_context())
    assert appended[0].id == 4
    with open_ledger(ledger) as book:
        assert book.migrated_from == 2 and book.count() == 4


def test_a_newer_or_foreign_database_is_refused_untouched(tmp_path):
    newer = tmp_path / "newer.db"
    record_report(str(newer), report(candidate("a.mindir", files=[
        {"path": "a.mindir", "size": 1, "sha256": "a" * 64}])), context=_context())
    with sqlite3.connect(newer) as conn:
        conn.execute("UPDATE ledger_meta SET value = '9' WHERE key = 'schema_version'")
    with pytest.raises(LedgerError, match="has schema version 9, newer than this amptool "
                                          r"reads \(2\); upgrade amptool"):
        with open_ledger(str(newer), create=True):
            pass
    foreign = tmp_path / "foreign.db"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE people (name TEXT)")
    with pytest.raises(LedgerError, match="holds tables but no amptool ledger version"):
        with open_ledger(str(foreign), create=True):
            pass
    assert [r[0] for r in sqlite3.connect(foreign).execute(
        "SELECT name FROM sqlite_master")] == ["people"]


def test_each_way_a_ledger_fails_is_one_line(tmp_path):
    rep = report(candidate("a.mindir", files=[{"path": "a.mindir", "size": 1,
                                               "sha256": "a" * 64}]))
    damaged = tmp_path / "damaged.db"
    damaged.write_bytes(b"this is no database, only bytes " * 64)
    with pytest.raises(LedgerError, match="is damaged or not an SQLite database"):
        record_report(str(damaged), rep)
    with pytest.raises(LedgerError, match="cannot be opened for writing"):
        record_report(str(tmp_path / "no" / "such" / "folder.db"), rep)
    with pytest.raises(LedgerError, match=r"does not exist; check the path"):
        with open_ledger(str(tmp_path / "missing.db")):
            pass
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()
    with pytest.raises(LedgerError, match="holds no record yet"):
        with open_ledger(str(empty)):
            pass
    with pytest.raises(LedgerError, match="cannot be reached"):
        record_report("postgresql+psycopg://nobody:secret@127.0.0.1:9/none", rep)
    with pytest.raises(LedgerError, match="unknown scheme 'mysql://'"):
        record_report("mysql://u:p@h/db", rep)
    with pytest.raises(LedgerError, match="in-memory ledger keeps nothing"):
        record_report("sqlite://", rep)


@pytest.mark.slow
def test_a_locked_ledger_waits_its_timeout_then_says_so(tmp_path):
    path = tmp_path / "busy.db"
    rep = report(candidate("a.mindir", files=[{"path": "a.mindir", "size": 1,
                                               "sha256": "a" * 64}]))
    record_report(str(path), rep)
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sqlite3, sys, time; c = sqlite3.connect(sys.argv[1], isolation_level=None); "
        "c.execute('BEGIN IMMEDIATE'); print('held', flush=True); time.sleep(30)"), str(path)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(LedgerError, match="is locked by another writer") as caught:
            record_report(f"sqlite:///{path}?timeout=0.3", rep)
        assert "?timeout=SECONDS" in str(caught.value)
    finally:
        holder.kill()
        holder.wait()
    assert len(record_report(f"sqlite:///{path}?timeout=5", rep)) == 1  # free again


def _onnx_with_provenance(path, provenance) -> None:
    """A real (tiny) ONNX file carrying ``provenance`` in its metadata_props, as export
    writes it."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    from amptool.documents.provenance import PROVENANCE_KEY

    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "net",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    model = helper.make_model(graph)
    helper.set_model_props(model, {PROVENANCE_KEY: provenance.to_json()})
    onnx.save(model, str(path))


def test_facts_come_from_the_provenance_inside_the_artefact_where_it_has_some(tmp_path):
    """The record's model, precision, policy and kept cells: the provenance the artefact
    carries inside its file, over the manifest beside it; without either, what the report
    knows."""
    from amptool.documents.manifest import KeptCell, PolicyRecord
    from amptool.documents.provenance import (PROVENANCE_VERSION, Provenance,
                                              SourceCheckpoint)
    from amptool.ledger.facts import artefact_facts

    art = tmp_path / "net_fp16.onnx"
    art.write_bytes(b"graph")
    (tmp_path / "net_fp16.onnx.json").write_text("{not json")  # an unreadable manifest
    assert artefact_facts(str(art)).source == "report"
    policy = PolicyRecord("O2", "float16", [], ["head"], [])
    _onnx_with_provenance(art, Provenance(
        PROVENANCE_VERSION, "0.1.0", "2.10.0", "ONNX", "fp16", "fp32", "my_net.py:build",
        None, SourceCheckpoint("last.ckpt", "0" * 64), policy,
        [KeptCell("head", "Dense"), KeptCell("", "Net")], None, None, "2026-01-01T00:00:00Z"))
    facts = artefact_facts(str(art))
    assert (facts.source, facts.model, facts.precision, facts.kept_cells) == (
        "provenance", "my_net.py:build", "fp16", ["head", ""])
    assert facts.policy is not None and facts.policy["fp32_cells"] == ["head"]
    (rec,) = record_report(str(tmp_path / "l.db"), report(candidate(str(art))),
                           context=_context())
    assert (rec.facts_from, rec.model, rec.kept_cells) == ("provenance", "my_net.py:build",
                                                           ["head", ""])
    assert artefact_facts(str(tmp_path / "foreign.onnx")).source == "report"


def test_urls_name_the_database_and_hide_the_password(tmp_path):
    assert ledger_url(str(tmp_path / "l.db")) == f"sqlite:///{tmp_path / 'l.db'}"
    assert ledger_url("sqlite:///rel/l.db?timeout=2") == "sqlite:///rel/l.db?timeout=2"
    assert ledger_url("sqlite:////abs/l.db") == "sqlite:////abs/l.db"
    assert ledger_url("postgresql://u:pw@h:5432/db") == "postgresql+psycopg://u:pw@h:5432/db"
    assert shown("postgresql+psycopg://u:pw@h/db") == "postgresql+psycopg://u:***@h/db"
    with pytest.raises(LedgerError, match="names no database"):
        ledger_url("postgresql+psycopg://u@h")
