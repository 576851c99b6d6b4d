"""The parity ledger: one record per candidate of every parity check, in a database named by a
URL (a path or ``sqlite:///PATH``: embedded SQLite, WAL and a busy timeout, safe for parallel
CI jobs; ``postgresql+psycopg://USER@HOST/DB``: a team's server), through SQLAlchemy Core,
imported only when a ledger is opened. The schema is versioned and migrated in place.

``url`` names a ledger (``LedgerError``), ``schema`` its tables and migrations, ``database``
the connection, ``record`` a record and a report made records, ``facts`` what an artefact
says of itself, ``store`` the ``Ledger``. May import ``amptool.artefact``,
``amptool.documents``, ``amptool.stats``, ``amptool.files`` and ``amptool.errors``.
"""
