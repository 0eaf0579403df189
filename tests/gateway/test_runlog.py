"""The run log contract, for each backend: contiguous ids, exact replay, live following,
bounds, forgetting (in process, and Redis Streams when HEADWATER_TEST_REDIS_URL is set)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing

import pytest

from headwater.errors import BudgetExceeded, RunLogClosed, RunLogFull, RunNotFound, UserError
from headwater.gateway.runlog import InMemoryRunLog, RunLog
from headwater.gateway.sse import Frame, encode_frame
from headwater.settings import Settings, get_settings

MakeLog = Callable[..., Awaitable[RunLog]]


def redis_settings(redis_url: str, **overrides: object) -> Settings:
    """Settings for a Redis test: its own key prefix, short waits."""
    values: dict[str, object] = {
        "redis_url": redis_url, "redis_key_prefix": f"hwtest:{uuid.uuid4().hex}:",
        "heartbeat_interval": 0.5, **overrides}
    return Settings(**values)  # type: ignore[arg-type]


async def drop_keys(redis_url: str, prefix: str) -> None:
    """Delete every key under ``prefix`` (a test's leftovers)."""
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(redis_url)
    try:
        keys = [key async for key in client.scan_iter(match=prefix + "*")]
        if keys:
            await client.delete(*keys)
    finally:
        await client.aclose()


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
async def make_log(request: pytest.FixtureRequest) -> AsyncIterator[MakeLog]:
    """Make run logs of one backend (``max_frames`` as given); closed after the test."""
    made: list[RunLog] = []
    prefixes: list[str] = []
    url = request.getfixturevalue("redis_url") if request.param == "redis" else ""

    async def make(max_frames: int | None = None) -> RunLog:
        log: RunLog
        if request.param == "memory":
            log = InMemoryRunLog(max_frames=max_frames)
        else:
            from headwater.gateway.redis_backend import RedisRunLog

            settings = redis_settings(url)
            prefixes.append(settings.redis_key_prefix)
            log = RedisRunLog(url, settings=settings, max_frames=max_frames)
        made.append(log)
        return log

    yield make
    for log in made:
        await log.close()
    for prefix in prefixes:
        await drop_keys(url, prefix)


@pytest.fixture
async def log(make_log: MakeLog) -> RunLog:
    run_log = await make_log(50)
    await run_log.open("r1")
    return run_log


async def deltas(log: RunLog, n: int, run_id: str = "r1") -> list[Frame]:
    return [await log.append(run_id, "delta", {"author": "a", "text": str(i)}) for i in range(n)]


async def collect(log: RunLog, after: int, run_id: str = "r1") -> list[Frame]:
    async with aclosing(log.follow(run_id, after)) as frames:
        return [frame async for frame in frames]


async def test_ids_are_contiguous_from_one(log: RunLog) -> None:
    assert await log.last_id("r1") == 0
    frames = await deltas(log, 3)
    assert [f.id for f in frames] == [1, 2, 3]
    assert frames[1] == encode_frame(2, "delta", {"author": "a", "text": "1"})
    assert await log.last_id("r1") == 3
    await log.open("r2")  # runs count separately
    assert [f.id for f in await deltas(log, 2, "r2")] == [1, 2]


async def test_read_after_is_the_exact_suffix(log: RunLog) -> None:
    frames = await deltas(log, 5)
    for after in range(7):
        assert await log.read_after("r1", after) == frames[after:]
    with pytest.raises(ValueError):
        await log.read_after("r1", -1)


async def test_frames_with_awkward_text_come_back_equal(log: RunLog) -> None:
    texts = ["héllo ✓", "line\u2028sep\u2029para\x85nel", "lone \ud800 surrogate", "a\nb\r\n",
             '{"json": "in text"}', ""]
    written = [await log.append("r1", "delta", {"author": "a", "text": t}) for t in texts]
    written.append(await log.append("r1", "done", {"usage": {"n": 1.5, "nested": [1, None]}}))
    assert await log.read_after("r1", 0) == written
    assert await asyncio.wait_for(collect(log, 0), 5) == written


async def test_follow_replays_then_follows_live(log: RunLog) -> None:
    await deltas(log, 2)
    got: list[Frame] = []
    two_more = asyncio.Event()

    async def follower() -> None:
        async with aclosing(log.follow("r1", 1)) as frames:
            async for frame in frames:
                got.append(frame)
                if frame.id == 4:
                    two_more.set()

    task = asyncio.create_task(follower())
    await deltas(log, 2)
    await asyncio.wait_for(two_more.wait(), 5)
    assert [f.id for f in got] == [2, 3, 4] and not task.done()  # still following
    done = await log.append("r1", "done", {"usage": {}})
    await asyncio.wait_for(task, 5)  # ends after the terminal frame
    assert got[-1] == done and [f.id for f in got] == [2, 3, 4, 5]


async def test_concurrent_followers_each_get_every_frame(log: RunLog) -> None:
    followers = [asyncio.create_task(collect(log, 0)) for _ in range(3)]
    slow_started = asyncio.Event()

    async def slow() -> list[Frame]:
        got = []
        async with aclosing(log.follow("r1", 0)) as frames:
            slow_started.set()
            async for frame in frames:
                got.append(frame)
                await asyncio.sleep(0.001)  # falls behind; append never waits for it
        return got

    slow_task = asyncio.create_task(slow())
    await slow_started.wait()
    written = []
    for i in range(20):
        written += await deltas(log, 1)
        if i % 3 == 0:
            await asyncio.sleep(0)  # let followers catch up and wait again
    written.append(await log.append("r1", "done", {}))
    results = await asyncio.wait_for(asyncio.gather(*followers, slow_task), 5)
    assert all(result == written for result in results)


async def test_follower_after_the_end_gets_the_suffix_then_ends(log: RunLog) -> None:
    frames = await deltas(log, 3)
    frames.append(await log.append("r1", "error", {"code": "cancelled"}))
    assert await log.ended("r1")
    assert await asyncio.wait_for(collect(log, 2), 5) == frames[2:]
    assert await asyncio.wait_for(collect(log, 4), 5) == []  # nothing left: ends at once
    assert await asyncio.wait_for(collect(log, 99), 5) == []


async def test_follow_from_beyond_the_end_waits_for_later_frames(log: RunLog) -> None:
    task = asyncio.create_task(collect(log, 2))
    frames = await deltas(log, 4)
    frames.append(await log.append("r1", "done", {}))
    assert await asyncio.wait_for(task, 5) == frames[2:]
    with pytest.raises(ValueError):
        log.follow("r1", -1)


async def test_append_after_terminal_is_refused(log: RunLog) -> None:
    assert not await log.ended("r1")
    await deltas(log, 1)
    await log.append("r1", "done", {})
    assert await log.ended("r1")
    for kind in ("delta", "done", "error"):
        with pytest.raises(RunLogClosed):
            await log.append("r1", kind, {})
    assert await log.last_id("r1") == 2


async def test_unknown_frame_type_is_refused_and_stores_nothing(log: RunLog) -> None:
    with pytest.raises(ValueError):
        await log.append("r1", "progress", {})
    assert await log.last_id("r1") == 0


async def test_max_frames_is_enforced_but_the_terminal_frame_fits(make_log: MakeLog) -> None:
    log = await make_log(3)
    await log.open("r")
    await deltas(log, 3, "r")
    with pytest.raises(RunLogFull) as caught:
        await log.append("r", "delta", {"author": "a", "text": "x"})
    assert isinstance(caught.value, BudgetExceeded) and caught.value.code == "budget_exceeded"
    assert await log.last_id("r") == 3
    end = await log.append("r", "error", {"code": "budget_exceeded"})
    assert end.id == 4 and await log.ended("r")


def test_max_frames_defaults_to_the_setting() -> None:
    assert InMemoryRunLog().max_frames == get_settings().run_log_max_frames
    with pytest.raises(ValueError):
        InMemoryRunLog(max_frames=0)


async def test_cancelling_a_waiting_follower_leaves_the_log_working(log: RunLog) -> None:
    await deltas(log, 1)
    got: list[Frame] = []
    waiting = asyncio.Event()

    async def follower() -> None:
        async with aclosing(log.follow("r1", 0)) as frames:
            async for frame in frames:
                got.append(frame)
                waiting.set()

    doomed = asyncio.create_task(follower())
    await waiting.wait()
    await asyncio.sleep(0)  # now parked on the log's wake-up
    doomed.cancel()
    with pytest.raises(asyncio.CancelledError):
        await doomed
    assert [f.id for f in got] == [1]
    survivor = asyncio.create_task(collect(log, 0))
    frames = await deltas(log, 1, "r1")
    await asyncio.sleep(0)
    frames += await deltas(log, 1, "r1")
    frames.append(await log.append("r1", "done", {}))
    assert [f.id for f in await asyncio.wait_for(survivor, 5)] == [1, 2, 3, 4]
    assert [f.id for f in frames] == [2, 3, 4]


async def test_unknown_run_is_run_not_found(log: RunLog) -> None:
    with pytest.raises(RunNotFound) as caught:
        await log.append("nope", "delta", {})
    assert isinstance(caught.value, KeyError) and "nope" in str(caught.value)
    with pytest.raises(RunNotFound):
        await log.read_after("nope", 0)
    with pytest.raises(RunNotFound):
        await log.ended("nope")
    with pytest.raises(RunNotFound):
        await log.last_id("nope")
    with pytest.raises(RunNotFound):
        await collect(log, 0, "nope")


async def test_open_twice_is_refused(log: RunLog) -> None:
    with pytest.raises(UserError, match="already has a log"):
        await log.open("r1")


async def test_forget(log: RunLog) -> None:
    await deltas(log, 2)
    waiting = asyncio.create_task(collect(log, 2))
    await asyncio.sleep(0)
    await log.forget("r1")
    with pytest.raises(RunNotFound):
        await log.last_id("r1")
    with pytest.raises(RunNotFound):  # it waited for frames that will never come
        await asyncio.wait_for(waiting, 5)
    await log.forget("r1")  # forgetting again is a no-op
    await log.open("r1")  # the id is free again, from 1
    assert [f.id for f in await deltas(log, 1)] == [1]


async def test_close_forgets_every_run_and_refuses_new_ones(make_log: MakeLog) -> None:
    log = await make_log()
    await log.open("a")
    await log.close()
    await log.close()
    with pytest.raises(RunNotFound):
        await log.ended("a")
    with pytest.raises(UserError, match="closed"):
        await log.open("b")


# -- Redis: what only a shared log can do ----------------------------------------------------------


@pytest.fixture
async def two_redis_logs(redis_url: str) -> AsyncIterator[tuple[RunLog, RunLog]]:
    """Two Redis run logs on one prefix: two replicas' views of the same runs."""
    from headwater.gateway.redis_backend import RedisRunLog

    settings = redis_settings(redis_url)
    first = RedisRunLog(redis_url, settings=settings)
    second = RedisRunLog(redis_url, settings=settings)
    yield first, second
    await first.close()
    await second.close()
    await drop_keys(redis_url, settings.redis_key_prefix)


@pytest.mark.redis
async def test_a_run_written_through_one_redis_log_is_followed_through_another(
        two_redis_logs: tuple[RunLog, RunLog]) -> None:
    writer, reader = two_redis_logs
    await writer.open("r")
    written = await deltas(writer, 3, "r")
    assert await reader.last_id("r") == 3 and not await reader.ended("r")
    follower = asyncio.create_task(collect(reader, 1, "r"))
    written += await deltas(writer, 2, "r")
    written.append(await writer.append("r", "done", {"usage": {"input_tokens": 1}}))
    assert await asyncio.wait_for(follower, 10) == written[1:]
    assert await reader.read_after("r", 0) == written
    assert [f.raw for f in await reader.read_after("r", 4)] == [f.raw for f in written[4:]]


@pytest.mark.redis
async def test_closing_a_redis_log_keeps_ended_runs_for_the_others(
        two_redis_logs: tuple[RunLog, RunLog]) -> None:
    first, second = two_redis_logs
    await first.open("ended")
    await first.append("ended", "done", {})
    await first.open("running")
    waiting = asyncio.create_task(collect(second, 0, "running"))
    await asyncio.sleep(0.2)
    await first.close()  # the replica stops: its unfinished run is gone, its ended one is not
    with pytest.raises(RunNotFound):
        await asyncio.wait_for(waiting, 10)
    with pytest.raises(RunNotFound):
        await second.last_id("running")
    assert [f.type for f in await second.read_after("ended", 0)] == ["done"]
    with pytest.raises(RunNotFound):
        await first.last_id("ended")  # a closed log knows no run


@pytest.mark.redis
@pytest.mark.timeout(60)
async def test_a_redis_follower_waits_through_a_silence_longer_than_redis_py_s_timeout(
        redis_url: str) -> None:
    from headwater.gateway.redis_backend import RedisRunLog

    # XREAD BLOCK waits up to heartbeat_interval: 6 s, past redis-py's default 5 s read timeout
    settings = redis_settings(redis_url, heartbeat_interval=6.0)
    log = RedisRunLog(redis_url, settings=settings)
    try:
        await log.open("quiet")
        follower = asyncio.create_task(collect(log, 0, "quiet"))
        await asyncio.sleep(5.5)  # the run says nothing for longer than 5 s
        written = await deltas(log, 1, "quiet")
        written.append(await log.append("quiet", "done", {}))
        assert await asyncio.wait_for(follower, 20) == written
    finally:
        await log.close()
        await drop_keys(redis_url, settings.redis_key_prefix)


@pytest.mark.redis
async def test_redis_log_bounds_come_from_the_settings(redis_url: str) -> None:
    from headwater.gateway.redis_backend import RedisRunLog

    settings = redis_settings(redis_url, run_log_max_frames=7)
    log = RedisRunLog(redis_url, settings=settings)
    try:
        assert log.max_frames == 7
        with pytest.raises(ValueError):
            RedisRunLog(redis_url, settings=settings, max_frames=0)
    finally:
        await log.close()


def test_redis_without_redis_py_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from headwater.gateway.redis_backend import RedisRunLog

    monkeypatch.setitem(__import__("sys").modules, "redis.asyncio", None)
    with pytest.raises(ImportError, match=r"headwater\[redis\]"):
        RedisRunLog("redis://127.0.0.1:6379/0", settings=Settings())


async def test_memory_log_keeping_few_frame_objects_replays_and_follows_every_frame() -> None:
    log = InMemoryRunLog(max_frames=100, keep_objects=1)  # older frames are decoded again
    await log.open("r1")
    follower = asyncio.ensure_future(collect(log, 0))
    written = await deltas(log, 3)
    await asyncio.sleep(0)  # the follower takes the first frames live
    written += await deltas(log, 20)
    written.append(await log.append("r1", "done", {"usage": {"input_tokens": 1}}))
    assert await asyncio.wait_for(follower, 5) == written
    for after in (0, 1, 5, 22, 23, 24):
        assert await log.read_after("r1", after) == written[after:]
        assert await asyncio.wait_for(collect(log, after), 5) == written[after:]
    with pytest.raises(ValueError, match="keep_objects"):
        InMemoryRunLog(max_frames=10, keep_objects=0)
