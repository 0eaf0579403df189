"""The served agents as MCP tools: the MCP server behind ``headwater mcp`` and ``/mcp``.

Each agent a :class:`~.core.Gateway` serves is one MCP tool named after it, with
input ``{"message": string, "session_id"?: string}``. A call is a run, started
and followed as every surface starts and follows runs (:meth:`Gateway.start_run`,
the run's frames): while it runs, what it streams goes to the client as
``notifications/progress`` for the client's progress token, each ``message``
the answer so far (or a tool's progress line); the result is the final text
(of a tree, the last final answer, its author named in the result's metadata).
The client's ``notifications/cancelled`` (or, at the 2026-07-28 revision over
HTTP, closing the call's stream) stops the run as Stop does, recorded
``cancelled``. The transport is the caller's: stdio (``headwater mcp``) or
Streamable HTTP (:mod:`.mcp`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from contextlib import aclosing
from typing import Any, Final

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError

from ..core import events
from ..core.errors import ERROR_MESSAGES, SessionError
from ..core.types import Content, Part
from ..sessions.base import Session
from .core import Gateway, store_error
from .http.problems import GatewayHTTPError, new_request_id
from .runs.manager import Run

logger = logging.getLogger("headwater.gateway")

META: Final = "headwater/"
"""The prefix of the keys headwater puts in a result's ``_meta``."""

INPUT_SCHEMA: Final[dict[str, Any]] = {  # raw JSON schema
    "type": "object",
    "properties": {
        "message": {"type": "string", "description": "What to ask the agent."},
        "session_id": {"type": "string",
                       "description": "The session to continue (from an earlier result's "
                                      "_meta or structuredContent); a new one when left out."},
    },
    "required": ["message"],
}
"""The input of every served agent's tool."""

UserOf = Callable[[ServerRequestContext[Any, Any]], Awaitable[str]]
"""Who a call is from: the stdio user, or the HTTP request's authenticated user."""


def agent_server(gateway: Gateway, user_of: UserOf) -> Server[Any]:
    """An MCP server (the SDK's low-level ``Server``) whose tools are ``gateway``'s agents."""
    calls = AgentCalls(gateway, user_of)
    return Server("headwater", version="0.1.0",
                  instructions="Each tool is a headwater agent: send it a message; pass the "
                               "session_id of its last result to go on with that session.",
                  on_list_tools=calls.list_tools, on_call_tool=calls.call_tool)


