"""The gateway on a real Redis that goes away: a private ``redis-server`` per test, killed
(refused) or stopped (silent past ``redis_timeout``). Requests that need Redis answer
503 ``run_store_unavailable`` with ``Retry-After``, a run streaming at that moment ends
with that terminal ``error`` frame (a live socket closes with the code's close code), the
outage is logged once, and the next request after Redis is back succeeds."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect

from headwater import Agent
from headwater.errors import ERRORS
from headwater.gateway import create_app
from headwater.settings import Settings
from headwater.testing import ScriptedModel, wait_until
from headwater.testing.sse import aiter_sse

from .conftest import Serve, unavailable
from .deployment import free_port
from .stores import new_service
from .test_gateway import AUTH, A, Received, new_session, post_run
from .test_replicas import Gate
from .test_websocket import closed, recv, responder, until

pytestmark = pytest.mark.redis

CODE = "run_store_unavailable"
REDIS_SERVER = "/usr/bin/redis-server"
TIMEOUT = 0.5  # Settings.redis_timeout of these apps: a silent Redis is found out fast


class PrivateRedis:
    """A ``redis-server`` of this test alone on a free loopback port, without persistence."""

    def __init__(self, binary: str, workdir: Path) -> None:
        self.binary = binary
        self.workdir = workdir
        self.port = free_port()
        self.process: asyncio.subprocess.Process | None = None
        self.stopped = False

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    async def start(self) -> None:
        """Start it (again, on the same port) and wait until it answers PING."""
        self.process = await asyncio.create_subprocess_exec(
            self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "no", "--dir", str(self.workdir),
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
        self.stopped = False
        deadline = time.monotonic() + 10
        while not await self.answers():
            if self.process.returncode is not None:
                raise RuntimeError(f"redis-server exited ({self.process.returncode})")
            if time.monotonic() > deadline:
                raise RuntimeError("redis-server does not answer PING after 10 s")
            await asyncio.sleep(0.02)

    async def answers(self) -> bool:
        """Whether it answers PING now."""
        try:
            async with asyncio.timeout(1):
                reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
                try:
                    writer.write(b"PING\r\n")
                    await writer.drain()
                    return await reader.readline() == b"+PONG\r\n"
                finally:
                    writer.close()
                    with contextlib.suppress(OSError):
                        await writer.wait_closed()
        except (OSError, TimeoutError):
            return False

    async def kill(self) -> None:
        """SIGKILL: connections are reset and new ones refused."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        await asyncio.wait_for(self.process.wait(), 10)

    def stop(self) -> None:
        """SIGSTOP: connections are taken by the kernel, and nothing answers."""
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)
        self.stopped = True

    def resume(self) -> None:
        """SIGCONT after :meth:`stop`."""
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)
        self.stopped = False

    async def close(self) -> None:
        if self.process is not None and self.process.returncode is None:
            if self.stopped:
                self.resume()
            await self.kill()


@pytest.fixture
async def redis_server(tmp_path: Path) -> AsyncIterator[PrivateRedis]:
    """A private ``redis-server``, started; killed after the test."""
    binary = REDIS_SERVER if os.access(REDIS_SERVER, os.X_OK) else shutil.which("redis-server")
    if binary is None:
        unavailable("redis-server is missing (as root: apt-get install redis-server)")
    server = PrivateRedis(binary, tmp_path)
    await server.start()
    try:
        yield server
    finally:
        await server.close()


AppFor = Callable[..., Awaitable[httpx.AsyncClient]]


@pytest.fixture
async def app_for(serve: Serve, redis_server: PrivateRedis) -> AsyncIterator[AppFor]:
    """``client = await app_for(agent)``: a gateway on the private Redis (and a SQLite
    session store), under uvicorn with its lifespan; an httpx client on it."""
    clients: list[httpx.AsyncClient] = []

    async def make(agent: Agent, **overrides: Any) -> httpx.AsyncClient:
        values: dict[str, Any] = {
            "redis_url": redis_server.url, "redis_timeout": TIMEOUT,
            "heartbeat_interval": 1.0, "send_timeout": 5.0, "session_lock_timeout": 0,
            "shutdown_grace": 2.0, **overrides}
        app = create_app(agent, session_service=new_service("sqlite"), auth=AUTH,
                         settings=Settings(**values))
        clients.append(httpx.AsyncClient(base_url=await serve(app, lifespan="on"),
                                         timeout=20))
        return clients[-1]

    yield make
    for client in clients:
        await client.aclose()


