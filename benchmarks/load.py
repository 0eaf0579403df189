"""L1 — gateway load: N concurrent SSE runs against one uvicorn worker on loopback.

    python benchmarks/load.py [--streams 1000] [--deltas 20] [--pace 0.05]
                              [--store memory|sqlite] [--quick] [--profile FILE]
                              [--baseline [--rounds N]] [--replicas 2 [--redis-url URL]]
                              [--resumable]

Three processes, so none of them measures itself:

- **provider** (a child): ``FakeProvider`` in the OpenAI wire format. Every run's
  answer sleeps ``--hold`` seconds before its first byte (the streams are then
  open and idle), then sends ``--deltas`` text chunks, one every ``--pace``
  seconds. It records when each chunk left (``RecordedRequest.sent_at``).
- **server** (a child): ``create_app(...)`` under one uvicorn worker, with
  uvloop and httptools when installed (what ``uvicorn`` picks by default); the
  agent's model is ``OpenAIChatModel`` against the provider; each stream has its
  own user (``StaticTokenAuth``). A task measures event-loop lag: how far each
  ``asyncio.sleep(0.01)`` overshoots.
- **client** (this process): raw asyncio sockets, HTTP/1.1, one connection per
  stream. Each chunk's text carries its index (``<7>``), so each frame's arrival
  is matched with the time its chunk left the provider. ``CLOCK_MONOTONIC``
  (``time.monotonic()``) is one clock for every process of a Linux machine.

``--baseline`` runs the same workload against a bare Starlette relay of the
provider's stream (``build_baseline``: the same frames, the same pace) and
against the gateway, in turn, and reports the server CPU per frame and the added
latency of both and their ratio. ``--replicas 2`` runs two gateway processes on
one Redis (``HEADWATER_REDIS_URL``), half the streams each; Redis's own CPU over the
streaming window (``INFO cpu``) is reported apart (``redis_cpu_*``). ``--resumable``
starts every run resumable (its frames go to the Redis log even when followed on its
own replica).

stdout gets one JSON object (figures, targets, sizes); stderr a short table.
What each figure means: benchmarks/README.md, "Gateway load (L1)". Nothing is
asserted: a figure over its target is for a human to read.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import dataclasses
import datetime
import gc
import io
import json
import os
import platform
import pstats
import re
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, cast

from common import commit, quantile  # benchmarks/common.py, beside this file

HERE = Path(__file__).resolve()
HOST = "127.0.0.1"
WARM = "warm"  # the warm-up run's user message (and token suffix)
MARKER = re.compile(rb"<(\d+)>")

Figures = dict[str, float]

SIDE_BY_SIDE_TARGETS: dict[str, str] = {
    "cpu_ratio": "<= 3",
    "replicas_cpu_ratio": "<= 1.5 (issue 32)",
    "gateway_added_p99_ms": "< 25 (1,000 streams)",
}

TARGETS: dict[str, str] = {
    "added_latency_p99_ms": "< 50",
    "rss_per_idle_stream_kib": "< 100",
    "loop_lag_max_ms": "< 100",
}


@dataclass(frozen=True, slots=True)
class Options:
    """The workload; ``--quick`` is a smoke-test size."""

    streams: int = 1000
    deltas: int = 20
    pace: float = 0.05
    hold: float = 0.0  # 0: chosen from ``streams`` (see ``hold_for``)
    store: str = "memory"
    loop: str = "auto"
    pool: str = "default"
    profile: str = ""
    replicas: int = 1  # gateway processes; 2 share one Redis run log (``--replicas 2``)
    redis_url: str = "redis://127.0.0.1:6379/0"
    resumable: bool = False  # every run started with ``"resumable": true``


DEFAULT = Options()
QUICK = Options(streams=20, deltas=5, pace=0.02, hold=1.0)


def hold_for(options: Options) -> float:
    """Seconds each answer waits before its first byte: long enough to open every stream."""
    return options.hold or max(2.0, 1.0 + options.streams * 0.006)


# -- shared helpers -----------------------------------------------------------------------


def raise_fd_limit() -> int:
    """Lift the soft limit on open files to the hard one; returns the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def rss_kib(pid: int) -> int:
    """``VmRSS`` of a process, KiB."""
    status = Path(f"/proc/{pid}/status").read_text()
    found = re.search(r"^VmRSS:\s+(\d+)", status, re.MULTILINE)
    return int(found.group(1)) if found else 0


