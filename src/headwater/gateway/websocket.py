"""``WS /live/{session_id}``: a live run (``Runner.run_live``) over a WebSocket.

One socket is one live run of the session's agent, fed through a
:class:`~headwater.live_request_queue.LiveRequestQueue`. The run is adopted by
the gateway's :class:`~.runs.RunManager` like any SSE run, so its frames go to
the run log, its events are stored before their frames leave, and cancel and
shutdown work the same. docs/frame-protocol.md describes the wire.

Opening: the token comes from the ``Sec-WebSocket-Protocol`` header
(subprotocols ``["bearer", "<token>"]``, accepted as ``bearer``), an
``Authorization: Bearer`` header, or the first message ``{"type": "auth",
"token": …}``. Before the run starts the socket answers only with a close
code, the code's in the registry (:data:`headwater.errors.ERRORS`): 1008 for
a missing or refused token (``unauthorized``), 4404 for a session that is
missing or another user's (the same), 4409 ``session_busy``, 1013
``rate_limited``, ``too_many_streams`` or ``run_store_unavailable``, 1001
``server_shutdown``, 1011 ``store_unavailable``.

Messages in (JSON text): ``content`` (``text`` or a Content JSON
``content``), ``realtime`` (base64 ``data`` and ``mime_type``),
``activity_start``, ``activity_end``, ``close``. Messages out: every frame of
the run as ``{"id", "type", "data"}`` (``id`` from 1, contiguous), and notices
about the socket itself with ``"id": null`` — ``ready`` once the run holds the
session, and ``error`` for a message that was refused (``invalid_request``,
``rate_limited``, ``payload_too_large`` past ``max_message_chars``), after
which the socket stays open. Only an ``error`` with an id ends the run. The
opening counts as one request of the user's rate limit (1013 ``rate_limited``
past it).

Lifetime: the run's terminal frame closes the socket (1000 after ``done``;
after ``error``, its code's close code: 1000 ``cancelled``, 1001
``server_shutdown``, 4409 ``session_busy``, 1013 ``run_store_unavailable``,
1011 for the others). On shutdown
``headwater serve`` waits (up to ``shutdown_grace``) for every socket to send
its terminal frame and close before it closes connections itself
(:meth:`Gateway.drain_sockets`). The client leaving closes the queue and stops
the run, which keeps what its model had shown (``interrupted``) and seals its
open calls, with no stop record (docs/event-contract.md); the handler returns
only once the run's task has ended (bounded by ``Settings.live_stop_timeout``).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import logging
import time
from collections.abc import AsyncGenerator, Mapping
from contextlib import aclosing
from types import MappingProxyType
from typing import Annotated, Any, Final, Literal

from fastapi import APIRouter, Depends, WebSocket, WebSocketDisconnect
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from ..core.errors import ERRORS, QueueFull, RunStoreUnavailable, UserError
from ..core.live_request_queue import LiveRequestQueue
from ..core.settings import Settings
from ..core.sse import encode_json
from ..core.tasks import TaskSet
from ..core.types import Blob, Content
from ..runner import Runner, RunStream
from .core import Gateway, GatewayDep
from .http.auth import DEV_USER, bearer_token
from .http.problems import GatewayHTTPError, request_id_of, validation_message
from .runs.manager import Run
from .wire.sse import Frame

logger = logging.getLogger("headwater.gateway")

SUBPROTOCOL: Final = "bearer"
"""The subprotocol a client offers, followed by its token, to authenticate in the handshake."""

CLOSE_NORMAL: Final = 1000
CLOSE_GOING_AWAY: Final = 1001
CLOSE_CODES: Final[Mapping[str, int]] = MappingProxyType(
    {code: info.close_code for code, info in ERRORS.items()})
"""Error code -> the close code of a socket it ends (from :data:`headwater.errors.ERRORS`)."""


# -- messages in ---------------------------------------------------------------------------------


class _Message(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AuthMessage(_Message):
    """``{"type": "auth", "token": …}``: the first message, when the handshake carried no token."""

    type: Literal["auth"]
    token: str = Field(min_length=1)


class ContentMessage(_Message):
    """A user turn: ``text``, or ``content`` as Content JSON (``{role: "user", parts}``)."""

    type: Literal["content"]
    text: str | None = None
    content: dict[str, Any] | None = None  # raw Content JSON, validated below


class RealtimeMessage(_Message):
    """Realtime media: base64 ``data`` and its ``mime_type`` (``audio/pcm;rate=16000``)."""

    type: Literal["realtime"]
    data: str
    mime_type: str = Field(min_length=3, max_length=255, pattern=r"^[\w.+-]+/[\w.+-]+")


class ActivityStartMessage(_Message):
    """The user started speaking."""

    type: Literal["activity_start"]


class ActivityEndMessage(_Message):
    """The user stopped speaking."""

    type: Literal["activity_end"]


class CloseMessage(_Message):
    """No more input: the run ends once it has answered what it was sent."""

    type: Literal["close"]


LiveMessage = Annotated[
    AuthMessage | ContentMessage | RealtimeMessage | ActivityStartMessage | ActivityEndMessage
    | CloseMessage, Field(discriminator="type")]
"""One message a client sends on ``WS /live/{session_id}``."""

_MESSAGE: Final[TypeAdapter[LiveMessage]] = TypeAdapter(LiveMessage)
_CONTENT: Final = TypeAdapter(Content)


class _Refused(Exception):
    """A message the socket does not take; it gets an ``error`` notice and the socket stays."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class _Closed(Exception):
    """End the socket with this close code (the client broke a bound)."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


_GONE: Final = (WebSocketDisconnect, OSError, RuntimeError, TimeoutError)
"""What a send or receive raises once the client went away."""


def parse_message(text: str) -> LiveMessage:
    """A client's message, checked.

    Raises:
        _Refused: bad JSON, an unknown type, missing or extra fields.
    """
    try:
        return _MESSAGE.validate_json(text)
    except ValidationError as exc:
        raise _Refused("invalid_request", validation_message(exc.errors())) from None


def content_of(message: ContentMessage) -> Content:
    """The user turn a ``content`` message carries.

    Raises:
        _Refused: neither or both of ``text`` and ``content``, empty text, or
            content that is not a user turn with parts.
    """
    if (message.text is None) == (message.content is None):
        raise _Refused("invalid_request", "a content message has exactly one of text, content")
    if message.text is not None:
        if not message.text.strip():
            raise _Refused("invalid_request", "the message is empty")
        return Content.from_text(message.text)
    try:
        content = _CONTENT.validate_python(message.content)
    except ValidationError:
        raise _Refused("invalid_request", "content is not a Content object") from None
    if content.role != "user" or not content.parts:
        raise _Refused("invalid_request", "content has role 'user' and some parts")
    return content


def blob_of(message: RealtimeMessage) -> Blob:
    """The media a ``realtime`` message carries.

    Raises:
        _Refused: ``data`` is not base64 or is empty.
    """
    try:
        data = base64.b64decode(message.data, validate=True)
    except (binascii.Error, ValueError):
        raise _Refused("invalid_request", "data is not base64") from None
    if not data:
        raise _Refused("invalid_request", "data is empty")
    return Blob(mime_type=message.mime_type, data=data)


# -- messages out --------------------------------------------------------------------------------


def frame_text(frame: Frame) -> str:
    """A run frame as the WebSocket sends it: ``{"id", "type", "data"}``.

    The data is encoded by :func:`headwater.sse.encode_json`, the JSON (and the
    escapes) of the frame's SSE data line, from the typed frame.
    """
    return f'{{"id":{frame.id},"type":"{frame.type}","data":{encode_json(frame.data)}}}'


def notice_text(type: str, data: dict[str, Any]) -> str:  # wire JSON
    """A message about the socket, not the run: it has ``"id": null``."""
    return json.dumps({"id": None, "type": type, "data": data}, separators=(",", ":"),
                      ensure_ascii=False)


# -- the route -----------------------------------------------------------------------------------


router = APIRouter()
"""``WS /live/{session_id}`` (see the module docstring for the wire)."""


async def live_user(websocket: WebSocket, gw: GatewayDep) -> str | None:
    """The caller of a live socket (``Depends(live_user)``), :func:`~.core.current_user`'s
    counterpart: accepts the socket, takes the token from the handshake or the first
    message, and counts the opening as one request of the user's rate. Answers ``None``
    once it has closed the socket (1008 ``unauthorized``, 1013 ``rate_limited``)."""
    settings = gw.settings
    offered = list(websocket.scope.get("subprotocols") or ())
    token = _subprotocol_token(offered)
    if token is None:
        token = bearer_token(websocket.headers.get("authorization"))
    await websocket.accept(subprotocol=SUBPROTOCOL if SUBPROTOCOL in offered else None)
    if gw.auth is None:
        user: str | None = DEV_USER
    else:
        if token is None:
            token = await _auth_message(websocket, settings)
        user = await _user_for(gw.auth, token) if token is not None else None
    if user is None:
        await _close_socket(websocket, "unauthorized", settings)
        return None
    websocket.scope.setdefault("state", {})["user"] = user
    try:
        gw.take_request(user)  # an opening is one request
    except GatewayHTTPError as exc:
        await _close_socket(websocket, exc.code, settings)
        return None
    return user


@router.websocket("/live/{session_id}")
async def live(websocket: WebSocket, session_id: str, gw: GatewayDep,
               user: Annotated[str | None, Depends(live_user)]) -> None:
    if user is not None:
        await LiveSocket(gw, websocket, session_id).serve(user)


async def _auth_message(websocket: WebSocket, settings: Settings) -> str | None:
    """The token of the first message when it is ``{"type": "auth", …}`` (within
    ``ws_auth_timeout`` and ``ws_max_message_bytes``); ``None`` otherwise."""
    try:
        async with asyncio.timeout(settings.ws_auth_timeout):
            message = await websocket.receive()
    except TimeoutError:
        return None
    text = message.get("text")
    if message["type"] != "websocket.receive" or not isinstance(text, str):
        return None
    if len(text) > settings.ws_max_message_bytes:
        return None
    try:
        parsed = parse_message(text)
    except _Refused:
        return None
    return parsed.token if isinstance(parsed, AuthMessage) else None


async def _close_socket(websocket: WebSocket, code: str, settings: Settings) -> None:
    """Close with an error code's close code (:data:`CLOSE_CODES`), the code as reason
    (within ``send_timeout``)."""
    with contextlib.suppress(Exception):
        async with asyncio.timeout(settings.send_timeout):
            await websocket.close(CLOSE_CODES.get(code, CLOSE_CODES["internal"]), code)


class _Bucket:
    """A token bucket: ``rate`` messages a second, at most ``rate`` at once."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.capacity = max(rate, 1.0)
        self.tokens = self.capacity
        self.last = time.monotonic()

    def take(self) -> bool:
        now = time.monotonic()
        self.tokens = min(self.capacity, self.tokens + (now - self.last) * self.rate)
        self.last = now
        if self.tokens < 1.0:
            return False
        self.tokens -= 1.0
        return True


