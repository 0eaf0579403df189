"""The gateway as a real process: ``headwater serve`` under uvicorn, over real HTTP.

Each test starts ``python -m headwater.cli serve ...`` as a child process (the
app is ``served_app.py`` or ``served_agents.py`` next to this file) with a
scaled-down time profile, and talks to it with httpx; the model is
``OpenAIChatModel`` speaking to this process's ``FakeProvider``. What is
checked is what a user of a deployed gateway sees: the provider connection, a
tool's child process, the frames, the stored history and the exit.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import ClientConnection

from headwater.sessions import SqlSessionService
from headwater.testing import (
    FakeProvider,
    Scenario,
    Sleep,
    render_openai,
    wait_until,
)

from .live_sockets import live_socket, socket_to_end
from .run_stream import RunStream
from .test_runlog import drop_keys

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
GRACE = 2.0  # HEADWATER_SHUTDOWN_GRACE of the served app
EXIT_MARGIN = 1.5  # interpreter teardown after uvicorn returns
A = {"Authorization": "Bearer token-a"}  # served_app's one token (user "alice")
WORDS = [f"w{i} " for i in range(100)]


# -- the child process ---------------------------------------------------------------------------


@dataclass
class Server:
    """A ``headwater serve`` child and its base URL."""

    process: subprocess.Popen[bytes]
    base_url: str
    log: Path

    def stderr(self) -> str:
        return self.log.read_text(errors="replace")

    async def terminate(self, within: float) -> float:
        """SIGTERM it; the seconds it took to exit (fails past ``within``)."""
        sent = time.monotonic()
        self.process.send_signal(signal.SIGTERM)
        await wait_until(lambda: self.process.poll() is not None, timeout=within, interval=0.01,
                         message=f"the server to exit after SIGTERM; stderr:\n{self.stderr()}")
        return time.monotonic() - sent


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def serve_command(target: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "headwater.cli", "serve", target, "--log-level", "warning",
            *args]


def launch(command: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """Start a child in this folder; its stdout and stderr go to ``log``."""
    with log.open("wb") as out:
        return subprocess.Popen(command, cwd=HERE, env=env, stdout=out,
                                stderr=subprocess.STDOUT)


Spawn = Callable[..., Awaitable[Server]]


@pytest.fixture
def server_env(child_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """The child's environment: headwater under test, a short time profile, the tmp dir."""
    return {**child_env, "HW_TEST_DIR": str(tmp_path),
            "HEADWATER_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'dev.db'}",
            "HEADWATER_SHUTDOWN_GRACE": str(GRACE), "HEADWATER_HEARTBEAT_INTERVAL": "0.5",
            "HEADWATER_SEND_TIMEOUT": "2", "HEADWATER_MODEL_MAX_ATTEMPTS": "1"}


@pytest.fixture
async def spawn(server_env: dict[str, str], tmp_path: Path) -> AsyncIterator[Spawn]:
    """``await spawn(target, *args, env=...)``: a served child, up (``/healthz`` 200).

    Every child still running after the test is killed.
    """
    children: list[subprocess.Popen[bytes]] = []

    async def start(target: str, *args: str, host: str = "127.0.0.1",
                    env: dict[str, str] | None = None) -> Server:
        port = free_port()
        log = tmp_path / f"serve-{len(children)}.log"
        process = launch(serve_command(target, "--host", host, "--port", str(port), *args),
                         {**server_env, **(env or {})}, log)
        children.append(process)
        server = Server(process, f"http://127.0.0.1:{port}", log)
        async with httpx.AsyncClient(base_url=server.base_url, timeout=1) as client:
            deadline = time.monotonic() + 60  # --workers starts three interpreters
            while True:
                if process.poll() is not None:
                    pytest.fail(f"the server exited ({process.returncode}):\n{server.stderr()}")
                try:
                    if (await client.get("/healthz")).status_code == 200:
                        return server
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    pytest.fail(f"the server did not come up:\n{server.stderr()}")
                await asyncio.sleep(0.05)

    yield start
    for process in children:
        if process.poll() is None:
            process.kill()
        process.wait(10)


