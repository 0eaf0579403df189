"""``LiveStreams``: the live streaming tools of one live run, and their stop.

A live streaming tool (kind ``live``) is answered at once with a pending status
(:data:`PENDING`) and runs on, in a task of the run's task group: each value it
yields is told to the model as ``Function <name> returned: <value>``, shown to
the caller and stored; its end (normal, a bound, or an error) is one terminal
message to both. Its bounds (``max_lifetime``, ``max_emissions``,
``min_interval``: latest wins) are kept by one loop in the stream's own task
(``_Emitter``), so nothing of a stream outlives its task. ``stop_streaming``
stops streams by name (or one by call id) and returns only once they have
ended: nothing of a stopped stream is told or stored after it returns. A call
named ``stop_streaming`` is always this built-in stop, even when the agent
declares a tool of that name (ADK's docs do): that declaration only lends its
description (:func:`stop_declared`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from contextlib import aclosing
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic_core import to_jsonable_python

from ..core.errors import QueueFull
from ..core.live_request_queue import LiveRequest, LiveRequestQueue
from ..core.tasks import TaskSet
from ..core.types import FunctionCall, ToolDeclaration
from ..tools.function_tool import BaseTool
from ._execution import ToolExecutor, closing_stream
from .invocation import InvocationContext

logger = logging.getLogger("headwater.live")

Say = Callable[[FunctionCall, str], Awaitable[None]]
"""Tells the model and the caller something about a call's stream, once it is stored."""

STOP_STREAMING = "stop_streaming"
PENDING = {"status": "The function is running asynchronously and the results are pending."}
STOP_DECLARATION = ToolDeclaration(
    name=STOP_STREAMING,
    description="Stop a running streaming function. Pass its name; pass call_id to stop one "
                "call only.",
    parameters={"type": "object", "required": ["function_name"], "properties": {
        "function_name": {"type": "string", "description": "Name of the streaming function."},
        "call_id": {"type": "string", "description": "Stop only this call."}}},
)


def stop_declared(tools: list[ToolDeclaration], streams: bool) -> list[ToolDeclaration]:
    """A live run's tool declarations with its ``stop_streaming``: always the built-in one.

    An agent's own tool named ``stop_streaming`` (ADK's docs declare one) only
    lends the built-in its description; its function never runs in a live run.
    Without one, the built-in is added when the agent has live streaming tools
    (``streams``).
    """
    if not any(d.name == STOP_STREAMING for d in tools):
        return [*tools, STOP_DECLARATION] if streams else list(tools)
    return [replace(STOP_DECLARATION,
                     description=d.description or STOP_DECLARATION.description)
            if d.name == STOP_STREAMING else d for d in tools]


@dataclass(slots=True, eq=False)
class _Stream:
    tool: BaseTool
    call: FunctionCall
    input_stream: LiveRequestQueue | None
    task: asyncio.Task[None] | None = None
    stopped: bool = False
    telling: asyncio.Lock = field(default_factory=asyncio.Lock)