def cpu_s(pid: int) -> float:
    """User + system CPU seconds a process has used (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def redis_cpu_s(url: str) -> float:
    """Redis's own CPU seconds so far (``INFO cpu``: ``used_cpu_sys`` + ``used_cpu_user``,
    every thread of the server). Other clients of the same server count too."""
    import redis

    client = redis.Redis.from_url(url)
    try:
        cpu = cast(dict[str, Any], client.info("cpu"))
    finally:
        client.close()
    return float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"])


def runqueue_wait_s(pid: int) -> float:
    """Seconds a process's main thread was runnable but waiting for a CPU (``schedstat``).

    High while other processes take the CPUs: then the other figures measure the machine.
    """
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return float("nan")


def loop_factory(kind: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop when asked or (``auto``) installed, as uvicorn chooses; else asyncio's loop."""
    if kind == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if kind == "uvloop":
            raise
        return None
    return uvloop.new_event_loop


def run_async(kind: str, main: Any) -> Any:
    with asyncio.Runner(loop_factory=loop_factory(kind)) as runner:
        return runner.run(main)


# -- provider child -----------------------------------------------------------------------


def answer(deltas: int, pace: float, hold: float) -> Any:
    """One run's answer: [sleep ``hold``], role chunk, ``deltas`` paced text chunks, the end."""
    from headwater.testing import Scenario, Sleep, render_openai

    events = render_openai(text=[f"<{j}>" for j in range(deltas)])
    role, texts, tail = events[0], events[1:deltas + 1], events[deltas + 1:]
    body: list[Any] = [Sleep(hold)] if hold else []
    body.append(role)
    for j, chunk in enumerate(texts):
        if j:
            body.append(Sleep(pace))
        body.append(chunk)
    body.extend(tail)
    return Scenario(body=body, check_history=False)


def user_text(request_body: bytes) -> str:
    """The last user message of a chat-completions request."""
    messages = json.loads(request_body).get("messages", [])
    for message in reversed(messages):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


async def provider_child(options: Options) -> None:
    """Serve the warm-up and ``streams`` answers; answer ``count`` and ``report`` on stdin."""
    from headwater.testing import FakeProvider

    raise_fd_limit()
    loop = asyncio.get_running_loop()
    async with FakeProvider() as provider:
        provider.enqueue(*[answer(options.deltas, options.pace, 0.0)] * options.replicas)
        provider.enqueue(*[answer(options.deltas, options.pace, hold_for(options))]
                         * options.streams)
        print(provider.base_url, flush=True)
        while command := (await loop.run_in_executor(None, sys.stdin.readline)).strip():
            if command == "count":
                print(len(provider.requests), flush=True)
            elif command == "report":
                sent = {user_text(r.body): r.sent_at for r in provider.requests}
                print(json.dumps(sent), flush=True)


# -- server child -------------------------------------------------------------------------


class LagMonitor:
    """Event-loop lag: how far each ``asyncio.sleep(every)`` overshoots, in seconds.

    It also times the garbage collector's pauses (``gc.callbacks``), one cause of lag.
    """

    def __init__(self, every: float = 0.01) -> None:
        self.every = every
        self.samples: list[float] = []
        self.gc_pauses: list[float] = []
        self.gc_by_gen: list[list[float]] = [[], [], []]  # every pause, by generation
        self.gc_cpu_by_gen: list[list[float]] = [[], [], []]  # the same, thread CPU time
        self._gc_start = self._gc_cpu_start = 0.0
        gc.callbacks.append(self._gc)

    def _gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_start, self._gc_cpu_start = time.perf_counter(), time.thread_time()
        else:
            pause = time.perf_counter() - self._gc_start
            self.gc_by_gen[info["generation"]].append(pause)
            self.gc_cpu_by_gen[info["generation"]].append(time.thread_time()
                                                          - self._gc_cpu_start)
            if info["generation"] == 2 or pause > 0.005:
                self.gc_pauses.append(pause)

    async def run(self) -> None:
        every, samples, clock = self.every, self.samples, time.perf_counter
        while True:
            start = clock()
            await asyncio.sleep(every)
            samples.append(clock() - start - every)

    def take(self) -> Figures:
        """Lag max and p99, and the longest GC pause, since the last ``take`` (ms)."""
        samples, pauses = self.samples[:], self.gc_pauses[:]
        by_gen = {f"gc{gen}_{name}": value
                  for gen, (times, cpu) in enumerate(zip(self.gc_by_gen, self.gc_cpu_by_gen,
                                                         strict=True))
                  for name, value in (("count", float(len(times))),
                                      ("max_ms", max(times, default=0.0) * 1000),
                                      ("cpu_ms", sum(cpu) * 1000))}
        self.samples.clear()
        self.gc_pauses.clear()
        for times in (*self.gc_by_gen, *self.gc_cpu_by_gen):
            times.clear()
        return {**by_gen, "max_ms": max(samples, default=0.0) * 1000,
                "p99_ms": quantile(samples, 0.99) * 1000, "samples": float(len(samples)),
                "gc_max_ms": max(pauses, default=0.0) * 1000, "gc_long": float(len(pauses))}


