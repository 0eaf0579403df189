"""The run registry: the in-process one counts streams; the Redis one shares runs, stream
counts and cancels between replicas, and lets a dead replica's records age out."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from headwater.gateway.registry import LocalRunRegistry, RunInfo
from headwater.settings import Settings

from .test_runlog import drop_keys, redis_settings


async def test_the_local_registry_counts_streams_and_knows_no_other_replica() -> None:
    registry = LocalRunRegistry()
    info = RunInfo(id="r", user_id="u", session_id="s", agent="a", replica=registry.replica)
    await registry.register(info)
    assert await registry.lookup("r") is None and await registry.active("u", "s") is None
    first = registry.stream_opened("u", "r")
    second = registry.stream_opened("u", "r")
    registry.stream_opened("v", "r")
    assert (await registry.open_streams("u"), await registry.open_streams("v")) == (2, 1)
    registry.stream_closed(first)
    registry.stream_closed(first)  # idempotent
    assert await registry.open_streams("u") == 1
    registry.stream_closed(second)
    assert await registry.open_streams("u") == 0
    assert await registry.request_cancel(info) is False
    await registry.close()


@pytest.fixture
async def settings(redis_url: str) -> AsyncIterator[Settings]:
    made = redis_settings(redis_url, redis_liveness_ttl=0.6, redis_ended_ttl=5.0)
    yield made
    await drop_keys(redis_url, made.redis_key_prefix)


@pytest.mark.redis
async def test_redis_registry_shares_runs_between_replicas(redis_url: str,
                                                           settings: Settings) -> None:
    from headwater.gateway.redis_backend import RedisRunRegistry

    a = RedisRunRegistry(redis_url, settings=settings)
    b = RedisRunRegistry(redis_url, settings=settings)
    try:
        assert a.replica != b.replica
        info = RunInfo(id="run-1", user_id="alice", session_id="s:1", agent="bot",
                       replica=a.replica)
        await a.register(info)
        assert await b.lookup("run-1") == info
        assert await b.active("alice", "s:1") == "run-1"
        assert await b.active("alice", "s") is None and await b.active("bob", "s:1") is None
        await asyncio.sleep(1.5)  # past the liveness TTL: A renews what is still running
        assert await b.lookup("run-1") == info
        assert await b.active("alice", "s:1") == "run-1"
        await a.ended("run-1", "cancelled")
        ended = await b.lookup("run-1")
        assert ended is not None and ended.status == "cancelled" and ended.ended
        assert await b.active("alice", "s:1") is None
        await a.forget("run-1")
        assert await b.lookup("run-1") is None
    finally:
        await a.close()
        await b.close()


@pytest.mark.redis
async def test_redis_registry_counts_streams_on_every_replica_and_ages_out_a_dead_one(
        redis_url: str, settings: Settings) -> None:
    from headwater.gateway.redis_backend import RedisRunRegistry

    a = RedisRunRegistry(redis_url, settings=settings)
    b = RedisRunRegistry(redis_url, settings=settings)
    try:
        on_a = a.stream_opened("alice", "run-1")
        b.stream_opened("alice", "run-1")
        b.stream_opened("bob", "run-2")
        assert await a.open_streams("alice") >= 1  # its own, counted at once
        assert await b.open_streams("alice") == 2  # B's own, and A's already written
        assert await a.open_streams("alice") == 2 and await a.open_streams("bob") == 1
        assert await a.followers("run-1") == 2
        await asyncio.sleep(1.5)  # renewed past the liveness TTL
        assert await a.open_streams("alice") == 2
        a.stream_closed(on_a)
        for _ in range(100):
            if await b.open_streams("alice") == 1:
                break
            await asyncio.sleep(0.02)
        assert await b.open_streams("alice") == 1
        await b.close()  # B dies without closing its streams: they age out
        for _ in range(100):
            if await a.open_streams("alice") == 0 and await a.open_streams("bob") == 0:
                break
            await asyncio.sleep(0.05)
        assert await a.open_streams("alice") == 0 and await a.open_streams("bob") == 0
        assert await a.followers("run-1") == 0
    finally:
        await a.close()
        await b.close()


@pytest.mark.redis
async def test_a_cancel_reaches_the_replica_that_runs_the_run(redis_url: str,
                                                              settings: Settings) -> None:
    from headwater.gateway.redis_backend import RedisRunRegistry

    a = RedisRunRegistry(redis_url, settings=settings)
    b = RedisRunRegistry(redis_url, settings=settings)
    heard: asyncio.Queue[str] = asyncio.Queue()
    a.on_cancel(heard.put_nowait)
    try:
        info = RunInfo(id="run-9", user_id="alice", session_id="s", agent="bot",
                       replica=a.replica)
        await a.register(info)  # A now listens
        assert await b.request_cancel(info) is True
        assert await asyncio.wait_for(heard.get(), 5) == "run-9"
        gone = RunInfo(id="run-0", user_id="alice", session_id="s", agent="bot",
                       replica="nobody")
        assert await b.request_cancel(gone) is False
    finally:
        await a.close()
        await b.close()


async def test_run_starts_are_counted_per_fixed_window() -> None:
    registry = LocalRunRegistry()
    first, left = await registry.count_run("u", 0.5, 10)
    if left < 0.2:  # too near the window's end to count twice in it: start in the next
        await asyncio.sleep(left + 0.01)
        first, left = await registry.count_run("u", 0.5, 10)
    second, _ = await registry.count_run("u", 0.5, 10)
    assert (first, second) == (1, 2) and 0 < left <= 0.5
    assert (await registry.count_run("v", 0.5, 10))[0] == 1
    await asyncio.sleep(left + 0.01)
    assert (await registry.count_run("u", 0.5, 10))[0] == 1  # a new window


@pytest.mark.redis
async def test_redis_counts_run_starts_over_every_replica(redis_url: str,
                                                          settings: Settings) -> None:
    from headwater.gateway.redis_backend import RedisRunRegistry

    a = RedisRunRegistry(redis_url, settings=settings)
    b = RedisRunRegistry(redis_url, settings=settings)
    try:
        counts = [(await a.count_run("alice", 600, 10))[0],
                  (await b.count_run("alice", 600, 10))[0],
                  (await a.count_run("alice", 600, 10))[0],
                  (await b.count_run("bob", 600, 10))[0]]
        if counts != [1, 2, 3, 1]:  # a 600 s window began between two counts: once more
            counts = [(await a.count_run("carol", 600, 10))[0],
                      (await b.count_run("carol", 600, 10))[0]]
            assert counts == [1, 2]
        left = (await a.count_run("dave", 600, 10))[1]
        assert 0 < left <= 600
        # past the limit a start is answered, not kept: the count stops at limit + 1
        erin = [(await (a, b)[n % 2].count_run("erin", 600, 2))[0] for n in range(5)]
        if erin[0] != 1 or erin != sorted(erin):  # a window began meanwhile: once more
            erin = [(await a.count_run("frank", 600, 2))[0] for _ in range(5)]
        assert erin == [1, 2, 3, 3, 3]
    finally:
        await a.close()
        await b.close()
