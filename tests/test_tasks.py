"""`headwater.tasks.TaskSet`: a task started by an owner is kept until it ends, its failure is
logged once and never reported by asyncio, and the owner's close cancels and awaits it."""

from __future__ import annotations

import asyncio
import gc
import logging
import threading

import pytest

from headwater.tasks import TaskSet


async def test_a_spawned_task_survives_garbage_collection_and_runs_to_its_end() -> None:
    tasks = TaskSet("owner")
    gate = asyncio.Event()
    finished: list[str] = []

    async def work() -> None:
        await gate.wait()
        finished.append("done")

    tasks.spawn(work(), name="work")  # the caller keeps no reference
    await asyncio.sleep(0)
    gc.collect()
    assert len(tasks) == 1
    gate.set()
    await tasks.wait()
    assert finished == ["done"]


async def test_a_task_is_forgotten_once_done() -> None:
    tasks = TaskSet("owner")
    task = tasks.spawn(asyncio.sleep(0, result=7), name="quick")
    assert list(tasks) == [task]
    assert await task == 7
    await asyncio.sleep(0)  # the done callbacks run on the next loop turn
    assert len(tasks) == 0 and list(tasks) == []


async def test_a_failure_is_logged_once_with_the_task_name_and_never_warned_about(
        caplog: pytest.LogCaptureFixture) -> None:
    loop = asyncio.get_running_loop()
    reported: list[dict[str, object]] = []
    loop.set_exception_handler(lambda _, context: reported.append(context))
    tasks = TaskSet("the owner")

    async def fail() -> None:
        raise ValueError("boom")

    with caplog.at_level(logging.ERROR, logger="headwater.tasks"):
        tasks.spawn(fail(), name="failing-step")
        await tasks.wait()
        gc.collect()  # asyncio reports an unretrieved exception when the task is collected
        await asyncio.sleep(0)
    loop.set_exception_handler(None)
    records = [r for r in caplog.records if r.name == "headwater.tasks"]
    assert len(records) == 1
    assert "failing-step" in records[0].getMessage() and "the owner" in records[0].getMessage()
    assert records[0].exc_info is not None and isinstance(records[0].exc_info[1], ValueError)
    assert reported == []


async def test_an_expected_failure_is_retrieved_but_not_logged(
        caplog: pytest.LogCaptureFixture) -> None:
    loop = asyncio.get_running_loop()
    reported: list[dict[str, object]] = []
    loop.set_exception_handler(lambda _, context: reported.append(context))
    tasks = TaskSet("owner")

    async def fail() -> None:
        raise KeyError("gone")

    with caplog.at_level(logging.DEBUG, logger="headwater.tasks"):
        tasks.spawn(fail(), name="expected", expected=LookupError)
        await tasks.wait()
        gc.collect()
        await asyncio.sleep(0)
    loop.set_exception_handler(None)
    assert [r for r in caplog.records if r.name == "headwater.tasks"] == []
    assert reported == []


async def test_a_failure_goes_to_the_owners_logger(caplog: pytest.LogCaptureFixture) -> None:
    tasks = TaskSet("owner", logger=logging.getLogger("headwater.gateway"))

    async def fail() -> None:
        raise RuntimeError("x")

    with caplog.at_level(logging.ERROR, logger="headwater.gateway"):
        tasks.spawn(fail())
        await tasks.wait()
    assert [r.name for r in caplog.records] == ["headwater.gateway"]


async def test_close_cancels_and_awaits_what_is_left_and_refuses_new_tasks() -> None:
    tasks = TaskSet("owner")
    cleaned: list[str] = []

    async def forever(name: str) -> None:
        try:
            await asyncio.Event().wait()
        finally:
            await asyncio.sleep(0)  # cleanup that itself awaits: close waits for it
            cleaned.append(name)

    started = [tasks.spawn(forever(n), name=n) for n in ("a", "b")]
    await asyncio.sleep(0)
    async with tasks:
        pass
    assert sorted(cleaned) == ["a", "b"]
    assert all(task.cancelled() for task in started)
    assert tasks.closed and len(tasks) == 0

    refused = forever("late")
    with pytest.raises(RuntimeError, match="closed"):
        tasks.spawn(refused)
    assert refused.cr_frame is None  # closed, so never "coroutine was never awaited"
    await tasks.aclose()  # idempotent


async def test_close_waits_at_most_its_timeout_for_a_task_that_ignores_cancellation() -> None:
    tasks = TaskSet("owner")
    release = asyncio.Event()

    async def stubborn() -> None:
        while not release.is_set():
            try:
                await release.wait()
            except asyncio.CancelledError:
                continue

    task = tasks.spawn(stubborn())
    await asyncio.sleep(0)
    await tasks.aclose(grace=0.01)
    assert not task.done() and len(tasks) == 1  # still held until it ends
    release.set()
    await task
    await asyncio.sleep(0)
    assert len(tasks) == 0


async def test_a_task_may_close_its_own_set() -> None:
    tasks = TaskSet("owner")
    other_cancelled = asyncio.Event()

    async def other() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            other_cancelled.set()
            raise

    async def closer() -> str:
        await tasks.aclose()
        return "closed"

    tasks.spawn(other())
    await asyncio.sleep(0)
    assert await tasks.spawn(closer()) == "closed"
    assert other_cancelled.is_set()


async def test_wait_cancels_nothing_and_waits_for_tasks_started_meanwhile() -> None:
    tasks = TaskSet("owner")
    gate = asyncio.Event()
    order: list[str] = []

    async def first() -> None:
        await gate.wait()
        order.append("first")
        tasks.spawn(second())

    async def second() -> None:
        await asyncio.sleep(0)
        order.append("second")

    task = tasks.spawn(first())
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.01):
            await tasks.wait()
    assert not task.done()
    gate.set()
    await tasks.wait()
    assert order == ["first", "second"]


def test_cancel_all_outside_a_loop_and_spawn_without_one() -> None:
    tasks = TaskSet("owner")
    tasks.cancel_all()  # nothing to cancel, no loop needed
    coro = asyncio.sleep(0)
    with pytest.raises(RuntimeError):
        tasks.spawn(coro)
    coro.close()


async def test_a_task_on_another_loop_is_cancelled_through_its_loop_and_not_waited_for() -> None:
    tasks = TaskSet("owner")
    started = threading.Event()
    outcome: list[str] = []

    async def elsewhere() -> None:
        async def forever() -> None:
            started.set()
            await asyncio.Event().wait()

        try:
            await tasks.spawn(forever(), name="other loop")
        except asyncio.CancelledError:
            outcome.append("cancelled")

    thread = threading.Thread(target=asyncio.run, args=(elsewhere(),))
    thread.start()
    assert await asyncio.to_thread(started.wait, 10)
    mine = tasks.spawn(asyncio.sleep(0))
    await tasks.wait()  # the other loop's task is not this loop's to wait for
    assert mine.done() and len(tasks) == 1
    await tasks.aclose()
    await asyncio.to_thread(thread.join, 10)
    assert outcome == ["cancelled"] and len(tasks) == 0
