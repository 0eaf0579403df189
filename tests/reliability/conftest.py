"""The reliability suite's harness: a served gateway, raw sockets, stats, the canary scan.

The gateway is a real ``headwater serve served_app:app`` child (uvicorn, SQLite in the
test's folder) whose model speaks to this process's ``FakeProvider``. Clients are raw
sockets (so a test chooses how a connection ends: FIN, RST, or not reading at all)
or httpx. ``GET /_test/stats`` (mounted by ``served_app`` under ``HEADWATER_TEST_STATS=1``
only) says what the server holds; a test compares it to the baseline it read first.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import sqlite3
import struct
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from headwater.testing import (
    FakeProvider,
    Scenario,
    Sleep,
    SSEMessage,
    SSEParser,
    Trickle,
    render_openai,
)

HERE = Path(__file__).resolve().parent
# The canaries: a secret each that must never leave where it belongs (a token, the provider key).
CANARY_TOKEN = "canary-tok-7f3a9c51e2"
CANARY_KEY = "canary-key-0b8e44d6a1"
CANARIES = (CANARY_TOKEN, CANARY_KEY)
TOKENS = {CANARY_TOKEN: "alice", "token-b": "bob"}
A = {"Authorization": f"Bearer {CANARY_TOKEN}"}
B = {"Authorization": "Bearer token-b"}
GRACE = 3.0  # HEADWATER_SHUTDOWN_GRACE of the served app
# What issue 23 ("Checks") promises, each measured from its event (not from when a test
# starts looking) to when the test first sees it hold, so an upper bound of the real time:
DISCONNECT_FREED = 1.0  # a client gone: upstream closed, tool child gone, run cancelled,
#                         counters at baseline
CHURN_SETTLED = 2.0  # runs leaving at random points: counters at baseline after the last left
# How long a check polls before it fails. Far past every promise: a miss fails with the
# time it measured (against the promise) instead of hanging or failing at a guess.
POLL_TIMEOUT = 15.0
# How often a check polls: part of what it measures, so small next to the promises.
POLL_EVERY = 0.02
# Requests a test's setup has in flight at once (new_sessions): fewer than the connections
# httpx's pool keeps alive (20), so none waits in its queue and none sits idle.
SETUP_AT_ONCE = 16


# -- the child ---------------------------------------------------------------------------------


@dataclass
class Served:
    """A ``headwater serve`` child: its process, port, folder and log (stdout and stderr)."""

    process: subprocess.Popen[bytes]
    port: int
    folder: Path
    log: Path

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def client(self, timeout: float = 10) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.base_url, timeout=timeout)

    async def stats(self) -> dict[str, Any]:
        async with self.client() as client:
            response = await client.get("/_test/stats")
        assert response.status_code == 200, response.text
        answer: dict[str, Any] = response.json()
        return answer

    async def wait_exit(self, within: float) -> int:
        deadline = time.monotonic() + within
        while self.process.poll() is None:
            if time.monotonic() > deadline:
                pytest.fail(f"the server did not exit within {within} s:\n{self.text()[-3000:]}")
            await asyncio.sleep(0.02)
        return self.process.returncode

    def effects(self) -> list[tuple[str, str, int]]:
        """The side-effect sink: (call id, tool, calls in flight when it ran), in order."""
        path = self.folder / "effects.log"
        lines = path.read_text().splitlines() if path.exists() else []
        return [(c, t, int(n)) for c, t, n in (line.split() for line in lines)]

    def tool_pids(self) -> dict[str, int]:
        pids = self.folder / "pids"
        return ({p.name: int(p.read_text()) for p in pids.iterdir() if p.read_text().strip()}
                if pids.exists() else {})


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def alive(pid: int) -> bool:
    """Whether a process of that pid exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


Spawn = Callable[..., Awaitable[Served]]


