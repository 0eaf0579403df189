"""Bounds on every HTTP request before the app sees it: an id, a body size and deadline, a log.

:class:`RequestLimits` is a pure ASGI middleware. Add it last (so it runs
first among the app's middleware) or wrap the whole app with it; both work::

    app.add_middleware(RequestLimits, max_body_bytes=settings.max_body_bytes,
                       body_read_timeout=settings.body_read_timeout)

The app behind it gets a request whose body has already arrived in full and
within its bounds; a client that sends too much, or too slowly, is answered
413 or 408 (and the connection closed) without the app being called.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from typing import Any, Final

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ...core.errors import ERRORS, UserError
from ...core.settings import Settings
from .problems import ERROR_LOGGED, error_response, new_request_id, too_large

_BODY_METHODS: Final = frozenset({"POST", "PUT", "PATCH"})
_SANE_ID: Final = re.compile(r"[A-Za-z0-9._-]{1,64}")
# A JSON \u escape of a UTF-16 surrogate (after an even run of backslashes, so not an
# escaped backslash followed by "u"): a high one with the low one that pairs it, or alone.
_SURROGATE: Final = re.compile(
    rb"(?<!\\)(?:\\\\)*\\u[dD](?:(?P<high>[89abAB][0-9a-fA-F]{2})"
    rb"(?P<pair>\\u[dD][c-fC-F][0-9a-fA-F]{2})?|(?P<low>[c-fC-F][0-9a-fA-F]{2}))")
_DEFAULT_MAX_BODY: Final[int] = Settings.model_fields["max_body_bytes"].default
_DEFAULT_BODY_TIMEOUT: Final[float] = Settings.model_fields["body_read_timeout"].default


class _ClientGone(Exception):
    """The client disconnected while sending its body."""


class _TooLarge(Exception):
    """The body passed the bound."""


class RequestLimits:
    """An ASGI middleware giving each request an id, a bounded body and a log line.

    For every HTTP request it:

    - sets ``scope["state"]["request_id"]`` (WebSocket scopes too) and the
      ``X-Request-Id`` response header: the client's own ``X-Request-Id`` when
      it is 1–64 characters of ``[A-Za-z0-9._-]``, else a new one;
    - for a request with a body (POST, PUT, PATCH, or any request declaring
      ``Content-Length`` or ``Transfer-Encoding``): answers 413
      ``payload_too_large`` at once to a ``Content-Length`` over
      ``max_body_bytes``; otherwise reads the whole body itself within
      ``body_read_timeout`` seconds (408 ``request_timeout`` past it; 413 as
      soon as a chunked body passes the bound), then hands it to the app as one
      ``http.request`` message. A 413 names the bound; after it, what the
      client still sends is read and dropped (within ``body_read_timeout``), so
      the client reads the answer instead of a reset. Later ``receive()`` calls reach the server, so
      the app still sees ``http.disconnect``. A 413 or 408 closes the
      connection. A client that disconnects mid-body ends the request quietly.
      A body holding a lone UTF-16 surrogate (a ``\\ud800`` escape without its
      pair), which no store can encode, is answered 400 ``invalid_request``;
    - answers 500 ``internal`` for an exception escaping the app before any
      response started; an exception after a complete response was already
      answered (``install_error_handlers``) and is dropped, after a partial
      one it is re-raised so the server breaks the connection;
    - logs one INFO line on ``logger_name`` when the request ends (a streaming
      response when its stream ends): ``"POST /sessions 201 3.2ms"`` with
      ``extra`` ``request_id``, ``method``, ``path``, ``status`` (``None`` when
      nothing was answered), ``duration_ms`` and ``user``
      (``scope["state"]["user"]``, set by the app). Never the query or body.

    Args:
        app: the ASGI app behind it.
        max_body_bytes: the largest body read (``Settings.max_body_bytes``).
        body_read_timeout: seconds a client has to send its whole body
            (``Settings.body_read_timeout``).
        logger_name: the logger of the request lines.

    Raises:
        UserError: at construction, for a bound that is not positive.
    """

    def __init__(self, app: ASGIApp, *, max_body_bytes: int = _DEFAULT_MAX_BODY,
                 body_read_timeout: float = _DEFAULT_BODY_TIMEOUT,
                 logger_name: str = "headwater.gateway") -> None:
        if max_body_bytes < 1:
            raise UserError("RequestLimits: max_body_bytes must be at least 1")
        if not body_read_timeout > 0:
            raise UserError("RequestLimits: body_read_timeout must be positive")
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.body_read_timeout = body_read_timeout
        self.logger = logging.getLogger(logger_name)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one ASGI connection through the app."""
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        request_id = _incoming_id(scope) or new_request_id()
        scope.setdefault("state", {})["request_id"] = request_id
        if scope["type"] == "websocket":
            await self.app(scope, receive, send)
            return
        await _Exchange(self, scope, receive, send, request_id).run()


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


def _incoming_id(scope: Scope) -> str | None:
    value = _header(scope, b"x-request-id")
    return value if value is not None and _SANE_ID.fullmatch(value) else None


