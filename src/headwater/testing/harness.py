"""``LiveHarness``: drive a live run from a test — send, let time pass, read the events."""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import Any

from ..core.events import Event
from ..core.live_request_queue import LiveRequestQueue
from ..core.tasks import TaskSet
from ..core.types import Blob, Content
from ..runner import Runner
from .clock import VirtualClock


class LiveHarness:
    """Runs ``runner.run_live`` in a background task and collects every event.

    Use it as ``async with``: entering starts the run, leaving closes the queue
    and waits (``close_timeout``) for the run to end. With a
    :class:`VirtualClock` (the one the runner was given), :meth:`say` and
    :meth:`send_realtime` let the run settle before they return, and
    ``clock.advance`` moves the run's tools through time.

    Args:
        runner: the runner (create the session or pass ``auto_create_session``).
        clock: the runner's virtual clock, or ``None`` for real time.
        user_id, session_id: whose session the run is on.
        close_timeout: seconds the run gets to end once the queue closes.
    """

    def __init__(self, runner: Runner, clock: VirtualClock | None = None, *,
                 user_id: str = "u", session_id: str = "s", close_timeout: float = 2.0) -> None:
        self.runner = runner
        self.clock = clock
        self.user_id = user_id
        self.session_id = session_id
        self.close_timeout = close_timeout
        self.queue = LiveRequestQueue()
        self.events: list[Event] = []
        self._tasks = TaskSet("live harness")
        self.task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> LiveHarness:
        async def consume() -> None:
            async for event in self.runner.run_live(user_id=self.user_id,
                                                    session_id=self.session_id,
                                                    live_request_queue=self.queue):
                self.events.append(event)

        # Awaited by __aexit__, which raises its failure.
        self.task = self._tasks.spawn(consume(), name="live harness", expected=Exception)
        await self.settle()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        self.queue.close()
        assert self.task is not None
        try:
            await asyncio.wait_for(self.task, self.close_timeout)
        finally:
            await self._tasks.aclose()

    async def settle(self) -> None:
        """Let the run process what it was sent (no time passes on a virtual clock)."""
        if self.clock is not None:
            await self.clock.settle()
        else:
            for _ in range(50):
                await asyncio.sleep(0)

    async def say(self, text: str) -> None:
        """Send a user turn and let the run settle."""
        self.queue.send_content(Content.from_text(text))
        await self.settle()

    async def send(self, content: Content) -> None:
        """Send any content (an approval answer, a function response) and settle."""
        self.queue.send_content(content)
        await self.settle()

    async def send_realtime(self, blob: Blob) -> None:
        """Send realtime media and settle."""
        self.queue.send_realtime(blob)
        await self.settle()

    def texts(self) -> list[str]:
        """The text of every non-partial event, in order."""
        return [e.text for e in self.events if not e.partial and e.text]

    def responses(self, tool_name: str) -> list[dict[str, Any]]:  # raw JSON objects
        """Every function response to calls of ``tool_name``, in order."""
        return [r.response for e in self.events if not e.partial
                for r in e.function_responses if r.name == tool_name]

    def told(self, prefix: str = "Function ") -> list[str]:
        """What live streams told the model (and the caller), starting with ``prefix``."""
        return [e.text for e in self.events
                if e.branch is not None and not e.partial and e.text.startswith(prefix)]
