"""Machinery of native live connections over a WebSocket (Gemini Live, OpenAI Realtime).

:class:`SocketConnection` owns what both wire protocols share: opening the
socket lazily (``BaseLlm.connect`` is synchronous), one reader task, the turn
gate, a transparent move to a resumed session, and the failure rules. A
protocol subclass says how to set a session up, how to start a turn, how to
ask the server to stop an answer, and what each server message means.

The turn gate keeps the contract of
:class:`~headwater.models.connection.BaseLlmConnection`: one model turn at a
time; content sent with ``interrupt=False`` while the model answers waits for
the answer's end and then starts one turn together with whatever else waited;
content sent with ``interrupt=True`` ends the answer at once, locally (its
final response, marked ``interrupted``, is in :meth:`receive`'s stream before
:meth:`send_content` returns), asks the server to stop, and drops what the
server still says of that answer. A turn it would start is first offered to
:meth:`~headwater.models.connection.BaseLlmConnection.admit_turn` (the live
flow's budget): a refused turn is not started, its content is not sent.

Failures never raise out of :meth:`receive`: a socket that closes without a
planned move, a message that is not JSON, a turn that goes quiet past
``Settings.live_idle_timeout`` and a setup the server refuses each become one
final response with an ``error_code`` (the provider's text is logged at DEBUG
only). The connection is then broken: each later turn is answered at once by
an error final with the same code, and realtime media is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from abc import abstractmethod
from collections.abc import AsyncGenerator, Mapping
from contextlib import aclosing
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus, WebSocketException

from ..core.errors import (
    ERROR_MESSAGES,
    ErrorCode,
    MalformedChunk,
    ModelError,
    ModelHTTPError,
    ProviderTimeout,
    ProviderUnavailable,
    UserError,
)
from ..core.settings import Settings
from ..core.tasks import TaskSet
from ..core.types import Blob, Content, FunctionCall, Part, Usage
from .base import BaseLlm
from .connection import BaseLlmConnection, QueuedConnection
from .llm_request import LlmRequest
from .llm_response import LlmResponse

logger = logging.getLogger("headwater.models")

Json = Any  # raw wire JSON


class _NoWireDebug(logging.LoggerAdapter[logging.Logger]):
    """websockets' logger without its DEBUG trace: that trace holds the handshake (the
    API key in the URL or a header) and the frames (tool payloads), which never get logged."""

    def isEnabledFor(self, level: int) -> bool:
        return level > logging.DEBUG and self.logger.isEnabledFor(level)


_WIRE_LOGGER = _NoWireDebug(logging.getLogger("websockets.client"), {})


class SocketConnection(QueuedConnection):
    """A live connection over one WebSocket at a time (see the module docstring).

    Args:
        model: the model name, for logs and errors.
        request: system instruction, tools, config and the starting history.
        settings: timeouts and the message size bound.
    """

    def __init__(self, model: str, request: LlmRequest, settings: Settings) -> None:
        super().__init__()
        self.model = model
        self.request = request
        self.settings = settings
        self.history: list[Content] = list(request.contents)
        self._ws: ClientConnection | None = None
        self._task: asyncio.Task[None] | None = None  # the reader, once started
        self._tasks = TaskSet("live socket", logger=logger)  # the reader; closed in close()
        self._ready = asyncio.Event()
        self.lock = asyncio.Lock()
        self._held: list[Content] = []
        self._closed = False
        self.broken: ErrorCode | None = None
        self.active = False
        """A model turn is in progress (started by us or by the server)."""
        self.turns_ended = 0
        """Model turns ended so far (normally, interrupted or failed)."""
        self.heard_at = 0.0
        """Loop time of the last server message, or of the turn's start if later."""
        self.going_away_at: float | None = None
        """Loop time by which the socket must be left (a planned move), or ``None``."""
        self._fresh = False  # the next socket starts a new session (send_history)
        self._text: list[str] = []
        self._thoughts: list[str] = []
        self.usage: Usage | None = None

    # -- what a protocol provides ---------------------------------------------------------------

    @abstractmethod
    async def setup(self, ws: ClientConnection, *, resume: bool) -> None:
        """Set the session up on a fresh socket; seed :attr:`history` unless ``resume``.

        Raises:
            ModelError: the server refused the setup or did not answer in time.
        """

    @abstractmethod
    async def handle(self, message: dict[str, Json]) -> None:
        """Act on one server message (an object)."""

    @abstractmethod
    async def start_turn(self, contents: list[Content]) -> None:
        """Send ``contents`` so that the model answers them in one turn."""

    @abstractmethod
    async def stop_answer(self, said: bool) -> None:
        """Ask the server to stop the answer just cut short (``said``: it had output)."""

    @abstractmethod
    async def send_blob(self, blob: Blob) -> None:
        """Send realtime media."""

    def can_start(self) -> bool:
        """Whether a new turn may be started now."""
        return not self.active

    def ready_to_move(self) -> bool:
        """Whether a planned move may happen now (before the deadline forces it)."""
        return not self.active

    # -- the connection's interface -------------------------------------------------------------

    async def send_history(self, contents: list[Content]) -> None:
        """Replace the conversation: the next socket starts a new session seeded with it.

        Before anything was sent this only sets what the session is seeded
        with; later the current session is left (a turn in progress ends
        ``interrupted``) and a fresh one is opened.
        """
        self._check_open()
        self.history = list(contents)
        if self._task is None:
            return
        await self._wait_ready()
        async with self.lock:
            if self.active:
                await self.cut_answer()
            self._fresh = True
            self.going_away_at = asyncio.get_running_loop().time()
        if self._ws is not None:
            await self._ws.close()  # the reader moves to the new session

    async def send_content(self, content: Content, *, interrupt: bool = True) -> None:
        """Add content and start a model turn (see the module docstring for the gate).

        Raises:
            ModelError: the connection was closed by :meth:`close`.
        """
        self._check_open()
        self._start()
        await self._wait_ready()
        if self.broken is not None:
            self.deliver(self.error(self.broken))
            return
        async with self.lock:
            self._held.append(content)
            if interrupt and self.active:
                await self.cut_answer()
            await self.flush_locked()

    async def send_realtime(self, blob: Blob) -> None:
        """Send realtime media now (dropped, with a DEBUG log, once the connection broke)."""
        if not await self.wait_open():
            logger.debug("live connection of %s is broken; realtime %s dropped",
                         self.model, blob.mime_type)
            return
        await self.send_blob(blob)

    def before_receive(self) -> None:
        self._start()

    async def close(self) -> None:
        """Close the socket and end :meth:`receive`; a turn in progress ends ``interrupted``."""
        if self._closed:
            return
        self._closed = True
        if self.active:
            self.interrupted()
        ws, self._ws = self._ws, None
        await self._close_socket(ws)  # the reader sees the close and ends (it checks _closed)
        self._task = None
        await self._tasks.aclose(grace=self.settings.live_close_timeout)
        if self._tasks:
            logger.warning("the reader of a live connection of %s did not end", self.model)
        self.end_stream()

    # -- what a protocol calls ------------------------------------------------------------------

    async def wait_open(self) -> bool:
        """Open the socket if needed and wait for it; ``False`` once the connection broke.

        Raises:
            ModelError: the connection was closed by :meth:`close`.
        """
        self._check_open()
        self._start()
        await self._wait_ready()
        return self.broken is None

    async def send_json(self, payload: dict[str, Json]) -> None:
        """Send one message; a socket that is gone is left to the reader to notice."""
        ws = self._ws
        if ws is None:
            return
        with contextlib.suppress(ConnectionClosed):
            await ws.send(json.dumps(payload, ensure_ascii=False))

    def begin(self) -> None:
        """A model turn starts (we asked for one, or the server began answering)."""
        if not self.active:
            self.heard_at = asyncio.get_running_loop().time()
        self.active = True

    def text(self, text: str, *, thought: bool = False) -> None:
        """A text (or thought) delta of the answer: one partial."""
        if not text:
            return
        self.begin()
        (self._thoughts if thought else self._text).append(text)
        self.deliver(LlmResponse(content=Content("model", [Part(text=text, thought=thought)]),
                              partial=True))

    def audio(self, blob: Blob) -> None:
        """An audio (or other media) chunk of the answer: one partial with an inline blob."""
        self.begin()
        self.deliver(LlmResponse(content=Content("model", [Part(inline_data=blob)]), partial=True))

    @property
    def said(self) -> bool:
        """Whether the turn in progress has produced text."""
        return bool(self._text or self._thoughts)

    def finish(self, calls: list[FunctionCall] | None = None, *,
               finish_reason: str | None = "stop") -> None:
        """The turn ended normally: its one final response (text, thoughts, calls, usage)."""
        content = self._content(calls or [])
        if content is not None:
            self.history.append(content)
        self.deliver(LlmResponse(content=content, finish_reason=finish_reason, usage=self.usage,
                              turn_complete=True))
        self._end_turn()

    def interrupted(self) -> None:
        """The turn was cut short: what was said, as one final marked ``interrupted``."""
        content = self._content([])
        if content is not None:
            self.history.append(content)
        self.deliver(LlmResponse(content=content, interrupted=True, turn_complete=True,
                              usage=self.usage))
        self._end_turn()

    def fail(self, code: ErrorCode) -> None:
        """The turn failed: one error final, nothing of the turn kept."""
        self.deliver(self.error(code))
        self._end_turn()

    @staticmethod
    def error(code: ErrorCode) -> LlmResponse:
        """An error final with the code's fixed message (never the provider's text)."""
        return LlmResponse(error_code=code, error_message=ERROR_MESSAGES[code],
                           turn_complete=True)

    async def flush(self) -> None:
        """Start a turn with the held content, if there is any and the gate is open."""
        async with self.lock:
            await self.flush_locked()

    async def flush_locked(self) -> None:
        if not self._held or not self.can_start() or self.broken is not None:
            return
        if self.going_away_at is not None:
            return  # held for the socket the connection is moving to
        if self._ws is None or not self._ready.is_set():
            return  # the reader flushes once the socket is ready
        contents, self._held = self._held, []
        if not self.admit_turn():
            logger.info("live turn of %s refused (before_turn); %d content(s) dropped",
                        self.model, len(contents))
            return
        self.history.extend(contents)
        self.begin()
        await self.start_turn(contents)

    async def open_socket(self, url: str, headers: Mapping[str, str]) -> ClientConnection:
        """Open the WebSocket within ``live_connect_timeout``.

        Raises:
            ModelHTTPError: the server refused the upgrade with an HTTP status.
            ProviderUnavailable: the server could not be reached.
        """
        settings = self.settings
        try:
            return await connect(url, additional_headers=dict(headers), logger=_WIRE_LOGGER,
                                 open_timeout=settings.live_connect_timeout,
                                 max_size=settings.live_max_message_bytes,
                                 close_timeout=settings.live_close_timeout)
        except InvalidStatus as exc:
            status = exc.response.status_code
            raise ModelHTTPError(f"live connection refused with HTTP {status}",
                                 status_code=status,
                                 retryable=status in (408, 429) or status >= 500) from None
        except (OSError, TimeoutError, WebSocketException) as exc:
            raise ProviderUnavailable(f"live connection failed: {type(exc).__name__}") from None

    async def receive_setup(self, ws: ClientConnection) -> dict[str, Json]:
        """The next server message during setup, within ``live_setup_timeout``.

        Raises:
            ProviderTimeout: nothing came in time.
            ProviderUnavailable: the server closed the socket (a refused setup).
            MalformedChunk: the message is not a JSON object.
        """
        try:
            async with asyncio.timeout(self.settings.live_setup_timeout):
                raw = await ws.recv()
        except TimeoutError:
            raise ProviderTimeout("live session setup timed out") from None
        except ConnectionClosed as exc:
            logger.debug("live setup of %s refused: %s", self.model, exc)
            raise ProviderUnavailable("the provider closed the live socket during setup") from None
        return decode(raw)

    # -- the reader -----------------------------------------------------------------------------

    def _start(self) -> None:
        if self._task is None and not self._closed:
            self._task = self._tasks.spawn(self._read(), name="live socket reader")

    def _check_open(self) -> None:
        if self._closed:
            raise ModelError("the live connection is closed")

    async def _wait_ready(self) -> None:
        await self._ready.wait()

    async def _read(self) -> None:
        try:
            await self._connect(resume=False)
            while self.broken is None and not self._closed:
                await self._read_one()
        except ModelError as exc:
            if self._closed:
                return  # the socket went because close() closed it
            logger.info("live connection of %s failed: %s", self.model, exc)
            await self._break(exc.code)
        except Exception as exc:  # an adapter bug must not leave the live run waiting forever
            if self._closed:
                return
            logger.error("live connection of %s failed", self.model, exc_info=exc)
            await self._break("internal")

    async def _connect(self, *, resume: bool) -> None:
        ws = await self._open()
        try:
            await self.setup(ws, resume=resume)
        except BaseException:
            await self._close_socket(ws)
            raise
        self._ws = ws
        self._ready.set()
        await self.flush()

    @abstractmethod
    async def _open(self) -> ClientConnection:
        """Open a fresh socket to the provider (URL and headers are the protocol's)."""

    async def _read_one(self) -> None:
        ws = self._ws
        if ws is None:
            return  # closed meanwhile: the loop ends
        now = asyncio.get_running_loop().time()
        idle = self.settings.live_idle_timeout
        if self.active:
            timeout = self.heard_at + idle - now
            if timeout <= 0:
                raise ProviderTimeout("the live model went quiet mid-turn")
        else:
            timeout = idle / 4  # look again soon: a turn may start while this read waits
        if self.going_away_at is not None:
            left = self.going_away_at - self.settings.live_go_away_margin - now
            if self.ready_to_move() or left <= 0:
                await self._move()
                return
            timeout = min(timeout, left)
        try:
            # Cancelling a websockets recv() loses nothing: the next one returns the message.
            # asyncio.timeout, not wait_for: on 3.11 wait_for swallows a cancellation that
            # comes as the message does, and close() would wait for this reader forever.
            async with asyncio.timeout(timeout):
                raw = await ws.recv()
        except TimeoutError:
            return  # the next round decides: quiet turn, deadline, or just no news
        except ConnectionClosed as exc:
            if self.going_away_at is not None:
                await self._move()
                return
            logger.debug("live socket of %s closed: %s", self.model, exc)
            raise ProviderUnavailable("the provider closed the live socket") from None
        self.heard_at = asyncio.get_running_loop().time()
        await self.handle(decode(raw))
        if self.going_away_at is not None and self.ready_to_move():
            await self._move()

    async def _move(self) -> None:
        """Leave this socket for a new one: resumed, or a fresh session (send_history)."""
        self._ready.clear()
        async with self.lock:
            if self.active:
                self.interrupted()  # cut by the deadline; what was said is kept
            old, self._ws = self._ws, None
            self.going_away_at = None
            fresh, self._fresh = self._fresh, False
        await self._close_socket(old)
        await self._connect(resume=not fresh)

    async def cut_answer(self) -> None:
        """End the answer in progress locally, then ask the server to stop it.

        Call it holding :attr:`lock`.
        """
        said = self.said
        self.interrupted()
        await self.stop_answer(said)

    async def _break(self, code: ErrorCode) -> None:
        self.broken = code
        self.going_away_at = None
        self._held.clear()
        self.fail(code)
        self._ready.set()  # senders waiting for a socket get the error at once
        await self._close_socket(self._ws)

    async def _close_socket(self, ws: ClientConnection | None) -> None:
        if ws is None:
            return
        with contextlib.suppress(Exception):
            async with asyncio.timeout(self.settings.live_close_timeout):
                await ws.close()

    # -- turn bookkeeping -----------------------------------------------------------------------

    def _content(self, calls: list[FunctionCall]) -> Content | None:
        parts = [Part(text="".join(self._thoughts), thought=True)] if self._thoughts else []
        if self._text:
            parts.append(Part(text="".join(self._text)))
        parts += [Part(function_call=call) for call in calls]
        return Content("model", parts) if parts else None

    def _end_turn(self) -> None:
        self.turns_ended += 1
        self.active = False
        self._text.clear()
        self._thoughts.clear()
        self.usage = None


