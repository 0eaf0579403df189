"""``wait_until``: wait on a condition in a test, never on a count of loop turns."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


async def wait_until(
    predicate: Callable[[], object],
    *,
    timeout: float = 5.0,  # noqa: ASYNC109 — the bound a failing test waits, not a deadline API
    interval: float = 0.001,
    message: str | None = None,
) -> None:
    """Wait until ``predicate()`` is true, letting other tasks run in between.

    The predicate is checked at once, then after every ``interval`` seconds of
    real time (the event loop runs the other tasks meanwhile, so this works
    with a :class:`~headwater.testing.VirtualClock` too). Use it instead of
    spinning a fixed number of ``asyncio.sleep(0)``: a condition says what the
    test waits for, and a slow machine only makes it wait longer.

    Args:
        predicate: a cheap, side-effect-free check.
        timeout: real seconds to wait before failing; generous, since a
            passing test never waits that long.
        interval: real seconds between checks.
        message: what is awaited, for the error (default: the predicate's repr).

    Raises:
        TimeoutError: ``predicate()`` was still false after ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            raise TimeoutError(f"waited {timeout} s for {message or repr(predicate)}")
        await asyncio.sleep(interval)
