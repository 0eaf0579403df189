"""``SqlSessionService``: sessions in SQLite (default) or PostgreSQL, on SQLAlchemy async Core.

Two tables, created on first use: ``hw_sessions`` (one row per session, its
state as JSON text) and ``hw_events`` (one row per non-partial event, as
:func:`~headwater.events.event_to_json` text). ``hw_events.seq`` is a
monotonic sequence: events are read back in ``seq`` order and ``seq`` is the
pagination cursor. An event and its state delta commit in one transaction
(DESIGN.md §5).

SQLite (DESIGN.md §7.8) runs in WAL mode with ``synchronous`` from the settings
(``NORMAL``: survives a process crash, may lose the last commits on power loss;
``FULL`` is one setting away), and every write transaction starts with
``BEGIN IMMEDIATE``: a writer takes the lock first and waits up to
``busy_timeout`` for it, instead of failing late at its first write. Reads use
a plain ``BEGIN`` and are never blocked by a writer.

PostgreSQL (``postgresql+asyncpg://…``, for several gateway replicas) uses the
same tables; an append locks the session row (``SELECT … FOR UPDATE``), so
appends from several processes keep the state consistent.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final, Literal, cast

from sqlalchemy import (
    BigInteger,
    Column,
    ColumnElement,
    Double,
    ForeignKeyConstraint,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    bindparam,
    delete,
    insert,
    select,
    text,
    update,
)
from sqlalchemy import event as sa_event
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from ..errors import SessionError, SessionNotFoundError
from ..events import Event, event_from_json, event_to_json
from ..settings import get_settings
from .base import BaseSessionService, EventPage, Session

SqliteSynchronous = Literal["OFF", "NORMAL", "FULL", "EXTRA"]
"""SQLite ``PRAGMA synchronous``: ``NORMAL`` survives a process crash, ``FULL`` a power cut."""

_SYNCHRONOUS_MODES: Final = ("OFF", "NORMAL", "FULL", "EXTRA")
_WRITE: Final = "headwater_write"  # connection execution option: this transaction writes
_SCHEMA_LOCK_KEY: Final = 0x6877_7365_7373  # PostgreSQL advisory lock for CREATE TABLE

_metadata = MetaData()

_sessions = Table(
    "hw_sessions",
    _metadata,
    Column("app_name", String, primary_key=True),
    Column("user_id", String, primary_key=True),
    Column("id", String, primary_key=True),
    Column("state", Text, nullable=False),
    Column("create_time", Double, nullable=False),
    Column("update_time", Double, nullable=False),
)

_events = Table(
    "hw_events",
    _metadata,
    # INTEGER (not BIGINT) on SQLite, so the column is the rowid and AUTOINCREMENT applies.
    Column("seq", BigInteger().with_variant(Integer, "sqlite"), primary_key=True,
           autoincrement=True),
    Column("id", String, nullable=False, unique=True),
    Column("app_name", String, nullable=False),
    Column("user_id", String, nullable=False),
    Column("session_id", String, nullable=False),
    Column("invocation_id", String, nullable=False),
    Column("author", String, nullable=False),
    Column("timestamp", Double, nullable=False),
    Column("data", Text, nullable=False),
    ForeignKeyConstraint(
        ["app_name", "user_id", "session_id"],
        ["hw_sessions.app_name", "hw_sessions.user_id", "hw_sessions.id"],
        ondelete="CASCADE",
    ),
    Index("ix_hw_events_session_seq", "app_name", "user_id", "session_id", "seq"),
    sqlite_autoincrement=True,  # never reuse a seq, even after deletes
)


_KEY = ((_sessions.c.app_name == bindparam("k_app")) & (_sessions.c.user_id == bindparam("k_user"))
        & (_sessions.c.id == bindparam("k_id")))
_TOUCH = update(_sessions).where(_KEY).values(update_time=bindparam("update_time"))
_TOUCH_WITH_STATE = update(_sessions).where(_KEY).values(update_time=bindparam("update_time"),
                                                         state=bindparam("state"))
_INSERT_EVENT = insert(_events)


class SqlSessionService(BaseSessionService):
    """Sessions and events in a SQL database, shared by every process that opens it.

    Args:
        url: a SQLAlchemy async URL; defaults to ``get_settings().database_url``
            (``sqlite+aiosqlite:///.headwater/sessions.db``). ``sqlite://`` and
            ``postgresql://`` get the ``aiosqlite`` and ``asyncpg`` drivers. The
            parent directory of a SQLite file is created when first used.
        synchronous: SQLite ``PRAGMA synchronous``; defaults to the
            ``sqlite_synchronous`` setting (``NORMAL``).
        busy_timeout_ms: how long a SQLite writer waits for the lock; defaults
            to the ``sqlite_busy_timeout_ms`` setting.

    The engine (a connection pool) is created on first use and belongs to the
    event loop that used it; used from another loop, the service disposes it
    and opens a new one. Connections stay open until :meth:`close`; a call
    after ``close`` opens new ones. Call ``close`` on the loop that used the
    service: PostgreSQL connections of a loop that has already stopped cannot
    be closed cleanly (asyncpg then warns about unclosed connections).

    Raises:
        ImportError: a PostgreSQL URL without asyncpg installed (the message
            says ``pip install "headwater[postgres]"``).
        ValueError: an unknown ``synchronous`` mode or a negative timeout.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        synchronous: SqliteSynchronous | None = None,
        busy_timeout_ms: int | None = None,
    ) -> None:
        settings = get_settings()
        self._url = _resolve_url(url or settings.database_url)
        mode = (synchronous or settings.sqlite_synchronous).upper()
        if mode not in _SYNCHRONOUS_MODES:
            raise ValueError(f"synchronous must be one of {_SYNCHRONOUS_MODES}, not {mode!r}")
        self._synchronous = mode
        timeout = settings.sqlite_busy_timeout_ms if busy_timeout_ms is None else busy_timeout_ms
        if timeout < 0:
            raise ValueError(f"busy_timeout_ms must be >= 0, not {timeout}")
        self._busy_timeout_ms = int(timeout)
        self._engine: AsyncEngine | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._schema_lock = asyncio.Lock()
        self._schema_ready = False

    def __repr__(self) -> str:
        return f"SqlSessionService({self._url.render_as_string(hide_password=True)!r})"

    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> Session:
        """Create a session (a fresh id unless one is given); see the base class.

        Raises:
            SessionError: ``session_id`` is already taken, or the database failed.
            TypeError: ``state`` is not JSON-serialisable.
        """
        sid = session_id or uuid.uuid4().hex
        encoded = json.dumps(state or {})
        now = time.time()
        try:
            async with self._transaction(write=True) as conn:
                await conn.execute(insert(_sessions).values(
                    app_name=app_name, user_id=user_id, id=sid, state=encoded,
                    create_time=now, update_time=now))
        except IntegrityError as exc:
            raise SessionError(f"session {sid!r} already exists") from exc
        return Session(id=sid, app_name=app_name, user_id=user_id, state=json.loads(encoded),
                       last_update_time=now)

    async def get_session(
        self, *, app_name: str, user_id: str, session_id: str
    ) -> Session | None:
        """The session with all its events in commit order, or ``None`` (missing or not theirs).

        Raises:
            SessionError: the database failed.
        """
        async with self._transaction(write=False) as conn:
            row = (await conn.execute(
                select(_sessions.c.state, _sessions.c.update_time)
                .where(_session_key(app_name, user_id, session_id)))).first()
            if row is None:
                return None
            data = await conn.scalars(
                select(_events.c.data)
                .where(_events_of(app_name, user_id, session_id))
                .order_by(_events.c.seq))
            events = [event_from_json(d) for d in data]
        return Session(id=session_id, app_name=app_name, user_id=user_id,
                       state=json.loads(row.state), events=events,
                       last_update_time=float(row.update_time))

    async def list_sessions(self, *, app_name: str, user_id: str) -> list[Session]:
        """The user's sessions, most recently updated first, without their events.

        Raises:
            SessionError: the database failed.
        """
        async with self._transaction(write=False) as conn:
            rows = (await conn.execute(
                select(_sessions.c.id, _sessions.c.state, _sessions.c.update_time)
                .where(_sessions.c.app_name == app_name, _sessions.c.user_id == user_id)
                .order_by(_sessions.c.update_time.desc(), _sessions.c.create_time.desc()))).all()
        return [Session(id=str(r.id), app_name=app_name, user_id=user_id,
                        state=json.loads(r.state), last_update_time=float(r.update_time))
                for r in rows]

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        """Delete a session and its events; deleting a missing one is a no-op.

        Raises:
            SessionError: the database failed.
        """
        async with self._transaction(write=True) as conn:
            await conn.execute(delete(_events).where(_events_of(app_name, user_id, session_id)))
            await conn.execute(delete(_sessions).where(
                _session_key(app_name, user_id, session_id)))

    async def list_events(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        after: int | None = None,
        limit: int = 100,
    ) -> EventPage:
        """A page of at most ``limit`` events in commit order, after cursor ``after``.

        The cursor is the ``seq`` of the page's last event; ``next_cursor`` is
        ``None`` on the last page.

        Raises:
            SessionNotFoundError: no such session for this user.
            ValueError: ``limit`` is below 1.
            SessionError: the database failed.
        """
        if limit < 1:
            raise ValueError(f"limit must be at least 1, not {limit}")
        query = select(_events.c.seq, _events.c.data).where(
            _events_of(app_name, user_id, session_id))
        if after is not None:
            query = query.where(_events.c.seq > after)
        async with self._transaction(write=False) as conn:
            await _require_session(conn, app_name, user_id, session_id, lock=False)
            rows = (await conn.execute(query.order_by(_events.c.seq).limit(limit + 1))).all()
        page = rows[:limit]
        more = len(rows) > limit
        return EventPage(events=[event_from_json(r.data) for r in page],
                         next_cursor=int(page[-1].seq) if more else None)

    async def _append(self, session: Session, event: Event, delta: dict[str, Any]) -> None:
        """Update the state, then insert the event, in one write transaction.

        The state is written first, so a failing insert (e.g. an event id that
        is already stored) proves the rollback: nothing of the call remains.

        Raises:
            SessionNotFoundError: the session does not exist (any more).
            SessionError: the event id is already stored, or the database failed.
        """
        key = (session.app_name, session.user_id, session.id)
        try:
            async with self._transaction(write=True) as conn:
                where = {"k_app": key[0], "k_user": key[1], "k_id": key[2]}
                if delta:
                    # Read-modify-write under the row lock; without a delta the UPDATE
                    # alone takes the lock and proves the session exists.
                    merged = json.loads(await _require_session(conn, *key, lock=True))
                    merged.update(delta)
                    result = await conn.execute(_TOUCH_WITH_STATE, {
                        **where, "update_time": event.timestamp, "state": json.dumps(merged)})
                else:
                    result = await conn.execute(_TOUCH, {**where,
                                                         "update_time": event.timestamp})
                if result.rowcount == 0:
                    raise SessionNotFoundError(f"no session {key[2]!r} for this user")
                # Statements built once (module level): only parameters change per event.
                await conn.execute(_INSERT_EVENT, {
                    "id": event.id, "app_name": key[0], "user_id": key[1],
                    "session_id": key[2], "invocation_id": event.invocation_id,
                    "author": event.author, "timestamp": event.timestamp,
                    "data": event_to_json(event).decode()})
        except IntegrityError as exc:
            raise SessionError(f"event {event.id!r} could not be stored (already stored?)") from exc

    async def close(self) -> None:
        """Dispose the engine and close its connections; a later call opens new ones."""
        engine, loop = self._engine, self._loop
        self._engine, self._loop, self._schema_ready = None, None, False
        if engine is not None:
            await _dispose(engine, loop)

    @asynccontextmanager
    async def _transaction(self, *, write: bool) -> AsyncIterator[AsyncConnection]:
        """A connection in a transaction (``BEGIN IMMEDIATE`` on SQLite when ``write``)."""
        engine = await self._ready_engine()
        try:
            async with engine.connect() as conn:
                if write:
                    await conn.execution_options(**{_WRITE: True})
                async with conn.begin():
                    yield conn
        except IntegrityError:
            raise
        except DBAPIError as exc:
            # The driver's message (e.g. "database is locked"), without SQL or parameters.
            raise SessionError(f"session store failed: {exc.orig}") from exc

    async def _ready_engine(self) -> AsyncEngine:
        """The engine for the running loop, with the tables created."""
        loop = asyncio.get_running_loop()
        if self._engine is not None and self._loop is not loop:
            engine, old_loop = self._engine, self._loop
            self._engine, self._loop = None, None
            await _dispose(engine, old_loop)
        if self._engine is None:
            self._engine = self._build_engine()
            self._loop = loop
            self._schema_lock = asyncio.Lock()
            self._schema_ready = False
        engine = self._engine
        if not self._schema_ready:
            async with self._schema_lock:
                if not self._schema_ready:
                    await self._create_tables(engine)
                    self._schema_ready = True
        return engine

    def _build_engine(self) -> AsyncEngine:
        if self._url.get_backend_name() != "sqlite":
            return create_async_engine(self._url, pool_pre_ping=True)
        engine = create_async_engine(_prepare_sqlite_file(self._url))
        pragmas = (f"PRAGMA busy_timeout={self._busy_timeout_ms}", "PRAGMA journal_mode=WAL",
                   f"PRAGMA synchronous={self._synchronous}", "PRAGMA foreign_keys=ON")

        def on_connect(dbapi_connection: Any, _record: Any) -> None:
            # The driver's own implicit BEGIN is off: on_begin below emits every BEGIN.
            dbapi_connection.isolation_level = None
            cursor = dbapi_connection.cursor()
            try:
                for pragma in pragmas:
                    cursor.execute(pragma)
            finally:
                cursor.close()

        def on_begin(conn: Connection) -> None:
            write = conn.get_execution_options().get(_WRITE, False)
            conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

        sa_event.listen(engine.sync_engine, "connect", on_connect)
        sa_event.listen(engine.sync_engine, "begin", on_begin)
        return engine

    async def _create_tables(self, engine: AsyncEngine) -> None:
        async with engine.connect() as conn:
            await conn.execution_options(**{_WRITE: True})
            async with conn.begin():
                if engine.dialect.name == "postgresql":
                    # Replicas starting together must not race on CREATE TABLE.
                    await conn.execute(text(f"SELECT pg_advisory_xact_lock({_SCHEMA_LOCK_KEY})"))
                await conn.run_sync(_metadata.create_all)


