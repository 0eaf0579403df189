"""``LiveFlow``: the live (BIDI) mode of the step engine — one connection, tools alongside.

Input comes from a ``LiveRequestQueue``; output is one stream of events. Like
every mode's, each non-partial event is committed through the runner's
recorder before it is yielded and before the task that made it goes on (tells
the model, runs its calls). The pieces are
:class:`~headwater.agents.flow.Flow`'s: request building, the model callbacks
(before-model once, on the request that opens the connection; after-model on
every turn's aggregate), the stream contract per turn, tool execution with
callbacks, middleware and budgets, result events. The run's model-call budget
(``max_llm_calls``, ``max_tokens_per_run``) is checked before a turn's request
leaves: the connection asks :meth:`LiveFlow._admit` first, and content that
would start a turn past the budget is not sent; the run ends ``budget_exceeded``.

A live streaming tool (kind ``live``) is answered at once with a pending status
and runs on: each value it yields is told to the model as ``Function <name>
returned: <value>``, shown to the caller and stored; its end (normal, a bound,
or an error) is one terminal message to both. ``stop_streaming`` stops streams
by name (or one by call id) and returns only once they have ended: nothing of
a stopped stream is told or stored after it returns. A call named
``stop_streaming`` is always this built-in stop, even when the agent declares a
tool of that name (ADK's docs do): that declaration only lends its description.

Structured concurrency: one task group owns the input pump, the model pump,
every call handler and every tool stream. Closing the queue, closing the
stream or cancelling the consumer cancels the group and waits for it (bounded
by ``Settings.live_stop_timeout``); the text a model turn then in progress had
shown is stored, marked ``interrupted`` (as a stopped model call of a
non-live run keeps it).

Transfer (docs/multi-agent.md): the agent is offered ``transfer_to_agent``
when it has somewhere to go. Once the result event carrying
``actions.transfer_to_agent`` is committed, the run switches agents under the
input gate (user content waits): the old agent's live streams are stopped and
its other running calls cancelled (each gets a ``cancelled`` result), its
connection is closed (an answer still in progress is stored ``interrupted``),
and the target's connection is opened with its own instruction and tools on
the session's history as it sees it (``CallLedger.contents_for``); the last of
that history (the transfer's result, as context) starts its first turn. The
client's queue and the one stream go on; events are now the target's.

A connection keeps its own conversation in the call ids its model gave. A call
stored under a fresh id (``CallLedger.unique_calls``: the id was taken) is
still answered on the connection under the id the model gave; the stored
history, the events and the next run's requests use the fresh one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine
from contextlib import aclosing
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic_core import to_jsonable_python

from ..errors import (
    ERROR_MESSAGES,
    ModelProtocolViolation,
    OutputTooLong,
    QueueFull,
    SessionError,
    UserError,
    public_message,
)
from ..events import Event, EventActions
from ..live_request_queue import LiveRequest, LiveRequestQueue
from ..models.base import LlmResponse
from ..models.connection import BaseLlmConnection
from ..sessions.ledger import as_seen_by
from ..tools.function_tool import BaseTool
from ..types import Content, FunctionCall, FunctionResponse, Part, ToolDeclaration
from ._execution import CallOutcome, closing_stream
from .agent import Agent
from .approvals import answered_calls, split_approvals
from .flow import Flow, split_decisions
from .turn import ModelTurn

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


class _End(Exception):
    """Ends the run from inside the task group (after its last event was handed up)."""


class LiveFlow:
    """One ``run_live``: owns the connection, the task group and the streams.

    Args:
        flow: the step engine of the agent that starts the run.
        queue: the client's input.
        flow_of: the step engine of an agent a transfer hands the run to
            (``None``: transfers end the agent's turn and nothing runs next).
    """

    def __init__(self, flow: Flow, queue: LiveRequestQueue,
                 flow_of: Callable[[Agent], Flow] | None = None) -> None:
        self.flow = flow
        self.ctx = flow.ctx
        self.queue = queue
        self._flow_of = flow_of
        self._gate = asyncio.Lock()  # what the input sends to the model, and a transfer's switch
        self._pump: asyncio.Task[None] | None = None  # the current connection's model pump
        self._work: set[asyncio.Task[None]] = set()  # the current agent's call handlers
        self._leaving = False  # a transfer is switching agents: the old one starts nothing
        self._out: asyncio.Queue[Event | None] = asyncio.Queue()
        self._group: asyncio.TaskGroup | None = None
        self._streams: dict[str, _Stream] = {}
        self._given: dict[str, str] = {}  # stored call id -> the id the connection gave
        self._conn: BaseLlmConnection | None = None
        self._turn: ModelTurn | None = None  # the model turn in progress
        self._realtime_to_model = True
        self._received = 0
        self._progress = asyncio.Event()
        self._hold_at: int | None = None  # the model pump handles no response past this count
        self._unhold = asyncio.Event()  # ... until this is set (see _caught_up)
        self._admitted = 0  # turns counted when admitted, whose first response is still due
        self._spent = False
        self._store_failure: SessionError | None = None

    async def events(self) -> AsyncGenerator[Event, None]:
        """The run's events until the queue closes, the run ends or the consumer stops.

        Non-partial events arrive here already committed.
        """
        supervisor = asyncio.create_task(self._supervise())
        try:
            while (event := await self._out.get()) is not None:
                yield event
        finally:
            await self._teardown(supervisor)
        if self._store_failure is not None:  # the run's end: as a store failure anywhere
            raise self._store_failure

    # -- the task group -------------------------------------------------------------------------

    async def _supervise(self) -> None:
        try:
            async with asyncio.TaskGroup() as group:
                self._group = group
                await self._open()
                group.create_task(self._pump_input())
                assert self._conn is not None
                self._pump = group.create_task(self._pump_model(self.flow, self._conn))
        except* _End:
            pass
        except* SessionError as failures:  # the store failed: the run ends (events() raises)
            first = failures.exceptions[0]
            assert isinstance(first, SessionError)
            self._store_failure = first
        except* Exception as failures:
            for failure in failures.exceptions:
                logger.error("live run task failed", exc_info=failure)
            self._out.put_nowait(self.flow.error_event("internal", "a live task failed"))
        finally:
            self._out.put_nowait(None)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        assert self._group is not None
        return self._group.create_task(work)

    def _spawn_work(self, work: Coroutine[Any, Any, None]) -> None:
        """Spawn one of the current agent's call handlers (a transfer cancels them)."""
        task = self._spawn(work)
        self._work.add(task)
        task.add_done_callback(self._work.discard)

    async def _teardown(self, supervisor: asyncio.Task[None]) -> None:
        for stream in self._streams.values():
            if stream.input_stream is not None:
                stream.input_stream.close()
        supervisor.cancel()
        timeout = self.ctx.settings.live_stop_timeout
        done, _ = await asyncio.wait([supervisor], timeout=timeout)
        if not done:
            logger.warning("live run tasks did not end within %g s of the run's end", timeout)
        turn, self._turn = self._turn, None
        if turn is not None:  # a turn cut off by the run's end: what it had shown is kept
            await self.flow.model_stopped(turn)
        if self._conn is not None:
            with contextlib.suppress(Exception):  # TimeoutError included: the close is bounded
                # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancel
                # that lands as the close completes.
                async with asyncio.timeout(timeout):
                    await self._conn.close()
        self._streams.clear()

    async def _emit(self, event: Event) -> None:
        """Commit a non-partial event, then hand it to the caller."""
        if not event.partial:
            await self.flow.commit(event)
        self._out.put_nowait(event)

    async def _end_with(self, event: Event) -> None:
        await self._emit(event)
        raise _End

    # -- opening --------------------------------------------------------------------------------

    async def _open(self, *, answer: bool = False) -> Content | None:
        """Open the current agent's connection on the session's history as it sees it.

        With ``answer`` (after a transfer), a history ending in user-role content
        is opened without that content, which is returned: sent, it starts the
        agent's first turn. ``None`` when there is nothing to answer, or when a
        before-model callback answered instead of the model.
        """
        flow, ctx = self.flow, self.ctx
        agent = flow.agent
        callback_context = ctx.callback_context(agent.name)
        request = await flow.request(callback_context)
        request.tools = stop_declared(request.tools,
                                      any(t.options.kind == "live" for t in agent.tools))
        replaced = await flow.before_model(callback_context, request)
        if replaced is not None:
            replaced.turn_complete = True
            await self._emit(flow.model_event(replaced, callback_context.actions))
        opening = None
        contents = request.contents
        if answer and replaced is None and contents and contents[-1].role == "user":
            request.contents, opening = contents[:-1], contents[-1]
        self._conn = agent.model.connect(request)
        self._conn.before_turn = self._admit
        self._realtime_to_model = True
        return opening

    # -- input ----------------------------------------------------------------------------------

    async def _pump_input(self) -> None:
        gate = self._gate
        async for request in self.queue:
            self._copy_to_input_streams(request)
            content = request.content
            if content is not None:
                if await self._answers(content):
                    continue
                spent = self.flow.llm_budget_spent()
                if spent is not None:
                    await self._over_budget(spent)
                    return
                async with gate:  # a transfer's switch is never half seen
                    conn = self._conn
                    assert conn is not None
                    await conn.send_content(self._as_given(content), interrupt=True)
                    async with self._caught_up():  # an answer this cut short is stored first
                        await self._emit(Event(invocation_id=self.ctx.invocation_id,
                                               author="user", content=content))
            elif request.blob is not None and self._realtime_to_model:
                async with gate:
                    conn = self._conn
                    assert conn is not None
                    try:
                        await conn.send_realtime(request.blob)
                    except NotImplementedError:
                        self._realtime_to_model = False  # this model takes no media: tools only
        raise _End

    async def _answers(self, content: Content) -> bool:
        """Handle approval answers sent through the queue; ``True`` if the content was one.

        A refused answer (no pending call, a replay, other arguments) is shown to
        the caller as a partial error event and stored nowhere.
        """
        rest, decisions = split_approvals(content)
        if not decisions:
            return False
        try:
            resume = answered_calls(self.ctx.ledger, None, decisions)
        except UserError as exc:
            self._out.put_nowait(Event(invocation_id=self.ctx.invocation_id, author="user",
                                       partial=True, error_code="internal",
                                       error_message=str(exc)))
            return True
        await self._emit(Event(invocation_id=self.ctx.invocation_id, author="user",
                               content=rest, actions=EventActions(approval_decisions=decisions)))
        by_maker: dict[str, list[tuple[FunctionCall, Any]]] = {}
        for call, decision in resume:  # each call runs with the tools of the agent that made it
            record = self.ctx.ledger.record(call.id)
            maker = record.author if record is not None else self.flow.agent.name
            by_maker.setdefault(maker, []).append((call, decision))
        for maker, calls in by_maker.items():
            self._spawn_work(self._resume(self._flow_named(maker), calls))
        return True

    def _flow_named(self, name: str) -> Flow:
        """The current flow when ``name`` is its agent (or has no flow of its own here),
        else a flow of agent ``name`` (one that handed the run over before)."""
        flow = self.flow
        if name == flow.agent.name or self._flow_of is None:
            return flow
        agent = flow.agent.root_agent.find_agent(name)
        return self._flow_of(agent) if isinstance(agent, Agent) else flow

    async def _resume(self, flow: Flow, resume: list[tuple[FunctionCall, Any]]) -> None:
        approved, denied = split_decisions(resume)
        outcomes = {o.call.id: o for o in denied}
        if approved:
            for outcome in await flow.outcomes(approved, {c.id for c in approved},
                                               self._emit_partial):
                outcomes[outcome.call.id] = outcome
        await self._send_results(flow, [outcomes[c.id] for c, _ in resume])

    def _emit_partial(self, event: Event) -> None:
        self._out.put_nowait(event)

    async def _send_results(self, flow: Flow, outcomes: list[CallOutcome]) -> None:
        event = flow.results_event(outcomes)
        await self._emit(event)
        current = self.flow
        if flow.agent is not current.agent:
            # Calls of an agent that has handed the run over (an approval answered after
            # the transfer): the current model is told them as context, as it sees them.
            seen = (None if event.content is None
                    else as_seen_by(current.agent.name, flow.agent.name, event.content))
            if seen is not None:
                assert self._conn is not None
                await self._conn.send_content(seen, interrupt=False)
            return
        target = event.actions.transfer_to_agent
        if target is not None and self._flow_of is not None:
            await self._transfer(target)
        elif event.content is not None:
            assert self._conn is not None
            await self._conn.send_content(self._as_given(event.content), interrupt=False)

    def _as_given(self, content: Content) -> Content:
        """``content`` with each result of a renamed call under the id the connection gave."""
        given = self._given
        if not given or not any(p.function_response is not None and p.function_response.id
                                in given for p in content.parts):
            return content
        parts = [replace(p, function_response=FunctionResponse(given[r.id], r.name, r.response))
                 if (r := p.function_response) is not None and r.id in given else p
                 for p in content.parts]
        return Content(content.role, parts)

    @contextlib.asynccontextmanager
    async def _caught_up(self) -> AsyncIterator[None]:
        """Enter once every response the connection has put out so far has been handled;
        the model pump handles no later one until the block is left.

        What the block stores goes in between: after an answer the content cut short,
        before the answer to that content (a fast model's, or one the store's write let
        through).
        """
        assert self._conn is not None
        queued = self._conn.queued
        if queued is None:
            yield
            return
        self._hold_at = queued
        try:
            while self._received < queued:
                self._progress.clear()
                await self._progress.wait()
            yield
        finally:
            self._hold_at = None
            self._unhold.set()

    def _copy_to_input_streams(self, request: LiveRequest) -> None:
        for stream in list(self._streams.values()):
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

    # -- model ----------------------------------------------------------------------------------

    def _admit(self) -> bool:
        """The connection's ``before_turn``: the turn about to start is admitted (and
        counted) against the run's model-call budget (:meth:`Flow.admit`), before its
        request leaves."""
        spent = self.flow.admit()
        if spent is not None:
            with contextlib.suppress(RuntimeError):  # the task group is already ending
                self._spawn(self._over_budget(spent))
            return False
        self._admitted += 1
        return True

    async def _over_budget(self, spent: Event) -> None:
        """End the run with the budget's error event (once, whoever noticed first)."""
        if self._spent:
            return
        self._spent = True
        await self._end_with(spent)

    async def _pump_model(self, flow: Flow, conn: BaseLlmConnection) -> None:
        """Handle ``conn``'s responses as ``flow``'s agent's, until the connection closes."""
        async with aclosing(conn.receive()) as responses:
            async for response in responses:
                while self._hold_at is not None and self._received >= self._hold_at:
                    self._unhold.clear()
                    await self._unhold.wait()
                await self._handle_response(flow, response)
                self._received += 1
                self._progress.set()

    async def _handle_response(self, flow: Flow, response: LlmResponse) -> None:
        ctx = self.ctx
        turn = self._turn
        if turn is None:  # a new model turn
            if self._admitted:
                self._admitted -= 1  # admitted and counted when the connection started it
            else:  # started by the server (speech), or by a connection without before_turn
                spent = flow.admit()
                if spent is not None:
                    await self._over_budget(spent)
                    return
            turn = self._turn = ModelTurn(flow.ctx, flow.agent, None)
        try:
            if response.partial:
                self._out.put_nowait(turn.partial(response))
                return
            self._turn = None
            if response.error_code == "model_protocol_violation":  # the connection checked it
                turn.end(response)
                await self._end_with(flow.error_event(
                    "model_protocol_violation", response.error_message
                    or ERROR_MESSAGES["model_protocol_violation"]))
            if response.error_code is None or response.content is not None:
                turn.final(response)
            turn.end(response)
        except (ModelProtocolViolation, OutputTooLong) as exc:
            self._turn = None  # a broken call keeps nothing, not even what it had shown
            turn.fail(exc.code)
            await self._end_with(flow.error_event(exc.code, public_message(exc)))
        callback_context = ctx.callback_context(flow.agent.name)
        response = await flow.after_model(callback_context, response)
        event = flow.model_event(response, callback_context.actions)
        if response.content is not None and event.function_calls:
            # Calls keep their order: a replaced id is told apart by position.
            for made, stored in zip(response.content.function_calls, event.function_calls,
                                    strict=True):
                if made.id != stored.id:
                    self._given[stored.id] = made.id
        await self._emit(event)
        if (event.function_calls and event.error_code is None and flow is self.flow
                and not self._leaving):  # a leaving agent's late calls: sealed by the switch
            self._spawn_work(self._handle_calls(flow, event.function_calls))

    # -- transfer -------------------------------------------------------------------------------

    async def _transfer(self, name: str) -> None:
        """Hand the run to agent ``name`` (see the module docstring); the caller is the
        handler of the call that transferred, and it is not cancelled."""
        old = self.flow
        target = old.agent.root_agent.find_agent(name)
        assert self._flow_of is not None
        if not isinstance(target, Agent):  # the transfer tool refuses these in live runs
            raise UserError(f"a live run cannot hand the conversation to {name!r}")
        current = asyncio.current_task()
        timeout = self.ctx.settings.live_stop_timeout
        async with self._gate:
            self._leaving = True
            # The old agent's streams stop and its other running calls are cancelled.
            if current is not None:
                self._work.discard(current)  # this handler goes on
            await self._halt(list(self._streams.values()))
            handlers = list(self._work)
            for task in handlers:
                task.cancel()
            if handlers:
                _, late = await asyncio.wait(handlers, timeout=timeout)
                if late:
                    logger.warning("%d call handler(s) of %s still run %g s after a transfer",
                                   len(late), old.agent.name, timeout)
            # Its connection closes; what it still delivers (an answer cut short) is stored.
            conn, pump = self._conn, self._pump
            assert conn is not None
            with contextlib.suppress(Exception):  # TimeoutError included: the close is bounded
                async with asyncio.timeout(timeout):
                    await conn.close()
            if pump is not None:
                done, _ = await asyncio.wait([pump], timeout=timeout)
                if not done:
                    pump.cancel()
                    await asyncio.wait([pump])
            sealed = old.seal("cancelled")  # the calls its cancelled handlers left
            if sealed is not None:
                await self._emit(sealed)
            # The target's connection opens on the history as it sees it.
            turn, self._turn = self._turn, None
            if turn is not None:  # a turn of the old connection left open (its pump was stopped)
                turn.fail("cancelled")
            self.flow = self._flow_of(target)
            self._given.clear()
            self._admitted, self._received = 0, 0
            self._leaving = False
            logger.info("live run %s: %s transferred to %s", self.ctx.invocation_id,
                        old.agent.name, target.name)
            opening = await self._open(answer=True)
            conn = self._conn
            assert conn is not None
            self._pump = self._spawn(self._pump_model(self.flow, conn))
            if opening is not None:
                await conn.send_content(opening, interrupt=False)

    # -- tools ----------------------------------------------------------------------------------

    async def _handle_calls(self, flow: Flow, calls: list[FunctionCall]) -> None:
        tools = flow.agent.tools_by_name
        outcomes: dict[str, CallOutcome] = {}
        ordinary: list[FunctionCall] = []
        for call in calls:
            tool = tools.get(call.name)
            if call.name == STOP_STREAMING:  # always the built-in stop (stop_declared)
                outcomes[call.id] = CallOutcome(call, await self._stop(call))
            elif (tool is not None and tool.options.kind == "live"
                  and not tool.options.requires_approval):
                self._start_stream(tool, call)
                outcomes[call.id] = CallOutcome(call, dict(PENDING))
            else:
                ordinary.append(call)
        if ordinary:
            for outcome in await flow.outcomes(ordinary, progress=self._emit_partial):
                outcomes[outcome.call.id] = outcome
        await self._send_results(flow, [outcomes[c.id] for c in calls])

    def _start_stream(self, tool: BaseTool, call: FunctionCall) -> None:
        input_stream = (LiveRequestQueue(self.ctx.settings.live_input_queue_size)
                        if tool.consumes_input_stream else None)
        stream = _Stream(tool, call, input_stream)
        self._streams[call.id] = stream
        stream.task = self._spawn(self._run_stream(stream))

    async def _stop(self, call: FunctionCall) -> dict[str, Any]:
        """Stop streams; returns once each has ended and nothing more of it can be told."""
        name = str(call.args.get("function_name", ""))
        only = call.args.get("call_id")
        matching = [s for s in self._streams.values() if s.tool.name == name and (
            only is None or only in (s.call.id, self._given.get(s.call.id)))]
        if not matching:
            return {"result": f"No active streaming function named {name}"}
        await self._halt(matching)
        return {"result": f"Successfully stopped streaming function {name}",
                "stopped": len(matching)}

    async def _halt(self, matching: list[_Stream]) -> None:
        """Stop streams; returns once each has ended and nothing more of it can be told."""
        if not matching:
            return
        for stream in matching:
            self._streams.pop(stream.call.id, None)
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

    async def _run_stream(self, stream: _Stream) -> None:
        """One live stream: emissions within its bounds, then the terminal message."""
        tool, call = stream.tool, stream.call
        context = self.flow.executor.tool_context(self.ctx, call, stream.input_stream)
        emitter = _Emitter(self, stream)
        try:
            ending = await emitter.pump(tool.stream(call.args, context))
        except asyncio.CancelledError:
            raise  # stopped: the stop_streaming result says so
        except Exception as exc:  # never silent: the model and the caller are told
            logger.warning("live stream %s (call %s) failed", tool.name, call.id, exc_info=exc)
            await emitter.flush()
            await self.tell(stream, f"Function {tool.name} failed: {type(exc).__name__}: {exc}")
        else:
            await emitter.flush()
            await self.tell(stream, ending)
        finally:
            if stream.input_stream is not None:
                stream.input_stream.close()
            self._streams.pop(call.id, None)
            await context.end_processes()

    async def tell(self, stream: _Stream, text: str) -> None:
        """Say something to the model and the caller about a stream, once it is stored.

        The event's ``branch`` is ``"<agent>/<call id>"``: it names the call.
        Nothing is told once the stream is stopped.
        """
        async with stream.telling:
            if stream.stopped:
                return
            agent_name = self.flow.agent.name
            content = Content("user", [Part(text=text)])
            await self._emit(Event(invocation_id=self.ctx.invocation_id, author=agent_name,
                                   branch=f"{agent_name}/{stream.call.id}", content=content))
            assert self._conn is not None
            await self._conn.send_content(content, interrupt=False)


class _Emitter:
    """Forwards a live stream's values within its bounds (lifetime, count, interval).

    One loop in the stream's own task waits for the next value, the lifetime's
    end and the held value's turn, so nothing of the stream outlives its task.
    """

    def __init__(self, flow: LiveFlow, stream: _Stream) -> None:
        self.flow = flow
        self.stream = stream
        self.tool = stream.tool
        self.clock = flow.ctx.clock
        self.sent = 0
        self.last_sent: float | None = None
        self.held: Any = None
        self.holding = False

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
                        reader = asyncio.ensure_future(anext(values, _END))
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

    async def _wait(self, reader: asyncio.Task[Any], deadline: float | None) -> None:
        """Until the next value, the lifetime's end or the held value's turn."""
        wake, interval = deadline, self.tool.options.min_interval
        if self.holding and self.last_sent is not None and interval is not None:
            due = self.last_sent + interval
            wake = due if wake is None else min(wake, due)
        if wake is None:
            await asyncio.wait([reader])
            return
        timer = asyncio.ensure_future(self.clock.sleep(max(0.0, wake - self.clock.monotonic())))
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
        await self.flow.tell(self.stream,
                             f"Function {self.tool.name} returned: {_render(value)}")


_END = object()


def _render(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(to_jsonable_python(value, fallback=repr), ensure_ascii=False)
