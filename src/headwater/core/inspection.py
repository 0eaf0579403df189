"""The run inspector's spans, recorded by the same calls as the OpenTelemetry ones.

A run started inside :func:`recording` (the gateway does, for
``Settings.inspect_runs``) gets a :class:`RecordedRun`: it records each span into
a :class:`~.trace_record.TraceRecord` and forwards every call to the run's
OpenTelemetry trace, so one place records both (:func:`.telemetry.start_run`).
The record adds the agents' turns (:meth:`RunTrace.agent
<.spans.RunTrace.agent>`) and transfers and parents each span as it happened
(docs/inspector.md); outside :func:`recording` a run pays one context variable
read.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Mapping
from contextlib import aclosing
from contextvars import ContextVar, Token
from types import TracebackType
from typing import Any

from .spans import (
    NO_CHAT,
    NO_TOOL,
    NO_TRACE,
    ChatTrace,
    ModelLike,
    RequestLike,
    ResponseLike,
    RunTrace,
    ToolTrace,
    error_type,
)
from .trace_record import SpanRecord, TraceRecord
from .types import Usage

__all__ = ("RecordedRun", "recorded", "recording")

_recording: ContextVar[TraceRecord | None] = ContextVar("headwater_trace_record", default=None)


class recording:  # used as a function: ``with recording(record):``
    """The run started in the block (its first :func:`start_run`) records its spans into
    ``record`` too, for the run inspector (docs/inspector.md); a record serves one run.

    A class rather than a generator-based context manager: the gateway enters one per run.
    """

    __slots__ = ("_record", "_token")

    def __init__(self, record: TraceRecord) -> None:
        self._record = record
        self._token: Token[TraceRecord | None] | None = None

    def __enter__(self) -> TraceRecord:
        self._token = _recording.set(self._record)
        return self._record

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._token is not None:
            _recording.reset(self._token)
            self._token = None


def recorded(otel: RunTrace, agent: str) -> RunTrace:
    """The run's trace: ``otel`` (its OpenTelemetry spans, or ``NO_TRACE``), recording the
    inspector's spans too when the run starts inside :func:`recording`."""
    record = _recording.get()
    if record is None or record.claimed:
        return otel
    record.claimed = True
    return RecordedRun(otel, record, agent)