def http_client(options: Options) -> Any:
    """The model's HTTP client for ``--pool``: ``None`` is the model's own.

    The model's own client spreads connections over several small pools
    (``PooledTransport``: httpcore's pool bookkeeping grows with its size,
    encode/httpcore#1035); ``shared`` is one unbounded httpx pool, to compare.
    """
    import httpx

    if options.pool == "default":
        return None
    return httpx.AsyncClient(limits=httpx.Limits(max_connections=None,
                                                 max_keepalive_connections=options.streams))


def build_app(provider_url: str, options: Options, db_dir: str) -> Any:
    """The gateway under test: one agent, ``OpenAIChatModel`` against the provider."""
    from headwater import Agent
    from headwater.gateway import StaticTokenAuth, create_app
    from headwater.models.openai import OpenAIChatModel
    from headwater.sessions import InMemorySessionService, SqlSessionService

    model = OpenAIChatModel(model="bench", base_url=f"{provider_url}/v1", api_key="x",
                            http_client=http_client(options))
    agent = Agent(name="bench", model=model)
    service: Any = (InMemorySessionService() if options.store == "memory"
                    else SqlSessionService(f"sqlite+aiosqlite:///{db_dir}/sessions.db"))
    tokens = {f"t{i}": f"u{i}" for i in range(options.streams)} | {f"t{WARM}": f"u{WARM}"}
    return create_app(agent, session_service=service, auth=StaticTokenAuth(tokens))


BASELINE_POOLS = 64  # plain httpx clients taken in turn (as the model's ``PooledTransport``)


def build_baseline(provider_url: str, heartbeat_interval: float) -> Any:
    """The bare baseline: a Starlette app that relays the provider's chunks as the same frames.

    ``POST /sessions`` answers an id; ``POST /sessions/{id}/runs`` reads the
    provider's OpenAI stream with plain httpx (``BASELINE_POOLS`` clients taken in
    turn, so no pool is large) and writes, for each text chunk, the gateway's
    ``delta`` frame bytes (``id:``, ``event: delta``, one compact ``data:`` line),
    then ``message`` and ``done`` — the same frames at the provider's pace. A
    heartbeat comment after ``heartbeat_interval`` of silence (one sleeping task
    per stream, sends under a lock, as sse-starlette does), and a client's
    disconnect ends the stream. No session store, runner, run log or auth: what
    is left is uvicorn, Starlette routing, httpx and JSON, the floor the
    gateway's cost is a ratio of.
    """
    import uuid

    import httpx
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
    clients = [httpx.AsyncClient(timeout=None, limits=httpx.Limits(max_connections=None))
               for _ in range(BASELINE_POOLS)]
    turn = [0]
    headers = [(b"content-type", b"text/event-stream; charset=utf-8"),
               (b"cache-control", b"no-store"), (b"x-accel-buffering", b"no")]

    async def new_session(request: Request) -> JSONResponse:
        return JSONResponse({"id": uuid.uuid4().hex}, status_code=201)

    class Relay:
        """The runs endpoint, a bare ASGI app (Starlette routes to it without a wrapper)."""

        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            message = str((await Request(scope, receive).json())["message"])
            client = clients[turn[0] % BASELINE_POOLS]
            turn[0] += 1
            lock, sent = asyncio.Lock(), [0]
            writer = asyncio.current_task()
            assert writer is not None

            async def emit(data: bytes) -> None:
                async with lock:
                    await send({"type": "http.response.body", "body": data, "more_body": True})
                    sent[0] += 1

            async def beat() -> None:
                while True:
                    seen = sent[0]
                    await asyncio.sleep(heartbeat_interval)
                    if sent[0] == seen:
                        await emit(b": hb\n\n")

            async def watch() -> None:
                while (await receive())["type"] != "http.disconnect":
                    pass
                writer.cancel()

            await send({"type": "http.response.start", "status": 200, "headers": headers})
            helpers = [asyncio.ensure_future(beat()), asyncio.ensure_future(watch())]
            body = {"model": "bench", "stream": True, "stream_options": {"include_usage": True},
                    "messages": [{"role": "user", "content": message}]}
            frame_id, text, usage = 0, [], {"input_tokens": 0, "output_tokens": 0}
            try:
                async with client.stream("POST", f"{provider_url}/v1/chat/completions",
                                         json=body) as response:
                    async for line in response.aiter_lines():
                        if not line.startswith("data: ") or line == "data: [DONE]":
                            continue
                        chunk = json.loads(line[6:])
                        if chunk.get("usage"):
                            usage = {"input_tokens": chunk["usage"]["prompt_tokens"],
                                     "output_tokens": chunk["usage"]["completion_tokens"]}
                        choices = chunk.get("choices")
                        piece = choices[0]["delta"].get("content") if choices else None
                        if piece:
                            text.append(piece)
                            frame_id += 1
                            await emit(f"id: {frame_id}\nevent: delta\ndata: "
                                       f"{dumps({'author': 'bench', 'text': piece})}\n\n"
                                       .encode())
                answer = {"author": "bench", "id": uuid.uuid4().hex, "text": "".join(text),
                          "final": True}
                await emit(f"id: {frame_id + 1}\nevent: message\ndata: {dumps(answer)}\n\n"
                           .encode())
                await emit(f"id: {frame_id + 2}\nevent: done\ndata: "
                           f"{dumps({'usage': usage})}\n\n".encode())
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            except asyncio.CancelledError:
                pass  # the client went away
            finally:
                for helper in helpers:
                    helper.cancel()

    return Starlette(routes=[Route("/sessions", new_session, methods=["POST"]),
                             Route("/sessions/{sid}/runs", Relay(), methods=["POST"])])


