"""The session store interface (DESIGN.md §5).

A session holds its events (non-partial only, in commit order) and its state.
An event's ``actions.state_delta`` is applied atomically with the event.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from ..errors import PartialEventError
from ..events import Event
from ..state import TEMP_PREFIX


@dataclass(slots=True)
class Session:
    """A conversation: its id, owner, state and persisted events.

    ``events`` is a snapshot taken by ``get_session`` and extended by
    ``append_event`` on the same object; it never holds a partial event.
    """

    id: str
    app_name: str
    user_id: str
    state: dict[str, Any] = field(default_factory=dict)  # raw JSON values
    events: list[Event] = field(default_factory=list)
    last_update_time: float = field(default_factory=time.time)


@dataclass(slots=True)
class EventPage:
    """One page of a session's events and the cursor of the next page (``None`` at the end)."""

    events: list[Event]
    next_cursor: int | None


class BaseSessionService(ABC):
    """Stores sessions and their events.

    Every method is safe to call concurrently from one event loop. Methods that
    take ``app_name``/``user_id``/``session_id`` treat a session of another
    user exactly like a missing one.
    """

    @abstractmethod
    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> Session:
        """Create a session (a fresh id unless one is given).

        Raises:
            SessionError: ``session_id`` is already taken.
        """

    @abstractmethod
    async def get_session(
        self, *, app_name: str, user_id: str, session_id: str
    ) -> Session | None:
        """The session with all its events, or ``None``."""

    @abstractmethod
    async def list_sessions(self, *, app_name: str, user_id: str) -> list[Session]:
        """The user's sessions, most recently updated first, without their events."""

    @abstractmethod
    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        """Delete a session and its events; deleting a missing one is a no-op."""

    @abstractmethod
    async def list_events(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        after: int | None = None,
        limit: int = 100,
    ) -> EventPage:
        """A page of events in commit order, starting after cursor ``after``.

        Raises:
            SessionNotFoundError: no such session for this user.
        """

    async def append_event(self, session: Session, event: Event) -> Event:
        """Persist a non-partial event and apply its state delta atomically.

        The event is added to ``session.events`` and the delta to
        ``session.state`` only once the store has committed them.

        Raises:
            PartialEventError: the event is partial; partials are never stored.
            SessionNotFoundError: the session no longer exists.
        """
        if event.partial:
            raise PartialEventError(
                "partial events are for the screen only and are never persisted "
                f"(event {event.id} by {event.author!r})"
            )
        delta = persistent_delta(event)
        await self._append(session, event, delta)
        session.events.append(event)
        if delta:
            session.state.update(delta)
        session.last_update_time = event.timestamp
        return event

    @abstractmethod
    async def _append(self, session: Session, event: Event, delta: dict[str, Any]) -> None:
        """Commit ``event`` and ``delta`` in one transaction."""

    async def close(self) -> None:  # noqa: B027 - optional hook, nothing to release by default
        """Release connections; the service may not be used afterwards."""


def persistent_delta(event: Event) -> dict[str, Any]:
    """Drop ``temp:`` keys from the event's state delta (in place) and return what is stored.

    Temporary state lives for one run: it reaches neither the stored state nor
    the stored event.
    """
    delta = event.actions.state_delta
    if delta and any(k.startswith(TEMP_PREFIX) for k in delta):
        delta = {k: v for k, v in delta.items() if not k.startswith(TEMP_PREFIX)}
        event.actions.state_delta = delta
    return delta
