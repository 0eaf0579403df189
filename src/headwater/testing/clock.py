"""``VirtualClock``: virtual time for tools and live streams under test."""

from __future__ import annotations

import asyncio
import heapq
import itertools

from ..tools.threads import sync_calls_in_flight


class VirtualClock:
    """A clock that moves only when a test says so.

    ``sleep`` parks the caller until :meth:`advance` moves time past its
    deadline; ``advance`` wakes sleepers in deadline order and lets the event
    loop run after each wake-up, so work a sleeper does (including new sleeps
    that fall inside the advanced span) happens before ``advance`` returns.

    Args:
        start: the initial reading (seconds since the epoch for ``time()``).
        settle: event-loop turns given to woken tasks after each wake-up (and
            by :meth:`settle`), counted once no sync tool is running.
        settle_timeout: the longest :meth:`settle` waits for sync tools, in
            real seconds (a tool stuck in its thread does not hang a test).
    """

    def __init__(self, start: float = 1_700_000_000.0, settle: int = 50,
                 settle_timeout: float = 2.0) -> None:
        self._now = start
        self._settle = settle
        self._settle_timeout = settle_timeout
        self._timers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    def time(self) -> float:
        return self._now

    def monotonic(self) -> float:
        return self._now

    @property
    def sleepers(self) -> int:
        """How many sleeps are waiting."""
        return sum(1 for _, _, f in self._timers if not f.done())

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._timers, (self._now + seconds, next(self._order), future))
        await future

    async def settle(self) -> None:
        """Let ready tasks run (no virtual time passes).

        Gives the loop ``settle`` turns in a row during which no sync tool is
        running on its thread; while one is (up to ``settle_timeout`` real
        seconds), it waits for it, since its result reaches the loop only then.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._settle_timeout
        quiet = 0
        while quiet < self._settle:
            await asyncio.sleep(0)
            quiet += 1
            if sync_calls_in_flight() and loop.time() < deadline:
                await asyncio.sleep(0.001)  # real time: a thread is working
                quiet = 0

    async def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds``, waking every sleeper due on the way."""
        target = self._now + seconds
        await self.settle()
        while self._timers and self._timers[0][0] <= target:
            due, _, future = heapq.heappop(self._timers)
            self._now = max(self._now, due)
            if not future.done():
                future.set_result(None)
                await self.settle()
        self._now = target
        await self.settle()
