"""``McpToolset``: an MCP server's tools as an agent's tools, their progress in the run's stream.

Built on the official ``mcp`` SDK (``pip install "headwater[mcp]"``)::

    from headwater.tools.mcp import McpToolset

    files = McpToolset(command=["npx", "-y", "@modelcontextprotocol/server-filesystem", "."])
    search = McpToolset(url="https://example.com/mcp", headers={"Authorization": "Bearer …"})
    agent = Agent(name="helper", model="openai:gpt-4o-mini", tools=[files, search])

Each of the server's tools (those ``tool_filter`` keeps) becomes a tool of the
agent with its name, description and input JSON schema. A call streams: each
``notifications/progress`` the server sends for it is a ``progress``
:class:`~headwater.events.ToolStreamEvent` of the call (``progress``,
``total``, ``message``), shown on every surface and never stored; the result
is the one answer the model sees. One connection per toolset, opened on first
use and shared by every run and call; it is closed with the runner. What each
failure gives, and every choice made where MCP leaves room, is in docs/mcp.md.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import collections
import contextlib
import json
import logging
import mimetypes
import shlex
import sys
import threading
from collections.abc import AsyncIterator, Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

try:
    import httpx2
    import mcp_types as types
    from mcp import Client, StdioServerParameters, stdio_client
    from mcp.client.session import ClientRequestContext, ElicitationFnT
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared.exceptions import MCPError
except ImportError as exc:  # the extra is not installed
    raise ImportError('McpToolset needs the official MCP SDK: pip install "headwater[mcp]"'
                      ) from exc

from ..core.errors import McpUnavailableError, UserError
from ..core.events import ToolStreamEvent
from ..core.settings import Settings, settings_or_default
from ..core.tasks import TaskSet
from ..core.types import Blob, Part, ToolDeclaration
from ._mcp_connection import Connection
from .context import ToolContext
from .function_tool import BaseTool
from .options import ToolOptions
from .toolset import BaseToolset

logger = logging.getLogger("headwater.tools.mcp")

ToolFilter = Collection[str] | Callable[["McpTool"], bool]
"""The server's tools an agent gets: their names, or a predicate on each tool."""

RESERVED_KEYS = ("artifacts", "resources", "text")
"""Keys a result object gets beside a server's structured content (which is nested under
``result`` when it uses one of them itself)."""

_CLIENT_INFO = types.Implementation(name="headwater", version="0.1.0")


class McpTool(BaseTool):
    """One tool of an MCP server, as an agent's tool (kind ``"progress"``).

    Attributes:
        toolset: the :class:`McpToolset` that listed it (and runs its calls).
        title: the server's display name for it, if any.
        input_schema: its arguments' JSON schema, as the server gave it (what the
            model is sent).
        output_schema: the JSON schema of its structured result, if any.
        annotations: the server's hints about it (``readOnlyHint``, …), raw.
    """

    def __init__(self, toolset: McpToolset, tool: types.Tool, *, requires_approval: bool) -> None:
        self.toolset = toolset
        self.name = tool.name
        self.description = tool.description or tool.title or tool.name
        self.title = tool.title
        self.input_schema: dict[str, Any] = dict(tool.input_schema)  # raw JSON schema
        self.output_schema: dict[str, Any] | None = tool.output_schema  # raw JSON schema
        self.annotations: dict[str, Any] | None = (  # raw JSON
            tool.annotations.model_dump(by_alias=True, exclude_none=True)
            if tool.annotations is not None else None)
        self.options = ToolOptions(kind="progress", requires_approval=requires_approval)
        self._declaration = ToolDeclaration(name=self.name, description=self.description,
                                            parameters=self.input_schema)

    def declaration(self) -> ToolDeclaration:
        return self._declaration

    async def run(self, args: dict[str, Any], context: ToolContext) -> Any:
        """Never called: an MCP tool streams (its progress, then its result).

        Raises:
            UserError: always; the runner calls :meth:`stream`.
        """
        raise UserError(f"MCP tool {self.name!r} streams: call stream(), not run()")

    def stream(self, args: dict[str, Any], context: ToolContext) -> AsyncIterator[Any]:
        """The call's progress events, then its ``done`` event (the result the model sees)."""
        return self.toolset.stream_call(self, args, context)

    def __repr__(self) -> str:
        return f"McpTool({self.name!r}, server={self.toolset.target})"


