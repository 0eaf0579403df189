"""The live (BIDI) flow: one agent, one model connection, tools in the background.

Input comes from a ``LiveRequestQueue``; output is one stream of events. Each
non-partial event is persisted before the caller sees it, whichever background
task produced it. Tools run from the model's aggregates, in parallel, with the
callbacks, middleware and budgets of ``run_async``. A live streaming tool (an
async generator not declared ``streaming=True``) is answered at once with a
pending status and runs on: each value it yields is told to the model as
``Function <name> returned: <value>``, shown to the caller and stored; its end
(normal, a bound, or an error) is one terminal message to both.
``stop_streaming`` stops streams by name (or one by call id). Closing the queue,
closing the stream or cancelling the consumer tears everything down.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncGenerator, Coroutine
from contextlib import aclosing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic_core import to_jsonable_python

from ..errors import QueueFull, UserError
from ..events import ApprovalDecision, Event, EventActions
from ..live_request_queue import LiveRequest, LiveRequestQueue
from ..models.base import LlmResponse
from ..models.connection import BaseLlmConnection
from ..tools.function_tool import BaseTool
from ..types import Content, FunctionCall, Part, ToolDeclaration
from ._execution import CallOutcome, closing_stream, error_result
from .approvals import answered_calls, split_approvals
from .invocation import InvocationContext

if TYPE_CHECKING:
    from .agent import Agent

logger = logging.getLogger("headwater.live")

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


@dataclass(slots=True)
class _Stream:
    tool: BaseTool
    call: FunctionCall
    task: asyncio.Task[None]
    input_stream: LiveRequestQueue | None


class LiveRun:
    """One ``run_live``: owns the connection, the background tasks and the streams."""

    def __init__(self, agent: Agent, ctx: InvocationContext, queue: LiveRequestQueue) -> None:
        self.agent = agent
        self.ctx = ctx
        self.queue = queue
        self.out: asyncio.Queue[Event | None] = asyncio.Queue()
        self.tasks: set[asyncio.Task[Any]] = set()
        self.streams: dict[str, _Stream] = {}
        self.conn: BaseLlmConnection | None = None
        self._realtime_to_model = True
        self._received = 0
        self._progress = asyncio.Event()

    async def events(self) -> AsyncGenerator[Event, None]:
        """The run's events until the queue closes or the consumer stops."""
        ctx, agent = self.ctx, self.agent
        request = await agent._build_request(ctx, ctx.callback_context(agent.name))
        if any(t.options.kind == "live" for t in agent.tools) and STOP_STREAMING not in {
                t.name for t in agent.tools}:
            request.tools.append(STOP_DECLARATION)
        self.conn = agent.model.connect(request)
        self._spawn(self._pump_input())
        self._spawn(self._pump_model())
        try:
            while True:
                event = await self.out.get()
                if event is None:
                    return
                yield event
        finally:
            await self._teardown()

    # -- plumbing -----------------------------------------------------------------------------

    def _spawn(self, work: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.create_task(work)
        self.tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.error("live task failed", exc_info=task.exception())
            self.out.put_nowait(Event(invocation_id=self.ctx.invocation_id,
                                      author=self.agent.name, error_code="internal",
                                      error_message="a live task failed"))
            self.out.put_nowait(None)

    async def _emit(self, event: Event) -> None:
        """Persist (non-partial events), then hand to the caller."""
        if not event.partial and self.ctx.session_service is not None:
            await self.ctx.session_service.append_event(self.ctx.session, event)
        self.out.put_nowait(event)

    async def _teardown(self) -> None:
        for stream in self.streams.values():
            if stream.input_stream is not None:
                stream.input_stream.close()
        tasks = [t for t in self.tasks if not t.done()]
        tasks += [s.task for s in self.streams.values() if not s.task.done()]
        for task in tasks:
            task.cancel()
        if self.conn is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.conn.close(), self.ctx.settings.live_stop_timeout)
        if tasks:
            await asyncio.wait(tasks, timeout=self.ctx.settings.live_stop_timeout)
        self.streams.clear()

    # -- input ----------------------------------------------------------------------------------

    async def _pump_input(self) -> None:
        assert self.conn is not None
        async for request in self.queue:
            self._copy_to_input_streams(request)
            if request.content is not None and await self._answers(request.content):
                continue
            if request.content is not None:
                await self.conn.send_content(request.content, interrupt=True)
                await self._caught_up()  # an answer this cut short is stored first
                await self._emit(Event(invocation_id=self.ctx.invocation_id, author="user",
                                       content=request.content))
            elif request.blob is not None and self._realtime_to_model:
                try:
                    await self.conn.send_realtime(request.blob)
                except NotImplementedError:
                    self._realtime_to_model = False  # this model takes no media: tools only
        self.out.put_nowait(None)

    async def _answers(self, content: Content) -> bool:
        """Handle approval answers sent through the queue; ``True`` if the content was one.

        A refused answer (no pending call, a replay, other arguments) is shown to
        the caller as a partial error event and stored nowhere.
        """
        rest, decisions = split_approvals(content)
        if not decisions:
            return False
        try:
            resume = answered_calls(self.ctx.session, None, decisions)
        except UserError as exc:
            self.out.put_nowait(Event(invocation_id=self.ctx.invocation_id, author="user",
                                      partial=True, error_code="internal",
                                      error_message=str(exc)))
            return True
        await self._emit(Event(invocation_id=self.ctx.invocation_id, author="user",
                               content=rest, actions=EventActions(approval_decisions=decisions)))
        self._spawn(self._resume(resume))
        return True

    async def _resume(self, resume: list[tuple[FunctionCall, ApprovalDecision]]) -> None:
        agent, ctx = self.agent, self.ctx
        approved = [call for call, decision in resume if decision.approved]
        outcomes: dict[str, CallOutcome] = {
            call.id: CallOutcome(call, error_result(
                "denied", "A human denied this call" + (f": {d.reason}" if d.reason else ".")))
            for call, d in resume if not d.approved}
        if approved:
            async with aclosing(agent._executor.run(ctx, approved,
                                                    {c.id for c in approved})) as items:
                async for item in items:
                    if isinstance(item, Event):
                        await self._emit(item)
                    else:
                        outcomes.update((o.call.id, o) for o in item)
        await self._send_results(agent._results_event(ctx, [outcomes[c.id] for c, _ in resume]))

    async def _send_results(self, event: Event) -> None:
        await self._emit(event)
        if event.content is not None:
            assert self.conn is not None
            await self.conn.send_content(event.content, interrupt=False)

    async def _caught_up(self) -> None:
        """Wait until every response the connection has put out so far has been emitted."""
        queued = getattr(self.conn, "queued", None)
        while queued is not None and self._received < queued:
            self._progress.clear()
            await self._progress.wait()

    def _copy_to_input_streams(self, request: LiveRequest) -> None:
        for stream in list(self.streams.values()):
            if stream.input_stream is None or stream.input_stream.closed:
                continue
            try:
                stream.input_stream.send(LiveRequest(
                    content=request.content, blob=request.blob,
                    activity_start=request.activity_start, activity_end=request.activity_end))
            except QueueFull:
                logger.warning("input stream of call %s is full; request dropped",
                               stream.call.id)

    # -- model ----------------------------------------------------------------------------------

    async def _pump_model(self) -> None:
        assert self.conn is not None
        async with aclosing(self.conn.receive()) as responses:
            async for response in responses:
                await self._handle_response(response)
                self._received += 1
                self._progress.set()

    async def _handle_response(self, response: LlmResponse) -> None:
        agent, ctx = self.agent, self.ctx
        if response.partial:
            await self._emit(Event(invocation_id=ctx.invocation_id, author=agent.name,
                                   content=response.content, partial=True))
            return
        if response.usage is not None:
            ctx.stats.usage = ctx.stats.usage + response.usage
        ctx.stats.llm_calls += 1
        event = agent._model_event(ctx, response, EventActions())
        await self._emit(event)
        if event.function_calls and event.error_code is None:
            self._spawn(self._handle_calls(event.function_calls))

    # -- tools ----------------------------------------------------------------------------------

    async def _handle_calls(self, calls: list[FunctionCall]) -> None:
        agent, ctx = self.agent, self.ctx
        tools = {t.name: t for t in agent.tools}
        outcomes: dict[str, CallOutcome] = {}
        ordinary: list[FunctionCall] = []
        for call in calls:
            tool = tools.get(call.name)
            if call.name == STOP_STREAMING:
                outcomes[call.id] = CallOutcome(call, await self._stop(call))
            elif (tool is not None and tool.options.kind == "live"
                  and not tool.options.requires_approval):
                self._start_stream(tool, call)
                outcomes[call.id] = CallOutcome(call, dict(PENDING))
            else:
                ordinary.append(call)
        if ordinary:
            async with aclosing(agent._executor.run(ctx, ordinary)) as items:
                async for item in items:
                    if isinstance(item, Event):
                        await self._emit(item)
                    else:
                        outcomes.update((o.call.id, o) for o in item)
        await self._send_results(agent._results_event(ctx, [outcomes[c.id] for c in calls]))

    def _start_stream(self, tool: BaseTool, call: FunctionCall) -> None:
        input_stream = (LiveRequestQueue(self.ctx.settings.live_input_queue_size)
                        if tool.consumes_input_stream else None)
        task = asyncio.create_task(self._run_stream(tool, call, input_stream))
        self.streams[call.id] = _Stream(tool, call, task, input_stream)

    async def _stop(self, call: FunctionCall) -> dict[str, Any]:
        name = str(call.args.get("function_name", ""))
        only = call.args.get("call_id")
        matching = [s for s in self.streams.values()
                    if s.tool.name == name and (only is None or s.call.id == only)]
        if not matching:
            return {"result": f"No active streaming function named {name}"}
        for stream in matching:
            self.streams.pop(stream.call.id, None)
            stream.task.cancel()
            if stream.input_stream is not None:
                stream.input_stream.close()
        await asyncio.wait([s.task for s in matching],
                           timeout=self.ctx.settings.live_stop_timeout)
        return {"result": f"Successfully stopped streaming function {name}",
                "stopped": len(matching)}

    async def _run_stream(self, tool: BaseTool, call: FunctionCall,
                          input_stream: LiveRequestQueue | None) -> None:
        """One live stream: emissions, bounds and the terminal message."""
        executor = self.agent._executor
        context = executor.tool_context(self.ctx, call, input_stream)
        emitter = _Emitter(self, tool, call)
        try:
            ending = await emitter.pump(tool.stream(call.args, context))
        except asyncio.CancelledError:
            raise  # stopped: the stop_streaming result says so
        except Exception as exc:  # never silent: the model and the caller are told
            logger.warning("live stream %s (call %s) failed", tool.name, call.id, exc_info=exc)
            await emitter.flush()
            await self._tell(call, f"Function {tool.name} failed: {type(exc).__name__}: {exc}")
        else:
            await emitter.flush()
            await self._tell(call, ending)
        finally:
            if input_stream is not None:
                input_stream.close()
            self.streams.pop(call.id, None)

    async def _tell(self, call: FunctionCall, text: str) -> None:
        """Say something to the model and the caller about a stream, and store it.

        The event's ``branch`` is ``"<agent>/<call id>"``: it names the call.
        """
        content = Content("user", [Part(text=text)])
        await self._emit(Event(invocation_id=self.ctx.invocation_id, author=self.agent.name,
                               branch=f"{self.agent.name}/{call.id}", content=content))
        assert self.conn is not None
        await self.conn.send_content(content, interrupt=False)


