"""``InMemoryMemoryService``: memory in a dict, keyword matching (ADK's prototype service)."""

from __future__ import annotations

from ..core.events import Event
from ..sessions.base import Session
from .base import (
    BaseMemoryService,
    SearchMemoryResponse,
    entry_of,
    event_words,
    query_words,
    remembered,
)


class InMemoryMemoryService(BaseMemoryService):
    """Keeps sessions' events in process memory; everything is lost when the process ends.

    Matching is by keyword, not meaning (:mod:`headwater.memory.base`).
    """

    def __init__(self) -> None:
        # (app_name, user_id) -> session id -> its remembered events, with their words
        self._sessions: dict[tuple[str, str], dict[str, list[tuple[Event, set[str]]]]] = {}

    async def add_session_to_memory(self, session: Session) -> None:
        kept = [(e, event_words(e)) for e in session.events if remembered(e)]
        sessions = self._sessions.setdefault((session.app_name, session.user_id), {})
        sessions.pop(session.id, None)  # added again: now the latest, as in the SQL store
        sessions[session.id] = kept

    async def search_memory(self, *, app_name: str, user_id: str,
                            query: str) -> SearchMemoryResponse:
        words = query_words(query)
        response = SearchMemoryResponse()
        for events in self._sessions.get((app_name, user_id), {}).values():
            for event, found in events:
                if found and not words.isdisjoint(found):
                    response.memories.append(entry_of(event))
        return response
