"""What names a ledger: a path (an SQLite file), ``sqlite:///PATH`` or a PostgreSQL URL, checked
before any work and shown without its password; ``LedgerError``, the one error a ledger
gives. Imports no SQLAlchemy.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Optional

from amptool.errors import UsageError

SQLITE = "sqlite"
POSTGRES = "postgresql"
SCHEMES = {"sqlite": SQLITE, "sqlite+pysqlite": SQLITE, "postgresql": POSTGRES,
           "postgresql+psycopg": POSTGRES, "postgres": POSTGRES}
"""The URL schemes a ledger may have and the database each names."""
EXAMPLES = "a path, sqlite:///PATH or postgresql+psycopg://USER@HOST/DB"


class LedgerError(UsageError):
    """A ledger that cannot be named, reached, locked for a write or read (exit 2).

    ``measured``: what a command had measured when the ledger failed it (the parity report,
    the pipeline's result), set by the command that raises it, so that nothing measured is
    lost: the caller still writes its reports, then says why nothing was recorded."""

    measured: Any = None


def ledger_url(text: str) -> str:
    """The SQLAlchemy URL of the ledger ``text`` names: a path (no ``://``) becomes
    ``sqlite:///ABSOLUTE-PATH``; a PostgreSQL URL gets the psycopg driver. One line for a
    scheme amptool does not take, or a URL naming no database."""
    text = str(text).strip()
    if not text:
        raise LedgerError("--ledger is empty", f"give {EXAMPLES}")
    if "://" not in text:
        return f"sqlite:///{Path(text).expanduser().resolve()}"
    scheme, rest = text.split("://", 1)
    kind = SCHEMES.get(scheme.lower())
    if kind is None:
        raise LedgerError(f"ledger {shown(text)}: unknown scheme '{scheme}://'",
                          f"give {EXAMPLES}")
    if kind == SQLITE:
        path = rest[1:] if rest.startswith("/") else rest
        if not path.split("?", 1)[0]:
            raise LedgerError(f"ledger {text} names no file (an in-memory ledger keeps "
                              "nothing)", "give sqlite:///PATH or a path")
        return f"sqlite:///{path}"
    if not re.match(r"[^/?#]*[^/?#@]", rest) or "/" not in rest.split("?", 1)[0]:
        raise LedgerError(f"ledger {shown(text)} names no database",
                          "give postgresql+psycopg://USER@HOST/DB")
    return f"postgresql+psycopg://{rest}"


def kind_of(url: str) -> str:
    """sqlite or postgresql, of a URL ``ledger_url`` made."""
    return SQLITE if url.startswith("sqlite") else POSTGRES


def sqlite_path(url: str) -> Optional[Path]:
    """The file of an SQLite ledger's URL (None for a server)."""
    if kind_of(url) != SQLITE:
        return None
    return Path(url.split(":///", 1)[1].split("?", 1)[0])


def shown(url: str) -> str:
    """``url`` as it may be printed: a password replaced by ``***``."""
    return re.sub(r"(://[^/:@]*:)[^@/]*@", r"\1***@", str(url))