def control(loop: asyncio.AbstractEventLoop, monitor: LagMonitor, server: Any) -> None:
    """Thread: ``lag`` on stdin prints the lag window as JSON; end of input stops the server."""
    for line in sys.stdin:
        if line.strip() == "lag":
            figures = asyncio.run_coroutine_threadsafe(_take(monitor), loop).result()
            print(json.dumps(figures), flush=True)
    loop.call_soon_threadsafe(setattr, server, "should_exit", True)


async def _take(monitor: LagMonitor) -> Figures:
    return monitor.take()


async def server_child(provider_url: str, options: Options, kind: str = "server") -> None:
    import uvicorn

    from headwater.settings import Settings

    raise_fd_limit()
    backlog = max(2048, 2 * options.streams)
    with tempfile.TemporaryDirectory(prefix="hw-load-") as db_dir:
        app = (build_baseline(provider_url, Settings().heartbeat_interval) if kind == "baseline"
               else build_app(provider_url, options, db_dir))
        config = uvicorn.Config(app, lifespan="on", access_log=False, log_level="warning",
                                backlog=backlog, timeout_keep_alive=60)
        server = uvicorn.Server(config)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((HOST, 0))
        sock.listen(backlog)
        monitor = LagMonitor()
        lag = asyncio.create_task(monitor.run())
        threading.Thread(target=control, args=(asyncio.get_running_loop(), monitor, server),
                         daemon=True).start()
        print(sock.getsockname()[1], flush=True)
        try:
            await server.serve(sockets=[sock])
        finally:
            lag.cancel()


def server_main(provider_url: str, options: Options, kind: str) -> None:
    if not options.profile:
        run_async(options.loop, server_child(provider_url, options, kind))
        return
    profiler = cProfile.Profile()
    try:
        profiler.runcall(run_async, options.loop, server_child(provider_url, options, kind))
    finally:
        out = io.StringIO()
        stats = pstats.Stats(profiler, stream=out)
        stats.sort_stats("tottime").print_stats(40)
        stats.sort_stats("cumulative").print_stats(40)
        Path(options.profile).write_text(out.getvalue())


# -- client -------------------------------------------------------------------------------


def http_request(method: str, path: str, token: str, body: Any) -> bytes:
    data = json.dumps(body).encode()
    return (f"{method} {path} HTTP/1.1\r\nhost: {HOST}\r\nauthorization: Bearer {token}\r\n"
            f"content-type: application/json\r\naccept: text/event-stream\r\n"
            f"content-length: {len(data)}\r\n\r\n").encode() + data


class Dechunker:
    """Sans-I/O ``Transfer-Encoding: chunked`` decoder: ``feed(bytes) -> [body bytes]``."""

    def __init__(self) -> None:
        self.buffer = b""
        self.left = 0  # body bytes left in the current chunk
        self.skip = 0  # bytes of the CRLF after a chunk still to skip
        self.ended = False

    def feed(self, data: bytes) -> list[bytes]:
        buf, pos, out = self.buffer + data, 0, []
        while not self.ended:
            if self.left:
                piece = buf[pos:pos + self.left]
                pos += len(piece)
                self.left -= len(piece)
                if piece:
                    out.append(piece)
                if self.left:
                    break
                self.skip = 2
            if self.skip:
                n = min(self.skip, len(buf) - pos)
                pos += n
                self.skip -= n
                if self.skip:
                    break
            end = buf.find(b"\r\n", pos)
            if end < 0:
                break
            size = int(buf[pos:end].split(b";")[0], 16)
            pos = end + 2
            self.ended = size == 0
            self.left = size
        self.buffer = buf[pos:]
        return out


