"""``SqlSessionService``: sessions in SQLite (default) or PostgreSQL.

Tables, created on first use: ``hw_sessions`` (one row per session, its state
as JSON text), ``hw_events`` (one row per non-partial event, as
:func:`~headwater.events.event_to_json` text), ``hw_call_results`` (one row
per call that has its final result) and ``hw_leases`` (the run holding each
session, and its process), declared once in :mod:`.schema`. A store brings
its database to the schema's head when it first connects (Alembic revisions,
:mod:`.migrations`; setting ``database_auto_migrate``, on by default), or
with it off checks the database is there (``headwater db upgrade`` brings
it). A lease whose holding process has provably ended on this host is taken
over at once (see :mod:`._holder`). ``hw_events.seq`` is a monotonic sequence: events are read
back in ``seq`` order and ``seq`` is the pagination cursor. An event, its
state delta and its result claims commit in one transaction
(docs/architecture.md).

SQLite (:mod:`.sqlite`; docs/architecture.md): one writer thread per database runs
each write transaction whole (``BEGIN IMMEDIATE``), committing writes queued
together in one transaction; WAL with ``synchronous`` from the settings
(``NORMAL``: survives a process crash, may lose the last commits on power loss;
``FULL`` is one setting away); reads on a small pool of reader threads, never
blocked by the writer.

PostgreSQL (``postgresql+asyncpg://…``, for several gateway replicas;
:mod:`.postgres`) uses the same tables; every write locks the session's row,
so writes from several processes keep the state consistent.

``get_session`` keeps the parsed events of recently read sessions (a
``session_cache_size`` LRU) and reads only the events committed since: its
cost follows what is new, not the session's length.
"""

from __future__ import annotations

import asyncio
import bisect
import importlib
import json
import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

from sqlalchemy.engine import URL, make_url

from ..core.events import Event, event_from_json, event_to_json
from ..core.settings import Settings, settings_or_default
from . import _sqlcore as core
from ._holder import this_process
from .base import BaseSessionService, EventPage, Lease, Session, final_call_ids

if TYPE_CHECKING:
    from .migrations import SchemaRevision

SqliteSynchronous = Literal["OFF", "NORMAL", "FULL", "EXTRA"]
"""SQLite ``PRAGMA synchronous``: ``NORMAL`` survives a process crash, ``FULL`` a power cut."""

_SYNCHRONOUS_MODES: Final = ("OFF", "NORMAL", "FULL", "EXTRA")
_PRAGMAS: Final = ("journal_mode", "synchronous", "busy_timeout", "foreign_keys")


@dataclass(slots=True)
class _Cached:
    """A session's events as this service last read them."""

    create_time: float  # tells a deleted-and-recreated session from the one cached
    seqs: list[int]
    events: list[Event]


