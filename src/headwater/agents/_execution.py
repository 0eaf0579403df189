"""Executing the function calls of one model aggregate.

Calls run concurrently (bounded by ``Settings.max_parallel_tools``); each gets
exactly one outcome, and every failure — unknown tool, invalid arguments, an
exception, a timeout, a budget, a stream without ``done`` — becomes an error
result the model sees. A streaming tool's progress reaches the caller as
partial events while the calls run (never persisted, never sent to a model);
under ``StreamingMode.NONE`` it is drained with a warning. A call that needs
approval does not run: its outcome is an :class:`ApprovalRequest`. A call to
an :class:`~headwater.agents.agent_tool.AgentTool` drives its agent within the
run (``ctx.driver``); the inner run's events reach the caller the way progress
does.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
from collections.abc import AsyncGenerator, Callable, Container, Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

from pydantic_core import to_json, to_jsonable_python

from ..core.errors import SessionError, ToolArgumentsError, UserError
from ..core.events import (
    ApprovalRequest,
    Event,
    EventActions,
    ToolProgress,
    ToolStreamEvent,
    partial_event,
)
from ..core.live_request_queue import LiveRequestQueue
from ..core.types import Blob, Content, FunctionCall, Part
from ..sessions.ledger import call_branch
from ..tools.approval import args_sha256
from ..tools.context import ToolContext
from ..tools.function_tool import BaseTool
from ..tools.middleware import ToolInvocation, ToolMiddleware, chain
from ..tools.threads import sync_tool_workers
from .agent_tool import AgentTool
from .callbacks import AfterToolCallback, BeforeToolCallback
from .handoff import Handoff
from .invocation import AgentOutcome, InvocationContext

logger = logging.getLogger("headwater.tools")
security_logger = logging.getLogger("headwater.security")

ProgressSink = Callable[[Event], None]


def error_result(code: str, message: str) -> dict[str, Any]:
    """The shape of every error result a model sees."""
    return {"error": message, "code": code}


async def maybe_await(value: Any) -> Any:
    """Await ``value`` if it is awaitable (callbacks may be sync or async)."""
    if inspect.isawaitable(value):
        return await value
    return value


class _StreamIncomplete(Exception):
    """A streaming tool ended without its ``done`` event."""


class InnerRunPaused(Exception):
    """The agent a call ran (an ``AgentTool``) paused: a call under it waits for a human.

    Raised by the call and turned into a ``waiting`` outcome before any error
    handling sees it; a tool middleware that catches every exception should let
    it pass.
    """


class InnerRun:
    """What the caller of an agent used as a tool makes of the inner run's events: its one
    result (docs/multi-agent.md, "Agents as tools"). One home for the first run of the
    call (``ToolExecutor``) and its resume after a pause (``TreeRun``)."""

    __slots__ = ("answer", "last")

    def __init__(self) -> None:
        self.answer = ""
        self.last: Event | None = None

    def see(self, event: Event) -> None:
        """Take one event of the inner run (partial ones and the user's turn count for
        nothing)."""
        if event.partial or event.author == "user":
            return
        self.last = event
        content = event.content
        if (event.error_code is None and content is not None and content.role == "model"
                and not content.function_calls):
            self.answer = content.text  # the last final answer wins (thoughts left out)

    def result(self, tool: AgentTool, actions: EventActions) -> dict[str, Any]:
        """The call's result: ``{"result": <the last final answer's text>}``, or an error
        result when the inner run ended in an error. ``skip_summarization`` goes on
        ``actions``."""
        last = self.last
        if last is not None and last.error_code is not None:
            code = "budget_exceeded" if last.error_code == "budget_exceeded" else "tool_error"
            why = f": {last.error_message}" if last.error_message else ""
            return error_result(code, f"agent {last.author!r} failed ({last.error_code}){why}")
        if tool.skip_summarization:
            actions.skip_summarization = True
        return {"result": self.answer}


@dataclass(slots=True)
class CallOutcome:
    """What became of one call.

    Attributes:
        call: the function call.
        response: its result for the model; ``None`` while it awaits approval.
        actions: state and artifact changes the call made.
        approval: the request a human must answer before the call runs.
        long_running: the result is a ticket; the real one comes later.
        return_direct: the result ends the run.
        waiting: no result yet: the agent the call ran (an ``AgentTool``) paused.
    """

    call: FunctionCall
    response: dict[str, Any] | None  # raw JSON object
    actions: EventActions = field(default_factory=EventActions)
    approval: ApprovalRequest | None = None
    long_running: bool = False
    return_direct: bool = False
    waiting: bool = False


class ToolExecutor:
    """Runs the calls of one aggregate for one agent."""

    __slots__ = ("after", "agent_name", "before", "middleware", "tools")

    def __init__(
        self,
        *,
        agent_name: str,
        tools: Mapping[str, BaseTool],
        before: Sequence[BeforeToolCallback],
        after: Sequence[AfterToolCallback],
        middleware: Sequence[ToolMiddleware] = (),
    ) -> None:
        self.agent_name = agent_name
        self.tools = tools
        self.before = before
        self.after = after
        self.middleware = middleware

    async def run(
        self, ctx: InvocationContext, calls: Sequence[FunctionCall],
        approved: Container[str] = (), progress: ProgressSink | None = None,
    ) -> list[CallOutcome]:
        """Run every call concurrently; their outcomes, in call order.

        ``progress`` receives the partial progress events of streaming tools as
        they happen (``None``: progress is dropped, as under NONE). Cancelling
        the caller cancels every running call and waits for their cleanup.
        """
        per_turn = ctx.run_config.max_tool_calls_per_turn
        refused: list[CallOutcome] = []
        if per_turn is not None and len(calls) > per_turn:
            refused = [CallOutcome(call, error_result(
                "budget_exceeded", f"the turn's budget of {per_turn} tool calls "
                "(max_tool_calls_per_turn) is spent; not executed")) for call in calls[per_turn:]]
            calls = calls[:per_turn]
        with sync_tool_workers(ctx.settings.sync_tool_workers):
            if len(calls) == 1:  # the common case: no task group
                return [await self._run_one(ctx, calls[0], progress, approved), *refused]
            limit = asyncio.Semaphore(ctx.settings.max_parallel_tools)

            async def one(call: FunctionCall) -> CallOutcome:
                async with limit:
                    return await self._run_one(ctx, call, progress, approved)

            async with asyncio.TaskGroup() as group:
                tasks = [group.create_task(one(call)) for call in calls]
        return [task.result() for task in tasks] + refused

    def streams_progress(self, calls: Sequence[FunctionCall]) -> bool:
        """Whether any of these calls is to a tool that streams progress (or to an agent)."""
        tools = self.tools
        return any((tool := tools.get(c.name)) is not None
                   and (tool.options.kind != "call" or isinstance(tool, AgentTool))
                   for c in calls)

    async def _run_one(
        self, ctx: InvocationContext, call: FunctionCall, sink: ProgressSink | None,
        approved: Container[str],
    ) -> CallOutcome:
        tool = self.tools.get(call.name)
        if tool is None:
            security_logger.warning(
                "refused call %s to tool %r, which agent %r does not have",
                call.id, call.name, self.agent_name,
            )
            return CallOutcome(call, error_result("unknown_tool",
                                                  f"there is no tool named {call.name!r}"))
        too_large = _args_too_large(call, ctx.settings.max_tool_args_bytes)
        if too_large is not None:
            security_logger.warning("refused call %s to %r: %s", call.id, call.name, too_large)
            return CallOutcome(call, error_result("invalid_arguments", too_large))
        if tool.options.requires_approval and call.id not in approved:
            return CallOutcome(call, None, approval=ApprovalRequest(
                call_id=call.id, tool_name=tool.name, args=call.args,
                args_sha256=args_sha256(call.args),
                summary=tool.summarize_approval(call.args)))
        limit = ctx.run_config.max_tool_calls
        if limit is not None and ctx.stats.tool_calls >= limit:
            return CallOutcome(call, error_result(
                "budget_exceeded",
                f"the run's budget of {limit} tool calls is spent; not executed"))
        ctx.stats.tool_calls += 1
        tool_context = self.tool_context(ctx, call)
        with ctx.trace.tool(self.agent_name, tool.name, call.id, call.args,
                            branch=ctx.branch) as span:
            if call.id in approved:  # the inspector's approval wait (docs/inspector.md)
                span.approved(next((e.timestamp for e in reversed(ctx.session.events) if any(
                    a.call_id == call.id for a in e.actions.requested_approvals)), None))
            try:
                result, ok = await self._result(ctx, tool, call, tool_context, sink)
            except InnerRunPaused:  # no result until the agent it ran goes on
                return CallOutcome(call, None, tool_context.actions, waiting=True)
            finally:  # returned, failed, timed out or cancelled: its processes end with it
                await tool_context.end_processes()
            limit_bytes = ctx.settings.max_result_bytes
            if _small(result):
                result = _bounded(result, limit_bytes)
            else:  # serialising and cutting a large result would block the event loop
                result = await asyncio.to_thread(_bounded_large, result, limit_bytes)
            span.result(result)
        return CallOutcome(call, result, tool_context.actions,
                           long_running=ok and tool.options.long_running,
                           return_direct=ok and tool.options.return_direct)

    def tool_context(self, ctx: InvocationContext, call: FunctionCall,
                     input_stream: LiveRequestQueue | None = None,
                     actions: EventActions | None = None) -> ToolContext:
        """The context a call of this agent's tools gets (``actions``: whose changes it
        records, its own by default)."""
        return ToolContext(
            function_call_id=call.id, tool_name=call.name, invocation_id=ctx.invocation_id,
            agent_name=self.agent_name, app_name=ctx.app_name, user_id=ctx.session.user_id,
            session_id=ctx.session.id, session_state=ctx.session.state, clock=ctx.clock,
            input_stream=input_stream, artifact_service=ctx.artifact_service,
            memory_service=ctx.memory_service, user_content=ctx.user_content,
            invocation_context=ctx, actions=actions,
        )

    async def _result(
        self, ctx: InvocationContext, tool: BaseTool, call: FunctionCall,
        tool_context: ToolContext, sink: ProgressSink | None,
    ) -> tuple[dict[str, Any], bool]:
        value: Any = None
        for before in self.before:
            value = await maybe_await(before(tool=tool, args=call.args,
                                             tool_context=tool_context))
            if value is not None:
                break
        else:
            value = await self._invoke(ctx, tool, call, tool_context, sink)
        ok = not (isinstance(value, dict) and "error" in value)
        for after in self.after:  # the raw value, as ADK's after_tool_callback gets it
            override = await maybe_await(after(tool=tool, args=call.args,
                                               tool_context=tool_context, tool_response=value))
            if override is not None:
                value = override
                break
        if _small(value):
            return _as_object(value), ok
        return await asyncio.to_thread(_as_object, value), ok

    async def _invoke(
        self, ctx: InvocationContext, tool: BaseTool, call: FunctionCall,
        tool_context: ToolContext, sink: ProgressSink | None,
    ) -> Any:
        """The call's raw value (what the tool returned), or an error result."""
        timeout = (tool.options.timeout if tool.options.timeout is not None
                   else ctx.settings.tool_timeout)

        async def terminal(invocation: ToolInvocation) -> Any:
            if isinstance(invocation.tool, AgentTool):
                return await self._drive(ctx, invocation.tool, invocation, sink)
            found, value = invocation.tool.cached(invocation.args)
            if found:
                return value
            if invocation.tool.options.kind in ("progress", "live"):
                value = await self._drain(ctx, invocation, sink)
            else:
                value = await invocation.tool.run(invocation.args, invocation.tool_context)
            invocation.tool.remember(invocation.args, value)
            return value

        invoke = chain(self.middleware, terminal) if self.middleware else terminal
        try:
            async with asyncio.timeout(timeout) as scope:
                value = await invoke(ToolInvocation(tool, call.args, tool_context))
            if tool.options.response_format == "content_and_artifact":
                value = await self._split_artifact(ctx, tool, call, tool_context, value)
            return value
        except InnerRunPaused:
            raise
        except ToolArgumentsError as exc:
            return error_result("invalid_arguments", str(exc))
        except _StreamIncomplete as exc:
            return error_result("stream_incomplete", str(exc))
        except TimeoutError as exc:
            if scope.expired():
                return error_result("timeout", f"{tool.name} did not finish within {timeout:g} s")
            return _failure(tool, call, exc)
        except (SessionError, UserError) as exc:
            if isinstance(tool, AgentTool):  # the store, or the app, failed: as anywhere in a run
                raise
            return _failure(tool, call, exc)
        except Exception as exc:  # a tool's failure is a result for the model, not a crash
            return _failure(tool, call, exc)

    async def _drain(self, ctx: InvocationContext, invocation: ToolInvocation,
                     sink: ProgressSink | None) -> Any:
        """Run a streaming tool to its ``done``; forward what comes before it as progress.

        Raises:
            _StreamIncomplete: the generator ended without ``done`` (and yielded no
                plain values, whose last one would be the result).
        """
        tool, call_id = invocation.tool, invocation.call_id
        if sink is None:
            logger.warning("tool %s (call %s) streams progress but the run is not streaming "
                           "(StreamingMode.NONE): its progress is dropped; its result still "
                           "reaches the model", tool.name, call_id)
        progress = _Progress(self.agent_name, ctx, tool.name, call_id, sink)
        plain: list[Any] = []
        stream = tool.stream(invocation.args, invocation.tool_context)
        async with aclosing(closing_stream(stream)) as items:
            async for item in items:
                if isinstance(item, ToolStreamEvent):
                    if item.type == "done":
                        progress.flush()
                        return item.response
                    progress.offer(item)
                else:
                    # Plain values: each is progress, and the last one is the result.
                    plain[:] = [item]
                    progress.offer(ToolStreamEvent("part_delta", delta=_as_delta(item)))
        progress.flush()
        if plain:
            return plain[0]
        raise _StreamIncomplete(
            f"{tool.name} ended without a 'done' event after {progress.seen} progress events; "
            "it produced no result")

    async def _drive(self, ctx: InvocationContext, tool: AgentTool, invocation: ToolInvocation,
                     sink: ProgressSink | None) -> dict[str, Any]:
        """Run an ``AgentTool``'s agent on the call's branch; its final text is the result.

        Every event of the inner run goes to ``sink`` (the caller's stream; ``None``
        under NONE: stored, not shown), through :meth:`Handoff.hand` when it is
        one, so the inner run waits for the caller. The result is
        :meth:`InnerRun.result`.

        Raises:
            ToolArgumentsError: ``request`` is missing or not a string (nothing ran).
            InnerRunPaused: the inner run paused (a call in it waits for a human).
        """
        driver = ctx.driver
        if driver is None:
            raise UserError(f"AgentTool {tool.name!r} needs a run to drive its agent in; run "
                            "the agent that has it with headwater.Runner")
        request = invocation.args.get("request")
        if not isinstance(request, str):
            raise ToolArgumentsError(f"{tool.name} takes one argument, 'request', a string")
        branch = call_branch(ctx.branch, self.agent_name, invocation.call_id)
        hand = sink.hand if isinstance(sink, Handoff) else None
        inner, outcome = InnerRun(), AgentOutcome()
        async with aclosing(driver(tool.agent, branch, Content("user", [Part(text=request)]),
                                   outcome)) as events:
            async for event in events:
                if hand is not None:
                    await hand(event)
                elif sink is not None:
                    sink(event)
                inner.see(event)
        if outcome.paused:
            raise InnerRunPaused(tool.name)
        return inner.result(tool, invocation.tool_context.actions)

    async def _split_artifact(self, ctx: InvocationContext, tool: BaseTool, call: FunctionCall,
                              tool_context: ToolContext, value: Any) -> Any:
        if not (isinstance(value, tuple) and len(value) == 2):
            raise TypeError(f"{tool.name} has response_format='content_and_artifact' and must "
                            f"return (content, artifact), not {type(value).__name__}")
        content, artifact = value
        service = ctx.artifact_service
        if service is None:
            raise RuntimeError("no artifact service: pass artifact_service= to the Runner")
        filename = f"{tool.name}-{call.id}"
        version = await service.save_artifact(
            app_name=ctx.app_name, user_id=ctx.session.user_id, session_id=ctx.session.id,
            filename=filename, artifact=_as_part(artifact))
        tool_context.actions.artifact_delta[filename] = version
        return content


