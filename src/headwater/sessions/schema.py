"""The SQL stores' tables, declared once: the one source of the schema.

Both SQL stores build their tables from :data:`metadata`: PostgreSQL through
``metadata.create_all``, SQLite through the DDL SQLAlchemy compiles from it
(:func:`create_statements`), run by its own ``sqlite3`` connection. Migrations
are to be generated from it too.

A database written by an earlier version opens unchanged: tables are created
only where missing, and a column added since (always nullable) is added in
place by :func:`added_columns` when the store opens; no row is touched.

Imported only by the SQL stores: ``import headwater`` does not load SQLAlchemy.
"""

from __future__ import annotations

from collections.abc import Collection

from sqlalchemy import (
    BigInteger,
    Column,
    Double,
    ForeignKeyConstraint,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.schema import CreateColumn, CreateIndex, CreateTable

from ..errors import SessionError

metadata = MetaData()


def _session_fk() -> ForeignKeyConstraint:
    return ForeignKeyConstraint(
        ["app_name", "user_id", "session_id"],
        ["hw_sessions.app_name", "hw_sessions.user_id", "hw_sessions.id"], ondelete="CASCADE")


sessions = Table(
    "hw_sessions", metadata,
    Column("app_name", String, primary_key=True),
    Column("user_id", String, primary_key=True),
    Column("id", String, primary_key=True),
    Column("state", Text, nullable=False),  # JSON
    Column("create_time", Double, nullable=False),
    Column("update_time", Double, nullable=False),
)
"""One row per session."""

events = Table(
    "hw_events", metadata,
    # SQLite: INTEGER PRIMARY KEY AUTOINCREMENT is the rowid, never reused.
    Column("seq", BigInteger().with_variant(Integer(), "sqlite"), primary_key=True,
           autoincrement=True),
    Column("id", String, nullable=False, unique=True),
    Column("app_name", String, nullable=False),
    Column("user_id", String, nullable=False),
    Column("session_id", String, nullable=False),
    Column("invocation_id", String, nullable=False),
    Column("author", String, nullable=False),
    Column("timestamp", Double, nullable=False),
    Column("data", Text, nullable=False),  # event_to_json
    _session_fk(),
    Index("ix_hw_events_session_seq", "app_name", "user_id", "session_id", "seq"),
    sqlite_autoincrement=True,
)
"""One row per non-partial event; ``seq`` is the commit order and the read cursor."""

call_results = Table(
    "hw_call_results", metadata,
    Column("app_name", String, primary_key=True),
    Column("user_id", String, primary_key=True),
    Column("session_id", String, primary_key=True),
    Column("call_id", String, primary_key=True),
    Column("event_id", String, nullable=False),
    _session_fk(),
)
"""One row per call that has its final result (the first result wins)."""

leases = Table(
    "hw_leases", metadata,
    Column("app_name", String, primary_key=True),
    Column("user_id", String, primary_key=True),
    Column("session_id", String, primary_key=True),
    Column("owner", String, nullable=False),
    Column("run_id", String, nullable=False),
    Column("expires_at", Double, nullable=False),
    Column("took_over", String, nullable=True),
    # The process holding the lease (added in place to earlier databases; NULL: unknown).
    Column("holder_host", String, nullable=True),
    Column("holder_pid", Integer, nullable=True),
    Column("holder_start", String, nullable=True),
    _session_fk(),
)
"""The lease of each session a run holds, and the process that holds it."""


def create_statements(dialect: Dialect) -> list[str]:
    """``CREATE TABLE/INDEX IF NOT EXISTS`` for every table, in dependency order."""
    statements: list[str] = []
    for table in metadata.sorted_tables:
        statements.append(str(CreateTable(table, if_not_exists=True).compile(dialect=dialect)))
        statements.extend(str(CreateIndex(index, if_not_exists=True).compile(dialect=dialect))
                          for index in sorted(table.indexes, key=lambda i: str(i.name)))
    return statements


def added_columns(table: Table, present: Collection[str], dialect: Dialect) -> list[str]:
    """``ALTER TABLE … ADD COLUMN`` for each column of ``table`` missing from ``present``.

    How a database written by an earlier version gets the columns added since:
    in place, each NULL in the existing rows.

    Raises:
        SessionError: a missing column is NOT NULL, so it cannot be added in
            place (the database needs a migration).
    """
    statements: list[str] = []
    for column in table.columns:
        if column.name in present:
            continue
        if not column.nullable:
            raise SessionError(
                f"the session database's table {table.name} has no column {column.name!r}, "
                "which cannot be added in place: migrate the database")
        spec = CreateColumn(column).compile(dialect=dialect)
        statements.append(f"ALTER TABLE {table.name} ADD COLUMN {spec}")
    return statements
