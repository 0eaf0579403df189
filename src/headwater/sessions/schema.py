"""The SQL stores' tables, declared once: the one source of the schema.

Both SQL stores get their tables through the Alembic revisions of
:mod:`.migrations`, each written by autogenerate from a change to
:data:`metadata`; a test checks that a database upgraded from nothing to the
newest revision has exactly this schema, on SQLite and PostgreSQL. A change
here therefore comes with a new revision (see ``migrations/alembic.ini``).

Imported only by the SQL stores: ``import headwater`` does not load SQLAlchemy.
"""

from __future__ import annotations

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
    # The process holding the lease (revision 0002; NULL: unknown).
    Column("holder_host", String, nullable=True),
    Column("holder_pid", Integer, nullable=True),
    Column("holder_start", String, nullable=True),
    _session_fk(),
)
"""The lease of each session a run holds, and the process that holds it."""


memory = Table(
    "hw_memory", metadata,
    Column("seq", BigInteger().with_variant(Integer(), "sqlite"), primary_key=True,
           autoincrement=True),
    Column("app_name", String, nullable=False),
    Column("user_id", String, nullable=False),
    Column("session_id", String, nullable=False),
    Column("event_id", String, nullable=False),
    Column("words", Text, nullable=False),  # " word word … ": the event's words, lower-cased
    Column("data", Text, nullable=False),  # a MemoryEntry as JSON
    Index("ix_hw_memory_session", "app_name", "user_id", "session_id"),
    sqlite_autoincrement=True,
)
"""One row per remembered event (revision 0003; ``SqlMemoryService``); no foreign key:
a memory outlives its session."""