class RecordedRun(RunTrace):
    """A run that records the inspector's spans (:mod:`.trace_record`) and forwards every
    call to its OpenTelemetry trace (``inner``, :data:`NO_TRACE` without one).

    Parents: each branch has a stack of the spans open on it (agents' turns,
    transfers). A model or tool call goes under the top of its branch's stack
    (opening a lazy span for its agent when the top is another's); an agent's
    turn or a transfer goes on top of it. A branch with no open span takes its
    parent from where it was made: a call's branch (``"<agent>:<call id>"``,
    an agent used as a tool) from that call's span, a parallel agent's
    branch from the branch above it, the main line from the run's root.
    """

    __slots__ = ("_calls", "_otel", "_record", "_root", "_stacks")

    def __init__(self, inner: RunTrace, record: TraceRecord, agent: str) -> None:
        # The run's OpenTelemetry trace; None when it has none (no call to forward then).
        self._otel = None if inner is NO_TRACE else inner
        self._record = record
        root = record.open("agent", agent, agent, None, None)
        assert root is not None  # the first span of a new record
        record.origin = root.start  # times are seconds since the run's start
        self._root = root
        self._stacks: dict[str | None, list[SpanRecord]] = {}
        self._calls: dict[str, SpanRecord] = {}  # call id -> its tool span

    # -- parents ----------------------------------------------------------------------------

    def _from_above(self, branch: str | None) -> SpanRecord:
        """The span a branch with nothing open on it was made under (class docstring)."""
        stacks, calls = self._stacks, self._calls
        while branch:
            head, _, last = branch.rpartition(".")
            _, mark, call_id = last.rpartition(":")
            if mark and call_id in calls:
                return calls[call_id]
            branch = head or None
            stack = stacks.get(branch)
            if stack:
                return stack[-1]
        return self._root

    def _agent_span(self, agent: str, branch: str | None) -> SpanRecord:
        """The span a model or tool call of ``agent`` on ``branch`` goes under."""
        stacks, root = self._stacks, self._root
        if not stacks and branch is None and agent == root.agent:
            return root  # a lone agent's call: under the run's own span
        stack = stacks.get(branch)
        if stack:
            top = stack[-1]
            if top.kind == "agent" and top.agent == agent:
                return top
            if top.lazy:  # a live run's agent after a transfer: the last one's turn is over
                top.close()
                stack.pop()
        parent = stack[-1] if stack else self._from_above(branch)
        if parent.kind == "agent" and parent.agent == agent:
            return parent
        span = self._record.open("agent", agent, agent, branch, parent.id)
        if span is None:
            return parent
        span.lazy = True
        self._stacks.setdefault(branch, []).append(span)
        return span

    # -- the spans --------------------------------------------------------------------------

    def chat(self, agent: str, model: ModelLike, request: RequestLike | None, *,
             stream: bool = True, branch: str | None = None) -> ChatTrace:
        otel = self._otel
        inner = None if otel is None else otel.chat(agent, model, request, stream=stream,
                                                     branch=branch)
        record, root = self._record, self._root
        parent = root if (branch is None and not self._stacks and agent == root.agent) \
            else self._agent_span(agent, branch)  # (a lone agent's call: under the root)
        name = model.model
        span = record.open("model", name, agent, branch, parent.id, {
            "model": name, "provider": model.provider, "stream": stream})
        if span is None:
            return NO_CHAT if inner is None else inner
        if record.payloads:
            if request is not None:
                record.learn_secrets(request.tools)
                span.payload = {"request": {
                    "system_instruction": request.system_instruction,
                    "contents": list(request.contents), "tools": list(request.tools),
                    "config": dict(request.config),
                    "generate_content_config": request.generate_content_config}}
            else:
                span.payload = {}
        return _RecordedChat(inner, span)

    def tool(self, agent: str, name: str, call_id: str, args: Mapping[str, Any], *,
             branch: str | None = None) -> ToolTrace:
        otel = self._otel
        inner = None if otel is None else otel.tool(agent, name, call_id, args, branch=branch)
        span = self.start_tool(agent, name, call_id, args, branch)  # the block begins now
        if span is None:
            return NO_TOOL if inner is None else inner
        return _RecordedTool(inner, span)

    def start_tool(self, agent: str, name: str, call_id: str, args: Mapping[str, Any],
                   branch: str | None) -> SpanRecord | None:
        """Open the span of a tool call (as its block is entered)."""
        root = self._root
        parent = root if (branch is None and not self._stacks and agent == root.agent) \
            else self._agent_span(agent, branch)
        record = self._record
        span = record.open("tool", name, agent, branch, parent.id,
                           {"tool": name, "call_id": call_id})
        if span is not None:
            self._calls[call_id] = span
            if record.payloads:
                span.payload = {"arguments": (name, args)}
        return span

    def agent(self, name: str, branch: str | None,
              events: AsyncGenerator[Any, None]) -> AsyncGenerator[Any, None]:
        otel = self._otel
        return self._turn(name, branch, events if otel is None else otel.agent(name, branch,
                                                                                events))

    async def _turn(self, name: str, branch: str | None,
                    events: AsyncGenerator[Any, None]) -> AsyncGenerator[Any, None]:
        stack = self._stacks.setdefault(branch, [])
        depth = len(stack)
        root = self._root
        if not stack and branch is None and name == root.agent and root.end is None:
            stack.append(root)  # the root agent's turn is the run's root span
        else:
            parent = stack[-1] if stack else self._from_above(branch)
            span = self._record.open("agent", name, name, branch, parent.id)
            if span is not None:
                stack.append(span)
        try:
            async with aclosing(events) as turn:
                async for event in turn:
                    yield event
        finally:
            self._unwind(branch, depth)

    def _unwind(self, branch: str | None, depth: int) -> None:
        """End the spans of ``branch`` above ``depth`` (a turn's, and what it opened)."""
        stack = self._stacks.get(branch)
        if stack is None:
            return
        while len(stack) > depth:
            span = stack.pop()
            if span is not self._root:
                span.close()
        if not stack:
            del self._stacks[branch]

    def progress(self, call_id: str, count: int) -> None:
        if self._otel is not None:
            self._otel.progress(call_id, count)
        span = self._calls.get(call_id)
        if span is not None:
            span.attributes["progress"] = count

    def transfer(self, source: str, target: str, branch: str | None) -> None:
        if self._otel is not None:
            self._otel.transfer(source, target, branch)
        stack = self._stacks.setdefault(branch, [])
        parent = stack[-1] if stack else self._from_above(branch)
        span = self._record.open("transfer", f"{source} → {target}", source, branch,
                                 parent.id, {"from": source, "to": target})
        if span is not None:
            stack.append(span)
        elif not stack:
            del self._stacks[branch]

    def fail(self, error_type: str) -> None:
        if self._otel is not None:
            self._otel.fail(error_type)
        attributes = self._root.attributes
        if "error_type" not in attributes:
            attributes["error_type"] = error_type

    def end(self, usage: Usage, error_type: str | None = None) -> None:
        if self._otel is not None:
            self._otel.end(usage, error_type)
        root, record = self._root, self._record
        if record.ended:
            return
        attributes = root.attributes
        if error_type is not None and "error_type" not in attributes:
            attributes["error_type"] = error_type
        attributes["input_tokens"] = usage.input_tokens
        attributes["output_tokens"] = usage.output_tokens
        root.close()
        self._stacks.clear()
        record.finish()