class McpToolset(BaseToolset):
    """The tools of one MCP server, over stdio or Streamable HTTP.

    Args:
        command: ``[program, *args]`` of a stdio server, started on first use.
        url: the Streamable HTTP endpoint of a server (``http://…/mcp``); exactly
            one of ``command`` and ``url``.
        env: environment variables of a stdio server, on top of the SDK's safe
            default (``HOME``, ``LOGNAME``, ``PATH``, ``SHELL``, ``TERM``, ``USER``):
            nothing else of this process's environment (API keys…) is passed.
        cwd: the working directory of a stdio server.
        headers: HTTP headers of every request to ``url`` (an ``Authorization``,
            say); never logged nor put in a message.
        tool_filter: the names of the tools to keep (a name the server does not
            list is refused when it is listed), or a predicate on each
            :class:`McpTool`; default all.
        requires_approval: ``True`` (every tool) or the names of the tools whose
            calls wait for a human's approval, exactly as
            ``@tool(requires_approval=True)`` (docs/tools.md, Approvals).
        elicitation_handler: answers the server's requests for input
            (``elicitation/create``), with the SDK's signature
            ``(context, params) -> ElicitResult``; default: each is declined and
            logged (tool and server named). Sampling requests are always refused.
        settings: ``mcp_call_timeout``, ``mcp_connect_timeout`` and
            ``max_progress_bytes`` (default: the process-wide settings).

    Raises:
        UserError: neither or both of ``command`` and ``url``, an empty command,
            a URL that is not ``http(s)://``, ``env``/``cwd`` with a URL or
            ``headers`` with a command, or a string where a list of names goes.
    """

    def __init__(
        self,
        command: Sequence[str] | None = None,
        *,
        url: str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
        headers: Mapping[str, str] | None = None,
        tool_filter: ToolFilter | None = None,
        requires_approval: bool | Collection[str] = False,
        elicitation_handler: ElicitationFnT | None = None,
        settings: Settings | None = None,
    ) -> None:
        self._command, self._url = _checked_target(command, url, env, cwd, headers)
        for name, given in (("tool_filter", tool_filter), ("requires_approval", requires_approval)):
            if isinstance(given, str):
                raise UserError(f"McpToolset({name}=…) takes a list of tool names, not the "
                                f"string {given!r}: write [{given!r}]")
        self.target = (f"command {shlex.join(self._command)!r}" if self._command
                       else f"URL {self._url}")
        """The command or URL, as messages name the server (never its headers)."""
        self._env = dict(env) if env is not None else None
        self._cwd = cwd
        self._headers = dict(headers or {})
        self._filter = tool_filter
        self._approval = requires_approval
        self._elicit: ElicitationFnT = elicitation_handler or self._decline
        self.settings = settings_or_default(settings)
        self._tools: tuple[McpTool, ...] | None = None
        self._shape: tuple[str, ...] = ()
        self._connection: Connection | None = None
        self._opening: asyncio.Task[Connection] | None = None
        self._in_flight: collections.Counter[str] = collections.Counter()
        # The opening and the calls in flight; each is awaited by whoever started it.
        self._tasks = TaskSet(f"McpToolset {self.target}", logger=logger)

    def __repr__(self) -> str:
        return (f"McpToolset(command={shlex.join(self._command)!r})" if self._command
                else f"McpToolset(url={self._url!r})")

    # -- listing -------------------------------------------------------------------------------

    def listed(self) -> tuple[McpTool, ...] | None:
        return self._tools

    def declared_names(self) -> Collection[str] | None:
        return _names_of(self._filter)

    async def open(self) -> None:
        await self._connected()

    def list_now(self) -> tuple[McpTool, ...]:
        """The tools; never listed before, they are listed on a thread of its own through a
        connection of its own (closed after), while the calling thread waits."""
        if self._tools is not None:
            return self._tools
        logger.info("listing the tools of the MCP server %s on a thread of its own (open "
                    "the toolset first, await open_toolsets(agent), not to wait)", self.target)
        found: list[list[types.Tool] | BaseException] = []

        def list_once() -> None:
            try:
                found.append(asyncio.run(self._list_once()))
            except BaseException as exc:  # handed to the calling thread
                found.append(exc)

        thread = threading.Thread(target=list_once, name=f"listing {self.target}")
        thread.start()
        thread.join()
        result = found[0]
        if isinstance(result, BaseException):
            raise result
        return self._listing(result)

    async def _list_once(self) -> list[types.Tool]:
        connection = self._new_connection()
        try:
            return await connection.open()
        finally:
            await connection.aclose()

    def _listing(self, tools: Sequence[types.Tool]) -> tuple[McpTool, ...]:
        """Keep the listing (a new version only when a tool changed); the tools kept.

        Raises:
            UserError: ``tool_filter`` names a tool the server does not list.
        """
        wanted = _names_of(self._filter)
        if wanted is not None:
            missing = sorted(set(wanted) - {tool.name for tool in tools})
            if missing:
                raise UserError(
                    f"tool_filter of {self!r} names {', '.join(map(repr, missing))}, which the "
                    f"server does not list (it lists: "
                    f"{', '.join(tool.name for tool in tools) or 'no tool'})")
        shape = tuple(tool.model_dump_json() for tool in tools)
        if self._tools is not None and shape == self._shape:
            return self._tools
        made = (McpTool(self, tool, requires_approval=self._approves(tool.name)) for tool in tools)
        self._tools = tuple(tool for tool in made if self._keeps(tool))
        self._shape = shape
        self.version += 1
        return self._tools

    def _keeps(self, tool: McpTool) -> bool:
        if self._filter is None:
            return True
        if callable(self._filter):
            return bool(self._filter(tool))
        return tool.name in self._filter

    def _approves(self, name: str) -> bool:
        if isinstance(self._approval, bool):
            return self._approval
        return name in self._approval

    # -- the connection ------------------------------------------------------------------------

    def _new_connection(self) -> Connection:
        return Connection(self._client, self.target, self.settings.mcp_connect_timeout)

    def _client(self) -> contextlib.AbstractAsyncContextManager[Client]:
        """What enters one connection's client: stdio, or Streamable HTTP over an HTTP client
        of its own."""
        options: dict[str, Any] = {"elicitation_callback": self._elicit,
                                   "client_info": _CLIENT_INFO, "cache": None}
        if self._command:
            server = StdioServerParameters(command=self._command[0], args=self._command[1:],
                                           env=self._env, cwd=self._cwd)
            # Its stderr is this process's as it is now (not as it was at import).
            return Client(stdio_client(server, errlog=sys.stderr), **options)
        return _http_client(self._url, self._headers, self.settings.mcp_connect_timeout, options)

    async def _connected(self) -> Connection:
        """The open connection, opened now when there is none (or it broke, or belongs to
        another event loop); concurrent callers share one opening.

        Raises:
            McpUnavailableError: the server could not be started or reached.
            UserError: ``tool_filter`` names a tool the server does not list.
        """
        connection = self._connection
        if connection is not None and connection.usable:
            return connection
        loop = asyncio.get_running_loop()
        opening = self._opening
        if opening is None or opening.get_loop() is not loop or opening.done():
            opening = self._opening = self._tasks.spawn(
                self._reopen(connection), name=f"opening {self.target}",
                expected=(McpUnavailableError, UserError))
        return await asyncio.shield(opening)

    async def _reopen(self, old: Connection | None) -> Connection:
        if old is not None:
            await old.aclose()
        connection = self._new_connection()
        tools = await connection.open()
        try:
            self._listing(tools)
        except BaseException:
            await connection.aclose()
            raise
        self._connection = connection
        return connection

    async def aclose(self) -> None:
        """Close the connection (a stdio server stops); the next use opens a new one."""
        opening, self._opening = self._opening, None
        if opening is not None and not opening.done() and opening.get_loop() is _loop():
            opening.cancel()
            await asyncio.wait({opening})
        connection, self._connection = self._connection, None
        if connection is not None:
            await connection.aclose()

    # -- a call --------------------------------------------------------------------------------

    async def stream_call(self, tool: McpTool, args: dict[str, Any],
                          context: ToolContext) -> AsyncIterator[ToolStreamEvent]:
        """One call: its progress events as they come, then ``done`` with its result.

        Closing the stream (the run was cancelled, the tool timed out) cancels the
        call: the SDK sends the server ``notifications/cancelled`` for it at once.
        """
        items: asyncio.Queue[ToolStreamEvent | None] = asyncio.Queue()
        limit = max(self.settings.max_progress_bytes, 1)

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            items.put_nowait(ToolStreamEvent(
                "progress", progress=progress, total=total,
                message=message[:limit] if message else message))

        call = self._tasks.spawn(self._call(tool.name, args, on_progress),
                                 name=f"MCP call {tool.name}", expected=(Exception,))
        call.add_done_callback(lambda _: items.put_nowait(None))
        try:
            while (item := await items.get()) is not None:
                yield item
            outcome = call.result()
            response = (outcome if isinstance(outcome, dict)
                        else await self._result(tool, outcome, context))
            yield ToolStreamEvent("done", response=response)
        finally:
            if not call.done():
                call.cancel()
                await asyncio.wait({call})

    async def _call(self, name: str, args: dict[str, Any],
                    on_progress: Any) -> types.CallToolResult | dict[str, Any]:
        """The server's result, or the error result (raw JSON) the call ends with."""
        try:
            connection = await self._connected()
        except McpUnavailableError as exc:
            logger.warning("%s", exc)
            return _error("mcp_unavailable", str(exc))
        assert connection.client is not None
        timeout = self.settings.mcp_call_timeout
        self._in_flight[name] += 1
        try:
            return await connection.client.call_tool(
                name, args, read_timeout_seconds=timeout, progress_callback=on_progress)
        except MCPError as exc:
            if exc.code == types.CONNECTION_CLOSED:
                connection.broken = True
                return self._gone(name)
            if exc.code == types.REQUEST_TIMEOUT:
                return _error("timeout", f"{name} did not answer within {timeout:g} s "
                                         "(mcp_call_timeout); the server was told to cancel it")
            code = "invalid_arguments" if exc.code == types.INVALID_PARAMS else "tool_error"
            return _error(code, f"the MCP server refused the call ({exc.code}): {exc.message}")
        except (RuntimeError, ValidationError) as exc:  # a result the SDK found malformed
            return _error("tool_error", f"the MCP server's result is not valid: {exc}")
        except Exception as exc:  # the transport failed (the server hung up, a reset)
            logger.warning("the MCP call %s to %s failed: %s", name, self.target,
                           type(exc).__name__)
            connection.broken = True
            return self._gone(name)
        finally:
            self._in_flight[name] -= 1
            if not self._in_flight[name]:
                del self._in_flight[name]

    def _gone(self, name: str) -> dict[str, Any]:
        again = "starts it again" if self._command else "connects again"
        logger.warning("the MCP server %s went away during a call to %s", self.target, name)
        return _error("mcp_disconnected", f"the MCP server {self.target} went away during the "
                                          f"call (it exited or hung up); the next call {again}")

    async def _result(self, tool: McpTool, result: types.CallToolResult,
                      context: ToolContext) -> dict[str, Any]:
        """What the model sees of a result (raw JSON): text, structured content, artifacts."""
        texts: list[str] = []
        resources: list[dict[str, Any]] = []
        artifacts: list[dict[str, Any]] = []
        for index, block in enumerate(result.content):
            if isinstance(block, types.TextContent):
                texts.append(block.text)
            elif isinstance(block, (types.ImageContent, types.AudioContent)):
                artifacts.append(await _store(context, tool.name, index, block.mime_type,
                                              block.data))
            elif isinstance(block, types.EmbeddedResource):
                found = block.resource
                if isinstance(found, types.TextResourceContents):
                    resources.append({"uri": found.uri, "mime_type": found.mime_type,
                                      "text": found.text})
                else:
                    artifacts.append({"uri": found.uri, **await _store(
                        context, tool.name, index, found.mime_type, found.blob)})
            else:  # a ResourceLink: where the server keeps it
                resources.append(block.model_dump(mode="json", exclude_none=True,
                                                  by_alias=True))
        text = "\n".join(texts)
        if result.is_error:
            return _error("tool_error", text or f"{tool.name} failed (the server gave no text)")
        return _shaped(result.structured_content, text, artifacts, resources)

    async def _decline(self, context: ClientRequestContext,
                       params: types.ElicitRequestParams) -> types.ElicitResult:
        """The default answer to a server's request for input: declined, and logged."""
        during = ", ".join(sorted(self._in_flight)) or "no call"
        logger.warning("the MCP server %s asked for input during %s (%r): declined; pass "
                       "McpToolset(elicitation_handler=…) to answer", self.target, during,
                       params.message[:200])
        return types.ElicitResult(action="decline")


