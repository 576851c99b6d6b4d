"""``Ledger``: a ledger opened by its URL, records appended in one transaction each and read
back by filter, by the bytes of an artefact, or as figures over time; ``record_report``
appends a parity report's candidates in one call.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, replace
from typing import Any, Iterator, List, Optional, Sequence

import sqlalchemy as sa

from amptool.files.fileio import jsonable
from amptool.ledger import schema
from amptool.ledger.database import WRITE, errors_named, make_engine, missing_file, ready
from amptool.ledger.record import (LedgerRecord, OutputEntry, RecordContext, RecordHead,
                                   current_context, records_from_report)
from amptool.ledger.url import LedgerError, ledger_url, shown

@dataclass(frozen=True)
class RecordFilter:
    """Which records to read; every field given must match (None: any)."""

    model: Optional[str] = None
    """The model reference, exactly."""
    format: Optional[str] = None
    """MINDIR, ONNX, ... (any case)."""
    precision: Optional[str] = None
    """fp32 or fp16."""
    branch: Optional[str] = None
    """The git branch, exactly."""
    commit: Optional[str] = None
    """A prefix of the git commit."""
    label: Optional[str] = None
    """The ``--label``, exactly."""
    sha256: Optional[str] = None
    """A prefix of the main file's sha256."""
    verdict: Optional[str] = None
    """pass or fail."""
    last: Optional[int] = None
    """Only the last N records that match."""


class Ledger:
    """A ledger opened by ``open_ledger``: its schema is this release's (made or migrated)."""

    def __init__(self, url: str, engine: sa.Engine, migrated_from: int):
        self.url = url
        """The SQLAlchemy URL (``shown(url)`` prints it without a password)."""
        self.engine = engine
        self.migrated_from = migrated_from
        """The schema version found on opening (0: made now; below ``SCHEMA_VERSION``:
        migrated in place)."""

    @property
    def name(self) -> str:
        """The URL as it may be printed."""
        return shown(self.url)

    def append(self, records: Sequence[LedgerRecord]) -> List[LedgerRecord]:
        """Append ``records`` in one transaction (all or none); returns them with their ids."""
        done = []
        with errors_named(self.url), self._writing() as conn:
            for rec in records:
                row = _row(rec)
                key = conn.execute(schema.records.insert().values(**row)).inserted_primary_key
                new_id = int(key[0]) if key else 0
                figures = schema.figure_rows(new_id, row["outputs"])
                if figures:
                    conn.execute(schema.figures.insert(), figures)
                done.append(replace(rec, id=new_id))
        return done

    def records(self, where: RecordFilter = RecordFilter()) -> List[LedgerRecord]:
        """The records that match, oldest first."""
        query = _filtered(sa.select(schema.records), where)
        with errors_named(self.url), self.engine.connect() as conn:
            rows = conn.execute(query).mappings().all()
        return sorted((_record(r) for r in rows), key=lambda r: r.id or 0)

    def of_bytes(self, sha256: str, weights: Sequence[str] = ()) -> List[LedgerRecord]:
        """Every record of the artefact whose main file has ``sha256`` and whose other files
        have the digests ``weights`` (any order, any names): those exact bytes, oldest first."""
        found = self.records(RecordFilter(sha256=sha256))
        return [r for r in found if r.sha256 == sha256 and r.weights == tuple(sorted(weights))]

    def figures(self, where: RecordFilter, names: Sequence[str]) -> tuple:
        """(a ``RecordHead`` of each record that matches, oldest first; its figures as
        ``(record id, output, figure, value)`` rows in record order, NaN for NULL) for the
        figures ``names`` (all when empty)."""
        heads = _filtered(sa.select(*(schema.records.c[c] for c in RecordHead._fields)), where)
        f = schema.figures
        ids = _filtered(sa.select(schema.records.c.id), where).subquery()
        query = sa.select(f.c.record_id, f.c.output, f.c.name, f.c.value).where(
            f.c.record_id.in_(sa.select(ids.c.id)))
        if names:
            query = query.where(f.c.name.in_(list(names)))
        with errors_named(self.url), self.engine.connect() as conn:
            rows = conn.execute(heads).all()
            values = conn.execute(query.order_by(f.c.record_id)).all()
        found = sorted((RecordHead._make(row)._replace(passed=bool(row.passed))
                        for row in rows), key=lambda h: h.id)
        nan = float("nan")
        return found, [(r[0], r[1], r[2], nan if r[3] is None else r[3]) for r in values]

    def count(self) -> int:
        with errors_named(self.url), self.engine.connect() as conn:
            return int(conn.execute(sa.select(sa.func.count()).select_from(schema.records))
                       .scalar() or 0)

    @contextlib.contextmanager
    def _writing(self) -> Iterator[sa.Connection]:
        with self.engine.connect().execution_options(**{WRITE: True}) as conn, conn.begin():
            yield conn

    def close(self) -> None:
        self.engine.dispose()