class _Progress:
    """Bounded forwarding of one call's progress (count and bytes; then latest wins)."""

    __slots__ = ("_author", "_branch", "_bytes", "_held", "_invocation", "_max_bytes",
                 "_max_events", "_sent", "_sink", "_suppressed", "_trace", "call_id", "seen",
                 "tool_name")

    def __init__(self, author: str, ctx: InvocationContext, tool_name: str, call_id: str,
                 sink: ProgressSink | None) -> None:
        self._author = author
        self._invocation = ctx.invocation_id
        self._branch = ctx.branch
        self._sink = sink
        self._trace = ctx.trace
        self._max_events = ctx.settings.max_progress_events
        self._max_bytes = ctx.settings.max_progress_bytes
        self.tool_name = tool_name
        self.call_id = call_id
        self.seen = 0
        self._sent = 0
        self._bytes = 0
        self._held: ToolStreamEvent | None = None
        self._suppressed = 0

    def offer(self, event: ToolStreamEvent) -> None:
        self.seen += 1
        if self._sink is None:
            return
        size = len(event.delta.encode()) if event.delta else 0
        if self._sent < self._max_events and self._bytes + size <= self._max_bytes:
            self._bytes += size
            self._send(event, 0)
        else:
            self._held = event
            self._suppressed += 1

    def flush(self) -> None:  # the stream's end
        self._trace.progress(self.call_id, self.seen)  # the inspector's progress count
        if self._held is not None:
            self._send(self._held, self._suppressed - 1)
            self._held = None

    def _send(self, event: ToolStreamEvent, coalesced: int) -> None:
        assert self._sink is not None
        self._sent += 1
        self._sink(partial_event(self._invocation, self._author, None, branch=self._branch,
                                 tool_progress=ToolProgress(self.call_id, self.tool_name, event,
                                                            self._sent, coalesced)))


