"""The caller's trace, made current for each request: a run it starts is a child of its span.

:class:`TraceContext` is a pure ASGI middleware. For an HTTP request or a WebSocket
handshake that carries a W3C ``traceparent`` header (read by OpenTelemetry's global
propagator, W3C trace context by default), it makes that remote span the current
context while the app handles the request, so the ``invoke_agent`` span of a run started
there (``headwater.telemetry``) joins the caller's trace. Without the header, or without
the OpenTelemetry API installed, it only passes the request on.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from ...core.telemetry import remote_parent


class TraceContext:
    """An ASGI middleware that continues the caller's trace (see the module's docstring).

    Args:
        app: the ASGI app behind it.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        with remote_parent(scope["headers"]):
            await self.app(scope, receive, send)
