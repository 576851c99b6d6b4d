"""Helpers of the ledger's tests: parity reports written by hand (``report``), a ledger of the
first schema version made as that version made it (``v1_ledger``), a fresh PostgreSQL
database a test (``postgres_database``), several processes appending at once (``appenders``).

Tests import these by name (``from ledgerkit import report``): tests/conftest.py puts this
folder on ``sys.path``.
"""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Iterator, Optional

POSTGRES_ENV = "AMPTOOL_TEST_POSTGRES_URL"
"""A PostgreSQL URL whose user may create databases; .ci/run starts a server and sets it."""

LIMITS = {"min_cosine": 0.999, "min_top1": 0.99, "max_acc_drop": 0.005, "max_abs": None,
          "max_abs_scaled": None, "max_p999_abs_scaled": None, "max_rel": None,
          "max_outside": None, "atol": 1e-3, "rtol": 1e-2, "allow_nonfinite": False,
          "max_metric_drop": 0.0}
"""The default limits of an fp16 candidate's class logits."""


def candidate(path: str, passed: bool = True, metrics: Optional[dict] = None,
              limits: Optional[dict] = None, files: Optional[list] = None,
              name: str = "logits", precision: str = "fp16") -> dict:
    """One candidate of a hand-written report: one output ``name`` with ``metrics``."""
    limits = dict(LIMITS, **(limits or {}))
    metrics = metrics if metrics is not None else {"cosine": 0.99995, "p999_abs_scaled": 0.002,
                                                   "nonfinite": 0, "top1_agree": 1.0,
                                                   "top1_agree_clear": 1.0}
    checks = [] if passed else [{"metric": "cosine", "value": metrics.get("cosine"),
                                 "limit": ">= 0.999", "passed": False}]
    cand = {"path": path, "format": "MINDIR", "precision": precision, "kind": "artefact",
            "passed": passed, "thresholds": limits, "task": None, "findings": [],
            "fp16_faithful": True, "caveat": None, "per_layer": None, "weights": None,
            "culprit": None, "deployment": None,
            "outputs": [{"name": name, "metrics": metrics, "checks": checks, "passed": passed,
                         "thresholds": limits}]}
    if files is not None:
        cand["files"] = files
    return cand


def report(*candidates: dict, samples: int = 200):
    """A ``ParityReport`` of ``candidates`` (from ``candidate``) against an fp32 MINDIR."""
    from amptool.documents.parity import ParityReport

    return ParityReport.from_dict({
        "passed": all(c["passed"] for c in candidates),
        "reference": {"path": "ref_fp32.mindir", "kind": "artefact", "format": "MINDIR",
                      "precision": "fp32", "model": "simplecnn", "preprocess": None,
                      "policy": None},
        "inputs": {"description": "digits", "samples": samples, "labels": True,
                   "targets": [], "labels_from": "digits"},
        "candidates": list(candidates), "golden_saved": None, "device": "CPU",
        "seconds": 1.0, "schema_version": 1})


V1_RECORDS = """CREATE TABLE records (
    id {id}, recorded_at VARCHAR(40) NOT NULL, artefact TEXT NOT NULL,
    sha256 VARCHAR(64) NOT NULL, files {json} NOT NULL, format VARCHAR(16) NOT NULL,
    precision VARCHAR(16), model TEXT, policy {json}, kept_cells {json}, reference TEXT,
    samples INTEGER, device VARCHAR(16), amptool_version VARCHAR(40),
    mindspore_version VARCHAR(40), "commit" VARCHAR(64), branch TEXT, label TEXT,
    passed BOOLEAN NOT NULL, verdict VARCHAR(8) NOT NULL, thresholds {json},
    outputs {json} NOT NULL)"""
"""The records table of schema version 1, as that version created it."""


def v1_row(i: int, p999: float, passed: bool = True) -> dict:
    """A version-1 record: its outputs JSON holds the figures."""
    outputs = [{"name": "logits", "passed": passed, "thresholds": LIMITS,
                "figures": {"cosine": 1 - i * 1e-6, "p999_abs_scaled": p999, "nonfinite": 0,
                            "acc_drop_ci": [0.0, 0.01]},
                "breaches": [] if passed else ["cosine 0.9 (limit >= 0.999)"]}]
    return {"recorded_at": f"2026-01-0{i + 1}T00:00:00+00:00", "artefact": f"a{i}.mindir",
            "sha256": f"{i:064x}", "files": json.dumps([{"path": f"a{i}.mindir", "size": 1,
                                                         "sha256": f"{i:064x}"}]),
            "format": "MINDIR", "precision": "fp16", "model": "simplecnn",
            "policy": json.dumps({"level": "O2"}), "kept_cells": json.dumps([]),
            "reference": "ref.mindir", "samples": 200, "device": "CPU",
            "amptool_version": "0.1.0", "mindspore_version": "2.10.0",
            "commit": f"{i:040x}", "branch": "main", "label": None, "passed": passed,
            "verdict": "PASS" if passed else "FAIL", "thresholds": json.dumps(LIMITS),
            "outputs": json.dumps(outputs)}