async def closing_stream(stream: Any) -> AsyncGenerator[Any, None]:
    """Iterate a tool's async iterator and close it (its ``finally`` runs) however we stop."""
    try:
        async for item in stream:
            yield item
    finally:
        close = getattr(stream, "aclose", None)
        if close is not None:
            await close()


def _as_delta(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(to_jsonable_python(value, fallback=repr), ensure_ascii=False)


def _as_part(artifact: Any) -> Part:
    if isinstance(artifact, Part):
        return artifact
    if isinstance(artifact, Blob):
        return Part(inline_data=artifact)
    if isinstance(artifact, bytes):
        return Part(inline_data=Blob("application/octet-stream", artifact))
    if isinstance(artifact, str):
        return Part(text=artifact)
    return Part(text=_as_delta(artifact))


def _failure(tool: BaseTool, call: FunctionCall, exc: Exception) -> dict[str, Any]:
    # The exception's text may hold what the tool was given (secrets, payloads): at WARNING
    # only its type; the text and the traceback at DEBUG, for whoever turns that on.
    logger.warning("tool %s (call %s) raised %s", tool.name, call.id, type(exc).__name__)
    logger.debug("tool %s (call %s) raised %s: %s", tool.name, call.id, type(exc).__name__,
                 exc, exc_info=exc)
    return error_result("tool_error", f"{type(exc).__name__}: {exc}")


def _as_object(value: Any) -> dict[str, Any]:
    jsonable = to_jsonable_python(value, fallback=repr)
    return jsonable if isinstance(jsonable, dict) else {"result": jsonable}


_INLINE_BYTES = 64 * 1024  # results surely smaller than this are serialised on the loop
_INLINE_ITEMS = 2048


def _small(value: Any) -> bool:
    """Whether ``value`` is surely small: a walk that gives up past a few KiB or items.

    Objects it does not know (models, dataclasses) count as large: their size
    is unknown until they are serialised, which then happens off the loop.
    """
    stack = [value]
    size = items = 0
    while stack:
        item = stack.pop()
        items += 1
        if isinstance(item, (str, bytes)):
            size += len(item)
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
        elif item is None or isinstance(item, (int, float)):
            size += 8
        else:
            return False
        if size > _INLINE_BYTES or items > _INLINE_ITEMS:
            return False
    return True


def _args_too_large(call: FunctionCall, limit: int) -> str | None:
    """Why the call's arguments are refused for their size, or ``None``."""
    size = len(to_json(call.args, fallback=repr))
    if size <= limit:
        return None
    return (f"the arguments are {size} bytes of JSON, more than max_tool_args_bytes={limit}; "
            "not executed")


def _bounded_large(result: dict[str, Any], limit: int) -> dict[str, Any]:
    """``_bounded`` for a large result, on a worker thread.

    It encodes only as much as the cut keeps (strings longer than the limit are
    clipped first), with the pure-Python ``iterencode``, so the worker gives the
    GIL back to the event loop as it goes; C's one-shot ``json.dumps`` of a
    50 MiB result would hold it for half a second whatever thread ran it.
    """
    pieces: list[str] = []
    size = 0
    for chunk in _ENCODER.iterencode(_clip(result, limit)):
        pieces.append(chunk)
        size += len(chunk)
        if size > limit:
            break
    else:
        return result
    marker = f"… [truncated: more than {limit} characters, limit {limit}]"
    return {"result": "".join(pieces)[: limit - len(marker)] + marker, "truncated": True}


_ENCODER = json.JSONEncoder(ensure_ascii=False)


def _clip(value: Any, limit: int) -> Any:
    """``value`` with every string cut to ``limit`` characters (its JSON prefix is unchanged)."""
    if isinstance(value, str):
        return value[:limit] if len(value) > limit else value
    if isinstance(value, dict):
        return {key: _clip(item, limit) for key, item in value.items()}
    if isinstance(value, list):
        return [_clip(item, limit) for item in value]
    return value


def _bounded(result: dict[str, Any], limit: int) -> dict[str, Any]:
    encoded = _ENCODER.encode(result)  # json.dumps(ensure_ascii=False) builds an encoder a call
    if len(encoded) <= limit:
        return result
    marker = f"… [truncated: {len(encoded)} characters, limit {limit}]"
    return {"result": encoded[: limit - len(marker)] + marker, "truncated": True}