class LiveStreams:
    """The running live streams of one live run, by call id.

    Args:
        ctx: the run (its settings and clock).
        spawn: starts a task in the run's task group.
        say: tells the model and the caller about a stream (:data:`Say`).
    """

    __slots__ = ("_running", "_say", "_spawn", "ctx")

    def __init__(self, ctx: InvocationContext,
                 spawn: Callable[[Coroutine[Any, Any, None]], asyncio.Task[None]],
                 say: Say) -> None:
        self.ctx = ctx
        self._spawn = spawn
        self._say = say
        self._running: dict[str, _Stream] = {}

    def start(self, executor: ToolExecutor, tool: BaseTool, call: FunctionCall) -> None:
        """Start ``call``'s stream (its tool context from ``executor``, the calling agent's)."""
        input_stream = (LiveRequestQueue(self.ctx.settings.live_input_queue_size)
                        if tool.consumes_input_stream else None)
        stream = _Stream(tool, call, input_stream)
        self._running[call.id] = stream
        stream.task = self._spawn(self._run(stream, executor))

    async def stop(self, call: FunctionCall, given: Mapping[str, str]) -> dict[str, Any]:
        """The built-in ``stop_streaming``: stop the streams it names; returns once each has
        ended and nothing more of it can be told. ``given``: stored call id -> the id the
        connection gave (a ``call_id`` argument may be either)."""
        name = str(call.args.get("function_name", ""))
        only = call.args.get("call_id")
        matching = [s for s in self._running.values() if s.tool.name == name and (
            only is None or only in (s.call.id, given.get(s.call.id)))]
        if not matching:
            return {"result": f"No active streaming function named {name}"}
        await self._halt(matching)
        return {"result": f"Successfully stopped streaming function {name}",
                "stopped": len(matching)}

    async def stop_all(self) -> None:
        """Stop every stream (a transfer: the old agent's streams end with its turn)."""
        await self._halt(list(self._running.values()))

    def copy_input(self, request: LiveRequest) -> None:
        """Give the client's request to every stream that consumes the input."""
        for stream in list(self._running.values()):
            queue = stream.input_stream
            if queue is None or queue.closed:
                continue
            try:
                queue.send(LiveRequest(
                    content=request.content, blob=request.blob,
                    activity_start=request.activity_start, activity_end=request.activity_end))
            except QueueFull:
                logger.warning("input stream of call %s is full; request dropped",
                               stream.call.id)

    def close_inputs(self) -> None:
        """The run is ending: every stream's input ends (their tasks end with the group)."""
        for stream in self._running.values():
            if stream.input_stream is not None:
                stream.input_stream.close()

    def clear(self) -> None:
        """Forget every stream (their tasks have ended with the run's group)."""
        self._running.clear()

    async def _halt(self, matching: list[_Stream]) -> None:
        """Stop streams; returns once each has ended and nothing more of it can be told."""
        if not matching:
            return
        for stream in matching:
            self._running.pop(stream.call.id, None)
            stream.stopped = True
            if stream.input_stream is not None:
                stream.input_stream.close()
        for stream in matching:
            async with stream.telling:  # an emission already on its way is committed first
                assert stream.task is not None
                stream.task.cancel()
        timeout = self.ctx.settings.live_stop_timeout
        _, late = await asyncio.wait([s.task for s in matching if s.task is not None],
                                     timeout=timeout)
        if late:  # a tool that ignores cancellation: it can no longer tell anything
            logger.warning("%d stopped stream(s) of %s still run %g s after the stop",
                           len(late), matching[0].tool.name, timeout)

    async def _run(self, stream: _Stream, executor: ToolExecutor) -> None:
        """One live stream: emissions within its bounds, then the terminal message."""
        tool, call = stream.tool, stream.call
        context = executor.tool_context(self.ctx, call, stream.input_stream)
        emitter = _Emitter(self, stream)
        trace = self.ctx.trace
        # The stream's span (the inspector's bar, an OpenTelemetry span): from its start to
        # its end, its emissions counted as a progress tool's progress.
        with trace.tool(executor.agent_name, tool.name, call.id, call.args,
                        branch=self.ctx.branch):
            try:
                ending = await emitter.pump(tool.stream(call.args, context))
            except asyncio.CancelledError:
                raise  # stopped: the stop_streaming result says so
            except Exception as exc:  # never silent: the model and the caller are told
                logger.warning("live stream %s (call %s) failed", tool.name, call.id,
                               exc_info=exc)
                await emitter.flush()
                await self.tell(stream,
                                f"Function {tool.name} failed: {type(exc).__name__}: {exc}")
            else:
                await emitter.flush()
                await self.tell(stream, ending)
            finally:
                trace.progress(call.id, emitter.sent)
                if stream.input_stream is not None:
                    stream.input_stream.close()
                self._running.pop(call.id, None)
                await context.end_processes()

    async def tell(self, stream: _Stream, text: str) -> None:
        """Say something to the model and the caller about a stream, once it is stored.

        Nothing is told once the stream is stopped.
        """
        async with stream.telling:
            if stream.stopped:
                return
            await self._say(stream.call, text)


