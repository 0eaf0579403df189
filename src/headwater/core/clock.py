"""Time as tools and live streams see it: real by default, virtual in tests.

A tool that waits or measures time through ``tool_context.clock`` can be tested
in virtual time with ``headwater.testing.VirtualClock``.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol


class Clock(Protocol):
    """What headwater needs of a clock."""

    def time(self) -> float:
        """Seconds since the epoch."""
        ...

    def monotonic(self) -> float:
        """A monotonic reading in seconds, for intervals and deadlines."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` (cancellable)."""
        ...


class SystemClock:
    """The real clock: ``time.time``, ``time.monotonic`` and ``asyncio.sleep``."""

    def time(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


SYSTEM_CLOCK = SystemClock()