def v1_ledger(url: str, rows: list) -> None:
    """Write a ledger of schema version 1 holding ``rows`` (``v1_row``) at ``url``."""
    import sqlalchemy as sa

    postgres = url.startswith("postgresql")
    engine = sa.create_engine(url)
    ddl = V1_RECORDS.format(id="SERIAL PRIMARY KEY" if postgres else "INTEGER PRIMARY KEY",
                            json="JSON" if postgres else "TEXT")
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE ledger_meta (key VARCHAR(64) PRIMARY KEY, "
                             "value TEXT NOT NULL)"))
        conn.execute(sa.text("INSERT INTO ledger_meta VALUES ('schema_version', '1')"))
        conn.execute(sa.text(ddl))
        names = list(rows[0]) if rows else []
        quoted = ", ".join(f'"{n}"' for n in names)
        for row in rows:
            conn.execute(sa.text(f"INSERT INTO records ({quoted}) VALUES "
                                 f"({', '.join(':' + n for n in names)})"), row)
    engine.dispose()


def postgres_server() -> Optional[str]:
    """The URL of ``POSTGRES_ENV`` when its server answers, else None."""
    url = os.environ.get(POSTGRES_ENV)
    if not url:
        return None
    try:
        import sqlalchemy as sa

        engine = sa.create_engine(url, connect_args={"connect_timeout": 5})
        with engine.connect():
            pass
        engine.dispose()
    except Exception:  # noqa: BLE001 - any failure to connect: the tests skip
        return None
    return url


@contextlib.contextmanager
def postgres_database(server: str) -> Iterator[str]:
    """A new, empty database on ``server`` for one test (dropped after): its URL."""
    import sqlalchemy as sa

    name = f"amptool_test_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    base = sa.engine.make_url(server)
    try:
        yield base.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


APPENDER = """
import sys, time
from pathlib import Path
sys.path.insert(0, {tests!r})
from ledgerkit import candidate, report
from amptool.ledger.store import record_report
url, who, count, start = sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
while not start.exists():
    time.sleep(0.005)
for i in range(count):
    record_report(url, report(candidate(f"{{who}}-{{i}}.mindir", files=[
        {{"path": f"{{who}}-{{i}}.mindir", "size": 1, "sha256": f"{{i:064x}}"}}])), label=who)
"""


def appenders(url: str, processes: int, count: int, folder: Path) -> list:
    """Start ``processes`` processes that each append ``count`` records to ``url`` at once
    (they wait for one start file); returns their exit codes and error output."""
    start = folder / "start"
    script = APPENDER.format(tests=str(Path(__file__).resolve().parent))
    procs = [subprocess.Popen([sys.executable, "-c", script, url, f"w{n}", str(count),
                               str(start)], stderr=subprocess.PIPE, text=True)
             for n in range(processes)]
    start.touch()
    return [(p.wait(timeout=300), p.stderr.read() if p.stderr else "") for p in procs]


def plant(ledger: str, figures: list, passed: Optional[list] = None, start: int = 0,
          artefact: str = "net_fp16.mindir") -> None:
    """Append one record per entry of ``figures`` (each the metrics of one check of the same
    kind of artefact) to ``ledger``, each at its own commit (``commit(i)``) on main."""
    from amptool.ledger.record import RecordContext
    from amptool.ledger.store import record_report

    for i, metrics in enumerate(figures, start):
        ok = True if passed is None else passed[i - start]
        rep = report(candidate(artefact, passed=ok, metrics=dict(metrics), files=[
            {"path": artefact, "size": 1, "sha256": f"{i:064x}"}]))
        context = RecordContext(f"2026-02-{1 + i // 24:02d}T{i % 24:02d}:00:00+00:00",
                                "0.1.0", "2.10.0", commit(i), "main", None)
        record_report(ledger, rep, context=context)


def commit(i: int) -> str:
    """The made-up commit of the ``i``-th planted record."""
    import hashlib

    return hashlib.sha1(f"commit {i}".encode()).hexdigest()