@dataclass(eq=False)
class Exchange(asyncio.Protocol):
    """One request on its own connection; an SSE answer is split into frames as it comes.

    Heartbeats (comments) are counted apart; each ``delta`` frame is kept with its
    arrival time (``time.monotonic()``), parsed later, off the hot path.
    """

    request: bytes
    ended: asyncio.Future[None]
    status: int = 0
    body: bytes = b""
    frames: int = 0
    heartbeats: int = 0
    deltas: list[tuple[float, bytes]] = field(default_factory=list)
    terminal: bytes = b""
    terminal_at: float = 0.0
    head_at: float = 0.0
    _head: bytes = b""
    _length: int = -1  # Content-Length, when the answer has one
    _stream: bool = False  # a 200 event stream: split into frames
    _chunks: Dechunker | None = None
    _sse: bytes = b""
    _transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self._transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        now = time.monotonic()
        if not self.status:
            self._head += data
            end = self._head.find(b"\r\n\r\n")
            if end < 0:
                return
            head, data = self._head[:end].lower(), self._head[end + 4:]
            self.status, self.head_at = int(head.split(b" ", 2)[1]), now
            self._chunks = Dechunker() if b"transfer-encoding: chunked" in head else None
            self._stream = self.status == 200 and b"text/event-stream" in head
            length = re.search(rb"content-length: *(\d+)", head)
            self._length = int(length.group(1)) if length else -1
        pieces = self._chunks.feed(data) if self._chunks else [data]
        if self._stream:
            self._frames(b"".join(pieces), now)
        else:
            self.body += b"".join(pieces)
        if (self._chunks and self._chunks.ended) or 0 <= self._length <= len(self.body):
            self.close()

    def _frames(self, data: bytes, now: float) -> None:
        frames = (self._sse + data).split(b"\n\n")
        self._sse = frames.pop()
        for frame in frames:
            if frame.startswith(b":"):
                self.heartbeats += 1
                continue
            kind = frame.partition(b"event: ")[2].partition(b"\n")[0]
            if not kind:
                continue  # e.g. a bare ``retry:`` hint
            self.frames += 1
            if kind == b"delta":
                self.deltas.append((now, frame))
            elif kind in (b"done", b"error"):
                self.terminal, self.terminal_at = frame, now

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.ended.done():
            self.ended.set_result(None)

    def json(self) -> Any:  # Any: the gateway's JSON answer
        return json.loads(self.body)


async def exchange(port: int, request: bytes, gate: asyncio.Semaphore | None = None,
                   wait: bool = True) -> Exchange:
    """Send ``request`` on a new connection; with ``wait``, return when it is closed."""
    loop = asyncio.get_running_loop()
    ended: asyncio.Future[None] = loop.create_future()
    async with gate or contextlib.nullcontext():
        _, protocol = await loop.create_connection(lambda: Exchange(request, ended), HOST, port)
    if wait:
        await ended
    return protocol


async def new_session(port: int, token: str, gate: asyncio.Semaphore) -> str:
    done = await exchange(port, http_request("POST", "/sessions", token, {}), gate)
    if done.status != 201:
        raise RuntimeError(f"POST /sessions answered {done.status}: {done.body[:300]!r}")
    session_id: str = done.json()["id"]
    return session_id


def run_request(session_id: str, token: str, message: str, resumable: bool = False) -> bytes:
    body: dict[str, Any] = {"message": message}
    if resumable:
        body["resumable"] = True
    return http_request("POST", f"/sessions/{session_id}/runs", token, body)


class Child:
    """A helper process spoken to by lines: a command on stdin, one line back."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        self.process = subprocess.Popen([sys.executable, str(HERE), *args], text=True,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        env=None if env is None else os.environ | env)
        self.first = self.readline()

    @property
    def pid(self) -> int:
        return self.process.pid

    def readline(self) -> str:
        stdout: IO[str] | None = self.process.stdout
        assert stdout is not None
        line = stdout.readline()
        if not line:
            raise RuntimeError(f"child {self.process.args} ended: {self.process.wait()}")
        return line.strip()

    def ask(self, command: str) -> str:
        assert self.process.stdin is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        return self.readline()

    async def aask(self, command: str) -> str:
        return await asyncio.to_thread(self.ask, command)

    def close(self, timeout: float = 30.0) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def child_args(options: Options) -> list[str]:
    return ["--streams", str(options.streams), "--deltas", str(options.deltas),
            "--pace", str(options.pace), "--hold", str(hold_for(options)),
            "--store", options.store, "--loop", options.loop, "--pool", options.pool,
            "--replicas", str(options.replicas), "--redis-url", options.redis_url,
            *(["--resumable"] if options.resumable else []),
            *(["--profile", options.profile] if options.profile else [])]


@dataclass
class Phase:
    """What the client saw, with the server's figures at each step."""

    opened_s: float = 0.0
    rss_before_kib: int = 0
    rss_idle_kib: int = 0
    rss_end_kib: int = 0
    cpu: dict[str, float] = field(default_factory=dict)  # CPU seconds while streaming
    idle_measured_at: float = 0.0
    lag_open: Figures = field(default_factory=dict)
    lag_stream: Figures = field(default_factory=dict)
    streams: list[Exchange] = field(default_factory=list)
    sent: dict[str, list[float]] = field(default_factory=dict)


