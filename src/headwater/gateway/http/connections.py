"""Bounds on connections, before any request: a deadline for the request head and a cap.

uvicorn times out only an idle keep-alive connection: a client that opens a
socket and sends half a request line keeps its file descriptor forever, and a
few hundred of them starve the process (even ``GET /healthz`` is refused). The
HTTP protocols here are uvicorn's own (httptools when installed, else h11, as
uvicorn picks) with two bounds added, from the settings :func:`http_protocol`
binds into the class it returns (uvicorn builds a protocol per connection with
no arguments):

- ``header_timeout``: a connection must complete its request head (request
  line and headers) within this many seconds of opening, and each later request
  head within as many of the previous response's end; past it the connection
  is closed. A WebSocket is bounded until its upgrade request is complete.
- ``max_connections``: a connection opened while this many are open (HTTP and
  WebSocket) is answered ``503`` (``Retry-After: 1``) and closed at once, so
  the ones already open, and the process's descriptors, are untouched.

``headwater serve``, ``headwater demo`` and
:class:`~headwater.gateway.background.BackgroundServer` pass
:func:`http_protocol` to uvicorn as ``http=``; under another server, put a
proxy in front that does the same (docs/frame-protocol.md, "Connections").
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Final, Literal

from uvicorn.protocols.http.h11_impl import H11Protocol

from ...core.settings import Settings

logger = logging.getLogger("headwater.gateway")

BUSY: Final = (b"HTTP/1.1 503 Service Unavailable\r\nretry-after: 1\r\nconnection: close\r\n"
               b"content-length: 0\r\n\r\n")
"""What a connection past ``max_connections`` is sent before it is closed."""

_WARN_EVERY: Final = 10.0  # seconds between two warnings about refused connections
_warned = {"at": -_WARN_EVERY, "refused": 0}  # a flood of connections is one line a while


def _refused(open_now: int) -> None:
    _warned["refused"] += 1
    now = time.monotonic()
    if now - _warned["at"] >= _WARN_EVERY:
        logger.warning("refused %d connection(s): %d are open (max_connections)",
                       _warned["refused"], open_now)
        _warned["at"], _warned["refused"] = now, 0


class _Bounds:
    """The head deadline and the connection cap, mixed into a uvicorn HTTP protocol.

    The protocol it is mixed into provides ``loop``, ``transport`` and
    ``connections`` (uvicorn's set of open connections, this one included).
    """

    bounds: Settings  # header_timeout, max_connections: bound by http_protocol()
    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport
    connections: set[Any]  # uvicorn's protocols, HTTP and WebSocket

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Count the connection; refuse it past the cap, else start the head deadline."""
        super().connection_made(transport)  # type: ignore[misc]  # the uvicorn protocol's
        self._start_bounds()

    def connection_lost(self, exc: Exception | None) -> None:
        """Drop the deadline with the connection."""
        self._cancel_head_timer()
        super().connection_lost(exc)  # type: ignore[misc]

    def _start_bounds(self) -> bool:
        """Read the bounds; close the connection if over the cap. Whether it stays open."""
        settings = self.bounds
        self._header_timeout = settings.header_timeout
        self._head_timer: asyncio.TimerHandle | None = None
        if len(self.connections) > settings.max_connections:
            _refused(len(self.connections) - 1)
            self.transport.write(BUSY)
            self.transport.close()
            return False
        self._arm_head_timer()
        return True

    def _arm_head_timer(self) -> None:
        self._cancel_head_timer()
        if not self.transport.is_closing():
            self._head_timer = self.loop.call_later(self._header_timeout, self._head_late)

    def _cancel_head_timer(self) -> None:
        timer = getattr(self, "_head_timer", None)
        if timer is not None:
            timer.cancel()
            self._head_timer = None

    def _head_late(self) -> None:
        self._head_timer = None
        if not self.transport.is_closing():
            logger.debug("closing a connection: no request head within %s s (header_timeout)",
                         self._header_timeout)
            self.transport.close()


class BoundedH11Protocol(_Bounds, H11Protocol):
    """uvicorn's h11 protocol with ``header_timeout`` and ``max_connections``."""

    def handle_events(self) -> None:
        """Parse what arrived; a request head that completed ends the deadline."""
        scope = getattr(self, "scope", None)
        super().handle_events()
        if getattr(self, "scope", None) is not scope:  # h11 made a new request's scope
            self._cancel_head_timer()

    def on_response_complete(self) -> None:
        """The next request head has ``header_timeout`` from now."""
        self._arm_head_timer()
        super().on_response_complete()  # a pipelined request already here ends it again


try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # pragma: no cover - httptools is an optional speed-up of uvicorn's
    HttpToolsProtocol = None  # type: ignore[assignment, misc]


if HttpToolsProtocol is not None:

    class BoundedHttpToolsProtocol(_Bounds, HttpToolsProtocol):
        """uvicorn's httptools protocol with ``header_timeout`` and ``max_connections``."""

        def on_headers_complete(self) -> None:
            """A request head is complete: its deadline ends."""
            self._cancel_head_timer()
            super().on_headers_complete()

        def on_response_complete(self) -> None:
            """The next request head has ``header_timeout`` from now (unless it is here)."""
            idle = not self.pipeline
            super().on_response_complete()
            if idle:
                self._arm_head_timer()


def http_protocol(settings: Settings, kind: Literal["auto", "h11"] = "auto"
                  ) -> type[asyncio.Protocol]:
    """The bounded protocol for uvicorn's ``http=``, with ``settings``' bounds.

    Args:
        settings: ``header_timeout`` and ``max_connections``.
        kind: ``"auto"`` picks as uvicorn would (httptools when installed, else h11).
    """
    base: type[_Bounds] = BoundedH11Protocol
    if kind == "auto" and HttpToolsProtocol is not None:
        base = BoundedHttpToolsProtocol
    bound: type[asyncio.Protocol] = type(base.__name__, (base,), {"bounds": settings})
    return bound
