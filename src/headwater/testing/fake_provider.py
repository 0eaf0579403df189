"""``FakeProvider``: a loopback HTTP/1.1 server that misbehaves at the byte level.

It is written on asyncio streams, not an HTTP library, so a scenario can do what
a real provider or proxy does on a bad day: sleep before the first byte, trickle
bytes, stall, close without the chunked terminator, reset the connection, or cut
a stream inside a UTF-8 character. Each request takes the next queued
:class:`Scenario`; the server records every request and every connection (when
and how it closed, FIN or RST, and by whom)::

    async with FakeProvider() as provider:
        provider.enqueue(Scenario(body=render_openai(text=["Hel", "lo"])))
        async with httpx.AsyncClient(base_url=provider.base_url) as client:
            ...
        assert provider.requests[0].json()["model"] == "gpt-4o-mini"

Like the real APIs it answers 400, and consumes no scenario, when a request to
``.../chat/completions``, ``.../v1/messages`` or ``...:streamGenerateContent``
(Gemini) has a body that is not JSON or a history with a tool call not answered
by its result. Requests to ``.../responses`` (OpenAI's Responses API) get the
same treatment: a 400 for a body that is not JSON, a ``function_call`` without
its ``function_call_output`` (or the reverse), or, with ``store: false``, a
reasoning item without its ``encrypted_content``. With no scenario queued it
answers 500, so a missing ``enqueue`` is loud.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import struct
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal, TypeAlias, assert_never

from ..core.tasks import TaskSet
from ._render import ErrorFormat, default_message, error_body, format_of, history_problem
from ._render_gemini import gemini_error_body, gemini_history_problem, is_gemini_path
from ._render_responses import is_responses_path, responses_problem

CloseKind = Literal["client_fin", "client_rst", "server_fin", "server_rst"]
"""Who closed a connection and how: with a FIN (an orderly close) or an RST (an abort)."""


@dataclass(frozen=True)
class Sleep:
    """Send nothing for ``seconds`` (ends early, and the response with it, if the client goes)."""

    seconds: float


@dataclass(frozen=True)
class Trickle:
    """Send ``data`` slowly: ``size`` bytes per write (default 1), one write every ``every`` s.

    The first write goes at once. With ``forever``, ``data`` is sent again and
    again until the client goes away (e.g. ``b": keep-alive\\n\\n"`` for a stream
    that is alive but never says anything). In chunked mode each write is a chunk.
    """

    data: bytes
    every: float
    forever: bool = False
    size: int = 1

    def __post_init__(self) -> None:
        if not self.data or self.size < 1 or self.every < 0:
            raise ValueError("Trickle needs non-empty data, size >= 1 and every >= 0")


@dataclass(frozen=True)
class Stall:
    """Send nothing more and keep the socket open until the client goes away."""


@dataclass(frozen=True)
class Reset:
    """Abort the connection with an RST (``SO_LINGER`` (1, 0), then close) after a flush."""


@dataclass(frozen=True)
class Close:
    """Close the socket with a FIN now, without the chunked terminator ``0\\r\\n\\r\\n``."""


Action: TypeAlias = Sleep | Trickle | Stall | Reset | Close
"""A body element that is not bytes: what the server does between writes."""


@dataclass(frozen=True)
class Scenario:
    """How to answer one request.

    Attributes:
        status: the HTTP status.
        headers: extra response headers (``Retry-After``, ``x-should-retry``...);
            one named like a default (``content-type``, ``content-length``...)
            replaces it, so a test can also send a wrong length.
        body: bytes, or writes and actions in order; each bytes element is one
            write (and one chunk), flushed before the next element.
        chunked: ``Transfer-Encoding: chunked``, ended by ``0\\r\\n\\r\\n`` unless an
            action ends the response first. Otherwise ``Content-Length`` when the
            body is all bytes, else no length and a close to end the body.
        content_type: the ``content-type`` header.
        check_history: validate the request first (see the module docstring).
    """

    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes | Sequence[bytes | Action] = b""
    chunked: bool = True
    content_type: str = "text/event-stream"
    check_history: bool = True

    @classmethod
    def error(
        cls,
        status: int,
        message: str | None = None,
        headers: Mapping[str, str] | None = None,
        format: ErrorFormat = "openai",
        *,
        error_type: str | None = None,
        param: str | None = None,
        code: str | None = None,
        retry_delay: str | None = None,
    ) -> Scenario:
        """An error answer with the provider's JSON error body and a ``Content-Length``.

        Args:
            message: defaults to the status phrase (``"Overloaded"`` for 529).
            format: whose error shape to send.
            error_type: the error's ``type``; defaults by status and provider
                (e.g. ``rate_limit_error`` for an Anthropic 429; for Gemini the
                ``status``, e.g. ``RESOURCE_EXHAUSTED``).
            param: OpenAI's ``param``; code: OpenAI's ``code``.
            retry_delay: Gemini's ``RetryInfo.retryDelay`` in the body (e.g. ``"7s"``).
        """
        message = message or default_message(status)
        if format == "gemini":  # Gemini: Google's error shape
            body = gemini_error_body(status, message, error_type=error_type,
                                     retry_delay=retry_delay)
        else:
            body = error_body(format, status, message, error_type=error_type, param=param,
                              code=code)
        return cls(status=status, headers=dict(headers or {}), body=body, chunked=False,
                   content_type="application/json")


@dataclass(frozen=True)
class RecordedRequest:
    """A request as the server read it.

    Attributes:
        method, path: from the request line (``path`` without the query string).
        query: the query string, without ``?``.
        headers: lower-case names; repeated headers joined with ``", "``.
        body: the body bytes (de-chunked if it came chunked).
        received_at: ``time.monotonic()`` when the whole request was read.
        connection: the index of its connection in ``FakeProvider.connections``.
        sent_at: ``time.monotonic()`` right after each bytes element of the
            answer's body was written and flushed, in order (not the head, the
            pieces of a ``Trickle`` or the chunked terminator); it grows while
            the answer plays. Latency benchmarks match it against when a client
            saw each chunk (``CLOCK_MONOTONIC`` is one clock for every process
            on a Linux machine).
    """

    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes
    received_at: float
    connection: int
    sent_at: list[float] = field(default_factory=list)

    def json(self) -> Any:  # Any: raw wire JSON
        """The body parsed as JSON.

        Raises:
            ValueError: when the body is not JSON.
        """
        return json.loads(self.body)


@dataclass
class ConnectionRecord:
    """One client connection; updated in place while it lives.

    Attributes:
        opened_at: ``time.monotonic()`` when the server accepted it.
        closed_at: when the server saw or made the close; None while open.
        close_kind: who closed and how: ``client_fin`` (a read returned EOF),
            ``client_rst`` (the read or a write failed with a reset),
            ``server_fin`` (a close, the end of an unsized body, shutdown),
            ``server_rst`` (a ``Reset()``); None while open.
        requests: how many requests were read on it.
    """

    opened_at: float
    closed_at: float | None = None
    close_kind: CloseKind | None = None
    requests: int = 0


@dataclass(eq=False)
class _Connection:
    index: int
    record: ConnectionRecord
    writer: asyncio.StreamWriter
    inbox: asyncio.StreamReader = field(default_factory=asyncio.StreamReader)
    gone: asyncio.Event = field(default_factory=asyncio.Event)

    async def send(self, data: bytes, chunked: bool) -> None:
        if data:  # an empty chunk would be the terminator
            self.writer.write(b"%X\r\n%b\r\n" % (len(data), data) if chunked else data)
            await self.writer.drain()

    async def pause(self, seconds: float) -> bool:
        """Sleeps; returns False at once if the client goes away meanwhile."""
        try:
            async with asyncio.timeout(seconds):
                await self.gone.wait()
        except TimeoutError:
            return True
        return False


class FakeProvider:
    """A loopback HTTP/1.1 server playing queued :class:`Scenario` s, one per request.

    Use it as ``async with FakeProvider() as provider``: it listens on
    ``127.0.0.1`` at a free port from ``__aenter__`` until ``__aexit__``, which
    closes every client socket and waits for its tasks. Requests on one
    connection (keep-alive) are served in order; connections are served
    concurrently. A closed client is noticed while the server sleeps, trickles
    or stalls, so a close is recorded within milliseconds.

    Attributes:
        requests: every request read, in order.
        connections: every connection accepted, in order.
        max_concurrent: the peak number of connections open at once.
    """

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.requests: list[RecordedRequest] = []
        self.connections: list[ConnectionRecord] = []
        self.max_concurrent = 0
        self._host = host
        self._queue: deque[Scenario] = deque()
        self._server: asyncio.Server | None = None
        self._open: list[_Connection] = []
        self._tasks = TaskSet("FakeProvider")  # a connection's handler and its reader
        self._failures: list[Exception] = []  # what a handler raised: aclose() raises it
        self._changed = asyncio.Event()
        self._closing = False

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>``, without a trailing slash; valid once started.

        Raises:
            RuntimeError: before ``__aenter__`` or after ``__aexit__``.
        """
        if self._server is None:
            raise RuntimeError("FakeProvider is not running; use `async with FakeProvider()`")
        port = self._server.sockets[0].getsockname()[1]
        return f"http://{self._host}:{port}"

    @property
    def pending(self) -> int:
        """How many queued scenarios no request has taken yet."""
        return len(self._queue)

    @property
    def open_connections(self) -> int:
        """How many connections are open now."""
        return len(self._open)

    def enqueue(self, *scenarios: Scenario) -> None:
        """Queues scenarios; each incoming request takes the oldest one (FIFO)."""
        self._queue.extend(scenarios)

    async def wait_closed(self, index: int, timeout: float = 1.0) -> ConnectionRecord:  # noqa: ASYNC109
        """Waits until ``connections[index]`` exists and is closed; returns its record.

        Raises:
            TimeoutError: when that has not happened within ``timeout`` seconds.
        """
        try:
            async with asyncio.timeout(timeout):
                while True:
                    changed = self._changed
                    if -len(self.connections) <= index < len(self.connections):
                        record = self.connections[index]
                        if record.closed_at is not None:
                            return record
                    await changed.wait()
        except TimeoutError:
            raise TimeoutError(f"FakeProvider: connection #{index} not closed within "
                               f"{timeout} s; connections: {self.connections}") from None

    async def start(self) -> None:
        """Starts listening; ``__aenter__`` calls it."""
        self._closing = False
        self._tasks = TaskSet("FakeProvider")
        self._failures = []
        self._server = await asyncio.start_server(self._accept, self._host, 0)

    async def aclose(self) -> None:
        """Stops listening, closes every connection (``server_fin`` if still open), waits.

        Raises:
            Exception: the first unexpected error a connection handler raised,
                so a bug in the fake fails the test.
        """
        if self._server is None:
            return
        self._closing = True
        self._server.close()
        await self._tasks.aclose()
        for connection in list(self._open):  # a handler cancelled before it ever ran
            self._mark_closed(connection, "server_fin")
            connection.writer.transport.abort()
        await asyncio.sleep(0)  # let the transports' connection_lost callbacks run
        await self._server.wait_closed()
        self._server = None
        if self._failures:
            raise self._failures[0]

    async def __aenter__(self) -> FakeProvider:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # -- connections --------------------------------------------------------------

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._closing:  # accepted while aclose() runs: nobody would serve or close it
            writer.transport.abort()
            return
        record = ConnectionRecord(opened_at=time.monotonic())
        connection = _Connection(len(self.connections), record, writer)
        self.connections.append(record)
        self._open.append(connection)
        self.max_concurrent = max(self.max_concurrent, len(self._open))
        self._notify()
        self._tasks.spawn(self._serve(connection, reader), name=f"serve #{connection.index}")

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def _mark_closed(self, connection: _Connection, kind: CloseKind) -> None:
        """Records the first close seen; later ones (e.g. our own FIN after an RST) are no-ops."""
        if connection.record.closed_at is not None:
            return
        connection.record.closed_at = time.monotonic()
        connection.record.close_kind = kind
        self._open.remove(connection)
        self._notify()

    async def _pump(self, reader: asyncio.StreamReader, connection: _Connection) -> None:
        """Reads the socket all the time, so a client's close is seen even mid-response."""
        try:
            while data := await reader.read(65536):
                connection.inbox.feed_data(data)
            self._mark_closed(connection, "client_fin")
        except OSError:  # ConnectionResetError, BrokenPipeError after our write hit an RST
            self._mark_closed(connection, "client_rst")
        finally:
            connection.inbox.feed_eof()
            connection.gone.set()

    async def _serve(self, connection: _Connection, reader: asyncio.StreamReader) -> None:
        pump = self._tasks.spawn(self._pump(reader, connection), name="read the socket")
        try:
            while await self._serve_one(connection):
                pass
        except (ValueError, asyncio.LimitOverrunError):
            with contextlib.suppress(OSError):
                connection.writer.write(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n"
                                        b"connection: close\r\n\r\n")
        except (OSError, asyncio.IncompleteReadError):
            pass  # the client went away mid-request or mid-response: already recorded
        except Exception as exc:  # a bug in the fake: aclose() raises it, so the test fails
            self._failures.append(exc)
        finally:
            self._mark_closed(connection, "server_fin")
            pump.cancel()
            await self._close_writer(connection.writer)
            await asyncio.wait([pump])

    @staticmethod
    async def _close_writer(writer: asyncio.StreamWriter) -> None:
        writer.close()
        try:
            async with asyncio.timeout(1.0):  # a client that stopped reading blocks the flush
                await writer.wait_closed()
        except TimeoutError:
            writer.transport.abort()
        except OSError:
            pass

    # -- requests -----------------------------------------------------------------

    async def _serve_one(self, connection: _Connection) -> bool:
        """Reads and answers one request; returns whether the connection stays usable."""
        request = await self._read_request(connection)
        if request is None:
            return False
        keep_alive = await self._respond(connection, self._choose(request), request.sent_at)
        return keep_alive and request.headers.get("connection", "").lower() != "close"

    async def _read_request(self, connection: _Connection) -> RecordedRequest | None:
        """Parses one request from the inbox; None when the client closed between requests.

        Raises:
            ValueError: a malformed request line, header or chunk size.
            asyncio.IncompleteReadError: the client closed inside the request.
        """
        try:
            head = await connection.inbox.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as exc:
            if exc.partial.strip():
                raise
            return None
        request_line, *lines = head[:-4].decode("latin-1").lstrip("\r\n").split("\r\n")
        method, target, _version = request_line.split(" ")
        headers: dict[str, str] = {}
        for line in lines:
            name, colon, value = line.partition(":")
            if not colon:
                raise ValueError(f"malformed header line {line!r}")
            key, value = name.strip().lower(), value.strip()
            headers[key] = f"{headers[key]}, {value}" if key in headers else value
        body = await _read_body(connection.inbox, headers)
        path, _, query = target.partition("?")
        connection.record.requests += 1
        request = RecordedRequest(method, path, query, headers, body, time.monotonic(),
                                  connection.index)
        self.requests.append(request)
        return request

    def _choose(self, request: RecordedRequest) -> Scenario:
        number = len(self.requests) - 1
        head = self._queue[0] if self._queue else None
        format = "gemini" if is_gemini_path(request.path) else format_of(request.path)
        if format is not None and (head is None or head.check_history):
            problem = (gemini_history_problem(request.path, request.body) if format == "gemini"
                       else history_problem(format, request.body))
            if problem is not None:
                return Scenario.error(400, problem[0], format=format, param=problem[1])
        if is_responses_path(request.path) and (head is None or head.check_history):
            responses = responses_problem(request.body)  # OpenAI Responses API
            if responses is not None:
                return Scenario.error(400, responses[0], param=responses[1])
        if head is None:
            message = f"FakeProvider: no scenario queued for request #{number}"
            return Scenario.error(500, message, format=format or "openai")
        return self._queue.popleft()

    async def _respond(self, connection: _Connection, scenario: Scenario,
                       sent_at: list[float]) -> bool:
        """Plays a scenario; returns False when it ended the connection (or the client did)."""
        body = scenario.body
        parts: list[bytes | Action] = [body] if isinstance(body, bytes) else list(body)
        sized = not scenario.chunked and all(isinstance(part, bytes) for part in parts)
        fields = {"content-type": ("content-type", scenario.content_type)}
        if scenario.chunked:
            fields["transfer-encoding"] = ("transfer-encoding", "chunked")
        elif sized:
            length = sum(len(part) for part in parts if isinstance(part, bytes))
            fields["content-length"] = ("content-length", str(length))
        else:
            fields["connection"] = ("connection", "close")
        for name, value in scenario.headers.items():
            fields[name.lower()] = (name, value)
        head = f"HTTP/1.1 {scenario.status} {default_message(scenario.status)}\r\n" + "".join(
            f"{name}: {value}\r\n" for name, value in fields.values())
        await connection.send((head + "\r\n").encode("latin-1"), chunked=False)
        for part in parts:
            if connection.gone.is_set() or not await self._play(connection, part,
                                                                scenario.chunked):
                return False
            if isinstance(part, bytes):
                sent_at.append(time.monotonic())
        if scenario.chunked:
            await connection.send(b"0\r\n\r\n", chunked=False)
        return sized or scenario.chunked

    async def _play(self, connection: _Connection, part: bytes | Action, chunked: bool) -> bool:
        """Performs one body element; returns False when the response ends with it."""
        match part:
            case bytes():
                await connection.send(part, chunked)
                return True
            case Sleep(seconds=seconds):
                return await connection.pause(seconds)
            case Trickle():
                return await self._trickle(connection, part, chunked)
            case Stall():
                await connection.gone.wait()
                return False
            case Reset():
                await self._reset(connection)
                return False
            case Close():
                self._mark_closed(connection, "server_fin")
                return False
            case _:
                assert_never(part)

    @staticmethod
    async def _trickle(connection: _Connection, trickle: Trickle, chunked: bool) -> bool:
        data, size = trickle.data, trickle.size
        pieces = [data[start:start + size] for start in range(0, len(data), size)]
        first = True
        while True:
            for piece in pieces:
                if not first and not await connection.pause(trickle.every):
                    return False
                first = False
                await connection.send(piece, chunked)
            if not trickle.forever:
                return True

    async def _reset(self, connection: _Connection) -> None:
        transport = connection.writer.transport
        transport.set_write_buffer_limits(high=0)  # drain() now waits for an empty buffer:
        await connection.writer.drain()  # what was written goes out before the RST
        sock = connection.writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self._mark_closed(connection, "server_rst")
        transport.abort()


async def _read_body(inbox: asyncio.StreamReader, headers: Mapping[str, str]) -> bytes:
    if "chunked" not in headers.get("transfer-encoding", "").lower():
        return await inbox.readexactly(int(headers.get("content-length", "0")))
    chunks = []
    while size := int((await inbox.readuntil(b"\r\n")).split(b";")[0], 16):
        chunks.append(await inbox.readexactly(size))
        await inbox.readexactly(2)
    while await inbox.readuntil(b"\r\n") != b"\r\n":
        pass  # trailers
    return b"".join(chunks)