class AgentCalls:
    """The two requests an agent server answers: ``tools/list`` and ``tools/call``."""

    def __init__(self, gateway: Gateway, user_of: UserOf) -> None:
        self.gateway = gateway
        self.user_of = user_of

    async def list_tools(self, ctx: ServerRequestContext[Any, Any],
                         params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        runners = self.gateway.runners
        return types.ListToolsResult(tools=[types.Tool(
            name=name, description=runner.agent.description or f"The headwater agent {name}.",
            input_schema=INPUT_SCHEMA) for name, runner in runners.items()])

    async def call_tool(self, ctx: ServerRequestContext[Any, Any],
                        params: types.CallToolRequestParams) -> types.CallToolResult:
        """Run the agent on the message; its answer (an error is a result with ``isError``).

        Raises:
            MCPError: ``-32602`` for a tool that is no served agent.
        """
        agent = params.name
        if agent not in self.gateway.runners:
            raise MCPError(types.INVALID_PARAMS, f"no agent named {agent!r}")
        args = params.arguments or {}
        message, session_id = args.get("message"), args.get("session_id")
        if not isinstance(message, str) or not message.strip():
            return refused("message must be a non-empty string")
        if session_id is not None and not isinstance(session_id, str):
            return refused("session_id must be a string")
        try:
            user = await self.user_of(ctx)
            session = await self._session(user, agent, session_id)
            run = await self.gateway.start_run(
                user, agent, session.id, self.gateway.message_run(
                    Content("user", [Part(text=message)])), new_request_id())
        except GatewayHTTPError as exc:
            return refused(exc.message, exc.code)
        return await follow(self.gateway, run, ctx)

    async def _session(self, user: str, agent: str, session_id: str | None) -> Session:
        """The user's session to go on with, or a new one of ``agent``.

        Raises:
            GatewayHTTPError: ``not_found`` for another agent's session or none.
        """
        if session_id is None:
            try:
                return await self.gateway.service.create_session(app_name=agent, user_id=user)
            except SessionError as exc:
                raise store_error(exc) from None
        found, session = await self.gateway.find_session(user, session_id)
        if found != agent:
            raise GatewayHTTPError("not_found", f"no session {session_id!r} of agent {agent!r}")
        return session


async def follow(gateway: Gateway, run: Run, ctx: ServerRequestContext[Any, Any]
                 ) -> types.CallToolResult:
    """Follow ``run``'s frames to its end: progress on the way, its answer at the end. A cancel
    of the call stops the run as Stop does (recorded ``cancelled``)."""
    answer = Answer(ctx, gateway.settings.mcp_progress_interval)
    frames, on_end = gateway.runs.follow(run, 0)
    ended = False
    try:
        async with aclosing(frames):
            async for frame in frames:
                await answer.read(frame.type, frame.data)
        ended = True
    finally:
        if not ended:  # the client cancelled (or left): as POST /runs/{id}/cancel does
            gateway.runs.stop(run, "cancelled")
        on_end(not ended)
    return answer.result(run)


class Answer:
    """What a run's frames add up to for an MCP client: progress notifications (the answer
    so far, a tool's progress line; at most one per ``interval`` seconds, the latest
    winning, and one before anything else is said), then the result."""

    def __init__(self, ctx: ServerRequestContext[Any, Any], interval: float) -> None:
        self.ctx = ctx
        self.interval = interval
        self.sent = 0
        self.last_sent = 0.0
        self.held: str | None = None
        self.drafts: dict[str, str] = {}
        self.final: tuple[str, str] | None = None  # (author, text) of the last final answer
        self.error: Mapping[str, Any] | None = None  # the terminal error frame's data
        self.approvals: list[str] = []

    async def read(self, kind: str, data: Mapping[str, Any]) -> None:  # data: frame JSON
        if kind == "delta":
            author = str(data.get("author", ""))
            self.drafts[author] = draft = self.drafts.get(author, "") + str(data.get("text", ""))
            await self.say(draft, hold=True)
        elif kind == "message":
            self.drafts.pop(str(data.get("author", "")), None)
            if data.get("final") and data.get("text"):
                self.final = str(data.get("author", "")), str(data["text"])
        elif kind == "tool_progress":
            await self.say(progress_line(data), hold=True)
        elif kind == "approval_required":
            self.approvals.append(str(data.get("display") or data.get("name")))
        elif kind == "error":
            self.error = data
        if kind != "delta" and kind != "tool_progress" and self.held is not None:
            await self.say(self.held)

    async def say(self, message: str, *, hold: bool = False) -> None:
        """Send a progress notification (held while the last one is younger than the
        interval, when ``hold``)."""
        now = time.monotonic()
        if hold and self.sent and now - self.last_sent < self.interval:
            self.held = message
            return
        self.held = None
        self.sent += 1
        self.last_sent = now
        await self.ctx.session.report_progress(self.sent, None, message)

    def result(self, run: Run) -> types.CallToolResult:
        """The call's result: the final text, or the run's error, with the session id."""
        author, text = self.final or (run.agent, "")
        meta: dict[str, Any] = {f"{META}session_id": run.session_id, f"{META}run_id": run.id,
                                f"{META}author": author}
        if self.error is not None:
            code = str(self.error.get("code", "internal"))
            meta[f"{META}error_code"] = code
            words = ERROR_MESSAGES.get(code, ERROR_MESSAGES["internal"])  # type: ignore[call-overload]
            return types.CallToolResult(
                content=[types.TextContent(text=f"The run ended with an error ({code}): {words}")],
                is_error=True, _meta=meta)
        if self.approvals:
            meta[f"{META}approvals"] = self.approvals
            text = (f"{text}\n\n" if text else "") + (
                "Waiting for approval: " + "; ".join(self.approvals) + ". Answer it in "
                "headwater (the page, headwater chat) for this session.")
        return types.CallToolResult(
            content=[types.TextContent(text=text)], _meta=meta,
            structured_content={"answer": text, "author": author,
                                "session_id": run.session_id})


def progress_line(data: Mapping[str, Any]) -> str:  # data: frame JSON
    """A ``tool_progress`` frame as one line: ``<tool>: <measure> <message>`` or its text."""
    progress, total = data.get("progress"), data.get("total")
    line = events.progress_line(
        data.get("delta"), progress if isinstance(progress, (int, float)) else None,
        total if isinstance(total, (int, float)) else None, data.get("message"))
    return f"{data.get('name', 'tool')}: {line}"


def refused(why: str, code: str = "invalid_request") -> types.CallToolResult:
    """A call that did not start a run: an error result saying why."""
    return types.CallToolResult(content=[types.TextContent(text=why)], is_error=True,
                                _meta={f"{META}error_code": code})