class _RecordedChat(ChatTrace):
    __slots__ = ("_inner", "_span")
    recording = True

    def __init__(self, inner: ChatTrace | None, span: SpanRecord) -> None:
        self._inner = inner  # the OpenTelemetry span's, None without one
        self._span = span

    def first_chunk(self) -> bool:
        span, inner = self._span, self._inner
        span.attributes["time_to_first_chunk"] = time.monotonic() - span.start
        if inner is not None and inner.recording:
            inner.first_chunk()
        return False

    def end(self, response: ResponseLike) -> None:
        if self._inner is not None:
            self._inner.end(response)
        span = self._span
        if span.end is not None:
            return
        span.end = time.monotonic()
        attributes = span.attributes
        usage = response.usage
        if usage is not None:
            attributes["input_tokens"] = usage.input_tokens
            attributes["output_tokens"] = usage.output_tokens
        if response.finish_reason:
            attributes["finish_reason"] = response.finish_reason
        if response.error_code is not None:
            attributes["error_code"] = response.error_code
        if span.payload is not None:  # payloads on
            span.payload["response"] = response.content

    def fail(self, error_type: str) -> None:
        if self._inner is not None:
            self._inner.fail(error_type)
        span = self._span
        if span.end is None:
            span.close()
            span.attributes["error_code"] = error_type


class _RecordedTool(ToolTrace):
    __slots__ = ("_inner", "_span")

    def __init__(self, inner: ToolTrace | None, span: SpanRecord) -> None:
        self._inner = inner  # the OpenTelemetry span's, None without one
        self._span = span

    def __enter__(self) -> ToolTrace:
        if self._inner is not None:
            self._inner.__enter__()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._inner is not None:
            self._inner.__exit__(exc_type, exc, tb)
        span = self._span
        if span.end is not None:
            return
        span.end = time.monotonic()
        attributes = span.attributes
        if exc is not None:
            attributes["status"] = "cancelled" if isinstance(
                exc, (asyncio.CancelledError, GeneratorExit)) else "error"
            attributes["error_code"] = error_type(exc)
        else:
            attributes.setdefault("status", "ok")

    def result(self, result: Mapping[str, Any]) -> None:
        if self._inner is not None:
            self._inner.result(result)
        span = self._span
        if "error" in result:
            code = result.get("code")
            span.attributes["status"] = "error"
            span.attributes["error_code"] = code if isinstance(code, str) else "tool_error"
        if span.payload is not None:
            span.payload["result"] = result

    def approved(self, asked_at: float | None) -> None:
        if self._inner is not None:
            self._inner.approved(asked_at)
        if asked_at is not None:
            self._span.attributes["approval_wait"] = max(0.0, time.time() - asked_at)
