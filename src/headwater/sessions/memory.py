"""``InMemorySessionService``: sessions in a dict, for tests and one-process demos."""

from __future__ import annotations

import copy
import time
import uuid
from typing import Any

from ..errors import SessionError, SessionNotFoundError
from ..events import Event
from .base import BaseSessionService, EventPage, Session


class InMemorySessionService(BaseSessionService):
    """Keeps sessions in process memory; everything is lost when the process ends.

    ``get_session`` returns a copy, as a database-backed store would, so a
    caller cannot change stored history by mutating what it got.
    """

    def __init__(self) -> None:
        self._sessions: dict[tuple[str, str, str], Session] = {}

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
        stored = Session(id=sid, app_name=app_name, user_id=user_id,
                         state=copy.deepcopy(state or {}), last_update_time=time.time())
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
                    state=copy.deepcopy(s.state), last_update_time=s.last_update_time)
            for (app, user, _), s in self._sessions.items()
            if app == app_name and user == user_id
        ]
        return sorted(found, key=lambda s: s.last_update_time, reverse=True)

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        self._sessions.pop((app_name, user_id, session_id), None)

    async def list_events(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        after: int | None = None,
        limit: int = 100,
    ) -> EventPage:
        stored = self._stored(app_name, user_id, session_id)
        start = after or 0
        page = stored.events[start : start + limit]
        end = start + len(page)
        return EventPage(events=list(page), next_cursor=end if end < len(stored.events) else None)

    async def _append(self, session: Session, event: Event, delta: dict[str, Any]) -> None:
        stored = self._stored(session.app_name, session.user_id, session.id)
        stored.events.append(event)
        if delta:
            stored.state.update(copy.deepcopy(delta))
        stored.last_update_time = event.timestamp

    def _stored(self, app_name: str, user_id: str, session_id: str) -> Session:
        stored = self._sessions.get((app_name, user_id, session_id))
        if stored is None:
            raise SessionNotFoundError(f"no session {session_id!r} for this user")
        return stored


def _copy(s: Session) -> Session:
    return Session(id=s.id, app_name=s.app_name, user_id=s.user_id, state=copy.deepcopy(s.state),
                   events=list(s.events), last_update_time=s.last_update_time)
