"""``VirtualClock.settle`` waits for sync tools running on their threads."""

from __future__ import annotations

import asyncio
import threading
import time

from headwater.testing import VirtualClock
from headwater.tools.threads import run_sync, sync_calls_in_flight


async def test_settle_waits_for_a_sync_call_and_its_result_on_the_loop() -> None:
    release = threading.Event()
    done: list[str] = []

    def work() -> str:
        release.wait(5)
        time.sleep(0.05)  # longer than any fixed number of loop turns takes
        return "ok"

    async def caller() -> None:
        done.append(await run_sync("work", work))

    task = asyncio.ensure_future(caller())
    await asyncio.sleep(0)
    assert sync_calls_in_flight() == 1
    release.set()
    await VirtualClock(settle=5).settle()
    assert done == ["ok"] and sync_calls_in_flight() == 0
    await task


async def test_settle_gives_up_on_a_stuck_sync_call_after_its_timeout() -> None:
    release = threading.Event()
    task = asyncio.ensure_future(run_sync("stuck", release.wait, timeout=5))
    await asyncio.sleep(0)
    started = time.monotonic()
    await VirtualClock(settle=5, settle_timeout=0.1).settle()
    assert 0.1 <= time.monotonic() - started < 2
    release.set()
    assert await task is True