class _Exchange:
    """One HTTP request through the middleware: its body, its answer, its log line."""

    def __init__(self, limits: RequestLimits, scope: Scope, receive: Receive, send: Send,
                 request_id: str) -> None:
        self.limits = limits
        self.scope = scope
        self.receive = receive
        self._send = send
        self.request_id = request_id
        self.status: int | None = None
        self.complete = False

    async def run(self) -> None:
        started = time.perf_counter()
        try:
            await self._serve()
        finally:
            self._log((time.perf_counter() - started) * 1000)

    async def _serve(self) -> None:
        receive = self.receive
        if self._has_body():
            declared = _header(self.scope, b"content-length")
            if declared is not None and declared.isdigit() and \
                    int(declared) > self.limits.max_body_bytes:
                await self._refuse_too_large()
                return
            try:
                async with asyncio.timeout(self.limits.body_read_timeout):
                    body = await self._read_body()
            except _ClientGone:
                return
            except _TooLarge:
                await self._refuse_too_large()
                return
            except TimeoutError:
                await self._refuse("request_timeout")
                return
            if lone_surrogate(body):
                await self._refuse("invalid_request", "The body holds a lone surrogate "
                                   "(a \\ud800-\\udfff escape without its pair).", status=400)
                return
            receive = _replay(body, self.receive)
        await self._call_app(receive)

    def _has_body(self) -> bool:
        if self.scope["method"] in _BODY_METHODS:
            return True
        return any(key.lower() in (b"content-length", b"transfer-encoding")
                   for key, _ in self.scope.get("headers", ()))

    async def _read_body(self) -> bytes:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await self.receive()
            if message["type"] == "http.disconnect":
                raise _ClientGone
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limits.max_body_bytes:
                raise _TooLarge
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    async def _refuse(self, code: str, message: str | None = None,
                      status: int | None = None) -> None:
        response = error_response(code, ERRORS[code].message if message is None else message,
                                  self.request_id, status=status,
                                  headers={"Connection": "close"})
        await response(self.scope, self.receive, self.send)

    async def _refuse_too_large(self) -> None:
        """413 naming the bound, sent at once; then the rest of the body is read and
        dropped (within ``body_read_timeout``) before the connection closes, so a client
        still sending it reads the answer rather than a reset. The answer's end is held
        back meanwhile: after it, the server would read no more."""
        error = too_large("The request body", self.limits.max_body_bytes, "bytes")
        response = error_response(error.code, error.message, self.request_id,
                                  headers={"Connection": "close"})

        async def held(message: Message) -> None:
            if message["type"] == "http.response.body" and not message.get("more_body"):
                message = {**message, "more_body": True}
            await self.send(message)

        await response(self.scope, self.receive, held)
        if (_header(self.scope, b"expect") or "").lower() != "100-continue":  # else none comes
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.limits.body_read_timeout):
                    await self._drop_body()
        await self.send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _drop_body(self) -> None:
        while True:
            message = await self.receive()
            if message["type"] == "http.disconnect" or not message.get("more_body", False):
                return

    async def _call_app(self, receive: Receive) -> None:
        try:
            await self.limits.app(self.scope, receive, self.send)
        except Exception:
            state = self.scope["state"]
            if not state.get(ERROR_LOGGED):
                self.limits.logger.exception(
                    "unhandled error in %s %s (request %s)", self.scope["method"],
                    self.scope["path"], self.request_id, extra={"request_id": self.request_id})
                state[ERROR_LOGGED] = True
            if self.status is None:
                response = error_response("internal", ERRORS["internal"].message,
                                          self.request_id)
                await response(self.scope, self.receive, self.send)
            elif not self.complete:
                raise  # the server breaks the connection: a cut response must not look whole

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
            headers = [(k, v) for k, v in message.get("headers", ())
                       if k.lower() != b"x-request-id"]
            headers.append((b"x-request-id", self.request_id.encode("ascii")))
            message = {**message, "headers": headers}
        elif message["type"] == "http.response.body" and not message.get("more_body", False):
            self.complete = True
        await self._send(message)

    def _log(self, duration_ms: float) -> None:
        method, path = self.scope["method"], self.scope["path"]
        user = self.scope["state"].get("user")
        extra: dict[str, Any] = {  # Any: logging's extra mapping
            "request_id": self.request_id, "method": method, "path": path,
            "status": self.status, "duration_ms": round(duration_ms, 1), "user": user,
        }
        status = "-" if self.status is None else self.status
        self.limits.logger.info("%s %s %s %.1fms", method, path, status, duration_ms,
                                extra=extra)


def lone_surrogate(body: bytes) -> bool:
    """Whether a JSON body escapes a UTF-16 surrogate without its pair (``"\\ud800"``).

    Such a string decodes in Python but cannot be encoded as UTF-8, so it must
    not get past the edge. Raw surrogate bytes are not UTF-8 and fail JSON
    decoding already. A body without ``\\u`` is not scanned.
    """
    if b"\\u" not in body:
        return False
    return any(m["low"] is not None or m["pair"] is None for m in _SURROGATE.finditer(body))


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that answers ``body`` once, then passes through to ``receive``."""
    pending = True

    async def replayed() -> Message:
        nonlocal pending
        if pending:
            pending = False
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed
