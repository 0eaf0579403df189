"""Schema migrations (Alembic): the same revisions for SQLite and PostgreSQL, from one schema.

A database upgraded from nothing to head has exactly the MetaData's schema
(autogenerate finds no difference); a database made by headwater 0.1.0 (the
DDL below, copied verbatim from that release) is stamped and upgraded
without losing a row, at start or by ``headwater db upgrade`` (twice: the
second does nothing); processes starting together migrate once; with
``database_auto_migrate`` off a store refuses a database that is not at head.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Column, Connection, MetaData, String, Table, create_engine, inspect, text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from headwater.errors import SessionBusyError, SessionError
from headwater.events import Event, event_to_json
from headwater.sessions import SqlSessionService, migrations, schema
from headwater.settings import Settings
from headwater.types import Content

if TYPE_CHECKING:
    from conftest import Store

T = TypeVar("T")
SQL = pytest.mark.parametrize(
    "store", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True)
TABLES = ("hw_sessions", "hw_events", "hw_call_results", "hw_leases")
LATER_TABLES = ("hw_memory",)  # added after the baseline (0003)
HOLDER_COLUMNS = ("holder_host", "holder_pid", "holder_start")
HEAD = "0003"

# headwater 0.1.0's DDL, verbatim: the SQLite store ran these statements; the PostgreSQL
# store ran what its MetaData compiled to (here as compiled).
PREVIOUS_SQLITE = (
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
PREVIOUS_POSTGRES = (
    """CREATE TABLE hw_sessions (
    app_name VARCHAR NOT NULL, user_id VARCHAR NOT NULL, id VARCHAR NOT NULL,
    state TEXT NOT NULL, create_time DOUBLE PRECISION NOT NULL,
    update_time DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (app_name, user_id, id))""",
    """CREATE TABLE hw_call_results (
    app_name VARCHAR NOT NULL, user_id VARCHAR NOT NULL, session_id VARCHAR NOT NULL,
    call_id VARCHAR NOT NULL, event_id VARCHAR NOT NULL,
    PRIMARY KEY (app_name, user_id, session_id, call_id),
    FOREIGN KEY(app_name, user_id, session_id) REFERENCES hw_sessions (app_name, user_id, id)
        ON DELETE CASCADE)""",
    """CREATE TABLE hw_events (
    seq BIGSERIAL NOT NULL, id VARCHAR NOT NULL, app_name VARCHAR NOT NULL,
    user_id VARCHAR NOT NULL, session_id VARCHAR NOT NULL, invocation_id VARCHAR NOT NULL,
    author VARCHAR NOT NULL, timestamp DOUBLE PRECISION NOT NULL, data TEXT NOT NULL,
    PRIMARY KEY (seq),
    FOREIGN KEY(app_name, user_id, session_id) REFERENCES hw_sessions (app_name, user_id, id)
        ON DELETE CASCADE,
    UNIQUE (id))""",
    "CREATE INDEX ix_hw_events_session_seq ON hw_events (app_name, user_id, session_id, seq)",
    """CREATE TABLE hw_leases (
    app_name VARCHAR NOT NULL, user_id VARCHAR NOT NULL, session_id VARCHAR NOT NULL,
    owner VARCHAR NOT NULL, run_id VARCHAR NOT NULL, expires_at DOUBLE PRECISION NOT NULL,
    took_over VARCHAR,
    PRIMARY KEY (app_name, user_id, session_id),
    FOREIGN KEY(app_name, user_id, session_id) REFERENCES hw_sessions (app_name, user_id, id)
        ON DELETE CASCADE)""",
)


async def on_database(url: str, work: Callable[[Connection], T]) -> T:
    """Run ``work`` in one transaction on a connection of the test's own (not the store's)."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        engine = create_engine(parsed.set(drivername="sqlite"), poolclass=NullPool)
        try:
            with engine.begin() as conn:
                return work(conn)
        finally:
            engine.dispose()
    async_engine = create_async_engine(url, poolclass=NullPool)
    try:
        async with async_engine.begin() as conn:
            return await conn.run_sync(work)
    finally:
        await async_engine.dispose()


def schema_diffs(conn: Connection, metadata: MetaData = schema.metadata) -> list[Any]:
    """What autogenerate would change to make the database's schema the MetaData's."""
    context = MigrationContext.configure(conn, opts={"version_table": migrations.VERSION_TABLE})
    return list(compare_metadata(context, metadata))


def version(conn: Connection) -> list[str]:
    if not inspect(conn).has_table(migrations.VERSION_TABLE):
        return []
    return [row[0] for row in conn.execute(
        text(f"SELECT version_num FROM {migrations.VERSION_TABLE}"))]