@contextlib.contextmanager
def open_ledger(text: str, create: bool = False) -> Iterator[Ledger]:
    """The ledger ``text`` names (a path, ``sqlite:///PATH`` or a PostgreSQL URL), its schema
    made (``create``: an SQLite file too) or migrated in place; closed after the block. A
    ledger that is missing, unreachable, locked, damaged or newer: one ``LedgerError``."""
    url = ledger_url(text)
    if not create and missing_file(url):
        raise LedgerError(f"ledger {shown(url)} does not exist",
                          "check the path, or append to it with amptool parity --ledger first")
    with errors_named(url):
        engine = make_engine(url)
        try:
            found = ready(engine, url, create)
        except BaseException:
            engine.dispose()
            raise
    ledger = Ledger(url, engine, found)
    try:
        yield ledger
    finally:
        ledger.close()


def record_report(text: str, report: Any, label: Optional[str] = None,
                  context: Optional[RecordContext] = None) -> List[LedgerRecord]:
    """Append one record per candidate of ``report`` (a ``ParityReport``) to the ledger
    ``text`` names (made when missing); ``context``: where and when (default: now, this
    checkout, ``label``). Returns the records with their ids."""
    records = records_from_report(report, context or current_context(label))
    with open_ledger(text, create=True) as ledger:
        return ledger.append(records)


def _filtered(query: Any, where: RecordFilter) -> Any:
    c = schema.records.c
    for name in ("model", "branch", "label"):
        value = getattr(where, name)
        if value is not None:
            query = query.where(c[name] == value)
    if where.format is not None:
        query = query.where(c.format == where.format.upper())
    if where.precision is not None:
        query = query.where(c.precision == where.precision.lower())
    if where.commit:
        query = query.where(c.commit.startswith(where.commit.lower(), autoescape=True))
    if where.sha256:
        query = query.where(c.sha256.startswith(where.sha256.lower(), autoescape=True))
    if where.verdict is not None:
        query = query.where(c.passed == (where.verdict.lower() == "pass"))
    query = query.order_by(c.id.desc() if where.last else c.id)
    return query.limit(where.last) if where.last else query


def _row(rec: LedgerRecord) -> dict:
    row = {name: getattr(rec, name) for name in rec.__dataclass_fields__ if name != "id"}
    row["outputs"] = [o.to_dict() for o in rec.outputs]
    for name in ("files", "policy", "kept_cells", "thresholds"):
        row[name] = jsonable(row[name])
    return row


def _record(row: Any) -> LedgerRecord:
    data = {k: row[k] for k in row.keys() if k in LedgerRecord.__dataclass_fields__}
    data["outputs"] = [OutputEntry.from_dict(o) for o in data.get("outputs") or []]
    data["passed"] = bool(data["passed"])
    data.setdefault("files", [])
    data.setdefault("thresholds", {})
    return LedgerRecord(**data)
