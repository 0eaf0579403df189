"""What the SQL stores share: the statements, and each operation as steps.

The tables are declared once, in :mod:`.schema`.

Every operation is a generator of ``(sql, params)`` steps (sans-I/O): it yields
a statement, receives its rows, and returns the result or raises. The SQLite
writer thread drives the steps synchronously inside its transaction; the
PostgreSQL store drives the very same steps with ``await``. The statements use
``:name`` parameters, which both ``sqlite3`` and SQLAlchemy's ``text()`` take.

Serialisation: on SQLite a write transaction holds the database's one write
lock (``BEGIN IMMEDIATE``). On PostgreSQL every write locks the session's row
first (an ``UPDATE``, or ``SELECT … FOR UPDATE``), so appends, lease changes
and result claims of one session run one after another, and ``hw_events.seq``
grows in commit order within a session (what the incremental read relies on).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeVar

from ..core.errors import (
    CallAlreadyAnsweredError,
    LeaseLostError,
    SessionError,
    SessionNotFoundError,
)
from ._holder import Holder, holder_is_dead
from .base import Lease

if TYPE_CHECKING:
    from .migrations import SchemaRevision

T = TypeVar("T")
Row = tuple[Any, ...]  # one result row (raw column values)
Step = tuple[str, dict[str, Any]]
Steps = Generator[Step, list[Row], T]
"""An operation: yields statements, is sent each statement's rows, returns its result."""

Key = tuple[str, str, str]  # app_name, user_id, session_id

_SESSION: Final = "app_name = :app AND user_id = :user AND id = :sid"
_OF_SESSION: Final = "app_name = :app AND user_id = :user AND session_id = :sid"

INSERT_SESSION: Final = (
    "INSERT INTO hw_sessions (app_name, user_id, id, state, create_time, update_time) "
    "VALUES (:app, :user, :sid, :state, :now, :now) ON CONFLICT DO NOTHING RETURNING 1")
SESSION_ROW: Final = f"SELECT state, create_time, update_time FROM hw_sessions WHERE {_SESSION}"
SESSION_STATE: Final = f"SELECT state FROM hw_sessions WHERE {_SESSION}"
SESSION_EXISTS: Final = f"SELECT 1 FROM hw_sessions WHERE {_SESSION}"
TOUCH: Final = f"UPDATE hw_sessions SET update_time = :t WHERE {_SESSION} RETURNING 1"
TOUCH_STATE: Final = f"UPDATE hw_sessions SET update_time = :t, state = :state WHERE {_SESSION}"
LIST_SESSIONS: Final = (
    "SELECT id, state, update_time, create_time FROM hw_sessions "
    "WHERE app_name = :app AND user_id = :user ORDER BY update_time DESC, create_time DESC")
EVENTS_AFTER: Final = (
    f"SELECT seq, data FROM hw_events WHERE {_OF_SESSION} AND seq > :after ORDER BY seq")
EVENTS_PAGE: Final = EVENTS_AFTER + " LIMIT :limit"
LAST_SEQ: Final = f"SELECT max(seq) FROM hw_events WHERE {_OF_SESSION}"
LAST_EVENT_ID: Final = (
    f"SELECT id FROM hw_events WHERE {_OF_SESSION} ORDER BY seq DESC LIMIT 1")
SNAPSHOT: Final = (f"SELECT state, create_time, update_time, ({LAST_SEQ}) FROM hw_sessions "
                   f"WHERE {_SESSION}")
INSERT_EVENT: Final = (
    "INSERT INTO hw_events (id, app_name, user_id, session_id, invocation_id, author, "
    "timestamp, data) VALUES (:id, :app, :user, :sid, :inv, :author, :ts, :data) RETURNING seq")
CLAIM_RESULT: Final = (
    "INSERT INTO hw_call_results (app_name, user_id, session_id, call_id, event_id) "
    "VALUES (:app, :user, :sid, :call, :event) ON CONFLICT DO NOTHING RETURNING 1")
LEASE_OF: Final = ("SELECT owner, run_id, expires_at, took_over, holder_host, holder_pid, "
                   f"holder_start FROM hw_leases WHERE {_OF_SESSION}")
INSERT_LEASE: Final = (
    "INSERT INTO hw_leases (app_name, user_id, session_id, owner, run_id, expires_at, took_over, "
    "holder_host, holder_pid, holder_start) "
    "VALUES (:app, :user, :sid, :owner, :run, :exp, :took, :host, :pid, :start)")
REPLACE_LEASE: Final = (
    "UPDATE hw_leases SET owner = :owner, run_id = :run, expires_at = :exp, took_over = :took, "
    f"holder_host = :host, holder_pid = :pid, holder_start = :start WHERE {_OF_SESSION}")
RENEW_LEASE: Final = (f"UPDATE hw_leases SET expires_at = :exp WHERE {_OF_SESSION} "
                      "AND owner = :owner AND run_id = :run RETURNING took_over")
RELEASE_LEASE: Final = (f"DELETE FROM hw_leases WHERE {_OF_SESSION} "
                        "AND owner = :owner AND run_id = :run")