def merge_lag(windows: list[Figures]) -> Figures:
    """The lag windows of several servers as one: counts summed, the worst of the rest."""
    return {key: sum(w[key] for w in windows) if key.endswith(("samples", "count", "long"))
            else max(w[key] for w in windows) for key in windows[0]}


async def drive(options: Options, provider: Child, servers: list[Child]) -> Phase:
    """Warm up, create the sessions, open every stream, measure idle, stream, collect.

    With several servers stream ``i`` goes to server ``i % len(servers)`` (its
    session is created there, its run started and followed there).
    """
    ports, phase = [int(server.first) for server in servers], Phase()
    for port in ports:  # the first warm-up answer is paced; the others follow at once
        warm_session = await new_session(port, f"t{WARM}", asyncio.Semaphore(1))
        async with asyncio.timeout(30):
            warm = await exchange(port, run_request(warm_session, f"t{WARM}", WARM))
        if not warm.terminal.startswith(b"id:") or b"event: done" not in warm.terminal:
            raise RuntimeError(f"the warm-up run did not end with done: {warm.status} "
                               f"{warm.body[:300]!r} {warm.terminal!r}")
    gate = asyncio.Semaphore(64)
    tokens = [f"t{i}" for i in range(options.streams)]
    at = [ports[i % len(ports)] for i in range(options.streams)]
    sessions = await asyncio.gather(*(new_session(port, t, gate)
                                      for port, t in zip(at, tokens, strict=True)))
    await asyncio.sleep(0.5)
    server_pids = [server.pid for server in servers]
    phase.rss_before_kib = sum(map(rss_kib, server_pids))
    for server in servers:
        await server.aask("lag")  # starts the opening window

    start = time.monotonic()
    phase.streams = list(await asyncio.gather(*(
        exchange(port, run_request(sid, t, f"k{i}", options.resumable), gate, wait=False)
        for i, (port, sid, t) in enumerate(zip(at, sessions, tokens, strict=True)))))
    deadline = start + hold_for(options)
    while int(await provider.aask("count")) < options.streams + len(servers):
        if time.monotonic() > deadline:
            break
        await asyncio.sleep(0.02)
    phase.opened_s = time.monotonic() - start
    await asyncio.sleep(0.2)  # let the last runs settle on their provider response
    phase.rss_idle_kib = sum(map(rss_kib, server_pids))
    phase.idle_measured_at = time.monotonic()
    phase.lag_open = merge_lag([json.loads(await s.aask("lag")) for s in servers])
    pids = {"provider": provider.pid, "client": os.getpid()}
    before = {name: cpu_s(pid) for name, pid in pids.items()}
    server_before = sum(map(cpu_s, server_pids))
    redis_before = redis_cpu_s(options.redis_url) if len(servers) > 1 else 0.0
    waited, load = sum(map(runqueue_wait_s, server_pids)), os.getloadavg()[0]

    budget = hold_for(options) + options.deltas * options.pace + 60
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(budget):
            await asyncio.gather(*(s.ended for s in phase.streams))
    phase.cpu = {name: cpu_s(pid) - before[name] for name, pid in pids.items()}
    phase.cpu["server"] = sum(map(cpu_s, server_pids)) - server_before
    phase.cpu["redis"] = (redis_cpu_s(options.redis_url) - redis_before if len(servers) > 1
                          else 0.0)
    phase.cpu["server_runqueue_wait"] = sum(map(runqueue_wait_s, server_pids)) - waited
    phase.cpu["loadavg_1min_max"] = max(load, os.getloadavg()[0])
    for stream in phase.streams:
        stream.close()
    phase.lag_stream = merge_lag([json.loads(await s.aask("lag")) for s in servers])
    phase.rss_end_kib = sum(map(rss_kib, server_pids))
    phase.sent = json.loads(await provider.aask("report"))
    return phase


def latencies(phase: Phase) -> tuple[list[float], int]:
    """Added latency of every chunk matched to its frame (seconds), and the chunks matched."""
    samples: list[float] = []
    for i, stream in enumerate(phase.streams):
        sent = phase.sent.get(f"k{i}", [])
        for arrived, frame in stream.deltas:
            for found in MARKER.finditer(frame):
                j = int(found.group(1)) + 1  # sent[0] is the role chunk
                if j < len(sent):
                    samples.append(arrived - sent[j])
    return samples, len(samples)