def assert_unavailable(answer: Received | httpx.Response) -> None:
    """503 with ``Retry-After`` and the registry's code and message."""
    if isinstance(answer, httpx.Response):
        status, body = answer.status_code, answer.content
    else:
        status, body = answer.status, answer.raw
    info = ERRORS[CODE]
    assert status == info.status == 503, body
    assert int(answer.headers["retry-after"]) >= 1
    error = json.loads(body)["error"]
    assert (error["code"], error["message"]) == (CODE, info.message)


def outage_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.WARNING
            and r.name.startswith("headwater")]


@pytest.mark.parametrize("how", ["refused", "silent"])
async def test_requests_answer_503_while_redis_is_away_and_succeed_once_it_is_back(
        app_for: AppFor, redis_server: PrivateRedis, caplog: pytest.LogCaptureFixture,
        how: str) -> None:
    gate = Gate(turns=3)
    gate.held.set()  # the tool returns at once
    client = await app_for(gate.agent())
    sid = await new_session(client)
    first = await post_run(client, sid, {"message": "go"})
    assert first.status == 200 and first.frames[-1][1] == "done"
    run_id = first.headers["x-run-id"]

    caplog.set_level(logging.INFO, logger="headwater")
    if how == "refused":
        await redis_server.kill()
    else:
        redis_server.stop()
    started = time.monotonic()
    refused = await post_run(client, sid, {"message": "again"})
    assert_unavailable(refused)
    if how == "silent":  # found out by redis_timeout, not by a longer wait
        assert time.monotonic() - started < 6 * TIMEOUT + 2
    assert_unavailable(await client.get(f"/runs/{run_id}/stream", headers=A))
    assert_unavailable(await client.get(f"/sessions/{sid}", headers=A))
    assert_unavailable(await post_run(client, sid, {"message": "and again"}))

    lines = outage_lines(caplog)
    assert len(lines) == 1, [r.getMessage() for r in lines]  # one line for the outage
    assert "unreachable" in lines[0].getMessage() and lines[0].exc_info is None
    assert CODE in lines[0].getMessage()

    if how == "refused":
        await redis_server.start()  # the same port, empty
    else:
        redis_server.resume()
    again = await post_run(client, sid, {"message": "back"})
    assert again.status == 200, again.raw
    assert again.frames[-1][1] == "done"
    assert (await client.get(f"/sessions/{sid}", headers=A)).status_code == 200
    assert any(r.levelno == logging.INFO and "answers again" in r.getMessage()
               for r in caplog.records)
    assert len(outage_lines(caplog)) == 1


@pytest.mark.parametrize("how", ["refused", "silent"])
async def test_a_streaming_run_ends_with_a_terminal_error_frame_and_is_stored_whole(
        app_for: AppFor, redis_server: PrivateRedis, caplog: pytest.LogCaptureFixture,
        how: str) -> None:
    gate = Gate(turns=3)
    client = await app_for(gate.agent())
    sid = await new_session(client)
    frames: list[tuple[int, str, dict[str, Any]]] = []

    async def stream() -> int:
        async with client.stream("POST", f"/sessions/{sid}/runs", json={"message": "go"},
                                 headers=A) as response:
            async for message in aiter_sse(response.aiter_bytes()):
                frames.append((int(message.id), message.event, json.loads(message.data)))
            return response.status_code  # the body ended normally: not a dropped connection

    reading = asyncio.create_task(stream())
    await asyncio.wait_for(gate.holding.wait(), 10)
    await wait_until(lambda: any(kind == "tool_call" for _, kind, _ in frames), timeout=10)
    caplog.set_level(logging.INFO, logger="headwater")
    if how == "refused":
        await redis_server.kill()
    else:
        redis_server.stop()
    assert await asyncio.wait_for(reading, 6 * TIMEOUT + 5) == 200

    last_id, kind, data = frames[-1]
    assert kind == "error"
    assert (data["code"], data["retryable"]) == (CODE, True)
    assert ERRORS[CODE].retryable
    assert [n for n, _, _ in frames] == list(range(1, last_id + 1))  # the next id
    assert [k for _, k, _ in frames].count("error") == 1
    lines = outage_lines(caplog)
    assert len(lines) == 1 and lines[0].exc_info is None, [r.getMessage() for r in lines]

    # The run is over (stopped here: it could store no more frames); its record, in the
    # session store, is whole: the held call has its one result, nothing partial.
    events = (await client.get(f"/sessions/{sid}/events", headers=A)).json()["items"]
    calls = [e for e in events if e.get("calls")]
    results = [r for e in events for r in e.get("results") or []]
    assert len(calls) == 1 and len(results) == 1, events
    assert results[0]["id"] == calls[0]["calls"][0]["id"]

    if how == "refused":
        await redis_server.start()
    else:
        redis_server.resume()
    gate.holding.clear()
    gate.held.set()
    again = await post_run(client, sid, {"message": "back"})
    assert again.status == 200, again.raw
    assert again.frames[-1][1] == "done"