@pytest.fixture
async def gateway(spawn: Spawn, provider: FakeProvider, tmp_path: Path
                  ) -> AsyncIterator[tuple[Server, httpx.AsyncClient]]:
    """``served_app:app`` (auth, SQLite in the tmp dir, the model on ``provider``)."""
    server = await spawn("served_app:app", env={"HW_TEST_PROVIDER_URL": provider.base_url})
    async with httpx.AsyncClient(base_url=server.base_url, timeout=10) as client:
        yield server, client
    pid = read_pid(tmp_path)
    if pid is not None and alive(pid):  # never leave a `sleep` behind, whatever failed
        os.kill(pid, signal.SIGKILL)


# -- reading a run's stream ----------------------------------------------------------------------


async def open_run(client: httpx.AsyncClient, sid: str, message: str,
                   headers: dict[str, str] = A) -> RunStream:
    request = client.build_request("POST", f"/sessions/{sid}/runs", json={"message": message},
                                   headers=headers)
    response = await client.send(request, stream=True)
    assert response.status_code == 200, (await response.aread()).decode()
    return RunStream(response, response.aiter_raw())


async def whole_run(client: httpx.AsyncClient, sid: str, message: str,
                    headers: dict[str, str] = A) -> RunStream:
    stream = await open_run(client, sid, message, headers)
    await stream.read_to_end()
    await stream.response.aclose()
    return stream


async def new_session(client: httpx.AsyncClient) -> str:
    response = await client.post("/sessions", json={}, headers=A)
    assert response.status_code == 201, response.text
    sid: str = response.json()["id"]
    return sid


async def history(client: httpx.AsyncClient, sid: str) -> list[dict[str, Any]]:
    response = await client.get(f"/sessions/{sid}/events", headers=A)
    assert response.status_code == 200, response.text
    items: list[dict[str, Any]] = response.json()["items"]
    return items


def deltas(count: int) -> Callable[[RunStream], bool]:
    return lambda stream: stream.types.count("delta") >= count


def trickled(words: Sequence[str], every: float) -> Scenario:
    """An OpenAI stream of ``words`` with ``every`` seconds between its SSE events."""
    body: list[bytes | Sleep] = []
    for event in render_openai(text=words):
        body += [event, Sleep(every)]
    return Scenario(body=body)


def tool_call(name: str, arguments: dict[str, Any], call_id: str) -> Scenario:
    return Scenario(body=render_openai(
        tool_calls=[{"name": name, "id": call_id, "arguments": arguments}],
        finish_reason="tool_calls"))


def read_pid(tmp_path: Path) -> int | None:
    text = (tmp_path / "hold.pid").read_text() if (tmp_path / "hold.pid").exists() else ""
    return int(text) if text.strip().isdigit() else None


def alive(pid: int) -> bool:
    """Whether a process of that pid exists (a zombie counts: it was never reaped)."""
    return Path(f"/proc/{pid}").exists()


async def tool_started(tmp_path: Path) -> int:
    await wait_until(lambda: read_pid(tmp_path) is not None, timeout=5, interval=0.01,
                     message="the hold tool to start its child")
    pid = read_pid(tmp_path)
    assert pid is not None and alive(pid)
    return pid


def sent_tool_results(provider: FakeProvider, request: int) -> list[Any]:
    """The tool results the model was sent in ``provider.requests[request]``."""
    messages = provider.requests[request].json()["messages"]
    return [json.loads(m["content"]) for m in messages if m["role"] == "tool"]


# -- 1. a disconnect cancels the run -------------------------------------------------------------