class SqlSessionService(BaseSessionService):
    """Sessions and events in a SQL database, shared by every process that opens it.

    Args:
        url: a SQLAlchemy-style URL; defaults to the ``database_url`` setting
            (``sqlite:///.headwater/sessions.db``). Any ``sqlite``
            URL (whatever its driver part) opens the file with the writer-thread
            store; ``postgresql://`` gets the ``asyncpg`` driver. The parent
            directory of a SQLite file is created when first used.
        synchronous: SQLite ``PRAGMA synchronous``; defaults to the
            ``sqlite_synchronous`` setting (``NORMAL``).
        busy_timeout_ms: how long a SQLite writer waits for the lock (held by
            another process); defaults to the ``sqlite_busy_timeout_ms`` setting.
        trace: called with every SQL statement the service's connections run
            (from the thread that runs it), for debugging.
        settings: the bounds to use (queue, batch, readers, cache, timeouts,
            ``lease_poll_interval``); defaults to the process-wide settings
            (:func:`~headwater.settings.settings_or_default`).

    Threads and connections open on first use and stay open until
    :meth:`close`; a call after ``close`` opens new ones. SQLite's threads
    belong to no event loop. A PostgreSQL pool belongs to the loop that used it
    (used from another loop, the service opens a new one): call ``close`` on
    the loop that used the service.

    ``get_session`` returns a new ``Session`` each time; its ``events`` list is
    a copy, but the ``Event`` objects in it are shared with the cache and with
    other callers: treat them as read-only.

    Raises:
        ImportError: a PostgreSQL URL without asyncpg installed (the message
            says ``pip install "headwater[postgres]"``).
        ValueError: an unknown ``synchronous`` mode, a negative timeout, or an
            in-memory SQLite URL (use ``InMemorySessionService``).
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        synchronous: SqliteSynchronous | None = None,
        busy_timeout_ms: int | None = None,
        trace: Callable[[str], None] | None = None,
        settings: Settings | None = None,
    ) -> None:
        settings = settings_or_default(settings)
        self.lease_poll_interval = settings.lease_poll_interval
        self._url = _resolve_url(url or settings.database_url)
        mode = (synchronous or settings.sqlite_synchronous).upper()
        if mode not in _SYNCHRONOUS_MODES:
            raise ValueError(f"synchronous must be one of {_SYNCHRONOUS_MODES}, not {mode!r}")
        timeout = settings.sqlite_busy_timeout_ms if busy_timeout_ms is None else busy_timeout_ms
        if timeout < 0:
            raise ValueError(f"busy_timeout_ms must be >= 0, not {timeout}")
        self._store: core.Store
        if self._url.get_backend_name() == "sqlite":
            from .sqlite import SqliteConfig, SqliteStore

            database, uri = _sqlite_database(self._url)
            self._store = SqliteStore(SqliteConfig(database, uri, mode, int(timeout), settings,
                                                   trace))
        else:
            from .postgres import PostgresStore

            self._store = PostgresStore(self._url, trace, settings.database_auto_migrate)
        self._cache: OrderedDict[core.Key, _Cached] = OrderedDict()
        self._cache_size = settings.session_cache_size
        # Taken with a lease, read by the run's first get_session (then dropped).
        self._snapshots: dict[core.Key, core.Snapshot] = {}

    @property
    def store(self) -> core.Store:
        """The database this service writes to, for the services that share it (the
        memory service, ``sessions/sql_memory.py``)."""
        return self._store

    def __repr__(self) -> str:
        return f"SqlSessionService({self.url!r})"

    @property
    def url(self) -> str:
        """The database's URL, its password shown as ``***``."""
        return self._url.render_as_string(hide_password=True)

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
        key = (app_name, user_id, sid)
        await self._store.write(core.create_session(key, encoded, now))
        self._remember(key, _Cached(now, [], []))  # a new session holds no event yet
        return Session(id=sid, app_name=app_name, user_id=user_id, state=json.loads(encoded),
                       last_update_time=now, create_time=now)

    async def get_session(
        self, *, app_name: str, user_id: str, session_id: str
    ) -> Session | None:
        """The session with all its events in commit order, or ``None`` (missing or not theirs).

        Reads only the events committed after those this service already holds
        for the session (by any process: the ``seq`` order tells what is new).

        Raises:
            SessionError: the database failed.
        """
        key = (app_name, user_id, session_id)
        cached = self._cache.get(key)
        after = cached.seqs[-1] if cached is not None and cached.seqs else 0
        snapshot = self._snapshots.pop(key, None)
        if (snapshot is not None and cached is not None and snapshot.last_seq == after
                and snapshot.create_time == cached.create_time):
            # Read with the lease just taken: nothing new since what this service holds.
            self._remember(key, cached)
            return Session(id=session_id, app_name=app_name, user_id=user_id,
                           state=json.loads(snapshot.state), events=list(cached.events),
                           last_update_time=snapshot.update_time,
                           create_time=snapshot.create_time)
        rows = await self._store.read(core.read_session(key, after))
        if rows is None:
            self._cache.pop(key, None)
            return None
        cached = self._cache.get(key)  # another read may have moved it on meanwhile
        if cached is None or cached.create_time != rows.create_time:
            cached = _Cached(rows.create_time, [], [])
        last = cached.seqs[-1] if cached.seqs else 0
        for seq, data in rows.events:
            if seq > last:
                cached.seqs.append(int(seq))
                cached.events.append(event_from_json(data))
        # This read's snapshot ends at its own last row (or its cursor), whatever the cache holds.
        seen = int(rows.events[-1][0]) if rows.events else after
        events = cached.events[: bisect.bisect_right(cached.seqs, seen)]
        self._remember(key, cached)
        return Session(id=session_id, app_name=app_name, user_id=user_id,
                       state=json.loads(rows.state), events=events,
                       last_update_time=rows.update_time, create_time=rows.create_time)

    def _remember(self, key: core.Key, cached: _Cached) -> None:
        if self._cache_size == 0:
            return
        self._cache[key] = cached
        self._cache.move_to_end(key)
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)

    async def list_sessions(self, *, app_name: str, user_id: str) -> list[Session]:
        """The user's sessions, most recently updated first, without their events.

        Raises:
            SessionError: the database failed.
        """
        rows = await self._store.read(core.list_sessions(app_name, user_id))
        return [Session(id=str(sid), app_name=app_name, user_id=user_id, state=json.loads(state),
                        last_update_time=float(update_time), create_time=float(created))
                for sid, state, update_time, created in rows]

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        """Delete a session, its events, result claims and lease; a missing one is a no-op.

        Raises:
            SessionError: the database failed.
        """
        key = (app_name, user_id, session_id)
        self._cache.pop(key, None)
        self._snapshots.pop(key, None)
        await self._store.write(core.delete_session(key))

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
        rows = await self._store.read(core.list_events(
            (app_name, user_id, session_id), after or 0, limit + 1))
        page = rows[:limit]
        return EventPage(events=[event_from_json(data) for _, data in page],
                         next_cursor=int(page[-1][0]) if len(rows) > limit else None)

    def _start_append(
        self, session: Session, event: Event, delta: dict[str, Any], release: Lease | None,
        lease: Lease | None, on_commit: Callable[[], None],
    ) -> Awaitable[object]:
        """Encode the write on the loop, then hand it to the store (see the base class).

        Raises (when awaited):
            SessionNotFoundError, LeaseLostError, CallAlreadyAnsweredError: see
                :meth:`append_event`.
            SessionError: the event id is already stored, or the database failed.
        """
        write = _encode((session.app_name, session.user_id, session.id), event, delta, lease,
                        release is not None)

        def committed(seqs: tuple[int, int]) -> None:
            on_commit()
            self._cache_append(write.key, event, *seqs)

        return self._store.start_write(core.append(write, self._store.lock), order=write.key,
                                       on_commit=committed)

    def _cache_append(self, key: core.Key, event: Event, seq: int, before: int) -> None:
        """Keep a cached session level with this service's own writes (no read needed).

        Only when the cache holds every event up to the one before it; else the
        next read fetches what is missing.
        """
        cached = self._cache.get(key)
        if cached is not None and (cached.seqs[-1] if cached.seqs else 0) == before:
            cached.seqs.append(seq)
            cached.events.append(event)

    async def _append(
        self, session: Session, event: Event, delta: dict[str, Any], lease: Lease | None
    ) -> None:
        await self._start_append(session, event, delta, None, lease, lambda: None)

    async def _try_acquire_lease(
        self, app_name: str, user_id: str, session_id: str, owner: str, run_id: str, ttl: float
    ) -> Lease | float:
        taken, _ = await self._acquire_write((app_name, user_id, session_id), owner, run_id,
                                             ttl, None, None, None)
        return taken

    async def _try_acquire_lease_and_append(
        self, app_name: str, user_id: str, session_id: str, owner: str, run_id: str, ttl: float,
        event: Event, delta: dict[str, Any], after: str | None,
    ) -> tuple[Lease | float, bool]:
        """The lease and, if the history ends at ``after``, the event: one transaction."""
        key = (app_name, user_id, session_id)
        # The fence is the lease this very transaction takes.
        write = _encode(key, event, delta, Lease(*key, owner, run_id, 0.0), False)
        return await self._acquire_write(key, owner, run_id, ttl, write, after, event)

    async def _acquire_write(self, key: core.Key, owner: str, run_id: str, ttl: float,
                             first: core.AppendWrite | None, after: str | None,
                             event: Event | None) -> tuple[Lease | float, bool]:
        """One acquire (with ``first`` when given); a cancelled caller waits for its outcome.

        Waiting keeps a release that follows a cancel behind the write (on
        PostgreSQL it could otherwise run first and leave the lease held).
        """

        def committed(done: core.Acquired) -> None:
            if done.appended is not None and event is not None:
                self._cache_append(key, event, *done.appended)

        steps = core.acquire_lease_with_snapshot(key, owner, run_id, ttl, self._store.lock,
                                                 this_process(), first, after)
        pending = self._store.start_write(steps, order=key, on_commit=committed)
        try:
            done = await asyncio.shield(pending)
        except asyncio.CancelledError:
            await asyncio.wait([pending])
            raise
        if done.snapshot is not None:
            self._snapshots[key] = done.snapshot
            while len(self._snapshots) > max(self._cache_size, 1):
                self._snapshots.pop(next(iter(self._snapshots)))
        return done.taken, done.appended is not None

    async def renew_lease(self, lease: Lease, ttl: float) -> Lease:
        """See the base class; one conditional write on the lease's row."""
        return await self._store.write(core.renew_lease(lease, ttl, self._store.lock))

    async def release_lease(self, lease: Lease) -> None:
        """See the base class; one conditional delete of the lease's row."""
        await self._store.write(core.release_lease(lease, self._store.lock))

    async def pragmas(self) -> dict[str, Any]:
        """The SQLite settings in effect on the writer connection (empty for PostgreSQL).

        Keys: ``journal_mode``, ``synchronous`` (0–3), ``busy_timeout`` (ms),
        ``foreign_keys`` (0/1). For diagnostics and tests.
        """
        if self._url.get_backend_name() != "sqlite":
            return {}
        return await self._store.write(core.pragmas(_PRAGMAS))

    async def upgrade_schema(self) -> SchemaRevision:
        """Bring the database's schema to head now (what ``headwater db upgrade`` does).

        Idempotent; runs whatever ``database_auto_migrate`` says, under the same
        lock as the migration a store runs when it first connects. An empty
        database gets every table; one made before migrations (no version
        table) is stamped at the revision it matches, then upgraded. No row
        is lost.

        Returns:
            Where the database stood before (it is at head once this returns).

        Raises:
            SessionError: the database is at a revision this headwater does not
                know, or the database failed (nothing of the upgrade stays).
        """
        return await self._store.upgrade_schema()

    async def ping(self) -> None:
        """Open the store if need be (connecting, and bringing the schema to head as
        ``database_auto_migrate`` says, as its first use would), then one round trip
        (``SELECT 1``).

        Raises:
            SessionError: the database failed or is not at head; ``OSError`` (or the
                driver's error) when it cannot be reached.
        """
        await self._store.read(core.ping())

    async def schema_revision(self) -> SchemaRevision:
        """Where the database's schema stands (its revision, and head); changes nothing.

        Raises:
            SessionError: the database failed.
        """
        return await self._store.schema_revision()

    async def close(self) -> None:
        """Finish the writes under way, then end the threads and close every connection.

        On SQLite the writer thread ends after the writes already queued, and
        with the last connection closed no ``-wal`` file is left behind. A
        later call opens everything again.
        """
        self._cache.clear()
        self._snapshots.clear()
        await self._store.close()


