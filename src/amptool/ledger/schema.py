"""The ledger's tables (SQLAlchemy Core) and their versions.

``ledger_meta`` holds the ``schema_version``; a ledger of an older version is migrated in
place, one version at a time (``MIGRATIONS``), inside one transaction that holds the
ledger's write lock, so that every process sees either the old ledger or the whole new
one. A newer version than this release writes is refused: nothing is changed.

Versions:

1. ``records``: one row per candidate of a parity check, its figures in the ``outputs``
   JSON (each output: name, passed, thresholds, figures, breaches).
2. adds ``figures`` (one row per figure of each output: what ``ledger trend`` reads by
   index instead of parsing every record's JSON) and the record columns
   ``reference_precision`` and ``facts_from``; the figures of version-1 records are copied
   into it from their JSON, nothing is dropped.
"""
from __future__ import annotations

import math
from typing import Callable, Dict

import sqlalchemy as sa

SCHEMA_VERSION = 2
"""The ``schema_version`` this release writes and the newest it reads."""
VERSION_KEY = "schema_version"

metadata = sa.MetaData()

meta = sa.Table(
    "ledger_meta", metadata,
    sa.Column("key", sa.String(64), primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
)

records = sa.Table(
    "records", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("recorded_at", sa.String(40), nullable=False),
    sa.Column("artefact", sa.Text, nullable=False),
    sa.Column("sha256", sa.String(64), nullable=False, index=True),
    sa.Column("files", sa.JSON, nullable=False),
    sa.Column("format", sa.String(16), nullable=False),
    sa.Column("precision", sa.String(16)),
    sa.Column("model", sa.Text),
    sa.Column("policy", sa.JSON),
    sa.Column("kept_cells", sa.JSON),
    sa.Column("reference", sa.Text),
    sa.Column("samples", sa.Integer),
    sa.Column("device", sa.String(16)),
    sa.Column("amptool_version", sa.String(40)),
    sa.Column("mindspore_version", sa.String(40)),
    sa.Column("commit", sa.String(64), index=True),
    sa.Column("branch", sa.Text),
    sa.Column("label", sa.Text),
    sa.Column("passed", sa.Boolean, nullable=False),
    sa.Column("verdict", sa.String(8), nullable=False),
    sa.Column("thresholds", sa.JSON),
    sa.Column("outputs", sa.JSON, nullable=False),
    sa.Column("reference_precision", sa.String(16)),
    sa.Column("facts_from", sa.String(16)),
)

figures = sa.Table(
    "figures", metadata,
    sa.Column("record_id", sa.Integer, sa.ForeignKey("records.id"), nullable=False),
    sa.Column("output", sa.Text, nullable=False),
    sa.Column("name", sa.String(40), nullable=False),
    sa.Column("value", sa.Float),
    sa.Index("figures_by_record", "record_id"),
    sa.Index("figures_by_name", "name", "record_id"),
)
"""A NaN figure is stored as NULL (SQLite keeps no NaN); a figure an output lacks has no row."""

FIGURE_TYPES = (int, float)


def figure_rows(record_id: int, outputs: list) -> list:
    """The ``figures`` rows of one record's ``outputs`` JSON: every number of each output's
    ``figures`` (intervals and flags left out), NaN as None."""
    rows = []
    for out in outputs:
        for name, value in (out.get("figures") or {}).items():
            number = _number(value)
            if number is not _SKIP:
                rows.append({"record_id": record_id, "output": out["name"], "name": name,
                             "value": number})
    return rows


_SKIP = object()


def _number(value):
    """A figure's value for its column: a float, None for NaN (also written "nan"), or
    ``_SKIP`` for what is no number (an interval, a flag)."""
    if isinstance(value, str) and value in ("nan", "inf", "-inf"):
        value = float(value)
    if isinstance(value, bool) or not isinstance(value, FIGURE_TYPES):
        return _SKIP
    value = float(value)
    return None if math.isnan(value) else value


def read_version(conn: sa.Connection) -> int:
    """The ledger's ``schema_version``: 0 for a database without the ledger's tables."""
    names = set(sa.inspect(conn).get_table_names())
    if "ledger_meta" not in names:
        return 0
    value = conn.execute(sa.select(meta.c.value).where(meta.c.key == VERSION_KEY)).scalar()
    return int(value) if value is not None else 0


def create(conn: sa.Connection) -> None:
    """The tables of this release's version, in an empty database."""
    metadata.create_all(conn)
    conn.execute(meta.insert().values(key=VERSION_KEY, value=str(SCHEMA_VERSION)))


def _v1_to_v2(conn: sa.Connection) -> None:
    """Version 1 -> 2: the two record columns, the figures table filled from each record's
    outputs JSON."""
    for column in ("reference_precision", "facts_from"):
        conn.execute(sa.text(f"ALTER TABLE records ADD COLUMN {column} VARCHAR(16)"))
    figures.create(conn)
    rows = conn.execute(sa.select(records.c.id, records.c.outputs)).all()
    batch: list = []
    for row in rows:
        batch += figure_rows(int(row.id), list(row.outputs or []))
        if len(batch) >= 5000:
            conn.execute(figures.insert(), batch)
            batch = []
    if batch:
        conn.execute(figures.insert(), batch)


MIGRATIONS: Dict[int, Callable[[sa.Connection], None]] = {1: _v1_to_v2}
"""version -> the function that makes a ledger of that version the next one."""


def migrate(conn: sa.Connection, version: int) -> None:
    """Bring a ledger of ``version`` to ``SCHEMA_VERSION``, a version at a time (the caller
    holds the transaction and the write lock)."""
    while version < SCHEMA_VERSION:
        MIGRATIONS[version](conn)
        version += 1
    conn.execute(meta.update().where(meta.c.key == VERSION_KEY).values(value=str(version)))