def launch(command: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """Start a child in this folder; its stdout and stderr go to ``log``."""
    with log.open("wb") as out:
        return subprocess.Popen(command, cwd=HERE, env=env, stdout=out,
                                stderr=subprocess.STDOUT)


@pytest.fixture
def served_env(child_env: dict[str, str], tmp_path: Path,
               provider: FakeProvider) -> dict[str, str]:
    """A short time profile, generous per-user limits (the suite opens many streams as
    one user), the test-mode stats on, the folder and the provider."""
    return {**child_env, "HW_TEST_DIR": str(tmp_path), "HW_TEST_PROVIDER_URL": provider.base_url,
            "HW_TEST_TOKENS": json.dumps(TOKENS), "HW_TEST_API_KEY": CANARY_KEY,
            "HEADWATER_TEST_STATS": "1", "HEADWATER_SHUTDOWN_GRACE": str(GRACE),
            "HEADWATER_HEARTBEAT_INTERVAL": "0.5", "HEADWATER_SEND_TIMEOUT": "2",
            "HEADWATER_MODEL_MAX_ATTEMPTS": "1", "HEADWATER_MAX_STREAMS_PER_USER": "1000",
            "HEADWATER_RATE_LIMIT_BURST": "100000", "HEADWATER_RATE_LIMIT_PER_MINUTE": "1000000",
            "HEADWATER_BODY_READ_TIMEOUT": "2", "HEADWATER_HEADER_TIMEOUT": "2",
            "HEADWATER_RUN_RETENTION": "2", "HEADWATER_DATABASE_URL":
            f"sqlite+aiosqlite:///{tmp_path / 'unused.db'}"}


@pytest.fixture
async def spawn(served_env: dict[str, str], tmp_path: Path) -> AsyncIterator[Spawn]:
    """``await spawn(env=...)``: a served child, up (``/healthz`` 200), logging at DEBUG.

    Every child still running after the test is killed, and so is every ``sleep`` a
    tool started.
    """
    children: list[Served] = []

    async def start(env: dict[str, str] | None = None, port: int | None = None) -> Served:
        port = port or free_port()
        log = tmp_path / f"serve-{len(children)}.log"
        command = [sys.executable, "-m", "headwater.cli", "serve", "served_app:app",
                   "--host", "127.0.0.1", "--port", str(port), "--log-level", "debug"]
        process = launch(command, {**served_env, **(env or {})}, log)
        served = Served(process, port, tmp_path, log)
        children.append(served)
        async with served.client(timeout=2) as client:
            deadline = time.monotonic() + 30
            while True:
                if process.poll() is not None:
                    pytest.fail(f"the server exited ({process.returncode}):\n{served.text()}")
                with contextlib.suppress(httpx.TransportError):
                    if (await client.get("/healthz")).status_code == 200:
                        return served
                if time.monotonic() > deadline:
                    pytest.fail(f"the server did not come up:\n{served.text()}")
                await asyncio.sleep(0.05)

    yield start
    for served in children:
        if served.process.poll() is None:
            served.process.kill()
        served.process.wait(10)
        for pid in served.tool_pids().values():
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
async def server(spawn: Spawn) -> Served:
    return await spawn()


async def eventually(check: Callable[[], Awaitable[bool]], message: str,
                     within: float = POLL_TIMEOUT) -> float:
    """Poll ``check`` until it holds (fails past ``within`` seconds); the
    ``time.monotonic()`` at which it was first seen to hold."""
    deadline = time.monotonic() + within
    while not await check():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {within} s: {message}")
        await asyncio.sleep(POLL_EVERY)
    return time.monotonic()


async def warm(served: Served, provider: FakeProvider) -> dict[str, Any]:
    """One whole run and concurrent reads, so the store has opened every connection it
    keeps (its writer and readers open lazily); then the baseline stats."""
    async with served.client() as client:
        sid = await new_session(client)
        provider.enqueue(text("warm"))
        response = await client.post(f"/sessions/{sid}/runs", json={"message": "warm"},
                                     headers=A)
        assert response.status_code == 200 and "event: done" in response.text, response.text
        await asyncio.gather(*(history(client, sid) for _ in range(16)))
        await asyncio.gather(*(client.get("/sessions", headers=A) for _ in range(16)))
    return await served.stats()


async def settle(served: Served, baseline: dict[str, Any], within: float = POLL_TIMEOUT,
                 keys: Iterable[str] = ("active_runs", "tool_processes", "sockets")) -> float:
    """Wait until the server's counters are back at ``baseline`` (tasks too, with the
    few a server keeps alive between requests allowed); the ``time.monotonic()`` at
    which they were first seen there (when the answer that says so arrived)."""
    deadline = time.monotonic() + within
    while True:
        now = await served.stats()
        off = {k: (baseline[k], now[k]) for k in keys if now[k] != baseline[k]}
        if now["tasks"] > baseline["tasks"] + 2:
            off["tasks"] = (baseline["tasks"], now["tasks"])
        if now["store_fds"] > baseline["store_fds"]:
            off["store_fds"] = (baseline["store_fds"], now["store_fds"])
        if not off:
            return time.monotonic()
        if time.monotonic() > deadline:
            pytest.fail(f"counters not at baseline after {within} s (baseline, now): {off}")
        await asyncio.sleep(POLL_EVERY)


# -- raw sockets -------------------------------------------------------------------------------


def request_bytes(method: str, path: str, body: Any = None, headers: dict[str, str] = A,
                  raw_body: bytes | None = None) -> bytes:
    data = raw_body if raw_body is not None else (
        b"" if body is None else json.dumps(body).encode())
    head = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", *(f"{k}: {v}" for k, v in
                                                            headers.items())]
    if data or method == "POST":
        head += ["Content-Type: application/json", f"Content-Length: {len(data)}"]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + data


