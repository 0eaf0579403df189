"""One schema for both SQL stores: what ``headwater.sessions.schema.metadata`` says.

A database written by the previous version (the hand-written SQLite DDL
below, and the same tables on PostgreSQL) opens unchanged: the lease's holder
columns are added in place and no row is lost.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from sqlalchemy import create_engine, inspect, text
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from headwater.errors import SessionBusyError, SessionError
from headwater.events import Event, event_to_json
from headwater.sessions import SqlSessionService, schema
from headwater.types import Content

if TYPE_CHECKING:
    from conftest import Store

# What SQLite files were created with before the schema had one source (and the lease
# recorded its holder); copied verbatim.
PREVIOUS_SQLITE_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS hw_sessions (
    app_name VARCHAR NOT NULL, user_id VARCHAR NOT NULL, id VARCHAR NOT NULL,
    state TEXT NOT NULL, create_time DOUBLE NOT NULL, update_time DOUBLE NOT NULL,
    PRIMARY KEY (app_name, user_id, id))""",
    """CREATE TABLE IF NOT EXISTS hw_events (
    seq INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT, id VARCHAR NOT NULL,
    app_name VARCHAR NOT NULL, user_id VARCHAR NOT NULL, session_id VARCHAR NOT NULL,
    invocation_id VARCHAR NOT NULL, author VARCHAR NOT NULL, timestamp DOUBLE NOT NULL,
    data TEXT NOT NULL,
    FOREIGN KEY(app_name, user_id, session_id) REFERENCES hw_sessions (app_name, user_id, id)
        ON DELETE CASCADE,
    UNIQUE (id))""",
    "CREATE INDEX IF NOT EXISTS ix_hw_events_session_seq "
    "ON hw_events (app_name, user_id, session_id, seq)",
    """CREATE TABLE IF NOT EXISTS hw_call_results (
    app_name VARCHAR NOT NULL, user_id VARCHAR NOT NULL, session_id VARCHAR NOT NULL,
    call_id VARCHAR NOT NULL, event_id VARCHAR NOT NULL,
    PRIMARY KEY (app_name, user_id, session_id, call_id),
    FOREIGN KEY(app_name, user_id, session_id) REFERENCES hw_sessions (app_name, user_id, id)
        ON DELETE CASCADE)""",
    """CREATE TABLE IF NOT EXISTS hw_leases (
    app_name VARCHAR NOT NULL, user_id VARCHAR NOT NULL, session_id VARCHAR NOT NULL,
    owner VARCHAR NOT NULL, run_id VARCHAR NOT NULL, expires_at DOUBLE NOT NULL,
    took_over VARCHAR,
    PRIMARY KEY (app_name, user_id, session_id),
    FOREIGN KEY(app_name, user_id, session_id) REFERENCES hw_sessions (app_name, user_id, id)
        ON DELETE CASCADE)""",
)
HOLDER_COLUMNS = ("holder_host", "holder_pid", "holder_start")
TABLES = ("hw_sessions", "hw_events", "hw_call_results", "hw_leases")