async def test_a_disconnect_closes_the_provider_connection_and_frees_the_session(
        gateway: tuple[Server, httpx.AsyncClient], provider: FakeProvider) -> None:
    _, client = gateway
    provider.enqueue(trickled(WORDS, every=0.05), Scenario(body=render_openai(text=["next"])))
    sid = await new_session(client)
    stream = await open_run(client, sid, "go")
    run_id = stream.response.headers["x-run-id"]
    await stream.read_until(deltas(3))
    assert stream.types == ["delta"] * 3
    left = await stream.hang_up()

    closed = await provider.wait_closed(0, timeout=1.0)
    assert closed.close_kind in ("client_fin", "client_rst")
    assert closed.closed_at is not None and closed.closed_at - left < 1.0

    # The run's cleanup (seal, lease release) ends just after the provider sees the close; a
    # next run waits for it up to session_lock_timeout (1 s by default), else answers 409.
    again = await open_run(client, sid, "again")  # asserts 200, not 409 session_busy
    await again.read_to_end()
    assert again.types == ["delta", "message", "done"]
    assert again.data(1)["text"] == "next"

    # A stopped model call keeps what was shown, marked interrupted, then the stop's record.
    items = await history(client, sid)
    seen = "".join(stream.data(i)["text"] for i in range(3))
    assert [(i["invocation_id"] == run_id, i["author"]) for i in items] == [
        (True, "user"), (True, "bot"), (True, "bot"), (False, "user"), (False, "bot")]
    # at least what the client read (the server may have sent a little more before the close)
    assert items[1]["interrupted"] is True and items[1]["text"].startswith(seen)
    assert items[2]["error"]["code"] == "cancelled" and items[2]["text"] == ""
    assert items[-1]["text"] == "next"
    roles = [m["role"] for m in provider.requests[1].json()["messages"]]
    assert roles == ["user", "assistant", "user"]  # the error record never reaches a model


# -- 2. a disconnect during a tool ---------------------------------------------------------------


async def test_a_disconnect_during_a_tool_kills_its_child_and_seals_the_call_cancelled(
        gateway: tuple[Server, httpx.AsyncClient], provider: FakeProvider,
        tmp_path: Path) -> None:
    _, client = gateway
    provider.enqueue(tool_call("hold", {"seconds": 30}, "call_hold"),
                     Scenario(body=render_openai(text=["ok"])))
    sid = await new_session(client)
    stream = await open_run(client, sid, "hold on")
    await stream.read_until(lambda s: "tool_call" in s.types)
    assert stream.types == ["tool_call"]
    assert stream.data(0)["calls"] == [{"id": "call_hold", "name": "hold"}]
    pid = await tool_started(tmp_path)
    await stream.hang_up()

    await wait_until(lambda: not alive(pid), timeout=1.0, interval=0.01,
                     message=f"the tool's child {pid} to be gone")

    again = await open_run(client, sid, "again")  # 200, not 409 session_busy
    await again.read_to_end()
    assert again.types == ["delta", "message", "done"]

    items = await history(client, sid)
    assert [i["author"] for i in items] == ["user", "bot", "bot", "bot", "user", "bot"]
    assert items[1]["calls"] == [{"id": "call_hold", "name": "hold"}]
    assert items[3]["error"]["code"] == "cancelled"  # the stop's record
    sealed = items[2]
    assert sealed["results"][0]["id"] == "call_hold"
    assert sealed["results"][0]["status"] == "error" and sealed["interrupted"] is True
    # What the model is told about the call on the next run: a `cancelled` result.
    assert [r["code"] for r in sent_tool_results(provider, 1)] == ["cancelled"]


# -- 3. SIGTERM while a run is mid-way -----------------------------------------------------------


# `hold` awaits a child process (cancellable); `block` sleeps in a sync-tool thread, which no
# cancel can stop: the run is sealed and the process exits within the grace all the same.
TOOLS = {"async_tool": ("hold", "call_hold"), "sync_tool": ("block", "call_block")}


