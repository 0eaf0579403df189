"""``LiveFlow``: the live (BIDI) mode of the step engine — one connection, tools alongside.

Input comes from a ``LiveRequestQueue``; output is one stream of events. Like
every mode's, each non-partial event is committed through the run's recorder
before it is yielded and before the task that made it goes on (tells the
model, runs its calls). The pieces are :class:`~headwater.agents.flow.Flow`'s:
request building, the model callbacks (before-model once, on the request that
opens the connection; after-model on every turn's aggregate), the per-turn
step (:meth:`Flow.admit <headwater.agents.flow.Flow.admit>` and
:class:`~headwater.agents.turn.ModelTurn`: the budget checked before a turn's
request leaves, the call counted, the stream contract, the span), tool
execution with callbacks, middleware and budgets, result events. Content that
would start a turn past the budget is not sent; the run ends ``budget_exceeded``.

A live run is four parts, each with one job, around this module's task group:

- :class:`~headwater.agents.live_out.LiveOut`: the run's one output (commit,
  then hand on) and its end;
- :class:`~headwater.agents.live_model.LiveModel`: the current agent's
  connection, the task that pumps its responses, the model turn in progress;
- :class:`~headwater.agents.live_streams.LiveStreams`: the live streaming tools
  and ``stop_streaming``;
- here, :class:`LiveFlow`: the input pump and its gate, the calls of each
  aggregate (and the approvals answered through the queue), and the transfer
  switch.

Structured concurrency: one task group owns the input pump, the model pump,
every call handler and every tool stream. Closing the queue, closing the
stream or cancelling the consumer cancels the group and waits for it (bounded
by ``Settings.live_stop_timeout``); the text a model turn then in progress had
shown is stored, marked ``interrupted`` (as a stopped model call of a
non-live run keeps it). A store failure in any task ends the run:
:meth:`LiveFlow.events` raises it once the group is over.

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
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Callable, Coroutine
from contextlib import aclosing
from typing import Any

from ..core.errors import SessionError, UserError
from ..core.events import Event, EventActions
from ..core.live_request_queue import LiveRequestQueue
from ..core.tasks import TaskSet
from ..core.types import Content, FunctionCall, Part
from ..sessions.ledger import as_seen_by, calls_above
from ._execution import CallOutcome
from .agent import Agent
from .approvals import answered_calls, split_approvals, split_decisions
from .flow import Flow
from .live_model import LiveModel
from .live_out import LiveEnd, LiveOut
from .live_streams import PENDING as PENDING
from .live_streams import STOP_DECLARATION as STOP_DECLARATION
from .live_streams import STOP_STREAMING as STOP_STREAMING
from .live_streams import LiveStreams
from .live_streams import stop_declared as stop_declared

logger = logging.getLogger("headwater.live")

ResumeCalls = Callable[[Agent, str | None, list[tuple[FunctionCall, Any]], list[CallOutcome]],
                       AsyncGenerator[Event, None]]
"""``TreeRun.resume_calls``: the agents used as tools that wait for answered calls go on."""


class LiveFlow:
    """One ``run_live``: owns the task group, the input pump and its gate, and the parts.

    Args:
        flow: the step engine of the agent that starts the run.
        queue: the client's input.
        flow_of: the step engine of an agent a transfer hands the run to
            (``None``: transfers end the agent's turn and nothing runs next).
    """

    __slots__ = ("_flow_of", "_gate", "_group", "_leaving", "_model", "_out", "_resume_calls",
                 "_store_failure", "_streams", "_work", "ctx", "queue")

    def __init__(self, flow: Flow, queue: LiveRequestQueue,
                 flow_of: Callable[[Agent], Flow] | None = None,
                 resume_calls: ResumeCalls | None = None) -> None:
        self.ctx = flow.ctx
        self.queue = queue
        self._flow_of = flow_of
        self._resume_calls = resume_calls
        self._gate = asyncio.Lock()  # what the input sends to the model, and a transfer's switch
        self._work: set[asyncio.Task[None]] = set()  # the current agent's call handlers
        self._leaving = False  # a transfer is switching agents: the old one starts nothing
        self._group: asyncio.TaskGroup | None = None
        self._store_failure: SessionError | None = None
        self._out = LiveOut(flow.commit)
        self._model = LiveModel(flow, self._out, self._spawn, self._calls_made)
        self._streams = LiveStreams(flow.ctx, self._spawn, self._say)

    @property
    def flow(self) -> Flow:
        """The step engine of the agent that has the run now."""
        return self._model.flow

    async def events(self) -> AsyncGenerator[Event, None]:
        """The run's events until the queue closes, the run ends or the consumer stops.

        Non-partial events arrive here already committed.

        Raises:
            SessionError: the store failed (the run is over).
        """
        tasks = TaskSet("live run", logger=logger)
        tasks.spawn(self._supervise(), name="live run")
        try:
            while (event := await self._out.get()) is not None:
                yield event
        finally:
            await self._teardown(tasks)
        if self._store_failure is not None:  # the run's end: as a store failure anywhere
            raise self._store_failure

    # -- the task group -------------------------------------------------------------------------

    async def _supervise(self) -> None:
        try:
            async with asyncio.TaskGroup() as group:
                self._group = group
                await self._model.open()
                group.create_task(self._pump_input())
                self._model.start()
        except* LiveEnd:
            pass
        except* SessionError as failures:  # the store failed: the run ends (events() raises)
            first = failures.exceptions[0]
            assert isinstance(first, SessionError)
            self._store_failure = first
        except* Exception as failures:
            for failure in failures.exceptions:
                logger.error("live run task failed", exc_info=failure)
            self._out.show(self.flow.error_event("internal", "a live task failed"))
        finally:
            self._out.close()

    def _spawn(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        assert self._group is not None
        return self._group.create_task(work)

    def _spawn_work(self, work: Coroutine[Any, Any, None]) -> None:
        """Spawn one of the current agent's call handlers (a transfer cancels them)."""
        task = self._spawn(work)
        self._work.add(task)
        task.add_done_callback(self._work.discard)

    async def _teardown(self, tasks: TaskSet) -> None:
        self._streams.close_inputs()
        timeout = self.ctx.settings.live_stop_timeout
        await tasks.aclose(grace=timeout)  # the supervisor: its group ends every task
        if len(tasks):
            logger.warning("live run tasks did not end within %g s of the run's end", timeout)
        await self._model.close()
        self._streams.clear()

    # -- input ----------------------------------------------------------------------------------

    async def _pump_input(self) -> None:
        gate, model, out = self._gate, self._model, self._out
        async for request in self.queue:
            self._streams.copy_input(request)
            content = request.content
            if content is not None:
                if await self._answers(content):
                    continue
                spent = self.flow.llm_budget_spent()
                if spent is not None:
                    await out.over_budget(spent)
                    return
                async with gate:  # a transfer's switch is never half seen
                    await model.send(content, interrupt=True)
                    async with model.caught_up():  # an answer this cut short is stored first
                        await out.emit(Event(invocation_id=self.ctx.invocation_id,
                                             author="user", content=content))
            elif request.blob is not None:
                async with gate:
                    await model.send_realtime(request.blob)
        raise LiveEnd

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
            self._out.show(Event(invocation_id=self.ctx.invocation_id, author="user",
                                 partial=True, error_code="internal", error_message=str(exc)))
            return True
        await self._out.emit(Event(invocation_id=self.ctx.invocation_id, author="user",
                                   content=rest,
                                   actions=EventActions(approval_decisions=decisions)))
        by_maker: dict[str, list[tuple[FunctionCall, Any]]] = {}
        inner: dict[str, list[tuple[FunctionCall, Any]]] = {}
        ledger = self.ctx.ledger
        for call, decision in resume:  # each call runs with the tools of the agent that made it
            record = ledger.record(call.id)
            maker = record.author if record is not None else self.flow.agent.name
            above = calls_above(record.branch) if record is not None else []
            outer = ledger.record(above[0]) if above else None
            if outer is not None:  # inside an agent used as a tool: it goes on, then its caller
                inner.setdefault(outer.author, []).append((call, decision))
            else:
                by_maker.setdefault(maker, []).append((call, decision))
        for maker, calls in by_maker.items():
            self._spawn_work(self._resume(self._flow_named(maker), calls))
        for caller, calls in inner.items():
            self._spawn_work(self._resume_inner(self._flow_named(caller), calls))
        return True

    def _flow_named(self, name: str) -> Flow:
        """The current flow when ``name`` is its agent (or has no flow of its own here),
        else a flow of agent ``name`` (one that handed the run over before)."""
        flow = self.flow
        if name == flow.agent.name or self._flow_of is None:
            return flow
        agent = flow.agent.root_agent.find_agent(name)
        return self._flow_of(agent) if isinstance(agent, Agent) else flow

    # -- calls ----------------------------------------------------------------------------------

    def _calls_made(self, flow: Flow, calls: list[FunctionCall]) -> None:
        """A committed aggregate's calls: handled in a task, unless its agent is leaving (a
        transfer seals them)."""
        if flow is self.flow and not self._leaving:
            self._spawn_work(self._handle_calls(flow, calls))

    async def _handle_calls(self, flow: Flow, calls: list[FunctionCall]) -> None:
        tools = flow.agent.tools_by_name
        outcomes: dict[str, CallOutcome] = {}
        ordinary: list[FunctionCall] = []
        for call in calls:
            tool = tools.get(call.name)
            if call.name == STOP_STREAMING:  # always the built-in stop (stop_declared)
                outcomes[call.id] = CallOutcome(call, await self._streams.stop(
                    call, self._model.given))
            elif (tool is not None and tool.options.kind == "live"
                  and not tool.options.requires_approval):
                self._streams.start(flow.executor, tool, call)
                outcomes[call.id] = CallOutcome(call, dict(PENDING))
            else:
                ordinary.append(call)
        if ordinary:
            for outcome in await flow.outcomes(ordinary, progress=self._out.show):
                outcomes[outcome.call.id] = outcome
        await self._send_results(flow, [outcomes[c.id] for c in calls])

    async def _resume(self, flow: Flow, resume: list[tuple[FunctionCall, Any]]) -> None:
        approved, denied = split_decisions(resume)
        outcomes = {o.call.id: o for o in denied}
        if approved:
            for outcome in await flow.outcomes(approved, {c.id for c in approved},
                                               self._out.show):
                outcomes[outcome.call.id] = outcome
        await self._send_results(flow, [outcomes[c.id] for c, _ in resume])

    async def _resume_inner(self, flow: Flow, resume: list[tuple[FunctionCall, Any]]) -> None:
        """Answers for calls inside the agents ``flow``'s agent used as tools: those agents go
        on (their events are committed by the tree and shown here); a call whose agent
        finished gets its result, which this agent's model is told."""
        if self._resume_calls is None:
            return
        decided: list[CallOutcome] = []
        async with aclosing(self._resume_calls(flow.agent, flow.ctx.branch, resume,
                                               decided)) as events:
            async for event in events:
                self._out.show(event)
        if decided:
            await self._send_results(flow, decided)

    async def _send_results(self, flow: Flow, outcomes: list[CallOutcome]) -> None:
        event = flow.results_event(outcomes)
        await self._out.emit(event)
        current = self.flow
        if flow.agent is not current.agent:
            # Calls of an agent that has handed the run over (an approval answered after
            # the transfer): the current model is told them as context, as it sees them.
            seen = (None if event.content is None
                    else as_seen_by(current.agent.name, flow.agent.name, event.content))
            if seen is not None:
                await self._model.send(seen, interrupt=False)
            return
        target = event.actions.transfer_to_agent
        if target is not None and self._flow_of is not None:
            await self._transfer(target)
        elif event.content is not None:
            await self._model.send(event.content, interrupt=False)

    async def _say(self, call: FunctionCall, text: str) -> None:
        """Tell the model and the caller about a live stream, once it is stored (the event's
        ``branch`` is ``"<agent>/<call id>"``: it names the call)."""
        agent_name = self.flow.agent.name
        content = Content("user", [Part(text=text)])
        await self._out.emit(Event(invocation_id=self.ctx.invocation_id, author=agent_name,
                                   branch=f"{agent_name}/{call.id}", content=content))
        await self._model.send(content, interrupt=False)

    # -- transfer -------------------------------------------------------------------------------

    async def _transfer(self, name: str) -> None:
        """Hand the run to agent ``name`` (see the module docstring); the caller is the
        handler of the call that transferred, and it is not cancelled."""
        old = self.flow
        target = old.agent.root_agent.find_agent(name)
        assert self._flow_of is not None
        if not isinstance(target, Agent):  # the transfer tool refuses these in live runs
            raise UserError(f"a live run cannot hand the conversation to {name!r}")
        async with self._gate:
            self._leaving = True
            # The old agent's streams stop and its other running calls are cancelled.
            await self._streams.stop_all()
            await self._cancel_handlers(old)
            # Its connection closes; what it still delivers (an answer cut short) is stored.
            self.ctx.trace.transfer(old.agent.name, target.name, self.ctx.branch)  # the arrow
            await self._model.switch(self._flow_of(target))
            sealed = old.seal("cancelled")  # the calls its cancelled handlers left
            if sealed is not None:
                await self._out.emit(sealed)
            self._leaving = False
            logger.info("live run %s: %s transferred to %s", self.ctx.invocation_id,
                        old.agent.name, target.name)
            # The target's connection opens on the history as it sees it.
            opening = await self._model.open(answer=True)
            self._model.start()
            if opening is not None:
                await self._model.send(opening, interrupt=False)

    async def _cancel_handlers(self, old: Flow) -> None:
        """Cancel the leaving agent's call handlers but the caller's own, and wait for them
        (bounded by ``live_stop_timeout``)."""
        current = asyncio.current_task()
        if current is not None:
            self._work.discard(current)  # this handler goes on
        handlers = list(self._work)
        for task in handlers:
            task.cancel()
        if handlers:
            timeout = self.ctx.settings.live_stop_timeout
            _, late = await asyncio.wait(handlers, timeout=timeout)
            if late:
                logger.warning("%d call handler(s) of %s still run %g s after a transfer",
                               len(late), old.agent.name, timeout)
