"""``InMemorySessionService``: sessions in a dict, for tests and one-process demos."""

from __future__ import annotations

import copy
import time
import uuid
from collections.abc import Awaitable, Callable, Generator
from typing import Any, Final

from ..core.errors import (
    CallAlreadyAnsweredError,
    LeaseLostError,
    SessionError,
    SessionNotFoundError,
)
from ..core.events import Event
from ..core.settings import Settings, settings_or_default
from .base import BaseSessionService, EventPage, Lease, Session, final_call_ids

_Key = tuple[str, str, str]


class InMemorySessionService(BaseSessionService):
    """Keeps sessions in process memory; everything is lost when the process ends.

    ``get_session`` returns a copy, as a database-backed store would, so a
    caller cannot change stored history by mutating what it got. Every check
    and write of one call runs without yielding to the event loop, so leases
    and the one-result-per-call rule are atomic within the process (the only
    place this store is shared).

    Args:
        settings: ``lease_poll_interval`` (the process-wide settings when omitted).
    """

    def __init__(self, *, settings: Settings | None = None) -> None:
        self.lease_poll_interval = settings_or_default(settings).lease_poll_interval
        self._sessions: dict[_Key, Session] = {}
        self._answered: dict[_Key, set[str]] = {}
        self._leases: dict[_Key, Lease] = {}

    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> Session:
        sid = session_id or uuid.uuid4().hex
        key = (app_name, user_id, sid)
        if key in self._sessions:
            raise SessionError(f"session {sid!r} already exists")
        now = time.time()
        stored = Session(id=sid, app_name=app_name, user_id=user_id,
                         state=_copied(state or {}), last_update_time=now, create_time=now)
        self._sessions[key] = stored
        return _copy(stored)

    async def get_session(
        self, *, app_name: str, user_id: str, session_id: str
    ) -> Session | None:
        stored = self._sessions.get((app_name, user_id, session_id))
        return _copy(stored) if stored is not None else None

    async def list_sessions(self, *, app_name: str, user_id: str) -> list[Session]:
        found = [
            Session(id=s.id, app_name=s.app_name, user_id=s.user_id,
                    state=_copied(s.state), last_update_time=s.last_update_time,
                    create_time=s.create_time)
            for (app, user, _), s in self._sessions.items()
            if app == app_name and user == user_id
        ]
        return sorted(found, key=lambda s: s.last_update_time, reverse=True)

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        key = (app_name, user_id, session_id)
        self._sessions.pop(key, None)
        self._answered.pop(key, None)
        self._leases.pop(key, None)

    async def list_events(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        after: int | None = None,
        limit: int = 100,
    ) -> EventPage:
        stored = self._stored((app_name, user_id, session_id))
        start = after or 0
        page = stored.events[start : start + limit]
        end = start + len(page)
        return EventPage(events=list(page), next_cursor=end if end < len(stored.events) else None)

    def _start_append(
        self, session: Session, event: Event, delta: dict[str, Any], release: Lease | None,
        lease: Lease | None, on_commit: Callable[[], None],
    ) -> Awaitable[object]:
        # Synchronous, hence atomic on the loop: checks and writes see no other call between
        # them, and a cancel cannot land in the middle. Failures raise from here.
        self._commit((session.app_name, session.user_id, session.id), event, delta, lease)
        if release is not None:
            self._leases.pop((session.app_name, session.user_id, session.id), None)
        on_commit()
        return _DONE

    async def _append(
        self, session: Session, event: Event, delta: dict[str, Any], lease: Lease | None
    ) -> None:
        self._commit((session.app_name, session.user_id, session.id), event, delta, lease)

    def _commit(
        self, key: _Key, event: Event, delta: dict[str, Any], lease: Lease | None
    ) -> None:
        stored = self._stored(key)
        if lease is not None:
            self._check_holder(key, lease)
        calls = final_call_ids(event)
        answered = self._answered.setdefault(key, set())
        if clash := [c for c in calls if c in answered]:
            raise CallAlreadyAnsweredError(clash)
        answered.update(calls)
        stored.events.append(event)
        if delta:
            stored.state.update(copy.deepcopy(delta))
        stored.last_update_time = event.timestamp

    async def _try_acquire_lease(
        self, app_name: str, user_id: str, session_id: str, owner: str, run_id: str, ttl: float
    ) -> Lease | float:
        key = (app_name, user_id, session_id)
        self._stored(key)
        now = time.time()
        held = self._leases.get(key)
        took_over: str | None = None
        if held is not None and (held.owner, held.run_id) != (owner, run_id):
            if held.expires_at > now:
                return held.expires_at
            took_over = held.run_id
        elif held is not None:
            took_over = held.took_over
        lease = Lease(app_name, user_id, session_id, owner, run_id, now + ttl, took_over)
        self._leases[key] = lease
        return lease

    async def _try_acquire_lease_and_append(
        self, app_name: str, user_id: str, session_id: str, owner: str, run_id: str, ttl: float,
        event: Event, delta: dict[str, Any], after: str | None,
    ) -> tuple[Lease | float, bool]:
        # Nothing here suspends: the lease and the event are one atomic step on the loop.
        taken = await self._try_acquire_lease(app_name, user_id, session_id, owner, run_id, ttl)
        if not isinstance(taken, Lease):
            return taken, False
        key = (app_name, user_id, session_id)
        events = self._stored(key).events
        if (events[-1].id if events else None) != after:
            return taken, False
        self._commit(key, event, delta, taken)
        return taken, True

    async def renew_lease(self, lease: Lease, ttl: float) -> Lease:
        key = (lease.app_name, lease.user_id, lease.session_id)
        held = self._check_holder(key, lease)
        renewed = Lease(lease.app_name, lease.user_id, lease.session_id, lease.owner,
                        lease.run_id, time.time() + ttl, held.took_over)
        self._leases[key] = renewed
        return renewed

    async def release_lease(self, lease: Lease) -> None:
        key = (lease.app_name, lease.user_id, lease.session_id)
        held = self._leases.get(key)
        if held is not None and (held.owner, held.run_id) == (lease.owner, lease.run_id):
            del self._leases[key]

    def _check_holder(self, key: _Key, lease: Lease) -> Lease:
        held = self._leases.get(key)
        if held is None or (held.owner, held.run_id) != (lease.owner, lease.run_id):
            raise LeaseLostError(f"run {lease.run_id!r} no longer holds session {key[2]!r}")
        return held

    def _stored(self, key: _Key) -> Session:
        stored = self._sessions.get(key)
        if stored is None:
            raise SessionNotFoundError(f"no session {key[2]!r} for this user")
        return stored


class _Done:
    """An awaitable that is already complete (awaiting it never suspends)."""

    def __await__(self) -> Generator[None, None, None]:
        return
        yield


_DONE: Final = _Done()


def _copy(s: Session) -> Session:
    return Session(id=s.id, app_name=s.app_name, user_id=s.user_id, state=_copied(s.state),
                   events=list(s.events), last_update_time=s.last_update_time,
                   create_time=s.create_time)


def _copied(state: dict[str, Any]) -> dict[str, Any]:
    # deepcopy of an empty dict costs ~1.7 µs; most sessions have no state
    return copy.deepcopy(state) if state else {}