@pytest.mark.parametrize("midway", ["async_tool", "sync_tool", "model"])
async def test_sigterm_ends_open_streams_with_server_shutdown_and_seals_history(
        gateway: tuple[Server, httpx.AsyncClient], provider: FakeProvider, tmp_path: Path,
        midway: str) -> None:
    server, client = gateway
    name, call_id = TOOLS.get(midway, ("", ""))
    if name:
        provider.enqueue(tool_call(name, {"seconds": 30}, call_id))
    else:
        provider.enqueue(trickled(WORDS, every=0.05))
    sid = await new_session(client)
    stream = await open_run(client, sid, "go")
    pid: int | None = None
    if midway == "model":
        await stream.read_until(deltas(3))
    else:
        await stream.read_until(lambda s: "tool_call" in s.types)
        if midway == "async_tool":
            pid = await tool_started(tmp_path)
        else:
            await wait_until((tmp_path / "block.started").exists, timeout=5)
    shown = len(stream.frames)

    sent = time.monotonic()
    server.process.send_signal(signal.SIGTERM)
    await stream.read_to_end(within=GRACE + EXIT_MARGIN)
    assert stream.ended

    tail = stream.frames[shown:]
    assert [f.event for f in tail if f.event != "delta"] == ["error"]
    assert stream.frames[-1].event == "error"
    assert sum(f.event in ("error", "done") for f in stream.frames) == 1
    error = stream.data(-1)
    assert error["code"] == "server_shutdown" and error["retryable"] is True
    # The `retry:` field comes right before the error frame, and only there.
    assert [f.retry for f in stream.frames[:-1]] == [None] * (len(stream.frames) - 1)
    assert isinstance(stream.frames[-1].retry, int) and stream.frames[-1].retry > 0
    raw = bytes(stream.raw)
    assert raw.count(b"retry: ") == 1 and raw.index(b"retry: ") < raw.index(b"event: error")

    await wait_until(lambda: server.process.poll() is not None,
                     timeout=max(0.0, sent + GRACE + EXIT_MARGIN - time.monotonic()),
                     interval=0.01, message="the server to exit within its shutdown grace")
    assert server.process.returncode in (0, -signal.SIGTERM), server.stderr()

    service = SqlSessionService(f"sqlite+aiosqlite:///{tmp_path / 'sessions.db'}")
    try:
        session = await service.get_session(app_name="bot", user_id="alice", session_id=sid)
    finally:
        await service.close()
    assert session is not None
    events = session.events
    assert events[-1].error_code == "server_shutdown"  # the stop's record
    events = events[:-1]
    if name:
        assert [e.author for e in events] == ["user", "bot", "bot"]
        assert [c.id for c in events[1].function_calls] == [call_id]
        sealed = events[-1]
        assert sealed.interrupted
        assert [(r.id, r.response["code"]) for r in sealed.function_responses] == [
            (call_id, "interrupted")]
    else:
        assert (await provider.wait_closed(0, timeout=1.0)).close_kind in ("client_fin",
                                                                            "client_rst")
        assert [(e.author, e.interrupted) for e in events] == [("user", False), ("bot", True)]
        assert events[1].text  # what the stream had shown, kept
    if pid is not None:
        assert not alive(pid)
    assert not any(e.partial for e in events)


# -- 4. headwater serve --------------------------------------------------------------------------


