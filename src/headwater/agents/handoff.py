"""``Handoff``: how events made inside tasks reach a run's one stream, in order.

Tool progress, the events of an agent used as a tool and a parallel agent's
branches are made inside tasks; nothing is yielded from inside a task, so each
hands its events to a ``Handoff``, whose :meth:`Handoff.relay` yields them
(docs/multi-agent.md, "Persistence, stop and cancellation").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Callable, Coroutine
from typing import Any

from ..core.events import Event
from ..core.tasks import TaskSet

logger = logging.getLogger("headwater.tools")


class Handoff:
    """Where the events of running calls go on their way to the caller, in order.

    As a :data:`ProgressSink` it takes tool progress as it comes (bounded per
    call by ``_Progress``). :meth:`hand` takes an event of an agent used as a
    tool and returns once the caller has it, so an inner run goes at the
    caller's pace (as a parallel agent's branches do) and nothing piles up.
    :meth:`relay` runs the work that hands events off and yields them.
    """

    __slots__ = ("_queue",)

    def __init__(self) -> None:
        self._queue: asyncio.Queue[tuple[Event, asyncio.Event | None] | None] = asyncio.Queue()

    def __call__(self, event: Event) -> None:
        self._queue.put_nowait((event, None))

    async def hand(self, event: Event) -> None:
        """Pass ``event`` on; returns once the reader has yielded it."""
        seen = asyncio.Event()
        self._queue.put_nowait((event, seen))
        await seen.wait()

    async def relay(self, work: Callable[[], Coroutine[Any, Any, None]]
                    ) -> AsyncGenerator[Event, None]:
        """Run ``work()`` in a task and yield what it hands off here, in order, until it ends.

        An event handed with :meth:`hand` is released once it is yielded; ``work``
        ending closes the stream and its failure is raised here. Closing the
        generator cancels ``work`` and waits for it (nothing is yielded from
        inside a task).
        """
        tasks = TaskSet("hand-off", logger=logger)  # its failure is raised here, not logged
        task = tasks.spawn(work(), name="hand-off", expected=BaseException)
        task.add_done_callback(lambda _: self._queue.put_nowait(None))  # the end
        queue = self._queue
        try:
            while (item := await queue.get()) is not None:
                event, seen = item
                yield event
                if seen is not None:
                    seen.set()
            task.result()
        finally:
            await tasks.aclose()  # cancels it if it still runs, and waits for it
