"""Redis calls through a relay to the real Redis that loses or holds answers.

A command whose answer is lost is sent again by redis-py (``connect``'s one retry after a
closed connection): the writes that retry meets must count once. The relay, when armed,
passes one command on and then closes the client's connection instead of passing the
answer back: the command ran, the client saw the connection close and sent it again.

A replica whose every connection is busy (answers held) is not a Redis outage: its calls
answer ``RunStoreUnavailable`` after ``redis_pool_timeout``, logged once as a full pool."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import pytest

from headwater.settings import Settings

from .test_runlog import drop_keys, redis_settings

pytestmark = pytest.mark.redis


class LosesOneAnswer:
    """A TCP relay to Redis that drops the answer to the next command carrying ``marker``."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.marker: bytes | None = None
        self.dropped = 0
        self.flowing = asyncio.Event()  # cleared: answers are held back until it is set
        self.flowing.set()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        return int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(self.host, self.port)
        drop = asyncio.Event()

        async def requests() -> None:
            while chunk := await reader.read(65536):
                if self.marker is not None and self.marker in chunk:
                    self.marker = None
                    drop.set()
                up_writer.write(chunk)
                await up_writer.drain()

        async def answers() -> None:
            while chunk := await up_reader.read(65536):
                await self.flowing.wait()
                if drop.is_set():  # the command ran; its answer never reaches the client
                    self.dropped += 1
                    writer.transport.abort()
                    return
                writer.write(chunk)
                await writer.drain()

        tasks = [asyncio.create_task(requests()), asyncio.create_task(answers())]
        self._tasks.update(tasks)
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._tasks.difference_update(tasks)
            writer.transport.abort()
            up_writer.close()


@pytest.fixture
async def relay(redis_url: str) -> AsyncIterator[tuple[LosesOneAnswer, str, Settings]]:
    url = urlsplit(redis_url)
    relay = LosesOneAnswer(url.hostname or "127.0.0.1", url.port or 6379)
    port = await relay.start()
    through = f"redis://127.0.0.1:{port}{url.path or '/0'}"
    settings = redis_settings(through)
    try:
        yield relay, through, settings
    finally:
        await relay.close()
        await drop_keys(redis_url, settings.redis_key_prefix)


async def test_a_run_start_whose_answer_is_lost_is_counted_once(
        relay: tuple[LosesOneAnswer, str, Settings]) -> None:
    from headwater.gateway.redis_backend import RedisRunRegistry

    lossy, url, settings = relay
    registry = RedisRunRegistry(url, settings=settings)
    try:
        assert (await registry.count_run("warm-up", 600, 5))[0] == 1  # the script is loaded
        for _ in range(3):  # a 600 s window may begin between two counts: try again
            first = (await registry.count_run("alice", 600, 5))[0]
            lossy.marker = b"starts:5:alice"
            second = (await registry.count_run("alice", 600, 5))[0]  # its answer is lost
            assert lossy.marker is None and lossy.dropped >= 1
            third = (await registry.count_run("alice", 600, 5))[0]
            if first < third:
                break
            await drop_keys_of(url, settings, "alice")
        assert (first, second, third) == (1, 2, 3)  # not 1, 3, 4
    finally:
        await registry.close()


async def test_a_run_log_open_whose_answer_is_lost_opens_it(
        relay: tuple[LosesOneAnswer, str, Settings]) -> None:
    from headwater.gateway.redis_backend import RedisRunLog

    lossy, url, settings = relay
    log = RedisRunLog(url, settings=settings)
    try:
        await log.open("warm-up")  # the script is loaded
        lossy.marker = b"run:run-1:meta"
        await log.open("run-1")  # sent twice: the second finds the log it opened
        assert lossy.dropped == 1
        frame = await log.append("run-1", "delta", {"author": "bot", "text": "hi"})
        assert frame.id == 1 and await log.last_id("run-1") == 1
        other = RedisRunLog(url, settings=settings)
        try:  # another opener of the same id is still refused
            with pytest.raises(Exception, match="already has a log"):
                await other.open("run-1")
        finally:
            await other.close()
    finally:
        await log.close()


async def drop_keys_of(url: str, settings: Settings, user: str) -> None:
    with contextlib.suppress(Exception):
        await drop_keys(url, f"{settings.redis_key_prefix}starts:{len(user)}:{user}")


async def test_a_full_pool_is_not_an_outage(relay: tuple[LosesOneAnswer, str, Settings],
                                            caplog: pytest.LogCaptureFixture) -> None:
    from headwater.errors import RunStoreUnavailable
    from headwater.gateway.redis_backend import RedisRunRegistry

    held, url, settings = relay
    small = settings.model_copy(update={"redis_max_connections": 2, "redis_pool_timeout": 0.3})
    registry = RedisRunRegistry(url, settings=small)
    caplog.set_level(logging.INFO, logger="headwater.gateway")
    try:
        assert await registry.open_streams("warm-up") == 0
        held.flowing.clear()  # the next calls' answers are held: their connections stay busy
        busy = [asyncio.create_task(registry.open_streams(f"u{n}")) for n in range(2)]
        await asyncio.sleep(0.1)
        for _ in range(2):
            with pytest.raises(RunStoreUnavailable, match="in use"):
                await registry.open_streams("one-too-many")  # after redis_pool_timeout
        assert not registry.health.down and registry.health.outages == 0
        held.flowing.set()
        assert await asyncio.gather(*busy) == [0, 0]
        assert await registry.open_streams("again") == 0
        lines = [r.getMessage() for r in caplog.records if "Redis" in r.getMessage()]
        assert len(lines) == 1 and "in use" in lines[0] and "unreachable" not in lines[0]
        assert not registry.health.busy
    finally:
        held.flowing.set()
        await registry.close()
