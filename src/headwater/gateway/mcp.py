"""``/mcp``: the served agents as MCP tools over Streamable HTTP, under the gateway's own auth.

Every request to ``/mcp`` (``POST`` messages, ``GET`` the server's stream,
``DELETE`` a session) is authenticated as every other route is: the bearer
token (dev mode: the one local user, on loopback, with the origin rules of
:mod:`.origins`), within the caller's request rate; a refusal is the gateway's
error envelope (401 ``unauthorized``, 429 ``rate_limited``). What the caller
may do is then the MCP server of :mod:`.mcp_server`, on the SDK's Streamable
HTTP session manager, which the app's lifespan runs. Each call takes its user
from the request that carried it, so an MCP session id lends nobody another
user's sessions. Sessions of the 2025 revisions live in this process (behind
several replicas a client keeps to one, or uses the stateless 2026-07-28
revision, whose every call stands alone).
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from .core import Gateway, current_user
from .http.problems import GatewayHTTPError, error_response, request_id_of
from .mcp_server import agent_server

PATH = "/mcp"
METHODS = ["GET", "POST", "DELETE"]


class McpEndpoint:
    """The ASGI app of ``/mcp``: the gateway's auth, then the SDK's session manager.

    :meth:`running` must be entered for the endpoint to answer (the app's
    lifespan does it); it can be entered once.
    """

    def __init__(self, gateway: Gateway) -> None:
        settings = gateway.settings
        self.gateway = gateway
        self.manager = StreamableHTTPSessionManager(
            app=agent_server(gateway, user_of_request),
            session_idle_timeout=settings.mcp_session_idle_timeout,
            max_sessions=settings.mcp_max_sessions,
            max_request_body_size=settings.max_body_bytes)

    def running(self) -> AbstractAsyncContextManager[None]:
        """The session manager's lifetime (its task group): the app's lifespan enters it."""
        return self.manager.run()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await current_user(Request(scope, receive))  # the user stays in scope["state"]
        except GatewayHTTPError as exc:
            response = error_response(exc.code, exc.message, request_id_of(scope),
                                      status=exc.status, headers=exc.headers)
            await response(scope, receive, send)
            return
        await self.manager.handle_request(scope, receive, send)


def mount(app: Starlette, gateway: Gateway) -> McpEndpoint:
    """Add ``/mcp`` to ``gateway``'s app; its endpoint is ``app.state.mcp`` (whose
    :meth:`~McpEndpoint.running` the app's lifespan enters)."""
    endpoint = app.state.mcp = McpEndpoint(gateway)
    app.router.routes.append(Route(PATH, endpoint=endpoint, methods=METHODS))
    return endpoint


async def user_of_request(ctx: ServerRequestContext[Any, Any]) -> str:
    """The user :class:`McpEndpoint` authenticated for the request that carried the call.

    Raises:
        MCPError: a call that came with no authenticated request (never over ``/mcp``).
    """
    request = ctx.request
    scope = getattr(request, "scope", None)
    user = scope.get("state", {}).get("user") if isinstance(scope, dict) else None
    if not isinstance(user, str):
        raise MCPError(types.INVALID_REQUEST, "the call came without an authenticated request")
    return user