class LiveSocket:
    """One ``WS /live/{session_id}`` connection: auth, the run, then input and frames.

    Args:
        gw: the gateway (runners, runs, auth, settings).
        websocket: the connection, not yet accepted.
        session_id: the session from the path.
    """

    def __init__(self, gw: Gateway, websocket: WebSocket, session_id: str) -> None:
        self.gw = gw
        self.ws = websocket
        self.session_id = session_id
        self.settings = gw.settings
        self.request_id = request_id_of(websocket)
        self.queue = LiveRequestQueue(maxsize=gw.settings.ws_queue_size)
        self.bucket = _Bucket(gw.settings.ws_messages_per_second)
        self.lock = asyncio.Lock()
        self.closed = False

    async def serve(self, user: str) -> None:
        """The connection of ``user`` (:func:`live_user`'s, the socket accepted); returns
        once the socket is closed and the run has ended."""
        try:
            run = await self._start(user)
            if run is None:
                return
            await self._follow(run)
        finally:
            self.queue.close()

    # -- opening -------------------------------------------------------------------------------

    async def _start(self, user: str) -> Run | None:
        """Start the live run holding the session, or close the socket and answer ``None``."""
        gw = self.gw
        queue = self.queue

        def run_live(runner: Runner, user_id: str, session_id: str) -> RunStream:
            return runner.run_live(user_id=user_id, session_id=session_id,
                                   live_request_queue=queue)
        try:
            agent, _ = await gw.find_session(user, self.session_id)
            return await gw.start_run(user, agent, self.session_id, run_live, self.request_id,
                                      live=True)
        except (GatewayHTTPError, RunStoreUnavailable) as exc:
            await self._close_with(exc.code)
            return None

    # -- the run -------------------------------------------------------------------------------

    async def _follow(self, run: Run) -> None:
        self.gw.socket_opened()  # the stop handler's drain waits for this socket's last frame
        try:
            await self._follow_run(run)
        finally:
            self.gw.socket_closed()

    async def _follow_run(self, run: Run) -> None:
        frames, on_end = self.gw.runs.follow(run, 0)
        gone = True
        tasks = TaskSet("live socket", logger=logger)  # closed before on_end
        sender = tasks.spawn(self._send_frames(frames), name="send frames", expected=_GONE)
        receiver = tasks.spawn(self._receive(), name="receive", expected=(_Closed, *_GONE))
        try:
            await self._send(notice_text("ready", {"run_id": run.id, "session_id": run.session_id,
                                                   "agent": run.agent}))
            await asyncio.wait([sender, receiver], return_when=asyncio.FIRST_COMPLETED)
            if sender.done() and not sender.cancelled() and sender.exception() is None:
                terminal = sender.result()
                if terminal is not None:
                    gone = False
                    await self._close(_close_code(terminal), "run ended")
        except _GONE:
            pass  # the client went away while we spoke: gone
        finally:
            self.queue.close()
            await tasks.aclose()
            on_end(gone)  # a client that left stops the run (it is never resumable)
            await self._closed_run(run, receiver)

    async def _closed_run(self, run: Run, receiver: asyncio.Future[None]) -> None:
        if (not receiver.cancelled() and receiver.done()
                and isinstance(receiver.exception(), _Closed)):
            closing = receiver.exception()
            assert isinstance(closing, _Closed)
            await self._close(closing.code, closing.reason)
        task = run.task
        if task is not None and not task.done():
            await asyncio.wait([task], timeout=self.settings.live_stop_timeout + 1.0)
        await self._close(CLOSE_GOING_AWAY, "run ended")

    async def _send_frames(self, frames: AsyncGenerator[Frame, None]) -> Frame | None:
        async with aclosing(frames) as reading:
            async for frame in reading:
                await self._send(frame_text(frame))
                if frame.terminal:
                    return frame
        return None

    async def _receive(self) -> None:
        """Client messages into the queue until the client leaves.

        Raises:
            _Closed: a message past ``ws_max_message_bytes`` (1009).
        """
        max_bytes = self.settings.ws_max_message_bytes
        while True:
            message = await self.ws.receive()
            if message["type"] == "websocket.disconnect":
                self.closed = True
                return
            text, data = message.get("text"), message.get("bytes")
            size = len(data) if data is not None else _utf8_size(text or "", max_bytes)
            if size > max_bytes:
                raise _Closed(CLOSE_CODES["payload_too_large"], "message too big")
            try:
                if not self.bucket.take():
                    raise _Refused("rate_limited", "too many messages; this one was dropped")
                if text is None:
                    raise _Refused("invalid_request", "send JSON text messages")
                self._enqueue(parse_message(text))
            except _Refused as refused:
                await self._send(notice_text("error", {
                    "code": refused.code, "message": refused.message,
                    "retryable": ERRORS[refused.code].retryable,
                    "request_id": self.request_id}))

    def _enqueue(self, message: LiveMessage) -> None:
        queue = self.queue
        try:
            if isinstance(message, ContentMessage):
                content = content_of(message)
                try:
                    self.gw.check_message(content)
                except GatewayHTTPError as exc:
                    raise _Refused(exc.code, exc.message) from None
                queue.send_content(content)
            elif isinstance(message, RealtimeMessage):
                queue.send_realtime(blob_of(message))
            elif isinstance(message, ActivityStartMessage):
                queue.send_activity_start()
            elif isinstance(message, ActivityEndMessage):
                queue.send_activity_end()
            elif isinstance(message, CloseMessage):
                queue.close()
            elif isinstance(message, AuthMessage):
                pass  # already authenticated (a client that always sends one)
            else:  # pragma: no cover - the union is exhaustive
                raise AssertionError(message)
        except QueueFull:
            raise _Refused("rate_limited", "the run is behind; this message was dropped") from None
        except UserError:
            raise _Refused("invalid_request", "the input is closed") from None

    # -- sending -------------------------------------------------------------------------------

    async def _send(self, text: str) -> None:
        async with self.lock, asyncio.timeout(self.settings.send_timeout):
            await self.ws.send_text(text)

    async def _close_with(self, code: str) -> None:
        """Close with an error code's close code (:data:`CLOSE_CODES`), the code as reason."""
        if not self.closed:
            self.closed = True
            await _close_socket(self.ws, code, self.settings)

    async def _close(self, code: int, reason: str) -> None:
        if self.closed:
            return
        self.closed = True
        with contextlib.suppress(Exception):
            async with asyncio.timeout(self.settings.send_timeout):
                await self.ws.close(code, reason)


def _subprotocol_token(offered: list[str]) -> str | None:
    """The token following ``bearer`` among the offered subprotocols."""
    for index, name in enumerate(offered[:-1]):
        if name == SUBPROTOCOL:
            return offered[index + 1]
    return None


async def _user_for(auth: Any, token: str) -> str | None:  # Any: the Authenticator callable
    try:
        user = await auth(token)
    except Exception:
        logger.error("authenticator %r failed; closing the socket", auth, exc_info=True)
        return None
    return user if isinstance(user, str) and user else None


def _utf8_size(text: str, bound: int) -> int:
    if len(text) * 4 <= bound:  # cannot be past the bound: skip the encoding
        return len(text)
    return len(text.encode("utf-8", "surrogatepass"))


def _close_code(terminal: Frame) -> int:
    if terminal.type == "done":
        return CLOSE_NORMAL
    return CLOSE_CODES.get(str(terminal.data.get("code")), CLOSE_CODES["internal"])