def sqlite_schema(path: Path) -> dict[str, Any]:
    """Everything SQLite says about the file's tables: columns, keys, indexes, objects."""
    raw = sqlite3.connect(path)
    try:
        found: dict[str, Any] = {"objects": sorted(raw.execute(
            "SELECT type, name, tbl_name FROM sqlite_master").fetchall())}
        for table in TABLES:
            found[table] = {
                "columns": raw.execute(f"PRAGMA table_xinfo({table})").fetchall(),
                "foreign_keys": raw.execute(f"PRAGMA foreign_key_list({table})").fetchall(),
                "indexes": sorted(
                    (name, unique, origin, partial,
                     raw.execute(f"PRAGMA index_xinfo({name})").fetchall())
                    for _, name, unique, origin, partial in raw.execute(
                        f"PRAGMA index_list({table})")),
                "autoincrement": "AUTOINCREMENT" in raw.execute(
                    "SELECT sql FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0],
            }
        return found
    finally:
        raw.close()


def metadata_schema(tmp_path: Path) -> dict[str, Any]:
    """The same, for a file SQLAlchemy creates from the MetaData itself."""
    path = tmp_path / "from_metadata.db"
    engine = create_engine(f"sqlite:///{path}", poolclass=NullPool)
    try:
        schema.metadata.create_all(engine)
    finally:
        engine.dispose()
    return sqlite_schema(path)


def event(text_: str, invocation_id: str = "inv") -> Event:
    return Event(invocation_id=invocation_id, author="user", content=Content.from_text(text_))


def fill_previous_file(path: Path) -> list[Event]:
    """A file of the previous schema holding a session, two events, a result claim, a lease."""
    stored = [event("one"), event("two")]
    raw = sqlite3.connect(path)
    try:
        with raw:
            for statement in PREVIOUS_SQLITE_SCHEMA:
                raw.execute(statement)
            raw.execute("INSERT INTO hw_sessions VALUES ('app', 'u', 's', ?, 1.0, 2.0)",
                        (json.dumps({"k": "v"}),))
            for e in stored:
                raw.execute("INSERT INTO hw_events (id, app_name, user_id, session_id, "
                            "invocation_id, author, timestamp, data) "
                            "VALUES (?, 'app', 'u', 's', 'inv', 'user', ?, ?)",
                            (e.id, e.timestamp, event_to_json(e).decode()))
            raw.execute("INSERT INTO hw_call_results VALUES ('app', 'u', 's', 'c1', ?)",
                        (stored[1].id,))
            # A lease of an older process: its holder is unknown, so it keeps its TTL.
            raw.execute("INSERT INTO hw_leases VALUES ('app', 'u', 's', 'old-owner', 'old-run', "
                        "9e12, NULL)")
    finally:
        raw.close()
    return stored


def counts(path: Path) -> dict[str, int]:
    raw = sqlite3.connect(path)
    try:
        return {t: raw.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLES}
    finally:
        raw.close()


async def test_the_sqlite_file_has_the_schema_of_the_metadata(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    service = SqlSessionService(f"sqlite:///{path}")
    try:
        await service.create_session(app_name="app", user_id="u", session_id="s")
    finally:
        await service.close()
    created = sqlite_schema(path)
    assert created == metadata_schema(tmp_path)
    assert [c[1] for c in created["hw_leases"]["columns"]][-3:] == list(HOLDER_COLUMNS)
    assert created["hw_events"]["autoincrement"]  # seq is never reused


async def test_a_file_of_the_previous_schema_keeps_every_row(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    stored = fill_previous_file(path)
    before = counts(path)
    assert sqlite_schema(path) != metadata_schema(tmp_path)  # the holder columns are missing

    service = SqlSessionService(f"sqlite:///{path}")
    try:
        session = await service.get_session(app_name="app", user_id="u", session_id="s")
        assert session is not None and session.state == {"k": "v"}
        assert [e.id for e in session.events] == [e.id for e in stored]
        with pytest.raises(SessionBusyError):  # the old lease still holds: holder unknown
            await service.acquire_lease(app_name="app", user_id="u", session_id="s",
                                        owner="new", run_id="new-run", ttl=30)
    finally:
        await service.close()
    assert counts(path) == before
    assert sqlite_schema(path) == metadata_schema(tmp_path)  # upgraded in place


async def test_a_missing_column_that_cannot_be_added_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    fill_previous_file(path)
    raw = sqlite3.connect(path)
    with raw:  # a table that lost a NOT NULL column: no default could fill the old rows
        raw.execute("ALTER TABLE hw_call_results DROP COLUMN event_id")
    raw.close()
    before = counts(path)
    service = SqlSessionService(f"sqlite:///{path}")
    try:
        with pytest.raises(SessionError, match=r"event_id.*migrate the database"):
            await service.get_session(app_name="app", user_id="u", session_id="s")
    finally:
        await service.close()
    assert counts(path) == before
    assert "holder_host" not in {c[1] for c in sqlite_schema(path)["hw_leases"]["columns"]}


@pytest.mark.postgres
@pytest.mark.parametrize("store", ["postgres"], indirect=True)
async def test_a_postgres_database_of_the_previous_schema_keeps_every_row(store: Store) -> None:
    assert store.url is not None
    session = await store.service.create_session(app_name="app", user_id="u", session_id="s",
                                                 state={"k": "v"})
    await store.service.append_event(session, event("one"))
    await store.service.close()
    engine = create_async_engine(store.url, poolclass=NullPool)
    try:
        async with engine.begin() as conn:  # back to the previous schema, with a lease row
            await conn.execute(text("ALTER TABLE hw_leases " + ", ".join(
                f"DROP COLUMN {name}" for name in HOLDER_COLUMNS)))
            await conn.execute(text(
                "INSERT INTO hw_leases VALUES ('app', 'u', 's', 'old-owner', 'old-run', 9e12, "
                "NULL)"))

        service = store.reopen()
        loaded = await service.get_session(app_name="app", user_id="u", session_id="s")
        assert loaded is not None and [e.text for e in loaded.events] == ["one"]
        assert loaded.state == {"k": "v"}
        with pytest.raises(SessionBusyError):
            await service.acquire_lease(app_name="app", user_id="u", session_id="s",
                                        owner="new", run_id="new-run", ttl=30)

        async with engine.connect() as conn:
            def columns(sync: Any) -> dict[str, list[str]]:
                found = inspect(sync)
                return {t: [c["name"] for c in found.get_columns(t)] for t in TABLES}

            assert await conn.run_sync(columns) == {
                t.name: [c.name for c in t.columns] for t in schema.metadata.sorted_tables}
            lease = (await conn.execute(text(
                "SELECT owner, run_id, holder_host FROM hw_leases"))).all()
            assert [tuple(row) for row in lease] == [("old-owner", "old-run", None)]
    finally:
        await engine.dispose()