def figures(options: Options, phase: Phase) -> Figures:
    samples, matched = latencies(phase)
    streams = phase.streams
    firsts = [sent[0] for key, sent in phase.sent.items() if key != WARM and sent]
    ends = [s.terminal_at for s in streams if s.terminal_at]
    window = max(ends, default=0.0) - min(firsts, default=0.0)
    frames = sum(s.frames for s in streams)
    lag = [phase.lag_open, phase.lag_stream]
    return {
        "streams": float(options.streams),
        "opened": float(sum(s.status == 200 for s in streams)),
        "done": float(sum(b"event: done" in s.terminal for s in streams)),
        "errors": float(sum(b"event: error" in s.terminal or s.status != 200 for s in streams)),
        "open_s": phase.opened_s,
        "idle_window_ok": float(min(firsts, default=0.0) > phase.idle_measured_at),
        "frames": float(frames),
        "frames_per_s": frames / window if window > 0 else 0.0,
        "chunks_expected": float(options.streams * options.deltas),
        "chunks_matched": float(matched),
        "added_latency_p50_ms": quantile(samples, 0.5) * 1000,
        "added_latency_p99_ms": quantile(samples, 0.99) * 1000,
        "added_latency_max_ms": max(samples, default=float("nan")) * 1000,
        "rss_before_mib": phase.rss_before_kib / 1024,
        "rss_idle_mib": phase.rss_idle_kib / 1024,
        "rss_end_mib": phase.rss_end_kib / 1024,
        "rss_per_idle_stream_kib": (phase.rss_idle_kib - phase.rss_before_kib) / options.streams,
        "loop_lag_open_max_ms": phase.lag_open["max_ms"],
        "loop_lag_open_p99_ms": phase.lag_open["p99_ms"],
        "loop_lag_stream_max_ms": phase.lag_stream["max_ms"],
        "loop_lag_stream_p99_ms": phase.lag_stream["p99_ms"],
        "loop_lag_max_ms": max(window["max_ms"] for window in lag),
        "loop_lag_samples": sum(window["samples"] for window in lag),
        "gc_pause_max_ms": max(window["gc_max_ms"] for window in lag),
        **{f"gc{gen}_stream_{name}": phase.lag_stream[f"gc{gen}_{name}"]
           for gen in range(3) for name in ("count", "max_ms", "cpu_ms")},
        "stream_s": window,
        **{f"{name}_cpu_s": phase.cpu[name] for name in ("server", "provider", "client")},
        "server_cpu_us_per_frame": phase.cpu["server"] / frames * 1e6 if frames else 0.0,
        "redis_cpu_s": phase.cpu["redis"],
        "redis_cpu_us_per_frame": phase.cpu["redis"] / frames * 1e6 if frames else 0.0,
        "server_runqueue_wait_s": phase.cpu["server_runqueue_wait"],
        "loadavg_1min": phase.cpu["loadavg_1min_max"],
        "heartbeats": float(sum(s.heartbeats for s in streams)),
    }