def _shaped(structured: Any, text: str, artifacts: list[dict[str, Any]],
            resources: list[dict[str, Any]]) -> dict[str, Any]:  # raw JSON
    """The result object: the structured content (or ``{"result": text}``), with the
    artifacts, resources and any text that is not the structured content's JSON beside it."""
    if structured is None:
        body: dict[str, Any] = {"result": text} if text or not (artifacts or resources) else {}
        text = ""
    elif isinstance(structured, dict) and not set(RESERVED_KEYS) & set(structured):
        body = dict(structured)
    else:
        body = {"result": structured}
    if text and not _mirrors(text, structured):
        body["text"] = text
    if artifacts:
        body["artifacts"] = artifacts
    if resources:
        body["resources"] = resources
    return body


def _mirrors(text: str, structured: Any) -> bool:  # structured: raw JSON
    """Whether ``text`` is the structured content's JSON (what the spec asks servers to
    send), or that of its one ``result`` (a server's value wrapped as an object)."""
    try:
        value = json.loads(text)
    except ValueError:
        return False
    wrapped = isinstance(structured, dict) and set(structured) == {"result"}
    return bool(value == structured or (wrapped and value == structured["result"]))


async def _store(context: ToolContext, tool: str, index: int, mime_type: str | None,
                 data: str) -> dict[str, Any]:  # raw JSON
    """Save a base64 blob of a result as an artifact; the reference the model gets instead."""
    mime = mime_type or "application/octet-stream"
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return {"omitted": mime, "why": "its data is not base64"}
    filename = f"{tool}-{context.function_call_id}-{index}{mimetypes.guess_extension(mime) or ''}"
    try:
        version = await context.save_artifact(filename, Part(inline_data=Blob(mime, raw)))
    except UserError as exc:  # no artifact service, or the store refused it
        logger.warning("tool %s (call %s): a %s of %d bytes was not stored: %s", tool,
                       context.function_call_id, mime, len(raw), exc)
        return {"omitted": mime, "bytes": len(raw), "why": str(exc)}
    return {"artifact": filename, "version": version, "mime_type": mime, "bytes": len(raw)}


