"""wait_until: waits on a condition, fails loudly when it never holds."""

from __future__ import annotations

import asyncio

import pytest

from headwater.testing import VirtualClock, wait_until


async def test_returns_once_another_task_makes_the_condition_true() -> None:
    seen: list[int] = []

    async def produce() -> None:
        for i in range(3):
            await asyncio.sleep(0.01)
            seen.append(i)

    task = asyncio.create_task(produce())
    await wait_until(lambda: len(seen) == 3, timeout=5)
    assert seen == [0, 1, 2]
    await task


async def test_a_true_condition_returns_at_once() -> None:
    await wait_until(lambda: True, timeout=0)


async def test_a_condition_that_never_holds_times_out_naming_it() -> None:
    with pytest.raises(TimeoutError, match=r"waited 0\.05 s for the answer"):
        await wait_until(lambda: False, timeout=0.05, message="the answer")


async def test_works_beside_a_virtual_clock() -> None:
    clock, woke = VirtualClock(), asyncio.Event()

    async def sleeper() -> None:
        await clock.sleep(10)
        woke.set()

    task = asyncio.create_task(sleeper())
    await wait_until(lambda: clock.sleepers == 1)
    await clock.advance(10)
    await wait_until(woke.is_set)
    await task
