"""The Redis run log's batches (issue 32), on the real Redis: a run's followers on its own
replica read in process, its frames go to Redis in batches of every run's frames, a run
that is not resumable goes to Redis only when a follower elsewhere asks for it, and a
batch Redis refuses halfway loses and repeats no frame for any follower."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

import pytest

from headwater.errors import RunStoreUnavailable
from headwater.gateway.redis_backend import RedisRunLog
from headwater.gateway.sse import Frame
from headwater.settings import Settings

from .test_gateway import A, follow, new_session, post_run
from .test_redis_retry import LosesOneAnswer, relay  # noqa: F401 (a fixture)
from .test_replicas import Gate, replicas_for  # noqa: F401 (a fixture)
from .test_runlog import collect, drop_keys, redis_settings

pytestmark = pytest.mark.redis


@pytest.fixture
async def logs(redis_url: str) -> AsyncIterator[tuple[RedisRunLog, RedisRunLog, Settings]]:
    """Two Redis run logs on one prefix (replicas A and B), a short ``redis_timeout``."""
    settings = redis_settings(redis_url, redis_timeout=0.5)
    a = RedisRunLog(redis_url, settings=settings)
    b = RedisRunLog(redis_url, settings=settings)
    yield a, b, settings
    await a.close()
    await b.close()
    await drop_keys(redis_url, settings.redis_key_prefix)


async def entries(redis_url: str, key: str) -> list[tuple[bytes, dict[bytes, bytes]]]:
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(redis_url)
    try:
        return list(await client.xrange(key))
    finally:
        await client.aclose()


async def test_every_run_s_frames_of_a_turn_go_in_one_call_and_are_read_in_process(
        logs: tuple[RedisRunLog, RedisRunLog, Settings]) -> None:
    a, b, _ = logs
    runs = [f"r{i}" for i in range(20)]
    for run_id in runs:
        await a.open(run_id)
    remote = [asyncio.ensure_future(collect(b, 0, run_id)) for run_id in runs]
    local = [asyncio.ensure_future(collect(a, 0, run_id)) for run_id in runs]
    calls = a.calls
    written = await asyncio.gather(*(a.append(run_id, "delta", {"author": "a", "text": run_id})
                                     for run_id in runs))
    assert a.calls == calls + 1  # twenty runs, one call
    assert [f.id for f in written] == [1] * 20
    done = await asyncio.gather(*(a.append(run_id, "done", {}) for run_id in runs))
    assert a.calls == calls + 2 and a.frames_sent == 40
    for run_id, delta, end, here, there in zip(runs, written, done, local, remote, strict=True):
        assert await asyncio.wait_for(here, 10) == [delta, end], run_id
        assert await asyncio.wait_for(there, 10) == [delta, end], run_id


async def test_a_run_that_is_not_resumable_goes_to_redis_when_a_follower_elsewhere_asks(
        logs: tuple[RedisRunLog, RedisRunLog, Settings], redis_url: str) -> None:
    a, b, settings = logs
    await a.open("quiet", resumable=False)
    here = asyncio.ensure_future(collect(a, 0, "quiet"))
    written = [await a.append("quiet", "delta", {"author": "a", "text": str(i)})
               for i in range(5)]
    key = f"{settings.redis_key_prefix}run:quiet:frames"
    assert await entries(redis_url, key) == []  # nobody elsewhere asked: nothing sent
    assert a.frames_sent == 0
    assert await b.last_id("quiet") == 5  # B asks A; A sends every frame so far
    assert [f.raw for f in await b.read_after("quiet", 2)] == [f.raw for f in written[2:]]
    there = asyncio.ensure_future(collect(b, 3, "quiet"))
    written.append(await a.append("quiet", "delta", {"author": "a", "text": "5"}))
    written.append(await a.append("quiet", "done", {}))
    assert await asyncio.wait_for(here, 10) == written
    assert await asyncio.wait_for(there, 10) == written[3:]
    assert len(await entries(redis_url, key)) == 7


async def test_a_batch_redis_refuses_halfway_loses_and_repeats_no_frame(
        logs: tuple[RedisRunLog, RedisRunLog, Settings], redis_url: str) -> None:
    """Replica A writes as a Redis user that may not XADD to run r2's stream (an ACL
    selector): r1's frames of the batch are written, r2's refused, r3's written after it. Every
    follower gets every frame once; r2's followers on A end after the frames Redis has,
    and its terminal frame reaches Redis (and B's follower) once Redis takes it."""
    import redis.asyncio as aioredis

    _, b, settings = logs
    prefix = settings.redis_key_prefix
    user, password = f"hwtest-{uuid.uuid4().hex}", uuid.uuid4().hex
    admin = aioredis.Redis.from_url(redis_url)
    await admin.execute_command("ACL", "SETUSER", user, "on", f">{password}", "&*", "+@all",
                                f"~{prefix}*")
    host = redis_url.split("://", 1)[1]
    a = RedisRunLog(f"redis://{user}:{password}@{host}", settings=settings)
    try:
        runs = ["r1", "r2", "r3"]
        for run_id in runs:
            await a.open(run_id)
        remote = {r: asyncio.ensure_future(collect(b, 0, r)) for r in runs}
        local = {r: asyncio.ensure_future(_frames_until_error(a, r)) for r in runs}
        first = {r: [await a.append(r, "delta", {"author": "a", "text": f"{r}.{i}"})
                     for i in range(2)] for r in runs}
        # From now on A may XADD to r1's and r3's streams only: its next batch is refused
        # halfway, inside the script (Redis checks each command of a script).
        await admin.execute_command("ACL", "SETUSER", user, "-xadd",
                                    f"(+xadd ~{prefix}run:r1:* ~{prefix}run:r3:*)")
        calls = a.calls
        second = await asyncio.gather(
            *(a.append(r, "delta", {"author": "a", "text": f"{r}.2"}) for r in runs),
            return_exceptions=True)
        assert a.calls == calls + 1  # one batch: r1 written, r2 refused, r3 written
        assert isinstance(second[1], RunStoreUnavailable)
        assert isinstance(second[0], Frame) and isinstance(second[2], Frame)
        with pytest.raises(RunStoreUnavailable):  # a failed run takes no more frames
            await a.append("r2", "delta", {"author": "a", "text": "more"})
        with pytest.raises(RunStoreUnavailable):  # its terminal frame waits for Redis
            await a.append("r2", "error", {"code": "run_store_unavailable",
                                           "message": "m", "retryable": True})
        frames, failed = await asyncio.wait_for(local["r2"], 10)
        assert frames == first["r2"] and failed  # what Redis has, then the failure
        assert (await entries(redis_url, f"{prefix}run:r2:frames"))[-1][0] == b"2-0"

        ends = {r: await a.append(r, "done", {}) for r in ("r1", "r3")}
        for r in ("r1", "r3"):
            whole = [*first[r], second[runs.index(r)], ends[r]]
            assert await asyncio.wait_for(local[r], 10) == (whole, False)
            assert await asyncio.wait_for(remote[r], 10) == whole

        await admin.execute_command("ACL", "SETUSER", user, "+xadd")
        tail = await asyncio.wait_for(remote["r2"], 10)  # the terminal frame, once written
        assert [f.id for f in tail] == [1, 2, 3]
        assert [f.raw for f in tail[:2]] == [f.raw for f in first["r2"]]
        assert tail[2].type == "error" and tail[2].data["code"] == "run_store_unavailable"
        stored = await entries(redis_url, f"{prefix}run:r2:frames")
        assert [entry_id for entry_id, _ in stored] == [b"1-0", b"2-0", b"3-0"]
    finally:
        await a.close()
        await admin.execute_command("ACL", "DELUSER", user)
        await admin.aclose()


async def _frames_until_error(log: RedisRunLog, run_id: str) -> tuple[list[Frame], bool]:
    """The frames a follower on the run's replica gets, and whether it ended in an error."""
    got: list[Frame] = []
    try:
        async with aclosing(log.follow(run_id, 0)) as frames:
            async for frame in frames:
                got.append(frame)
    except RunStoreUnavailable:
        return got, True
    return got, False


async def test_a_batch_whose_answer_is_lost_is_written_once(
        relay: tuple[LosesOneAnswer, str, Settings],  # noqa: F811 (the fixture)
        redis_url: str) -> None:
    lossy, url, settings = relay
    writer = RedisRunLog(url, settings=settings)
    reader = RedisRunLog(redis_url, settings=settings)
    try:
        await writer.open("r")
        await writer.append("r", "delta", {"author": "a", "text": "warm"})  # scripts loaded
        lossy.marker = b"lost-answer"
        frame = await writer.append("r", "delta", {"author": "a", "text": "lost-answer"})
        assert lossy.dropped == 1 and frame.id == 2  # sent twice, written once
        end = await writer.append("r", "done", {})
        assert [f.id for f in await reader.read_after("r", 0)] == [1, 2, 3]
        assert end.id == 3
    finally:
        await writer.close()
        await reader.close()


async def test_a_run_that_is_not_resumable_is_followed_through_b_from_any_frame(
        replicas_for: Any, redis_url: str) -> None:  # noqa: F811 (the fixture)
    gate = Gate()
    replicas = await replicas_for(gate.agent)
    prefix = replicas.apps[0].state.gateway.settings.redis_key_prefix
    sid = await new_session(replicas.a)
    running = asyncio.ensure_future(post_run(replicas.a, sid, {"message": "go"}))
    try:
        await asyncio.wait_for(gate.holding.wait(), 10)
        run_id = next(iter(replicas.apps[0].state.gateway.runs.runs))
        assert await entries(redis_url, f"{prefix}run:{run_id}:frames") == []
        tail = asyncio.ensure_future(follow(replicas.b, run_id, 1))
        for _ in range(200):  # B asked A for the run: its frames are in Redis
            if await entries(redis_url, f"{prefix}run:{run_id}:frames"):
                break
            await asyncio.sleep(0.02)
        gate.held.set()
        whole = await asyncio.wait_for(running, 10)
        got = await asyncio.wait_for(tail, 10)
    finally:
        gate.held.set()
    assert whole.frames[-1][1] == "done" and got.status == 200
    assert got.frames == whole.frames[1:]
    again = await follow(replicas.b, run_id, None)  # ended: replayed whole from Redis
    assert again.frames == whole.frames
    assert json.loads(json.dumps(again.frames)) == json.loads(json.dumps(whole.frames))
    done = await replicas.b.get(f"/runs/{run_id}/stream",
                                headers={**A, "Last-Event-ID": str(len(whole.frames))})
    assert done.status_code == 204