def run_serve(server_env: dict[str, str], target: str,
              *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(serve_command(target, "--port", str(free_port()), *args), cwd=HERE,
                          env=server_env, capture_output=True, text=True, timeout=30,
                          check=False)


def test_serve_refuses_a_dev_mode_gateway_on_a_public_address(
        server_env: dict[str, str]) -> None:
    done = run_serve(server_env, "served_agents:agent", "--host", "0.0.0.0")
    assert done.returncode == 2, done.stderr
    assert "headwater serve: refusing to serve without auth on 0.0.0.0" in done.stderr
    assert "--insecure-dev" in done.stderr
    assert "Traceback" not in done.stderr


async def test_serve_an_agent_with_insecure_dev_on_a_public_address(spawn: Spawn) -> None:
    server = await spawn("served_agents:agent", "--insecure-dev", host="0.0.0.0")
    async with httpx.AsyncClient(base_url=server.base_url, timeout=5) as client:
        health = await client.get("/healthz")
    assert health.status_code == 200 and health.json() == {"status": "ok"}
    await server.terminate(within=GRACE + EXIT_MARGIN)


async def test_serve_a_list_of_agents_on_loopback(spawn: Spawn) -> None:
    server = await spawn("served_agents:agents")
    async with httpx.AsyncClient(base_url=server.base_url, timeout=5) as client:
        assert (await client.get("/healthz")).status_code == 200
        created = await client.post("/sessions", json={"agent": "second"})
        assert created.status_code == 201, created.text
        assert created.json()["agent"] == "second"
        default = await client.post("/sessions", json={})
        assert default.status_code == 201 and default.json()["agent"] == "first"
        unknown = await client.post("/sessions", json={"agent": "third"})
        assert unknown.status_code == 404
        ran = await whole_run(client, created.json()["id"], "hey", headers={})  # dev mode
    assert ran.types == ["delta", "message", "done"] and ran.data(1)["text"] == "hi"
    assert ran.data(1)["author"] == "second"
    await server.terminate(within=GRACE + EXIT_MARGIN)


@pytest.mark.parametrize(("target", "says"), [
    ("nomodule:x", "no module named 'nomodule'"),
    ("served_agents:missing", "module 'served_agents' has no attribute 'missing'"),
    ("served_agents:not_an_app", "expected an ASGI app, an agent (an Agent or a workflow "
                                 "agent) or a list of agents"),
    ("served_agents", "expected module:attr"),
    ("served_agents:needs_a_name",
     "served_agents:needs_a_name is a function that needs arguments (name): a factory is "
     "called with none"),
    ("served_agents:builds_nothing", "served_agents:builds_nothing() is None: expected an "
                                     "ASGI app, an agent (an Agent or a workflow agent) or a "
                                     "list of agents"),
    ("served_agents:build_later", "served_agents:build_later is an async function"),
])
def test_serve_a_bad_target_exits_2_with_a_message(server_env: dict[str, str], target: str,
                                                    says: str) -> None:
    done = run_serve(server_env, target)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("headwater serve: ") and says in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


async def built_here(client: httpx.AsyncClient, agent: str) -> int:
    """One run on a new session of ``agent`` (a ``served_agents.build_agent``): the pid of
    the process whose factory call built the agent."""
    made = await client.post("/sessions", json={"agent": agent})
    assert made.status_code == 201, made.text
    ran = await whole_run(client, made.json()["id"], "hey", headers={})  # dev mode
    assert ran.types == ["delta", "message", "done"], ran.types
    text: str = ran.data(1)["text"]
    assert text.startswith("built in "), text
    return int(text.removeprefix("built in "))


@pytest.mark.parametrize("target", ["served_agents:build_agent", "served_agents:build_agents",
                                    "served_agents:build_app"])
async def test_serve_a_factory_calls_it_and_serves_what_it_returns(spawn: Spawn,
                                                                   target: str) -> None:
    """A plain function is a factory (uvicorn's ``--factory``): called with no arguments in
    the process that serves, its agent, list of agents or app is served."""
    server = await spawn(target)
    async with httpx.AsyncClient(base_url=server.base_url, timeout=10) as client:
        assert await built_here(client, "built") == server.process.pid
        if target.endswith("build_agents"):
            other = await client.post("/sessions", json={"agent": "other"})
            assert other.status_code == 201, other.text
    await server.terminate(within=GRACE + EXIT_MARGIN)
    assert "Traceback" not in server.stderr()


def children_of(pid: int) -> set[int]:
    return {int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()}


@pytest.mark.redis
async def test_serve_a_factory_with_workers_calls_it_in_a_worker(spawn: Spawn,
                                                                 redis_url: str) -> None:
    prefix = f"hwtest:{uuid.uuid4().hex}:"
    server = await spawn("served_agents:build_agent", "--workers", "2", "--redis-url",
                         redis_url, env={"HEADWATER_REDIS_KEY_PREFIX": prefix})
    async with httpx.AsyncClient(base_url=server.base_url, timeout=10) as client:
        built = await built_here(client, "built")
    assert built != server.process.pid  # a worker built it, not the supervisor
    assert built in children_of(server.process.pid)
    await server.terminate(within=GRACE + EXIT_MARGIN + 5)
    await drop_keys(redis_url, prefix)


# -- 4. Ctrl-C (SIGINT) takes SIGTERM's path -----------------------------------------------------


async def test_sigint_ends_open_streams_with_server_shutdown_and_exits_without_a_traceback(
        spawn: Spawn, provider: FakeProvider) -> None:
    # A long grace: the exit must come from the streams ending, not from the grace running out.
    server = await spawn("served_app:app", env={"HW_TEST_PROVIDER_URL": provider.base_url,
                                                "HEADWATER_SHUTDOWN_GRACE": "30"})
    provider.enqueue(trickled(WORDS, every=0.05))
    async with httpx.AsyncClient(base_url=server.base_url, timeout=10) as client:
        sid = await new_session(client)
        stream = await open_run(client, sid, "go")
        await stream.read_until(deltas(3))
        sent = time.monotonic()
        server.process.send_signal(signal.SIGINT)
        await stream.read_to_end(within=3)
    assert stream.ended and stream.types[-1] == "error"
    assert stream.data(-1)["code"] == "server_shutdown" and stream.data(-1)["retryable"] is True
    await wait_until(lambda: server.process.poll() is not None,
                     timeout=max(0.0, sent + 3 - time.monotonic()), interval=0.01,
                     message=f"the server to exit within 3 s of SIGINT:\n{server.stderr()}")
    assert server.process.returncode == 130, server.stderr()  # as a shell reports Ctrl-C
    log = server.stderr()
    assert "Traceback" not in log and "CancelledError" not in log, log
    assert "timeout graceful shutdown exceeded" not in log


@pytest.mark.parametrize("tool", ["stubborn", "block"])
async def test_sigint_does_not_wait_past_the_streams_and_a_second_one_exits_at_once(
        spawn: Spawn, provider: FakeProvider, tmp_path: Path, tool: str) -> None:
    """``stubborn`` ignores the cancel, so the first Ctrl-C waits (up to the grace) and a
    second one ends the wait; ``block`` leaves a sync-tool thread busy, which the exit does
    not wait for."""
    server = await spawn("served_app:app", env={"HW_TEST_PROVIDER_URL": provider.base_url,
                                                "HEADWATER_SHUTDOWN_GRACE": "60"})
    provider.enqueue(tool_call(tool, {"seconds": 60}, f"call_{tool}"))
    async with httpx.AsyncClient(base_url=server.base_url, timeout=10) as client:
        sid = await new_session(client)
        stream = await open_run(client, sid, "go")
        await stream.read_until(lambda s: "tool_call" in s.types)
        await wait_until((tmp_path / f"{tool}.started").exists, timeout=5)
        server.process.send_signal(signal.SIGINT)
        if tool == "stubborn":
            await asyncio.sleep(1.0)
            assert server.process.poll() is None, "the first SIGINT waits for the run"
            server.process.send_signal(signal.SIGINT)
        else:
            await stream.read_to_end(within=5)
            assert stream.data(-1)["code"] == "server_shutdown"
        await wait_until(lambda: server.process.poll() is not None, timeout=5, interval=0.01,
                         message=f"the server to exit:\n{server.stderr()}")
    assert server.process.returncode == 130, server.stderr()
    assert "Traceback" not in server.stderr()


# -- 5. SIGTERM: every live WebSocket gets its last frame, then its close; exit 0 ----------------


async def test_sigterm_gives_every_websocket_its_frame_then_its_close_and_exits_0(
        spawn: Spawn, provider: FakeProvider) -> None:
    server = await spawn("served_app:app", env={"HW_TEST_PROVIDER_URL": provider.base_url,
                                                "HEADWATER_SHUTDOWN_GRACE": "10"})
    provider.enqueue(*[trickled(WORDS, every=0.05) for _ in range(6)])
    async with httpx.AsyncClient(base_url=server.base_url, timeout=10) as client:
        sids = [await new_session(client) for _ in range(6)]
        sockets = await answering_sockets(server, sids[:4])
        streams = [await open_run(client, sid, "go") for sid in sids[4:]]
        for stream in streams:
            await stream.read_until(deltas(2))
        sent = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        endings = await asyncio.gather(*(socket_to_end(s, within=8) for s in sockets))
        for stream in streams:
            await stream.read_to_end(within=8)
    assert_shut_down(server, sockets, endings)
    for stream in streams:
        assert stream.ended and stream.data(-1)["code"] == "server_shutdown"
    await wait_until(lambda: server.process.poll() is not None,
                     timeout=max(0.0, sent + 8 - time.monotonic()), interval=0.01,
                     message=f"the server to exit after SIGTERM:\n{server.stderr()}")
    assert server.process.returncode == 0, server.stderr()
    log = server.stderr()
    assert "Traceback" not in log and "timeout graceful shutdown exceeded" not in log, log


async def answering_sockets(server: Server, sids: Sequence[str]) -> list[ClientConnection]:
    """A live socket on each session, each mid-answer (a delta seen): the stop has a model
    call to close and seal."""
    sockets = [await live_socket(server.base_url, sid, A) for sid in sids]
    for ws in sockets:
        await ws.send(json.dumps({"type": "content", "text": "go"}))
        async with asyncio.timeout(10):
            while json.loads(await ws.recv())["type"] != "delta":
                pass
    return sockets


def assert_shut_down(server: Server, sockets: Sequence[ClientConnection],
                     endings: Sequence[list[dict[str, Any]]]) -> None:
    """Each socket's last message is ``error`` ``server_shutdown``, then the close 1001."""
    for ws, messages in zip(sockets, endings, strict=True):
        assert messages, f"no frame before the close; stderr:\n{server.stderr()}"
        last = messages[-1]
        assert last["type"] == "error" and last["data"]["code"] == "server_shutdown", messages
        assert ws.close_code == 1001, (ws.close_code, ws.close_reason)


@pytest.mark.redis
@pytest.mark.parametrize("mode", ["workers", "reload"])
async def test_workers_and_reload_drain_every_websocket_as_one_process_does(
        spawn: Spawn, provider: FakeProvider, redis_url: str, mode: str) -> None:
    """uvicorn runs each worker of ``--workers`` and ``--reload`` on a server of its own; the
    app's stop handler drains the sockets there too: SIGTERM to ``headwater serve`` (which
    uvicorn's supervisor passes on to each worker) ends every live socket with its frame,
    then its close."""
    args = ("--workers", "2", "--redis-url", redis_url) if mode == "workers" else ("--reload",)
    prefix = f"hwtest:{uuid.uuid4().hex}:"
    server = await spawn("served_app:app", *args, env={
        "HW_TEST_PROVIDER_URL": provider.base_url, "HEADWATER_SHUTDOWN_GRACE": "10",
        "HEADWATER_REDIS_KEY_PREFIX": prefix})
    provider.enqueue(*[trickled(WORDS, every=0.05) for _ in range(4)])
    async with httpx.AsyncClient(base_url=server.base_url, timeout=10) as client:
        sids = [await new_session(client) for _ in range(4)]
    sockets = await answering_sockets(server, sids)
    server.process.send_signal(signal.SIGTERM)
    endings = await asyncio.gather(*(socket_to_end(s, within=12) for s in sockets))
    assert_shut_down(server, sockets, endings)
    await wait_until(lambda: server.process.poll() is not None, timeout=15, interval=0.05,
                     message=f"the server to exit after SIGTERM:\n{server.stderr()}")
    assert server.process.returncode == 0, server.stderr()
    log = server.stderr()
    assert "Traceback" not in log and "timeout graceful shutdown exceeded" not in log, log
    if mode == "workers":
        await drop_keys(redis_url, prefix)


# -- 9. a process a tool starts through ToolContext ends with the call ---------------------------


def read_owned(tmp_path: Path) -> int | None:
    path = tmp_path / "owned.pid"
    text = path.read_text() if path.exists() else ""
    return int(text) if text.strip().isdigit() else None


@pytest.mark.parametrize("tool", ["hold_owned", "block_owned"])
async def test_a_cancelled_run_kills_the_process_its_tool_started_through_tool_context(
        gateway: tuple[Server, httpx.AsyncClient], provider: FakeProvider, tmp_path: Path,
        tool: str) -> None:
    _, client = gateway
    provider.enqueue(tool_call(tool, {"seconds": 30}, f"call_{tool}"))
    sid = await new_session(client)
    stream = await open_run(client, sid, "go")
    await stream.read_until(lambda s: "tool_call" in s.types)
    await wait_until(lambda: read_owned(tmp_path) is not None, timeout=5, interval=0.01,
                     message=f"{tool} to start its child")
    pid = read_owned(tmp_path)
    assert pid is not None and alive(pid)
    try:
        cancelled = await client.post(f"/runs/{stream.response.headers['x-run-id']}/cancel",
                                      headers=A)
        assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
        await wait_until(lambda: not alive(pid), timeout=5, interval=0.01,
                         message=f"the child {pid} of {tool} to be gone")
        await stream.read_to_end()
        assert stream.data(-1)["code"] == "cancelled"
    finally:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