async def test_a_live_socket_ends_with_the_terminal_frame_and_the_code_s_close_code(
        serve: Serve, redis_server: PrivateRedis) -> None:
    agent = Agent(name="voice", model=ScriptedModel(responder=responder))
    app = create_app(agent, session_service=new_service("sqlite"), auth=AUTH,
                     settings=Settings(redis_url=redis_server.url, redis_timeout=TIMEOUT,
                                       heartbeat_interval=1.0, session_lock_timeout=0,
                                       send_timeout=2.0, shutdown_grace=2.0))
    base = await serve(app, lifespan="on")
    async with httpx.AsyncClient(base_url=base, timeout=10) as client:
        sid = await new_session(client)
        url = base.replace("http://", "ws://", 1) + f"/live/{sid}"
        async with connect(url, subprotocols=["bearer", "token-a"]) as ws:  # type: ignore[list-item]
            assert (await recv(ws))["type"] == "ready"
            await ws.send(json.dumps({"type": "content", "text": "tell me a long story"}))
            seen: list[dict[str, Any]] = []
            await until(ws, lambda m: m["type"] == "delta", seen)
            await redis_server.kill()
            terminal = await until(ws, lambda m: m["id"] is not None and m["type"] == "error",
                                   seen, within=10)
            assert terminal["data"]["code"] == CODE and terminal["data"]["retryable"] is True
            code, _ = await closed(ws)
            assert code == ERRORS[CODE].close_code

        # A socket opened while Redis is away is closed with the code, before any run.
        async with connect(url, subprotocols=["bearer", "token-a"]) as ws:  # type: ignore[list-item]
            assert await closed(ws, within=10) == (ERRORS[CODE].close_code, CODE)

        await redis_server.start()
        async with connect(url, subprotocols=["bearer", "token-a"]) as ws:  # type: ignore[list-item]
            assert (await recv(ws))["type"] == "ready"


async def test_a_replica_hears_cancels_again_once_redis_is_back(
        redis_server: PrivateRedis) -> None:
    """A restarted Redis forgets every subscription: the replica's listener subscribes
    again on its own, and a cancel another replica sends afterwards reaches the run."""
    from headwater.gateway.redis_backend import RedisRunRegistry
    from headwater.gateway.registry import RunInfo

    settings = Settings(redis_url=redis_server.url, redis_timeout=TIMEOUT)
    a = RedisRunRegistry(redis_server.url, settings=settings)
    b = RedisRunRegistry(redis_server.url, settings=settings)
    heard: list[str] = []
    a.on_cancel(heard.append)
    info = RunInfo(id="run-1", user_id="alice", session_id="s", agent="bot", replica=a.replica)
    try:
        await a.register(info)  # A listens on its cancel channel from here on
        assert await b.request_cancel(info) is True
        await wait_until(lambda: heard == ["run-1"], timeout=5)
        await redis_server.kill()
        await redis_server.start()  # the same port, no data, no subscriptions
        deadline = time.monotonic() + 10  # A's listener retries once a second

        async def reached() -> bool:
            with contextlib.suppress(Exception):  # B's pooled connection died with Redis
                return await b.request_cancel(info)
            return False

        while not await reached():
            assert time.monotonic() < deadline, "A never subscribed again"
            await asyncio.sleep(0.1)
        await wait_until(lambda: heard == ["run-1", "run-1"], timeout=5)
    finally:
        await a.close()
        await b.close()
