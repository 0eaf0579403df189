"""``SqlMemoryService``: memory in the SQL session store's database (table ``hw_memory``).

The table comes with migration ``0003``; the statements are plain SQL both
SQLite and PostgreSQL run, driven as steps by the session store's own
connections (:mod:`._sqlcore`). Matching is ADK's keyword rule
(:mod:`headwater.memory.base`): each remembered event keeps its words as one
space-delimited string, and a query's word matches with ``LIKE '% word %'``.
"""

from __future__ import annotations

import re
from typing import Final

from ..memory.base import (
    BaseMemoryService,
    MemoryEntry,
    SearchMemoryResponse,
    entry_of,
    event_words,
    query_words,
    remembered,
)
from . import _sqlcore as core
from .base import Session
from .sql import SqlSessionService

_LETTERS: Final = re.compile(r"[a-z]+")
_OF_USER: Final = "app_name = :app AND user_id = :user"
FORGET_SESSION: Final = f"DELETE FROM hw_memory WHERE {_OF_USER} AND session_id = :sid"
REMEMBER: Final = (
    "INSERT INTO hw_memory (app_name, user_id, session_id, event_id, words, data) "
    "VALUES (:app, :user, :sid, :event, :words, :data)")


def _remember(key: core.Key, rows: list[tuple[str, str, str]]) -> core.Steps[None]:
    """Replace what is remembered of the session by ``rows`` (event id, words, entry JSON)."""
    yield FORGET_SESSION, core.params(key)
    for event_id, words, data in rows:
        yield REMEMBER, {**core.params(key), "event": event_id, "words": words, "data": data}


def _search(app_name: str, user_id: str, words: list[str]) -> core.Steps[list[core.Row]]:
    if not words:
        return []
    matches = " OR ".join(f"words LIKE :w{i}" for i in range(len(words)))
    like = {f"w{i}": f"% {word} %" for i, word in enumerate(words)}
    return (yield (f"SELECT data FROM hw_memory WHERE {_OF_USER} AND ({matches}) ORDER BY seq",
                   {"app": app_name, "user": user_id, **like}))


class SqlMemoryService(BaseMemoryService):
    """Remembers sessions in the database of a :class:`SqlSessionService` (its connections).

    SQLite or PostgreSQL, as the session service is; a memory outlives the
    session it came from (deleting a session does not forget it).

    Args:
        sessions: the session store whose database (and connections) to use; it
            owns them: close it, not this service.
    """

    def __init__(self, sessions: SqlSessionService) -> None:
        if not isinstance(sessions, SqlSessionService):
            raise TypeError("SqlMemoryService needs a SqlSessionService (its database), got "
                            f"{type(sessions).__name__}; use InMemoryMemoryService otherwise")
        self.sessions = sessions

    async def add_session_to_memory(self, session: Session) -> None:
        """Remember the session's events that have content, replacing what was remembered.

        Raises:
            SessionError: the database failed; nothing changed.
        """
        rows = [(e.id, " " + " ".join(sorted(event_words(e))) + " ",
                 entry_of(e).model_dump_json(exclude_none=True))
                for e in session.events if remembered(e)]
        key = (session.app_name, session.user_id, session.id)
        await self.sessions.store.write(_remember(key, rows))

    async def search_memory(self, *, app_name: str, user_id: str,
                            query: str) -> SearchMemoryResponse:
        """The remembered events of the user's sessions of the app matching ``query``, in the
        order they were remembered.

        Raises:
            SessionError: the database failed.
        """
        # An event's words are letters only: a query word with anything else matches none.
        words = sorted(w for w in query_words(query) if _LETTERS.fullmatch(w))
        rows = await self.sessions.store.read(_search(app_name, user_id, words))
        return SearchMemoryResponse(
            memories=[MemoryEntry.model_validate_json(data) for (data,) in rows])