def decode(raw: str | bytes) -> dict[str, Json]:
    """One server message as a JSON object.

    Raises:
        MalformedChunk: not JSON, or not an object.
    """
    try:
        value = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise MalformedChunk("a live message is not JSON") from None
    if type(value) is not dict:
        raise MalformedChunk("a live message is not a JSON object")
    return value


class SocketModel(BaseLlm):
    """A model reached through a live socket only.

    :meth:`generate_content` (``run_async``) runs one model call over a live
    session of its own, opened and closed for it; prefer an HTTP adapter there.
    """

    async def generate_content(self, request: LlmRequest,
                               stream: bool = False) -> AsyncGenerator[LlmResponse, None]:
        """One model call over a live session of its own (opened and closed here).

        Raises:
            UserError: the request has no content.
        """
        async with aclosing(one_turn(self.connect(request), request, stream)) as responses:
            async for response in responses:
                yield response


async def one_turn(connection: BaseLlmConnection, request: LlmRequest,
                   stream: bool) -> AsyncGenerator[LlmResponse, None]:
    """Run one model call over a live connection: partials (when ``stream``), then the final.

    The history before the last content seeds the session; the last content
    starts the turn. The connection is closed when the generator ends.

    Raises:
        UserError: the request has no content to answer.
    """
    if not request.contents:
        raise UserError("a model call needs at least one content to answer")
    try:
        await connection.send_history(request.contents[:-1])
        await connection.send_content(request.contents[-1], interrupt=False)
        async with aclosing(connection.receive()) as responses:
            async for response in responses:
                if response.partial:
                    if stream:
                        yield response
                    continue
                yield response
                return
    finally:
        await connection.close()