class _Emitter:
    """Forwards a live stream's values within its bounds (lifetime, count, interval).

    One loop in the stream's own task waits for the next value, the lifetime's
    end and the held value's turn, so nothing of the stream outlives its task.
    """

    def __init__(self, streams: LiveStreams, stream: _Stream) -> None:
        self.streams = streams
        self.stream = stream
        self.tool = stream.tool
        self.clock = streams.ctx.clock
        self.sent = 0
        self.last_sent: float | None = None
        self.held: Any = None
        self.holding = False
        # The stream's next read and its wake-up timer: each awaited, or cancelled and
        # awaited, before the stream's task goes on (a read's failure is raised there).
        self._tasks = TaskSet("live stream", logger=logger)

    async def pump(self, source: AsyncIterator[Any]) -> str:
        tool, clock = self.tool, self.clock
        lifetime, most = tool.options.max_lifetime, tool.options.max_emissions
        deadline = None if lifetime is None else clock.monotonic() + lifetime
        async with aclosing(closing_stream(source)) as values:
            reader: asyncio.Task[Any] | None = None
            try:
                while True:
                    if deadline is not None and clock.monotonic() >= deadline:
                        return (f"Function {tool.name} stopped streaming: it reached its "
                                f"maximum lifetime of {lifetime:g} s.")
                    if reader is None:
                        reader = self._tasks.spawn(self._next(values), expected=BaseException)
                    await self._wait(reader, deadline)
                    if self._due():  # the held value's turn came first
                        await self.flush()
                    if not reader.done():
                        continue
                    value, reader = reader.result(), None
                    if value is _END:
                        return f"Function {tool.name} finished streaming."
                    if deadline is not None and clock.monotonic() >= deadline:
                        continue  # produced at (or past) the deadline: past the lifetime
                    await self.offer(value)
                    if most is not None and self.sent >= most:
                        return (f"Function {tool.name} stopped streaming: it reached its "
                                f"maximum of {most} emissions.")
            finally:
                if reader is not None and not reader.done():
                    reader.cancel()  # the pending read ends before the generator closes
                    with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                        await reader

    @staticmethod
    async def _next(values: AsyncIterator[Any]) -> Any:
        """The stream's next value, or ``_END``."""
        return await anext(values, _END)

    async def _wait(self, reader: asyncio.Task[Any], deadline: float | None) -> None:
        """Until the next value, the lifetime's end or the held value's turn."""
        wake, interval = deadline, self.tool.options.min_interval
        if self.holding and self.last_sent is not None and interval is not None:
            due = self.last_sent + interval
            wake = due if wake is None else min(wake, due)
        if wake is None:
            await asyncio.wait([reader])
            return
        timer = self._tasks.spawn(self.clock.sleep(max(0.0, wake - self.clock.monotonic())))
        try:
            await asyncio.wait([reader, timer], return_when=asyncio.FIRST_COMPLETED)
        finally:
            timer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await timer

    def _due(self) -> bool:
        interval = self.tool.options.min_interval
        return (self.holding and interval is not None and self.last_sent is not None
                and self.clock.monotonic() - self.last_sent >= interval)

    async def offer(self, value: Any) -> None:
        interval = self.tool.options.min_interval
        now = self.clock.monotonic()
        if interval is None or self.last_sent is None or now - self.last_sent >= interval:
            await self._send(value)
            return
        self.held, self.holding = value, True  # latest wins

    async def flush(self) -> None:
        if self.holding:
            value, self.held, self.holding = self.held, None, False
            await self._send(value)

    async def _send(self, value: Any) -> None:
        self.sent += 1
        self.last_sent = self.clock.monotonic()
        await self.streams.tell(self.stream,
                                f"Function {self.tool.name} returned: {_render(value)}")


_END = object()


def _render(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(to_jsonable_python(value, fallback=repr), ensure_ascii=False)