def measure(options: Options, kind: str = "gateway") -> dict[str, Any]:
    """Run L1 once against ``kind`` (``gateway`` or the bare ``baseline``); the report.

    ``options.replicas`` gateway processes (2: one Redis run log, ``redis_url``).
    """
    raise_fd_limit()
    replicas = options.replicas if kind == "gateway" else 1
    options = dataclasses.replace(options, replicas=replicas)
    env = {"HEADWATER_REDIS_URL": options.redis_url} if replicas > 1 else None
    provider = Child("--child", "provider", *child_args(options))
    servers: list[Child] = []
    try:
        for _ in range(replicas):
            servers.append(Child("--child", "baseline" if kind == "baseline" else "server",
                                 "--provider-url", provider.first, *child_args(options),
                                 env=env))
        phase = run_async(options.loop, drive(options, provider, servers))
    finally:
        for server in servers:
            server.close()
        provider.close()
    return {
        "date": datetime.date.today().isoformat(),
        "commit": commit(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "kind": kind,
        "options": {k: getattr(options, k) for k in Options.__dataclass_fields__}
        | {"hold": hold_for(options), "replicas": replicas},
        "figures": figures(options, phase),
        "targets": TARGETS,
    }


COMPARED = ("server_cpu_us_per_frame", "redis_cpu_us_per_frame", "added_latency_p50_ms",
            "added_latency_p99_ms",
            "frames_per_s", "done", "errors", "gc_pause_max_ms", "loop_lag_max_ms",
            "server_runqueue_wait_s", "loadavg_1min")


def side_by_side(options: Options, rounds: int) -> dict[str, Any]:
    """``rounds`` × (baseline, gateway[, two replicas]), interleaved; medians and ratios.

    ``cpu_ratio`` is the gateway's server CPU per frame over the baseline's (target
    ≤ 3); ``gateway_added_p99_ms`` the gateway's added-latency p99 less the
    baseline's (target < 25 ms at 1,000 streams); with two replicas,
    ``replicas_cpu_ratio`` is their server CPU per frame (both processes; Redis's
    apart) over one replica's (target ≤ 1.5).
    """
    one = dataclasses.replace(options, replicas=1)
    kinds = {"baseline": ("baseline", one), "gateway": ("gateway", one)}
    if options.replicas > 1:  # and the gateway as two replicas on one Redis, in turn too
        kinds["replicas"] = ("gateway", options)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in kinds}
    for _ in range(rounds):
        for name, (kind, sized) in kinds.items():
            runs[name].append(measure(sized, kind))
    medians = {kind: {key: statistics.median(r["figures"][key] for r in reports)
                      for key in COMPARED} for kind, reports in runs.items()}
    base, gate = medians["baseline"], medians["gateway"]
    ratio = (gate["server_cpu_us_per_frame"] / base["server_cpu_us_per_frame"]
             if base["server_cpu_us_per_frame"] else float("nan"))
    extra: dict[str, float] = {}
    if "replicas" in medians and gate["server_cpu_us_per_frame"]:
        extra["replicas_cpu_ratio"] = (medians["replicas"]["server_cpu_us_per_frame"]
                                       / gate["server_cpu_us_per_frame"])
    return {
        "date": datetime.date.today().isoformat(),
        "commit": commit(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "kind": "side_by_side",
        "options": {k: getattr(options, k) for k in Options.__dataclass_fields__}
        | {"hold": hold_for(options), "rounds": rounds},
        "medians": medians,
        "figures": {"cpu_ratio": ratio, **extra,
                    "gateway_added_p99_ms": gate["added_latency_p99_ms"]
                    - base["added_latency_p99_ms"],
                    **{f"{kind}_{k}": v for kind, figures in medians.items()
                       for k, v in figures.items()}},
        "targets": SIDE_BY_SIDE_TARGETS,
        "runs": {kind: [r["figures"] for r in reports] for kind, reports in runs.items()},
    }


def table(report: dict[str, Any]) -> str:
    targets = report["targets"]
    lines = [f"{'figure':<36}{'value':>12}  target"]
    for key, value in report["figures"].items():
        lines.append(f"{key:<36}{value:>12.2f}  {targets.get(key, '')}")
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--streams", type=int, default=DEFAULT.streams)
    parser.add_argument("--deltas", type=int, default=DEFAULT.deltas)
    parser.add_argument("--pace", type=float, default=DEFAULT.pace, help="s between deltas")
    parser.add_argument("--hold", type=float, default=0.0,
                        help="s each answer waits before its first byte (default: from N)")
    parser.add_argument("--store", choices=["memory", "sqlite"], default="memory")
    parser.add_argument("--loop", choices=["auto", "uvloop", "asyncio"], default="auto")
    parser.add_argument("--pool", choices=["default", "shared"], default="default",
                        help="the model's own client (several small pools) or one "
                             "unbounded httpx pool")
    parser.add_argument("--baseline", action="store_true",
                        help="the bare Starlette baseline and the gateway, interleaved: "
                             "server CPU per frame and added latency side by side")
    parser.add_argument("--rounds", type=int, default=1,
                        help="with --baseline: (baseline, gateway) pairs to run")
    parser.add_argument("--replicas", type=int, choices=[1, 2], default=1,
                        help="gateway processes; 2 share a Redis run log (--redis-url), "
                             "each drives half the streams (with --baseline: a third "
                             "kind of run, beside one replica)")
    parser.add_argument("--redis-url", default=DEFAULT.redis_url)
    parser.add_argument("--resumable", action="store_true",
                        help="start every run resumable (with --replicas 2 its frames go "
                             "to Redis even when followed on its own replica)")
    parser.add_argument("--quick", action="store_true", help="20 short streams: a smoke test")
    parser.add_argument("--profile", default="", help="cProfile the server; stats to FILE")
    parser.add_argument("--child", choices=["provider", "server", "baseline"],
                        help=argparse.SUPPRESS)
    parser.add_argument("--provider-url", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def options_of(args: argparse.Namespace) -> Options:
    size = QUICK if args.quick else Options(streams=args.streams, deltas=args.deltas,
                                            pace=args.pace, hold=args.hold)
    return dataclasses.replace(size, store=args.store, loop=args.loop, pool=args.pool,
                               profile=args.profile, replicas=args.replicas,
                               redis_url=args.redis_url, resumable=args.resumable)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    options = options_of(args)
    if args.child == "provider":
        run_async(options.loop, provider_child(options))
        return
    if args.child in ("server", "baseline"):
        server_main(args.provider_url, options, args.child)
        return
    report = side_by_side(options, args.rounds) if args.baseline else measure(options)
    print(json.dumps(report, indent=2))
    print(table(report), file=sys.stderr)


if __name__ == "__main__":
    main()