_OPEN: list[socket.socket] = []


@pytest.fixture(autouse=True)
def _close_raw_sockets() -> Iterator[None]:
    """Every raw socket a test opened and did not hang up is closed after it."""
    yield
    while _OPEN:
        _OPEN.pop().close()


@dataclass
class Raw:
    """A client on a raw socket: it reads an SSE response itself and hangs up as told."""

    sock: socket.socket
    buffer: bytearray = field(default_factory=bytearray)
    head: bytes = b""
    parser: SSEParser = field(default_factory=SSEParser)
    frames: list[SSEMessage] = field(default_factory=list)
    eof: bool = False

    @classmethod
    async def open(cls, port: int, rcvbuf: int | None = None) -> Raw:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf is not None:  # before connect, so the window is small from the start
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        sock.setblocking(False)
        _OPEN.append(sock)
        await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
        return cls(sock)

    async def send(self, data: bytes) -> None:
        await asyncio.get_running_loop().sock_sendall(self.sock, data)

    async def _read(self) -> None:
        chunk = await asyncio.get_running_loop().sock_recv(self.sock, 65536)
        if not chunk:
            self.eof = True
            return
        if not self.head:
            self.buffer += chunk
            if b"\r\n\r\n" in self.buffer:
                head, _, rest = bytes(self.buffer).partition(b"\r\n\r\n")
                self.head, self.buffer = head, bytearray()
                chunk = rest
            else:
                return
        self.buffer += chunk
        self._decode()

    def _decode(self) -> None:
        """Feed the parser what whole chunks of the chunked body hold."""
        while True:
            line_end = self.buffer.find(b"\r\n")
            if line_end < 0:
                return
            size = int(bytes(self.buffer[:line_end]).split(b";")[0] or b"0", 16)
            if len(self.buffer) < line_end + 2 + size + 2:
                return
            self.frames += self.parser.feed(bytes(self.buffer[line_end + 2:line_end + 2 + size]))
            del self.buffer[:line_end + 2 + size + 2]
            if size == 0:
                self.eof = True
                return

    @property
    def status(self) -> int:
        return int(self.head.split(b" ", 2)[1]) if self.head else 0

    def header(self, name: str) -> str | None:
        for line in self.head.split(b"\r\n")[1:]:
            key, _, value = line.decode().partition(":")
            if key.strip().lower() == name.lower():
                return value.strip()
        return None

    @property
    def types(self) -> list[str]:
        return [f.event for f in self.frames]

    async def read_until(self, done: Callable[[Raw], bool], within: float = 10.0) -> None:
        async with asyncio.timeout(within):
            while not done(self) and not self.eof:
                await self._read()

    def fin(self) -> None:
        """Hang up politely: FIN (shutdown, then close)."""
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()

    def rst(self) -> None:
        """Hang up abruptly: RST (linger 0, then close)."""
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.sock.close()


