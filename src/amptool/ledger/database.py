"""The connection to a ledger: an SQLAlchemy engine for its URL, the schema made or migrated
under the write lock, and every database error turned into one ``LedgerError`` line.

SQLite: the WAL journal (readers never wait for a writer), a busy timeout (a writer waits
for another's transaction, 30 s unless the URL says ``?timeout=SECONDS``) and each write
transaction begun ``IMMEDIATE``, so that concurrent writers queue on the lock rather than
fail. PostgreSQL: a write transaction first takes a transaction-scoped advisory lock while
it creates or migrates the schema, so that two first writers do not both create it.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

import sqlalchemy as sa
from sqlalchemy import event, exc

from amptool.ledger import schema
from amptool.ledger.url import POSTGRES, SQLITE, LedgerError, kind_of, shown, sqlite_path

BUSY_TIMEOUT = 30.0
"""Seconds an SQLite writer waits for another writer's lock before the ledger is 'locked'."""
CONNECT_TIMEOUT = 10
"""Seconds to reach a PostgreSQL server before the ledger is 'unreachable'."""
WRITE = "ledger_write"
"""The execution option of a connection that writes (its transaction takes the write lock)."""
SCHEMA_LOCK = 7_244_130_042
"""The PostgreSQL advisory lock a writer holds while it creates or migrates the schema."""


def make_engine(url: str) -> sa.Engine:
    """An engine for ``url`` (made by ``ledger.url.ledger_url``); nothing is connected yet."""
    if kind_of(url) == SQLITE:
        return _sqlite_engine(url)
    try:
        import psycopg  # noqa: F401  # the driver the URL names
    except ImportError:
        raise LedgerError(f"ledger {shown(url)} is a PostgreSQL server, and psycopg is not "
                          "installed", "pip install 'amptool[postgres]'") from None
    return sa.create_engine(url, poolclass=sa.pool.NullPool,
                            connect_args={"connect_timeout": CONNECT_TIMEOUT})


def _sqlite_engine(url: str) -> sa.Engine:
    parsed = sa.engine.make_url(url)
    timeout = float(parsed.query.get("timeout", BUSY_TIMEOUT))  # type: ignore[arg-type]
    engine = sa.create_engine(parsed.difference_update_query(["timeout"]),
                              poolclass=sa.pool.NullPool, connect_args={"timeout": timeout})

    @event.listens_for(engine, "connect")
    def _connected(dbapi_conn, _record):
        dbapi_conn.isolation_level = None  # transactions begun below, not by the driver
        cursor = dbapi_conn.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
        cursor.execute("PRAGMA journal_mode = WAL")  # kept by the file: a no-op once set
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(conn):
        write = conn.get_execution_options().get(WRITE, False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

    return engine


@contextlib.contextmanager
def errors_named(url: str) -> Iterator[None]:
    """Database errors in the block as one ``LedgerError`` naming the ledger and what is
    wrong: unreachable, locked, damaged or not a ledger."""
    try:
        yield
    except LedgerError:
        raise
    except exc.DBAPIError as err:
        raise _named(url, err) from None
    except exc.SQLAlchemyError as err:
        raise LedgerError(f"ledger {shown(url)}: {_first(err)}",
                          "check that the URL names an amptool ledger") from None


def _named(url: str, err: exc.DBAPIError) -> LedgerError:
    text = _first(err)
    low = text.lower()
    where = f"ledger {shown(url)}"
    if kind_of(url) == SQLITE:
        if "locked" in low or "busy" in low:
            return LedgerError(f"{where} is locked by another writer ({text})",
                               "retry when it is done, or give ?timeout=SECONDS to wait longer")
        if "not a database" in low or "malformed" in low or "corrupt" in low:
            return LedgerError(f"{where} is damaged or not an SQLite database ({text})",
                               "restore it from a copy, or name another --ledger")
        if "unable to open" in low or "readonly" in low or "read-only" in low:
            return LedgerError(f"{where} cannot be opened for writing ({text})",
                               "check that its folder exists and is writable")
    elif isinstance(err, exc.OperationalError) and not err.connection_invalidated and (
            "connect" in low or "connection" in low or "password" in low or "resolve" in low
            or "timeout" in low or "does not exist" in low):
        return LedgerError(f"{where} cannot be reached ({text})",
                           "check the server, the user and the database the URL names")
    return LedgerError(f"{where}: {text}", "check that the URL names an amptool ledger")


def _first(err: BaseException) -> str:
    cause = getattr(err, "orig", None) or err
    lines = [line.strip() for line in str(cause).splitlines() if line.strip()]
    return (lines[0] if lines else type(cause).__name__)[:240]


def ready(engine: sa.Engine, url: str, create: bool) -> int:
    """The ledger's schema version before it was made ready for this release: made in an
    empty database when ``create`` (else an empty one is refused), an older version migrated
    in place (a reader too takes the write lock for that), a newer one refused."""
    found = _prepare(engine, url, write=create, create=create)
    if 0 < found < schema.SCHEMA_VERSION and not create:
        _prepare(engine, url, write=True, create=False)
    return found


def _prepare(engine: sa.Engine, url: str, write: bool, create: bool) -> int:
    with engine.connect().execution_options(**{WRITE: write}) as conn, conn.begin():
        if write and kind_of(url) == POSTGRES:
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": SCHEMA_LOCK})
        found = schema.read_version(conn)
        if found == 0 and _has_tables(conn):
            raise LedgerError(f"ledger {shown(url)} holds tables but no amptool ledger "
                              "version", "name an amptool ledger, or a new file")
        if found > schema.SCHEMA_VERSION:
            raise LedgerError(f"ledger {shown(url)} has schema version {found}, newer than "
                              f"this amptool reads ({schema.SCHEMA_VERSION})", "upgrade amptool")
        if found == 0 and not create:
            raise LedgerError(f"ledger {shown(url)} holds no record yet",
                              "append to it with amptool parity --ledger first")
        if found == 0:
            schema.create(conn)
        elif found < schema.SCHEMA_VERSION and write:
            schema.migrate(conn, found)
    return found


def _has_tables(conn: sa.Connection) -> bool:
    return bool(sa.inspect(conn).get_table_names())


def missing_file(url: str) -> bool:
    """Whether ``url`` is an SQLite ledger whose file does not exist."""
    path = sqlite_path(url)
    return path is not None and not path.is_file()