def _encode(key: core.Key, event: Event, delta: dict[str, Any], lease: Lease | None,
            release: bool) -> core.AppendWrite:
    """One append, encoded on the caller's loop (the event cannot change under it)."""
    return core.AppendWrite(
        key=key, event_id=event.id, invocation_id=event.invocation_id, author=event.author,
        timestamp=event.timestamp, data=event_to_json(event).decode(),
        delta=json.dumps(delta) if delta else None, call_ids=tuple(final_call_ids(event)),
        holder=(lease.owner, lease.run_id) if lease is not None else None, release=release)


def _resolve_url(url: str) -> URL:
    """Parse ``url``, pick the driver, and check that asyncpg is installed for PostgreSQL."""
    parsed = make_url(url)
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+asyncpg")
    elif parsed.drivername == "sqlite":
        parsed = parsed.set(drivername="sqlite+aiosqlite")  # the name users know; unused
    if parsed.get_driver_name() == "asyncpg":
        try:
            importlib.import_module("asyncpg")
        except ImportError as exc:
            raise ImportError(
                'SqlSessionService needs asyncpg for PostgreSQL: pip install "headwater[postgres]"'
            ) from exc
    return parsed


def _sqlite_database(url: URL) -> tuple[str, bool]:
    """The file to open (absolute, its directory created) and whether it is a ``file:`` URI."""
    database = url.database
    if not database or database == ":memory:" or "mode=memory" in database:
        raise ValueError("SqlSessionService needs a SQLite file (several connections share "
                         "it); for sessions in memory use InMemorySessionService")
    if database.startswith("file:"):
        return database, True
    path = Path(database).expanduser().absolute()
    path.parent.mkdir(parents=True, exist_ok=True)
    return str(path), False