DELETE_SESSION: Final = (
    f"DELETE FROM hw_call_results WHERE {_OF_SESSION}",
    f"DELETE FROM hw_leases WHERE {_OF_SESSION}",
    f"DELETE FROM hw_events WHERE {_OF_SESSION}",
    f"DELETE FROM hw_sessions WHERE {_SESSION}",
)


@dataclass(frozen=True, slots=True)
class AppendWrite:
    """One ``append_event``, encoded on the caller's loop (the event cannot change under it)."""

    key: Key
    event_id: str
    invocation_id: str
    author: str
    timestamp: float
    data: str  # event_to_json
    delta: str | None  # the state delta as JSON, None without one
    call_ids: tuple[str, ...]  # calls whose final result the event carries
    holder: tuple[str, str] | None  # the fencing lease's (owner, run_id)
    release: bool = False  # release the holder's lease in the same transaction


@dataclass(frozen=True, slots=True)
class SessionRows:
    """A session's row and its events after a cursor, read in one transaction."""

    state: str
    create_time: float
    update_time: float
    events: list[Row]  # (seq, data) in seq order


def params(key: Key) -> dict[str, Any]:
    return {"app": key[0], "user": key[1], "sid": key[2]}


def not_found(key: Key) -> SessionNotFoundError:
    return SessionNotFoundError(f"no session {key[2]!r} for this user")


def create_session(key: Key, state: str, now: float) -> Steps[None]:
    rows = yield INSERT_SESSION, {**params(key), "state": state, "now": now}
    if not rows:
        raise SessionError(f"session {key[2]!r} already exists")


def delete_session(key: Key) -> Steps[None]:
    for statement in DELETE_SESSION:
        yield statement, params(key)


def read_session(key: Key, after: int) -> Steps[SessionRows | None]:
    rows = yield SESSION_ROW, params(key)
    if not rows:
        return None
    state, create_time, update_time = rows[0]
    events = yield EVENTS_AFTER, {**params(key), "after": after}
    return SessionRows(state, float(create_time), float(update_time), events)


def list_sessions(app_name: str, user_id: str) -> Steps[list[Row]]:
    return (yield LIST_SESSIONS, {"app": app_name, "user": user_id})


def list_events(key: Key, after: int, limit: int) -> Steps[list[Row]]:
    if not (yield SESSION_EXISTS, params(key)):
        raise not_found(key)
    return (yield EVENTS_PAGE, {**params(key), "after": after, "limit": limit})


def append(write: AppendWrite, lock: str) -> Steps[tuple[int, int]]:
    """Touch (and lock) the session, check the fence, claim the results, insert the event.

    Returns:
        The event's ``seq``, and the session's last ``seq`` before it (0: none):
        the service's cache takes the event only when it holds every event
        up to that one.
    """
    key = params(write.key)
    if write.delta is not None:
        rows = yield SESSION_STATE + lock, key
        if not rows:
            raise not_found(write.key)
        merged = json.loads(rows[0][0])
        merged.update(json.loads(write.delta))
        yield TOUCH_STATE, {**key, "t": write.timestamp, "state": json.dumps(merged)}
    elif not (yield TOUCH, {**key, "t": write.timestamp}):
        raise not_found(write.key)
    if write.holder is not None:
        rows = yield LEASE_OF, key
        if not rows or (rows[0][0], rows[0][1]) != write.holder:
            raise LeaseLostError(f"run {write.holder[1]!r} no longer holds session "
                                 f"{write.key[2]!r}; event {write.event_id} was not stored")
    clash = []
    for call_id in write.call_ids:
        if not (yield CLAIM_RESULT, {**key, "call": call_id, "event": write.event_id}):
            clash.append(call_id)
    if clash:
        raise CallAlreadyAnsweredError(clash)
    before = yield LAST_SEQ, key
    rows = yield INSERT_EVENT, {
        **key, "id": write.event_id, "inv": write.invocation_id, "author": write.author,
        "ts": write.timestamp, "data": write.data}
    if write.release and write.holder is not None:
        yield RELEASE_LEASE, {**key, "owner": write.holder[0], "run": write.holder[1]}
    return int(rows[0][0]), int(before[0][0] or 0)


def acquire_lease(key: Key, owner: str, run_id: str, ttl: float, lock: str, holder: Holder
                  ) -> Steps[Lease | float]:
    """Take the lease if it is free, expired, already this run's, or its holder is dead.

    ``holder`` (the calling process) is recorded with the lease. A lease whose
    recorded holder is provably dead (:func:`._holder.holder_is_dead`: a
    process of this host that has ended) is taken over before its expiry.

    Returns:
        The lease, or the holder's expiry when another run holds the session.
    """
    if not (yield SESSION_EXISTS + lock, params(key)):
        raise not_found(key)
    now = time.time()  # when the write runs, not when it was queued
    rows = yield LEASE_OF, params(key)
    took_over: str | None = None
    if rows:
        held_owner, held_run, expires_at, held_took_over, host, pid, start = rows[0]
        if (held_owner, held_run) != (owner, run_id):
            if float(expires_at) > now and not _recorded_dead(host, pid, start):
                return float(expires_at)
            took_over = str(held_run)
        else:
            took_over = held_took_over
    lease = Lease(*key, owner=owner, run_id=run_id, expires_at=now + ttl, took_over=took_over)
    values = {**params(key), "owner": owner, "run": run_id, "exp": lease.expires_at,
              "took": took_over, "host": holder.host, "pid": holder.pid, "start": holder.start}
    yield (REPLACE_LEASE if rows else INSERT_LEASE), values
    return lease