class _Emitter:
    """Forwards a live stream's values within its bounds (lifetime, count, interval)."""

    def __init__(self, run: LiveRun, tool: BaseTool, call: FunctionCall) -> None:
        self.run = run
        self.tool = tool
        self.call = call
        self.clock = run.ctx.clock
        self.sent = 0
        self.last_sent: float | None = None
        self.held: Any = None
        self.holding = False
        self.flusher: asyncio.Task[None] | None = None

    async def pump(self, stream: Any) -> str:
        tool = self.tool
        started = self.clock.monotonic()
        async with aclosing(closing_stream(stream)) as values:
            while True:
                if tool.options.max_lifetime is not None:
                    value = await self._next_within(values, started + tool.options.max_lifetime)
                    if value is _LIFETIME:
                        return (f"Function {tool.name} stopped streaming: it reached its "
                                f"maximum lifetime of {tool.options.max_lifetime:g} s.")
                else:
                    value = await anext(values, _END)
                if value is _END:
                    return f"Function {tool.name} finished streaming."
                await self.offer(value)
                limit = tool.options.max_emissions
                if limit is not None and self.sent >= limit:
                    return (f"Function {tool.name} stopped streaming: it reached its maximum "
                            f"of {limit} emissions.")

    async def _next_within(self, values: AsyncGenerator[Any, None], deadline: float) -> Any:
        """The next value, or ``_LIFETIME`` once ``deadline`` (clock time) has come.

        A value produced at the deadline itself is past the lifetime too, however the
        clock ordered the tool's wake-up and the timer's.
        """
        left = deadline - self.clock.monotonic()
        if left <= 0:
            return _LIFETIME
        item = asyncio.ensure_future(anext(values, _END))
        timer = asyncio.ensure_future(self.clock.sleep(left))
        try:
            await asyncio.wait([item, timer], return_when=asyncio.FIRST_COMPLETED)
        finally:
            timer.cancel()
            if not item.done():
                # Lifetime over, or this stream was stopped: the pending read must end
                # before the generator can be closed.
                item.cancel()
                with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                    await item
        if item.cancelled():
            return _LIFETIME
        value = item.result()
        if value is not _END and self.clock.monotonic() >= deadline:
            return _LIFETIME
        return value

    async def offer(self, value: Any) -> None:
        interval = self.tool.options.min_interval
        now = self.clock.monotonic()
        if interval is None or self.last_sent is None or now - self.last_sent >= interval:
            await self._send(value)
            return
        self.held, self.holding = value, True  # latest wins
        if self.flusher is None:
            self.flusher = asyncio.ensure_future(self._flush_after(interval - (now -
                                                                               self.last_sent)))

    async def _flush_after(self, delay: float) -> None:
        await self.clock.sleep(delay)
        self.flusher = None
        await self.flush()

    async def flush(self) -> None:
        if self.flusher is not None:
            self.flusher.cancel()
            self.flusher = None
        if self.holding:
            value, self.held, self.holding = self.held, None, False
            await self._send(value)

    async def _send(self, value: Any) -> None:
        self.sent += 1
        self.last_sent = self.clock.monotonic()
        await self.run._tell(self.call, f"Function {self.tool.name} returned: {_render(value)}")


_END = object()
_LIFETIME = object()


def _render(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(to_jsonable_python(value, fallback=repr), ensure_ascii=False)
