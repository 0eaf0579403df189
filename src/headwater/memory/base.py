"""The memory service interface, modelled on Google ADK's (``google.adk.memory``).

A memory service keeps what was said in a user's past sessions of an app and
finds it again: ``add_session_to_memory(session)`` takes a session's events
with content in, ``search_memory(app_name=, user_id=, query=)`` returns the
entries that match a query. Tools read it through
``ToolContext.search_memory`` (``load_memory``, ``preload_memory``).

As ADK's in-memory service does, a query matches an event when one of its
words (split at whitespace, lower-cased) is one of the event's words (its text
parts' runs of ASCII letters, lower-cased).
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from datetime import datetime

from pydantic import BaseModel, Field

from ..core.events import Event
from ..core.types import Content
from ..sessions.base import Session

_WORD = re.compile(r"[A-Za-z]+")


class MemoryEntry(BaseModel):
    """One remembered piece of a past conversation.

    Attributes:
        content: what was said.
        author: who said it (``"user"`` or an agent's name).
        timestamp: when, as ISO 8601 local time (forwarded to the model as is).
    """

    content: Content
    author: str | None = None
    timestamp: str | None = None


class SearchMemoryResponse(BaseModel):
    """What :meth:`BaseMemoryService.search_memory` found, oldest session first."""

    memories: list[MemoryEntry] = Field(default_factory=list)


class BaseMemoryService(ABC):
    """Stores sessions' events per (app, user) and finds them by a query."""

    @abstractmethod
    async def add_session_to_memory(self, session: Session) -> None:
        """Remember ``session``'s events that have content; adding a session again
        replaces what was remembered of it."""

    @abstractmethod
    async def search_memory(self, *, app_name: str, user_id: str,
                            query: str) -> SearchMemoryResponse:
        """The remembered events of ``user_id``'s sessions of ``app_name`` matching ``query``."""


def event_words(event: Event) -> set[str]:
    """The lower-cased words of the event's text parts (runs of ASCII letters)."""
    if event.content is None:
        return set()
    text = " ".join(p.text for p in event.content.parts if p.text)
    return {w.lower() for w in _WORD.findall(text)}


def query_words(query: str) -> set[str]:
    """The query's words: split at whitespace, lower-cased (ADK's rule)."""
    if not isinstance(query, str):
        raise TypeError(f"a memory query is a str, got {type(query).__name__}")
    return set(query.lower().split())


def remembered(event: Event) -> bool:
    """Whether an event is kept in memory: it has content with parts (ADK's rule)."""
    return event.content is not None and bool(event.content.parts)


def entry_of(event: Event) -> MemoryEntry:
    """The memory entry of a remembered event."""
    assert event.content is not None
    return MemoryEntry(content=event.content, author=event.author,
                       timestamp=datetime.fromtimestamp(event.timestamp).isoformat())
