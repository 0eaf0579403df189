"""Which browser pages may call the gateway: CORS for the listed origins, Host and Origin checks.

:class:`OriginGuard` is a pure ASGI middleware, inside
:class:`~headwater.gateway.limits.RequestLimits`. For every HTTP request and
WebSocket handshake it decides, from the ``Host`` and ``Origin`` headers only:

- **Dev mode** (no authenticator: anyone who reaches the server is the one
  local user) answers only a loopback ``Host`` (``localhost``, ``127.0.0.0/8``,
  ``::1``, any port) and an ``Origin`` that is absent, the same as ``Host``, or
  listed. Otherwise a web page could reach it by DNS rebinding (its own name
  resolving to 127.0.0.1) or send it a simple cross-origin request (a
  ``text/plain`` POST needs no preflight).
- **With auth**, a WebSocket whose ``Origin`` is neither the same as ``Host``
  nor listed is refused (browsers apply no CORS to WebSockets). HTTP requests
  pass: a browser cannot send a bearer token cross-origin without a preflight.
- **CORS**: a preflight (``OPTIONS`` with ``Access-Control-Request-Method``)
  from a listed origin is answered 204 with the ``Access-Control-Allow-*``
  headers; from any other origin 403 ``forbidden``. A request from a listed
  origin gets ``Access-Control-Allow-Origin`` and the ``X-Run-Id`` and
  ``X-Request-Id`` headers exposed. Nothing is listed by default
  (``Settings.cors_origins``, ``create_app(cors_origins=...)``).

A refused HTTP request is answered 403 ``forbidden`` (the error envelope); a
refused WebSocket is closed before it is accepted (the server answers 403).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ...core.errors import UserError
from .auth import is_loopback
from .problems import error_response, new_request_id

_ORIGIN: Final = re.compile(r"https?://[^/?#\s*]+")
ALLOW_METHODS: Final = "GET, POST, DELETE, OPTIONS"
EXPOSE_HEADERS: Final = "X-Run-Id, X-Request-Id"
PREFLIGHT_MAX_AGE: Final = "600"


def allowed_origins(origins: Iterable[str]) -> frozenset[str]:
    """The origins a gateway lists, normalised (lower case, no trailing ``/``).

    Raises:
        UserError: an entry that is not ``http(s)://host[:port]`` (``*``, a path
            or a query among them).
    """
    listed = set()
    for origin in origins:
        normal = origin.strip().rstrip("/").lower()
        if not _ORIGIN.fullmatch(normal):
            raise UserError(f"cors_origins: {origin!r} is not an origin; list each one as "
                            "scheme://host[:port], e.g. http://localhost:3000")
        listed.add(normal)
    return frozenset(listed)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


def _host_name(host: str) -> str:
    try:
        return urlsplit(f"//{host}").hostname or ""
    except ValueError:  # a malformed Host (an unclosed "[", say)
        return ""


def _netloc(origin: str) -> str:
    try:
        return urlsplit(origin).netloc.lower()
    except ValueError:  # a malformed Origin: the same as no other origin
        return ""


class OriginGuard:
    """The ASGI middleware described in the module docstring.

    Args:
        app: the ASGI app behind it.
        dev_mode: the gateway has no authenticator.
        origins: the listed origins (from :func:`allowed_origins`).
    """

    def __init__(self, app: ASGIApp, *, dev_mode: bool, origins: frozenset[str]) -> None:
        self.app = app
        self.dev_mode = dev_mode
        self.origins = origins

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Refuse, answer a preflight, or pass the connection on (with CORS headers)."""
        kind = scope["type"]
        if kind not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        host = _header(scope, b"host")
        origin = _header(scope, b"origin")
        listed = origin is not None and origin.lower() in self.origins
        if self.dev_mode and host is not None and not is_loopback(_host_name(host)):
            await _refuse(scope, receive, send, "dev mode answers only a loopback Host")
            return
        if kind == "http" and scope["method"] == "OPTIONS" and origin is not None and \
                _header(scope, b"access-control-request-method") is not None:
            await self._preflight(scope, receive, send, origin, listed)
            return
        same = origin is None or (bool(host) and _netloc(origin) == (host or "").lower())
        if not (same or listed) and (self.dev_mode or kind == "websocket"):
            await _refuse(scope, receive, send, "this origin is not allowed (cors_origins)")
            return
        if listed and kind == "http":
            assert origin is not None
            send = _with_cors(send, origin)
        await self.app(scope, receive, send)

    async def _preflight(self, scope: Scope, receive: Receive, send: Send, origin: str,
                         listed: bool) -> None:
        if not listed:
            await _refuse(scope, receive, send, "this origin is not allowed (cors_origins)")
            return
        headers = [(b"access-control-allow-origin", origin.encode("latin-1")),
                   (b"access-control-allow-methods", ALLOW_METHODS.encode()),
                   (b"access-control-max-age", PREFLIGHT_MAX_AGE.encode()),
                   (b"vary", b"Origin")]
        asked = _header(scope, b"access-control-request-headers")
        if asked:  # the origin is trusted: the headers its page sends are allowed
            headers.append((b"access-control-allow-headers", asked.encode("latin-1")))
        await send({"type": "http.response.start", "status": 204, "headers": headers})
        await send({"type": "http.response.body", "body": b""})


def _with_cors(send: Send, origin: str) -> Send:
    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = list(message.get("headers", ()))
            headers += [(b"access-control-allow-origin", origin.encode("latin-1")),
                        (b"access-control-expose-headers", EXPOSE_HEADERS.encode()),
                        (b"vary", b"Origin")]
            message = {**message, "headers": headers}
        await send(message)

    return sending


async def _refuse(scope: Scope, receive: Receive, send: Send, message: str) -> None:
    if scope["type"] == "websocket":
        await receive()  # websocket.connect
        await send({"type": "websocket.close", "code": 1008, "reason": "forbidden"})
        return
    request_id = scope.get("state", {}).get("request_id") or new_request_id()
    response = error_response("forbidden", message, request_id)
    await response(scope, receive, send)
