"""``LiveOut``: the one output of a live run — commit, then hand on; and the run's end.

Every part of a live run (its input, its model connection, its tools, its live
streams) hands its events to the run through one ``LiveOut``: a non-partial
event is committed through the run's recorder before the reader can see it
(persist, then yield) and before the task that made it goes on; a partial one
is handed on as it comes. A part that ends the run hands its last event to
:meth:`LiveOut.end_with`, which raises :class:`LiveEnd` to stop the run's task
group.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import NoReturn

from ..core.events import Event


class LiveEnd(Exception):
    """Ends a live run from inside its task group (after its last event was handed on)."""


class LiveOut:
    """The events of one live run on their way to the reader.

    Args:
        commit: the run's recorder's commit (persist a non-partial event).
    """

    __slots__ = ("_commit", "_queue", "_spent")

    def __init__(self, commit: Callable[[Event], Awaitable[None]]) -> None:
        self._commit = commit
        self._queue: asyncio.Queue[Event | None] = asyncio.Queue()
        self._spent = False

    def show(self, event: Event) -> None:
        """Hand on an event without committing it: a partial (screen-only), or an error the
        store does not keep (a refused approval answer, a failed task's)."""
        self._queue.put_nowait(event)

    async def emit(self, event: Event) -> None:
        """Commit a non-partial event, then hand it on (a partial one is only handed on).

        Raises:
            SessionError: the store failed; nothing of the event is handed on.
        """
        if not event.partial:
            await self._commit(event)
        self._queue.put_nowait(event)

    async def end_with(self, event: Event) -> NoReturn:
        """Emit the run's last event and end the run (raises :class:`LiveEnd`)."""
        await self.emit(event)
        raise LiveEnd

    async def over_budget(self, spent: Event) -> None:
        """End the run with the model-call budget's error event, once (whoever noticed first:
        the input, the connection, or a turn the model started)."""
        if self._spent:
            return
        self._spent = True
        await self.end_with(spent)

    def close(self) -> None:
        """No more events: the reader's :meth:`get` returns ``None`` after those handed on."""
        self._queue.put_nowait(None)

    async def get(self) -> Event | None:
        """The next event for the reader; ``None`` once the run is over."""
        return await self._queue.get()