def _error(code: str, message: str) -> dict[str, Any]:
    """An error result, shaped as every error result a model sees (``{"error", "code"}``)."""
    return {"error": message, "code": code}


def _names_of(tool_filter: ToolFilter | None) -> Collection[str] | None:
    if tool_filter is None or callable(tool_filter):
        return None
    return tool_filter


def _loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _checked_target(command: Sequence[str] | None, url: str | None, env: Any, cwd: Any,
                    headers: Any) -> tuple[list[str], str]:
    """The command (or ``[]``) and the URL (or ``""``) of a toolset.

    Raises:
        UserError: what :class:`McpToolset` refuses.
    """
    if (command is None) == (url is None):
        raise UserError("McpToolset takes one server: command=[program, *args] (stdio) or "
                        "url='http://…/mcp' (Streamable HTTP)")
    if command is not None:
        if isinstance(command, str) or not command or not all(
                isinstance(part, str) and part for part in command):
            raise UserError("McpToolset(command=…) is a list: [program, *args], each a "
                            f"non-empty string, not {command!r}")
        if headers:
            raise UserError("McpToolset(headers=…) is for a server at a url")
        return list(command), ""
    assert url is not None
    if not url.startswith(("http://", "https://")):
        raise UserError(f"McpToolset(url=…) is an http:// or https:// URL, not {url!r}")
    if env is not None or cwd is not None:
        raise UserError("McpToolset(env=…, cwd=…) are for a server started with command=[…]")
    return [], url


@contextlib.asynccontextmanager
async def _http_client(url: str, headers: dict[str, str], connect_timeout: float,
                       options: dict[str, Any]) -> AsyncIterator[Client]:
    """A Streamable HTTP client over an HTTP client of its own (no read timeout: a call's
    stream may be quiet for long; ``mcp_call_timeout`` bounds each call)."""
    timeout = httpx2.Timeout(connect_timeout, read=None)
    async with (httpx2.AsyncClient(headers=headers, timeout=timeout) as http,
                Client(streamable_http_client(url, http_client=http), **options) as client):
        yield client