def rows(conn: Connection) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table, in key order."""
    keys = {"hw_sessions": "app_name, user_id, id", "hw_events": "seq",
            "hw_call_results": "app_name, user_id, session_id, call_id",
            "hw_leases": "app_name, user_id, session_id"}
    return {table: [tuple(r) for r in conn.execute(text(
        f"SELECT * FROM {table} ORDER BY {keys[table]}"))] for table in TABLES}


def columns(conn: Connection) -> dict[str, list[str]]:
    found = inspect(conn)
    return {t: [c["name"] for c in found.get_columns(t)] for t in (*TABLES, *LATER_TABLES)
            if found.has_table(t)}


def event(text_: str) -> Event:
    return Event(invocation_id="inv", author="user", content=Content.from_text(text_))


def fill_previous(conn: Connection) -> None:
    """The schema of headwater 0.1.0, with two sessions, events, result claims and leases."""
    ddl = PREVIOUS_SQLITE if conn.dialect.name == "sqlite" else PREVIOUS_POSTGRES
    for statement in ddl:
        conn.execute(text(statement))
    for sid, state in (("s", {"k": "v"}), ("t", {})):
        conn.execute(text("INSERT INTO hw_sessions VALUES ('app', 'u', :sid, :state, 1.5, 2.5)"),
                     {"sid": sid, "state": json.dumps(state)})
    stored = [(sid, event(f"{sid} {n}")) for sid in ("s", "t") for n in range(3)]
    for sid, e in stored:
        conn.execute(text(
            "INSERT INTO hw_events (id, app_name, user_id, session_id, invocation_id, author, "
            "timestamp, data) VALUES (:id, 'app', 'u', :sid, 'inv', 'user', :ts, :data)"),
            {"id": e.id, "sid": sid, "ts": e.timestamp, "data": event_to_json(e).decode()})
    conn.execute(text("INSERT INTO hw_call_results VALUES ('app', 'u', 's', 'c1', :e)"),
                 {"e": stored[1][1].id})
    # Leases of an older process: their holder is unknown, so they keep their TTL.
    conn.execute(text("INSERT INTO hw_leases VALUES ('app', 'u', 's', 'old-owner', 'old-run', "
                      "9e12, NULL), ('app', 'u', 't', 'other', 'run-t', 9e12, 'run-0')"))


def sql(service: object) -> SqlSessionService:
    assert isinstance(service, SqlSessionService)
    return service


@SQL
async def test_an_empty_database_upgraded_to_head_has_exactly_the_metadata_schema(
        store: Store) -> None:
    assert store.url is not None
    assert await on_database(store.url, columns) == {}  # nothing yet: the service is lazy
    before = await sql(store.service).upgrade_schema()
    assert (before.current, before.unversioned, before.head) == (None, None, HEAD)

    assert await on_database(store.url, schema_diffs) == []
    assert await on_database(store.url, version) == [HEAD]
    # The comparison sees a difference when there is one: the MetaData plus a column.
    larger = MetaData()
    for table in schema.metadata.sorted_tables:
        table.to_metadata(larger)
    Table("hw_leases", larger, Column("extra", String), extend_existing=True)
    diffs = await on_database(store.url, lambda conn: schema_diffs(conn, larger))
    assert [(d[0], d[3].name) for d in diffs] == [("add_column", "extra")]


@SQL
async def test_a_database_of_the_previous_release_keeps_every_row(store: Store) -> None:
    assert store.url is not None
    await on_database(store.url, fill_previous)
    before = await on_database(store.url, rows)
    assert await on_database(store.url, schema_diffs) != []  # the holder columns are missing

    service = store.service  # upgraded at start (database_auto_migrate is on by default)
    session = await service.get_session(app_name="app", user_id="u", session_id="s")
    assert session is not None and session.state == {"k": "v"}
    assert [e.text for e in session.events] == ["s 0", "s 1", "s 2"]
    with pytest.raises(SessionBusyError):  # the old lease still holds: holder unknown
        await service.acquire_lease(app_name="app", user_id="u", session_id="s",
                                    owner="new", run_id="new-run", ttl=30)
    await service.close()

    after = await on_database(store.url, rows)
    # Every row as it was; each lease gained three NULL holder columns.
    assert {t: after[t] for t in TABLES if t != "hw_leases"} == {
        t: before[t] for t in TABLES if t != "hw_leases"}
    assert after["hw_leases"] == [(*row, None, None, None) for row in before["hw_leases"]]
    assert await on_database(store.url, schema_diffs) == []
    assert await on_database(store.url, version) == [HEAD]
    assert (await sql(service).upgrade_schema()).at_head


async def test_a_file_whose_holder_columns_were_added_in_place_is_stamped_at_0002(
        tmp_path: Path) -> None:
    # What the development versions between 0.1.0 and migrations left: the columns, no version.
    url = f"sqlite:///{tmp_path / 'sessions.db'}"
    await on_database(url, fill_previous)
    for name, kind in zip(HOLDER_COLUMNS, ("VARCHAR", "INTEGER", "VARCHAR"), strict=True):
        await on_database(url, lambda conn, n=name, k=kind: conn.execute(text(
            f"ALTER TABLE hw_leases ADD COLUMN {n} {k}")))
    before = await on_database(url, rows)
    service = SqlSessionService(url)
    try:
        found = await service.schema_revision()
        assert (found.current, found.unversioned) == (None, "0002")
        assert len(await service.list_sessions(app_name="app", user_id="u")) == 2
    finally:
        await service.close()
    assert await on_database(url, rows) == before
    assert await on_database(url, version) == [HEAD]
    assert await on_database(url, schema_diffs) == []


@SQL
async def test_processes_starting_together_migrate_once(store: Store) -> None:
    services = [store.reopen() for _ in range(4)]
    created = await asyncio.gather(*(
        s.create_session(app_name="app", user_id="u", session_id=f"s{n}")
        for n, s in enumerate(services)))
    assert len(created) == 4
    assert store.url is not None
    assert await on_database(store.url, version) == [HEAD]
    assert await on_database(store.url, schema_diffs) == []


async def test_stores_of_one_process_migrate_their_files_at_once(tmp_path: Path) -> None:
    # Each SQLite store migrates on a thread of its own; Alembic's state is the process's.
    urls = [f"sqlite:///{tmp_path / f'db{n}.db'}" for n in range(6)]
    services = [SqlSessionService(url) for url in urls]
    try:
        await asyncio.gather(*(s.create_session(app_name="app", user_id="u", session_id="s")
                               for s in services))
    finally:
        await asyncio.gather(*(s.close() for s in services))
    for url in urls:
        assert await on_database(url, version) == [HEAD]
        assert await on_database(url, schema_diffs) == []


@SQL
async def test_with_auto_migrate_off_a_store_refuses_a_database_not_at_head(
        store: Store) -> None:
    assert store.url is not None
    off = Settings(database_auto_migrate=False)
    empty = store.reopen(settings=off)
    with pytest.raises(SessionError, match=r"no session tables.*headwater db upgrade"):
        await empty.list_sessions(app_name="app", user_id="u")

    await on_database(store.url, fill_previous)
    before = await on_database(store.url, rows)
    old = store.reopen(settings=off)
    with pytest.raises(SessionError, match=r"made before schema migrations.*headwater db upgrade"):
        await old.get_session(app_name="app", user_id="u", session_id="s")
    assert await on_database(store.url, rows) == before  # untouched: no column, no version
    assert await on_database(store.url, version) == []

    reached = await sql(old).upgrade_schema()  # what the command runs
    assert (reached.current, reached.unversioned) == (None, migrations.BASELINE)
    session = await old.get_session(app_name="app", user_id="u", session_id="s")
    assert session is not None and len(session.events) == 3


@SQL
async def test_ping_opens_the_store_as_a_first_use_would(store: Store) -> None:
    """What the gateway calls at start and for ``GET /readyz``: on an empty database the
    first ``ping()`` brings the schema to head (with auto-migration off it refuses, and
    nothing is written); a later one only asks the database."""
    assert store.url is not None
    off = store.reopen(settings=Settings(database_auto_migrate=False))
    with pytest.raises(SessionError, match=r"no session tables.*headwater db upgrade"):
        await off.ping()
    assert await on_database(store.url, columns) == {}
    await store.service.ping()
    assert await on_database(store.url, version) == [HEAD]
    assert await on_database(store.url, schema_diffs) == []
    await store.service.ping()
    await off.ping()  # at head now: the check passes


@SQL
async def test_a_database_at_a_revision_this_version_does_not_know_is_refused(
        store: Store) -> None:
    assert store.url is not None
    await sql(store.service).upgrade_schema()
    await store.service.close()
    await on_database(store.url, lambda conn: conn.execute(text(
        f"UPDATE {migrations.VERSION_TABLE} SET version_num = '9999'")))
    service = store.reopen()
    with pytest.raises(SessionError, match=r"revision '9999'.*newer headwater"):
        await service.list_sessions(app_name="app", user_id="u")
    assert await on_database(store.url, version) == ["9999"]


async def test_a_failed_upgrade_leaves_the_sqlite_file_as_it_was(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'sessions.db'}"
    await on_database(url, fill_previous)
    # A column 0002 adds, already there with another type: its ALTER fails half-way.
    await on_database(url, lambda conn: conn.execute(text(
        "ALTER TABLE hw_leases ADD COLUMN holder_pid TEXT")))
    before = await on_database(url, rows), await on_database(url, columns)
    service = SqlSessionService(url)
    try:
        with pytest.raises(SessionError, match="holder_pid"):
            await service.list_sessions(app_name="app", user_id="u")
    finally:
        await service.close()
    # Neither the stamp nor the first added column stayed.
    assert (await on_database(url, rows), await on_database(url, columns)) == before
    assert await on_database(url, version) == []


@SQL
async def test_every_revision_downgrades_and_upgrades_again(store: Store) -> None:
    assert store.url is not None
    await sql(store.service).upgrade_schema()
    await store.service.close()

    def walk(conn: Connection) -> list[dict[str, list[str]]]:
        config = Config()
        config.set_main_option("script_location", str(Path(migrations.__file__).parent))
        config.attributes["connection"] = conn
        seen = []
        for target in (migrations.BASELINE, "base", "head"):
            (command.upgrade if target == "head" else command.downgrade)(config, target)
            seen.append(columns(conn))
        return seen

    baseline, base, head = await on_database(store.url, walk)
    assert baseline["hw_leases"][-1] == "took_over" and set(baseline) == set(TABLES)
    assert base == {}
    assert head == {t.name: [c.name for c in t.columns] for t in schema.metadata.sorted_tables}
    assert await on_database(store.url, schema_diffs) == []


# -- headwater db ---------------------------------------------------------------------------------

def hw_db(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "headwater", "db", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.slow
@SQL
async def test_headwater_db_upgrade_twice_upgrades_once_and_keeps_every_row(
        store: Store, tmp_path: Path, child_env: dict[str, str]) -> None:
    assert store.url is not None
    await on_database(store.url, fill_previous)
    before = await on_database(store.url, rows)
    env = {k: v for k, v in child_env.items() if not k.startswith("HEADWATER_")}
    shown = make_url(store.url).render_as_string(hide_password=True)

    current = hw_db("current", "--db", store.url, cwd=tmp_path, env=env)
    assert current.returncode == 0, current.stderr
    assert current.stdout == (f"{shown}: no version table, tables of revision 0001 (made before "
                              f"migrations); head is {HEAD} (`headwater db upgrade` stamps and "
                              "upgrades it)\n")
    first = hw_db("upgrade", "--db", store.url, cwd=tmp_path, env=env)
    assert first.returncode == 0, first.stderr
    assert first.stdout == (f"{shown}: upgraded from unversioned tables of revision 0001 to "
                            f"revision {HEAD} (head)\n")
    second = hw_db("upgrade", "--db", store.url, cwd=tmp_path, env=env)
    assert second.returncode == 0, second.stderr
    assert second.stdout == f"{shown}: at revision {HEAD} (head), nothing to upgrade\n"
    current = hw_db("current", "--db", store.url, cwd=tmp_path, env=env)
    assert current.stdout == f"{shown}: revision {HEAD} (head)\n"

    after = await on_database(store.url, rows)
    assert after["hw_events"] == before["hw_events"]
    assert after["hw_leases"] == [(*row, None, None, None) for row in before["hw_leases"]]
    assert await on_database(store.url, schema_diffs) == []


@pytest.mark.slow
def test_headwater_db_upgrade_defaults_to_the_setting_and_rejects_a_bad_url(
        tmp_path: Path, child_env: dict[str, str]) -> None:
    env = {k: v for k, v in child_env.items() if not k.startswith("HEADWATER_")}
    made = hw_db("upgrade", cwd=tmp_path, env=env)  # the demo's file under .headwater/
    assert made.returncode == 0, made.stderr
    assert made.stdout == ("sqlite:///.headwater/sessions.db: upgraded from an empty database "
                           f"to revision {HEAD} (head)\n")
    raw = sqlite3.connect(tmp_path / ".headwater" / "sessions.db")
    try:
        assert raw.execute(f"SELECT version_num FROM {migrations.VERSION_TABLE}").fetchall() == [
            (HEAD,)]
    finally:
        raw.close()

    other = tmp_path / "other.db"
    by_env = hw_db("upgrade", cwd=tmp_path, env={**env, "HEADWATER_DATABASE_URL":
                                                 f"sqlite:///{other}"})
    assert by_env.returncode == 0, by_env.stderr
    assert other.exists()

    for bad in ("nope://x", "::"):
        result = hw_db("upgrade", "--db", bad, cwd=tmp_path, env=env)
        assert result.returncode == 2
        assert result.stdout == ""
        assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith("headwater db: ")
    not_a_db = tmp_path / "notes.txt"
    not_a_db.write_text("hello")
    result = hw_db("upgrade", "--db", f"sqlite:///{not_a_db}", cwd=tmp_path, env=env)
    assert (result.returncode, result.stderr) == (
        2, f"headwater db: {not_a_db} is not a SQLite database\n")
    assert not_a_db.read_text() == "hello"