def _session_key(app_name: str, user_id: str, session_id: str) -> ColumnElement[bool]:
    c = _sessions.c
    return (c.app_name == app_name) & (c.user_id == user_id) & (c.id == session_id)


def _events_of(app_name: str, user_id: str, session_id: str) -> ColumnElement[bool]:
    c = _events.c
    return (c.app_name == app_name) & (c.user_id == user_id) & (c.session_id == session_id)


async def _require_session(
    conn: AsyncConnection, app_name: str, user_id: str, session_id: str, *, lock: bool
) -> str:
    """The session's stored state (JSON text); ``lock`` holds its row until commit."""
    query = select(_sessions.c.state).where(_session_key(app_name, user_id, session_id))
    if lock:
        query = query.with_for_update()  # PostgreSQL; SQLite already holds BEGIN IMMEDIATE
    state = (await conn.execute(query)).scalar_one_or_none()
    if state is None:
        raise SessionNotFoundError(f"no session {session_id!r} for this user")
    return cast(str, state)


async def _dispose(engine: AsyncEngine, loop: asyncio.AbstractEventLoop | None) -> None:
    """Close an engine's connections, on the loop that opened them if it still runs."""
    if loop is None or loop is asyncio.get_running_loop():
        await engine.dispose()
    elif loop.is_running():
        # That loop runs in another thread: its connections can only close there.
        await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(engine.dispose(), loop))
    elif engine.dialect.name == "sqlite":
        await engine.dispose()  # aiosqlite connections live in their own threads
    else:
        # Sockets of a stopped loop cannot be closed from this one: drop the pool.
        await engine.dispose(close=False)


def _resolve_url(url: str) -> URL:
    """Parse ``url``, pick the async driver, and check that the driver is installed."""
    parsed = make_url(url)
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+asyncpg")
    elif parsed.drivername == "sqlite":
        parsed = parsed.set(drivername="sqlite+aiosqlite")
    if parsed.get_driver_name() == "asyncpg":
        try:
            importlib.import_module("asyncpg")
        except ImportError as exc:
            raise ImportError(
                'SqlSessionService needs asyncpg for PostgreSQL: pip install "headwater[postgres]"'
            ) from exc
    return parsed


def _prepare_sqlite_file(url: URL) -> URL:
    """Make a SQLite file path absolute and create its directory (memory and URIs untouched)."""
    database = url.database
    if not database or database == ":memory:" or database.startswith("file:"):
        return url
    path = Path(database).expanduser().absolute()
    path.parent.mkdir(parents=True, exist_ok=True)
    return url.set(database=str(path))