def _recorded_dead(host: Any, pid: Any, start: Any) -> bool:
    """Whether a lease row's holder columns name a provably dead process (none: unknown)."""
    if host is None or pid is None:  # written by an earlier version
        return False
    return holder_is_dead(Holder(str(host), int(pid), None if start is None else str(start)))


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A session's row and its last event ``seq``, read with the lease just taken."""

    state: str
    create_time: float
    update_time: float
    last_seq: int


@dataclass(frozen=True, slots=True)
class Acquired:
    """What :func:`acquire_lease_with_snapshot` did."""

    taken: Lease | float  # the lease, or the holder's expiry
    snapshot: Snapshot | None  # with the lease: the session as it is now (the event included)
    appended: tuple[int, int] | None  # the first event's seq and the seq before it, if stored


def acquire_lease_with_snapshot(key: Key, owner: str, run_id: str, ttl: float, lock: str,
                                holder: Holder, first: AppendWrite | None = None,
                                after: str | None = None) -> Steps[Acquired]:
    """:func:`acquire_lease`, and once taken the session's row and last ``seq`` (one write).

    With the snapshot, a service that already holds the session's events up to
    that ``seq`` serves the run's first read without reading again. With
    ``first`` (written by the lease's holder), the event is appended in the same
    transaction when the session's last event has the id ``after`` (``None``:
    no event), and the snapshot includes it.
    """
    taken = yield from acquire_lease(key, owner, run_id, ttl, lock, holder)
    if not isinstance(taken, Lease):
        return Acquired(taken, None, None)
    appended = None
    if first is not None:
        rows = yield LAST_EVENT_ID, params(key)
        if (rows[0][0] if rows else None) == after:
            appended = yield from append(first, lock)
    rows = yield SNAPSHOT, params(key)
    state, create_time, update_time, last_seq = rows[0]
    return Acquired(taken, Snapshot(state, float(create_time), float(update_time),
                                    int(last_seq or 0)), appended)


def renew_lease(lease: Lease, ttl: float, lock: str) -> Steps[Lease]:
    key: Key = (lease.app_name, lease.user_id, lease.session_id)
    yield SESSION_EXISTS + lock, params(key)  # serialises with acquire on PostgreSQL
    expires_at = time.time() + ttl
    rows = yield RENEW_LEASE, {**params(key), "owner": lease.owner, "run": lease.run_id,
                               "exp": expires_at}
    if not rows:
        raise LeaseLostError(f"run {lease.run_id!r} no longer holds session {key[2]!r}")
    return Lease(*key, owner=lease.owner, run_id=lease.run_id, expires_at=expires_at,
                 took_over=rows[0][0])


def release_lease(lease: Lease, lock: str) -> Steps[None]:
    key: Key = (lease.app_name, lease.user_id, lease.session_id)
    yield SESSION_EXISTS + lock, params(key)
    yield RELEASE_LEASE, {**params(key), "owner": lease.owner, "run": lease.run_id}


def drive(execute: Callable[[str, dict[str, Any]], list[Row]], steps: Steps[T]) -> T:
    """Run ``steps`` synchronously; ``execute(sql, params)`` returns the statement's rows."""
    try:
        step = next(steps)
        while True:
            step = steps.send(execute(*step))
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


class Store(Protocol):
    """What ``SqlSessionService`` needs of a database: run steps as reads or writes."""

    @property
    def lock(self) -> str:
        """Appended to a session-row SELECT that must lock the row (PostgreSQL)."""
        ...

    def start_write(self, steps: Steps[T], order: Key | None = None,
                    on_commit: Callable[[T], None] | None = None) -> asyncio.Future[T]:
        """Start a write that finishes (commits or rolls back) whatever its caller does.

        Cancelling the future stops only the waiting. ``on_commit(result)`` is
        called on the loop once the write committed, before the future
        completes; writes with the same ``order`` key commit (and call it) in
        the order they started.
        """
        ...

    async def write(self, steps: Steps[T]) -> T: ...

    async def read(self, steps: Steps[T]) -> T: ...

    async def upgrade_schema(self) -> SchemaRevision:
        """Bring the database to the schema's head (Alembic); where it stood before."""
        ...

    async def schema_revision(self) -> SchemaRevision:
        """Where the database's schema stands; changes nothing."""
        ...

    async def close(self) -> None: ...


def ping() -> Steps[None]:
    """One round trip to the database."""
    yield "SELECT 1", {}


def pragmas(names: tuple[str, ...]) -> Steps[dict[str, Any]]:
    found: dict[str, Any] = {}
    for name in names:
        rows = yield f"PRAGMA {name}", {}
        found[name] = rows[0][0] if rows else None
    return found