async def start_run(port: int, sid: str, message: str, headers: dict[str, str] = A,
                    **extra: Any) -> Raw:
    """A raw client that posted a run and read its response head (200)."""
    raw = await Raw.open(port)
    await raw.send(request_bytes("POST", f"/sessions/{sid}/runs",
                                 {"message": message, **extra}, headers))
    await raw.read_until(lambda r: bool(r.head))
    assert raw.status == 200, raw.head
    return raw


async def new_session(client: httpx.AsyncClient, headers: dict[str, str] = A) -> str:
    response = await client.post("/sessions", json={}, headers=headers)
    assert response.status_code == 201, response.text
    sid: str = response.json()["id"]
    return sid


async def new_sessions(client: httpx.AsyncClient, count: int,
                       headers: dict[str, str] = A) -> list[str]:
    """``count`` new sessions, created ``SETUP_AT_ONCE`` at a time.

    Setup, not the thing under test: httpx's pool scans its queue for each request it
    assigns, so hundreds queued at once stall this process's loop for seconds on a busy
    machine, long enough for the server to close the connections left waiting
    (``header_timeout``) and the client to fail with ``ReadError``.
    """
    limit = asyncio.Semaphore(SETUP_AT_ONCE)

    async def one() -> str:
        async with limit:
            return await new_session(client, headers)

    return list(await asyncio.gather(*(one() for _ in range(count))))


async def history(client: httpx.AsyncClient, sid: str,
                  headers: dict[str, str] = A) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        params = {"limit": "200", **({"cursor": cursor} if cursor else {})}
        response = await client.get(f"/sessions/{sid}/events", headers=headers, params=params)
        assert response.status_code == 200, response.text
        page = response.json()
        items += page["items"]
        cursor = page.get("next_cursor")
        if not cursor:
            return items


# -- the provider's scenarios ------------------------------------------------------------------


def trickled(words: Iterable[str], every: float, first: float = 0.0) -> Scenario:
    """An OpenAI stream of ``words``, ``every`` seconds apart, after ``first`` seconds."""
    body: list[bytes | Sleep] = [Sleep(first)] if first else []
    for event in render_openai(text=list(words)):
        body += [event, Sleep(every)]
    return Scenario(body=body)


def endless(word: str, every: float) -> Scenario:
    """An OpenAI stream that sends ``word`` every ``every`` seconds until the client goes: a
    stream still going when the test acts, however long its setup took."""
    role, first = render_openai(text=[word], finish_reason=None, usage=None, done=False)
    return Scenario(body=[role, first, Trickle(first, every=every, forever=True,
                                               size=len(first))])


def tool_calls(*calls: tuple[str, dict[str, Any], str]) -> Scenario:
    return Scenario(body=render_openai(
        tool_calls=[{"name": n, "id": i, "arguments": a} for n, a, i in calls],
        finish_reason="tool_calls"))


def text(*words: str) -> Scenario:
    return Scenario(body=render_openai(text=list(words)))


# -- the canary scan ---------------------------------------------------------------------------


def canaries_in(label: str, data: str | bytes) -> list[str]:
    """``label: canary`` for each canary ``data`` holds."""
    blob = data.decode(errors="replace") if isinstance(data, bytes) else data
    return [f"{label}: {c}" for c in CANARIES if c in blob]


def database_dump(path: Path) -> str:
    with contextlib.closing(sqlite3.connect(path)) as db:
        return "\n".join(db.iterdump())


def integrity(path: Path) -> str:
    with contextlib.closing(sqlite3.connect(path)) as db:
        row = db.execute("PRAGMA integrity_check").fetchone()
        return str(row[0])


