"""``Flow``: the step engine of one run, for every mode.

One step: build the request from the ledger's conversation → the before-model
callbacks → call the model, checking every response against the stream
contract (partials pass through as they come; the aggregate is held until the
stream ends) → the after-model callbacks → hand the aggregate up → run its
function calls (progress passes through) → hand their results up. Steps repeat
until a final response, an error, ``end_invocation`` or the run's model-call
budget.

The flow never persists. It hands every non-partial event up to the runner's
:class:`Recorder`, which commits it (and updates ``ctx.session`` and
``ctx.ledger``); only then is the event yielded and the flow goes on with it:
persist, then yield. Partial events are yielded as they come. ``run_async``
drives :meth:`Flow.run`;
``run_live`` drives :class:`~headwater.agents.live_flow.LiveFlow`, which uses
the same pieces (request, callbacks, contract, budgets, tool execution, result
events) around a live connection.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Container, Sequence
from contextlib import aclosing
from typing import Any, Protocol

from ..core.context import CallbackContext
from ..core.errors import ErrorCode, ModelError, UserError, public_message
from ..core.events import Event, EventActions, partial_event
from ..core.run_config import StreamingMode
from ..core.telemetry import error_type
from ..core.types import Content, FunctionCall, FunctionResponse, Part
from ..models.base import LlmRequest, LlmResponse
from ..planners import plan_request, plan_response
from ..tools.function_tool import BaseTool
from ._execution import (
    CallOutcome,
    ProgressSink,
    ToolExecutor,
    maybe_await,
)
from .agent import Agent
from .approvals import Resume, split_decisions
from .expiry import seal_event
from .handoff import Handoff
from .instructions import system_instruction
from .invocation import InvocationContext
from .output_schema import append_schema, parse_output
from .transfer import TRANSFER_TO_AGENT, TransferToAgentTool, transfer_targets
from .turn import ModelTurn

logger = logging.getLogger("headwater.agents")

class Recorder(Protocol):
    """Where a run's record goes: the runner's session store (the one place that persists)."""

    async def commit(self, event: Event, *, last: bool = False) -> None:
        """Persist a non-partial event; the run's session and ledger follow once it is stored.

        ``last``: the run ends with this event (the recorder may close the run's
        hold on the session in the same write).

        Raises:
            SessionError: the store refused or failed; nothing of the event is stored.
        """
        ...


def recorded(recorder: Recorder | None) -> Recorder:
    """``recorder``; a run without one is refused (its record would be silently lost).

    Raises:
        UserError: no recorder.
    """
    if recorder is None:
        raise UserError("a run needs a recorder (the runner's session store) to persist "
                        "its events; run agents through headwater.Runner")
    return recorder


class Flow:
    """Drives one agent for one run.

    Args:
        agent: the agent (configuration only).
        ctx: the run as this agent sees it (its ``branch``); its session and
            ledger are kept level by ``recorder``.
        recorder: commits every non-partial event before the flow goes on.
        transfer: offer ``transfer_to_agent`` when the agent has somewhere to
            go (docs/multi-agent.md).
        live: the flow drives a live run: the transfer tool refuses targets
            that cannot run live.

    Raises:
        UserError: no recorder: a run whose record would be silently lost is
            refused; or the agent has a tool of its own named ``transfer_to_agent``
            and agents to transfer to.
    """

    __slots__ = ("agent", "calls_back", "commit", "ctx", "executor", "global_instruction",
                 "processors", "tools")

    def __init__(self, agent: Agent, ctx: InvocationContext, recorder: Recorder | None,
                 *, transfer: bool = True, live: bool = False) -> None:
        self.agent = agent
        self.ctx = ctx
        self.commit = recorded(recorder).commit
        tools, by_name = agent.tools, agent.tools_by_name
        targets = transfer_targets(agent) if transfer else []
        if targets:
            if TRANSFER_TO_AGENT in by_name:
                raise UserError(f"agent {agent.name!r} has a tool named {TRANSFER_TO_AGENT!r} "
                                "and agents to transfer to: rename the tool")
            transfer_tool = TransferToAgentTool(agent, targets, live=live)
            tools = (*tools, transfer_tool)
            by_name = {**by_name, TRANSFER_TO_AGENT: transfer_tool}
        self.tools: tuple[BaseTool, ...] = tools
        self.executor = ToolExecutor(
            agent_name=agent.name, tools=by_name,
            before=agent.before_tool_callbacks, after=agent.after_tool_callbacks,
            middleware=agent.tool_middleware)
        root = agent.root_agent
        self.global_instruction = root.global_instruction if isinstance(root, Agent) else ""
        """The tree's global instruction (its root's, ADK's), put before the agent's own."""
        self.processors = agent.request_processors
        """The tools that process each request (``BaseTool.process_llm_request``)."""
        self.calls_back = bool(callable(agent.instruction) or agent.before_model_callbacks
                               or agent.after_model_callbacks or self.processors
                               or callable(self.global_instruction)
                               or agent.planner is not None)
        """Whether a model call needs a callback context (an instruction provider, model
        callbacks, tools that process requests, a planner); without one, :meth:`run`
        makes none."""

    # -- run_async --------------------------------------------------------------------------

    def run(self, decided: Sequence[CallOutcome] = ()) -> AsyncGenerator[Event, None]:
        """Resume answered calls, then run steps until the agent is done.

        ``decided``: outcomes of calls that were waiting (agents used as tools that
        went on after a pause, ``TreeRun``); they join the answered calls' results.
        Yields partial and non-partial events; the caller commits every
        non-partial event before resuming this generator. Closing it closes the
        model stream and cancels running tools.
        """
        if not self.ctx.resume and not decided:
            return _steps(self)
        return _resumed(self, decided)

    def streams(self, calls: Sequence[FunctionCall]) -> bool:
        """Whether running ``calls`` shows events as they run (tool progress, agents used
        as tools; SSE only): :meth:`execute` then; :meth:`call` otherwise."""
        return (self.ctx.run_config.streaming_mode is not StreamingMode.NONE
                and self.executor.streams_progress(calls))

    async def call(self, calls: Sequence[FunctionCall]) -> Event:
        """Run calls that show nothing as they run; the one committed event with every result."""
        return await self._results(await self.executor.run(self.ctx, calls))

    async def _results(self, outcomes: list[CallOutcome]) -> Event:
        results = self.results_event(outcomes)
        await self.commit(results, last=results.actions.end_invocation or (
            results.is_final_response() and not self.asks_again(results)))
        return results

    async def execute(self, calls: Sequence[FunctionCall], approved: Container[str] = (),
                      decided: Sequence[CallOutcome] = ()) -> AsyncGenerator[Event, None]:
        """Run calls: their progress (SSE only), then one committed event with every result.

        ``decided`` outcomes (denials) join the results without running anything.
        """
        outcomes: list[CallOutcome] = list(decided)
        if calls:
            if self.streams(calls):
                async with aclosing(self._with_progress(calls, approved, outcomes)) as events:
                    async for event in events:
                        yield event
            else:
                outcomes += await self.executor.run(self.ctx, calls, approved)
        yield await self._results(outcomes)

    def _with_progress(self, calls: Sequence[FunctionCall], approved: Container[str],
                       outcomes: list[CallOutcome]) -> AsyncGenerator[Event, None]:
        """Run calls in a task while their progress events (and the events of agents
        used as tools) are yielded."""
        handoff = Handoff()

        async def run() -> None:
            outcomes.extend(await self.executor.run(self.ctx, calls, approved, handoff))

        return handoff.relay(run)

    async def resume(self, resume: Resume, decided: Sequence[CallOutcome] = ()
                     ) -> AsyncGenerator[Event, None]:
        """Run the calls a human approved and deny the others, before the next model call;
        ``decided`` outcomes join their results."""
        approved, denied = split_decisions(resume)
        async with aclosing(self.execute(approved, {c.id for c in approved},
                                         [*denied, *decided])) as events:
            async for event in events:
                yield event

    # -- the pieces both modes use -----------------------------------------------------------

    async def request(self, callback_context: CallbackContext | None) -> LlmRequest:
        """The next model request: the global instruction and the agent's, the ledger's
        conversation, tools, config; then the tools that process requests change it."""
        agent, ctx = self.agent, self.ctx
        instruction = agent.instruction
        if callable(instruction) or self.global_instruction or "{" in instruction:
            instruction = await system_instruction(instruction, self.global_instruction,
                                                   callback_context, ctx.session.state,
                                                   agent.name)
        if agent.output_schema is not None:
            instruction = append_schema(instruction, agent.output_schema)
        request = LlmRequest(
            model=agent.model.model,
            system_instruction=instruction or None,
            contents=ctx.ledger.contents_for(agent.name, ctx.branch),
            tools=[t.declaration() for t in self.tools if t.declares_function],
            config=dict(agent.generate_config),
            generate_content_config=agent.generate_content_config,
        )
        if agent.planner is not None or self.processors:
            assert callback_context is not None  # made for a planner or request processors
            await self._process(request, callback_context)
        return request

    async def _process(self, request: LlmRequest, callback_context: CallbackContext) -> None:
        """The planner's change (ADK's planning processor), then each tool's
        ``process_llm_request`` with a ``ToolContext`` recording into the step's actions."""
        if self.agent.planner is not None:
            plan_request(self.agent.planner, callback_context, request)
        if self.processors:
            tool_context = self.executor.tool_context(
                self.ctx, FunctionCall(id="", name="", args={}),
                actions=callback_context.actions)
            for tool in self.processors:
                await tool.process_llm_request(tool_context=tool_context, llm_request=request)

    async def before_model(self, callback_context: CallbackContext, request: LlmRequest
                           ) -> LlmResponse | None:
        """The before-model callbacks; a response one returns replaces the model call."""
        for callback in self.agent.before_model_callbacks:
            response: LlmResponse | None = await maybe_await(
                callback(callback_context=callback_context, llm_request=request))
            if response is not None:
                return response
        return None

    async def after_model(self, callback_context: CallbackContext, response: LlmResponse
                          ) -> LlmResponse:
        """The agent's planner (``headwater.planners.plan_response``), then the after-model
        callbacks (the first to return a response replaces the aggregate)."""
        if self.agent.planner is not None:
            response = plan_response(self.agent.planner, callback_context, response)
        for callback in self.agent.after_model_callbacks:
            replaced: LlmResponse | None = await maybe_await(
                callback(callback_context=callback_context, llm_response=response))
            if replaced is not None:
                return replaced
        return response

    def admit(self) -> Event | None:
        """Admit a model call about to start: counted in the run's ``llm_calls``, or the
        ``budget_exceeded`` error event when the run's model-call budget is spent.

        Asked right before a request leaves, in every mode: before each model
        call of :meth:`run` (after the before-model callbacks, which may answer
        instead of the model) and before each turn of a live connection.
        """
        spent = self.llm_budget_spent()
        if spent is None:
            self.ctx.stats.llm_calls += 1
        return spent

    def model_failed(self, turn: ModelTurn, exc: ModelError) -> Event:
        """The error event that ends the run after a model call failed (its span failed
        too); nothing of the call is kept."""
        turn.fail(exc.code)
        logger.info("agent %s: model call failed: %s", self.agent.name, exc)
        return self.error_event(exc.code, public_message(exc))

    async def ended(self, error: Event) -> Event:
        """``error``, committed as the run's last event."""
        await self.commit(error, last=True)
        return error

    async def answered(self, callback_context: CallbackContext | None, aggregate: LlmResponse
                       ) -> Event:
        """The record of a model call's aggregate, after the after-model callbacks (none
        without a callback context)."""
        if callback_context is None:
            return self.model_event(aggregate)
        return self.model_event(await self.after_model(callback_context, aggregate),
                                callback_context.actions)

    async def model_stopped(self, turn: ModelTurn, exc: BaseException | None = None) -> None:
        """A model call ended before its aggregate, by ``exc``: its span fails. A stop (a
        close, a cancel; ``None``: the run ended around it) keeps the answer text it had
        shown, stored ``interrupted``; a failure keeps nothing of the call."""
        if exc is None or isinstance(exc, (GeneratorExit, asyncio.CancelledError)):
            turn.fail("cancelled")
            await self.keep_shown(turn.shown_text())
        else:
            turn.fail(error_type(exc))

    def llm_budget_spent(self) -> Event | None:
        """The ``budget_exceeded`` error event once ``max_llm_calls`` or
        ``max_tokens_per_run`` is reached, else ``None``."""
        config, stats = self.ctx.run_config, self.ctx.stats
        limit = config.max_llm_calls
        if stats.llm_calls >= limit:
            return self.error_event("budget_exceeded", f"the run reached max_llm_calls={limit}")
        tokens, usage = config.max_tokens_per_run, stats.usage
        used = max(usage.total_tokens, usage.input_tokens + usage.output_tokens)
        if tokens is not None and used >= tokens:
            return self.error_event("budget_exceeded",
                                    f"the run used {used} tokens, max_tokens_per_run={tokens}")
        return None

    def model_event(self, response: LlmResponse, actions: EventActions | None = None) -> Event:
        """The record of one model aggregate; its usage is added to the run's.

        A call whose id the session already holds (or that an earlier call of
        the aggregate took) gets a fresh one here, before the event is stored
        and its calls run (``CallLedger.unique_calls``); ``response`` is left
        as the model gave it. A final answer of an agent with an ``output_key``
        carries its text into state (``actions.state_delta``), stored with it.
        """
        ctx = self.ctx
        if response.usage is not None:
            ctx.stats.usage = ctx.stats.usage + response.usage
        content = response.content
        long_running: list[str] = []
        if content is not None:
            content = ctx.ledger.unique_calls(content)
            if content.function_calls:
                long_running = self.long_running_calls(content.function_calls)
        if actions is None:
            actions = EventActions()
        agent = self.agent
        key = agent.output_key
        if (key is not None and response.error_code is None and content is not None
                and not content.function_calls):
            if agent.output_schema is None:
                actions.state_delta[key] = content.text
            elif self.invalid_output(content) is None:
                actions.state_delta[key] = parse_output(agent.output_schema, content.text)
        return Event(
            invocation_id=ctx.invocation_id, author=self.agent.name, branch=ctx.branch,
            content=content, finish_reason=response.finish_reason, usage=response.usage,
            error_code=response.error_code, error_message=response.error_message,
            turn_complete=response.turn_complete, interrupted=response.interrupted,
            long_running_tool_ids=long_running, actions=actions,
        )

    def long_running_calls(self, calls: Sequence[FunctionCall]) -> list[str]:
        """The ids of ``calls`` to long-running tools: what the model's event carrying them
        lists in ``long_running_tool_ids`` (ADK's)."""
        tools = self.executor.tools
        return [c.id for c in calls
                if (t := tools.get(c.name)) is not None and t.options.long_running]

    def asks_again(self, results: Event) -> bool:
        """Whether the model is asked once more after ``results`` although it holds tickets
        (ADK's rule): every pending call is a ticket of a tool with
        ``after_ticket="ask_model"`` and nothing else ends the turn."""
        pending = results.long_running_tool_ids
        actions = results.actions
        if (not pending or actions.requested_approvals or actions.skip_summarization
                or actions.transfer_to_agent or actions.end_invocation):
            return False
        tools = self.executor.tools
        answered = 0
        for response in results.function_responses:
            if response.id in pending:
                tool = tools.get(response.name)
                if tool is None or tool.options.after_ticket != "ask_model":
                    return False
                answered += 1
        return answered == len(pending)

    def ends_turn(self, results: Event) -> bool:
        """Whether the agent's turn is over after ``results``: a final response (not one
        whose tickets ask the model again), or a transfer to another agent."""
        if results.actions.transfer_to_agent:
            return True
        return results.is_final_response() and not self.asks_again(results)

    def invalid_output(self, content: Content | None) -> str | None:
        """Why a final answer does not match the agent's ``output_schema`` (``None``: it
        does, or there is no schema)."""
        schema = self.agent.output_schema
        if schema is None or content is None:
            return None
        try:
            parse_output(schema, content.text)
        except ValueError as exc:
            return (f"the answer of agent {self.agent.name!r} is not JSON of "
                    f"{schema.__name__}: {exc}")
        return None

    async def keep_shown(self, text: str) -> None:
        """Store the answer text a stopped model call had shown, marked ``interrupted``.

        Quiet on a store failure: the stop goes on either way.
        """
        if not text:
            return
        ctx = self.ctx
        shown = Event(invocation_id=ctx.invocation_id, author=self.agent.name, branch=ctx.branch,
                      content=Content("model", [Part(text=text)]), interrupted=True,
                      finish_reason="interrupted")
        try:
            await self.commit(shown)
        except Exception as exc:
            logger.warning("agent %s: storing the interrupted answer failed: %s",
                           self.agent.name, type(exc).__name__)

    def error_event(self, code: ErrorCode, message: str) -> Event:
        """An error record of this run (no content)."""
        logger.warning("agent %s: %s: %s", self.agent.name, code, message)
        return Event(invocation_id=self.ctx.invocation_id, author=self.agent.name,
                     branch=self.ctx.branch, error_code=code, error_message=message)

    async def outcomes(self, calls: Sequence[FunctionCall], approved: Container[str] = (),
                       progress: ProgressSink | None = None) -> list[CallOutcome]:
        """Run calls; progress events go to ``progress`` as they happen."""
        return await self.executor.run(self.ctx, calls, approved, progress)

    def results_event(self, outcomes: Sequence[CallOutcome]) -> Event:
        """One event with every result, and the calls still pending (approvals, tickets,
        agents used as tools that paused)."""
        actions = EventActions()
        parts: list[Part] = []
        pending: list[str] = []
        for outcome in outcomes:
            actions.merge(outcome.actions)
            if outcome.approval is not None:
                actions.requested_approvals.append(outcome.approval)
                pending.append(outcome.call.id)
                continue
            if outcome.waiting:  # listed without a result: the ledger marks it waiting
                pending.append(outcome.call.id)
                continue
            assert outcome.response is not None
            parts.append(Part(function_response=FunctionResponse(
                id=outcome.call.id, name=outcome.call.name, response=outcome.response)))
            if outcome.long_running:
                pending.append(outcome.call.id)
        if any(o.return_direct for o in outcomes):
            actions.skip_summarization = True
        return Event(invocation_id=self.ctx.invocation_id, author=self.agent.name,
                     branch=self.ctx.branch, content=Content("user", parts) if parts else None,
                     long_running_tool_ids=pending, actions=actions)

    # -- calls left without a result ----------------------------------------------------------

    def seal(self, reason: str, results: dict[str, dict[str, Any]] | None = None) -> Event | None:
        """One event giving every dangling call of the ledger a result, or ``None``.

        Calls in ``results`` get that result; the others a synthetic ``reason``
        error (``cancelled`` or ``interrupted``). The event is ``interrupted``
        when any result is synthetic.
        """
        return seal_event(self.ctx, self.agent.name, reason, results)

    async def repair(self) -> Event | None:
        """After a crash: re-run dangling calls to ``idempotent`` tools, seal the others.

        A call that needs approval, or to a tool not marked ``idempotent``, is
        never re-run; it gets an ``interrupted`` result. Progress of a re-run is
        not shown.
        """
        dangling = self.ctx.ledger.dangling()
        if not dangling:
            return None
        return self.seal("interrupted", await self.rerun(dangling))

    async def rerun(self, calls: Sequence[FunctionCall]) -> dict[str, dict[str, Any]]:
        """Run again those of ``calls`` that are to this agent's ``idempotent`` tools
        (and need no approval); their results by call id."""
        tools = self.executor.tools
        again = [c for c in calls if (tool := tools.get(c.name)) is not None
                 and tool.options.idempotent and not tool.options.requires_approval]
        results: dict[str, dict[str, Any]] = {}
        if again:
            for outcome in await self.executor.run(self.ctx, again):
                if outcome.response is not None:
                    results[outcome.call.id] = outcome.response
        return results


async def _resumed(flow: Flow, decided: Sequence[CallOutcome]) -> AsyncGenerator[Event, None]:
    """:meth:`Flow.run` of a run whose message answered calls: those first, then the steps
    (unless the results ended the agent's turn)."""
    last = None
    async with aclosing(flow.resume(flow.ctx.resume, decided)) as events:
        async for last in events:
            yield last
    if last is not None and flow.ends_turn(last):
        return
    async with aclosing(_steps(flow)) as events:
        async for last in events:
            yield last


async def _steps(flow: Flow) -> AsyncGenerator[Event, None]:
    """:meth:`Flow.run`'s steps, one model call each (the per-chunk path is here, inline)."""
    ctx, commit, agent, calls_back = flow.ctx, flow.commit, flow.agent, flow.calls_back
    invocation_id, author, branch, model = ctx.invocation_id, agent.name, ctx.branch, agent.model
    stream = ctx.run_config.streaming_mode is StreamingMode.SSE
    while True:
        callback_context = ctx.callback_context(author) if calls_back else None
        request = await flow.request(callback_context)
        aggregate = None
        if callback_context is not None:
            aggregate = await flow.before_model(callback_context, request)
        if aggregate is None:
            if (spent := flow.admit()) is not None:
                yield await flow.ended(spent)
                return
            turn = ModelTurn(ctx, author, model, request, stream=stream)
            contract, chat, done = turn.contract, turn.chat, False
            check_partial, waiting = contract.partial, chat.recording
            try:
                async with aclosing(model.generate_content(request, stream=stream)) as chunks:
                    async for response in chunks:  # the per-chunk path: keep it lean
                        if waiting:  # the time to the first chunk is still to record
                            waiting = chat.first_chunk()
                        if response.partial and not done:  # ModelTurn.partial, inline
                            check_partial(response)
                            yield partial_event(invocation_id, author, response.content,
                                                branch)
                        else:
                            done = True
                            contract.check(response)
                aggregate = turn.finish()
            except ModelError as exc:
                yield await flow.ended(flow.model_failed(turn, exc))
                return
            except BaseException as exc:
                await flow.model_stopped(turn, exc)
                raise
        event = await flow.answered(callback_context, aggregate)
        calls = event.function_calls
        ends = event.error_code is not None or not calls
        invalid = None
        if ends and agent.output_schema is not None and event.error_code is None:
            invalid = flow.invalid_output(event.content)
        await commit(event, last=ends and invalid is None)
        yield event
        if invalid is not None:  # the answer is kept; the run ends with why it is refused
            yield await flow.ended(flow.error_event("output_invalid", invalid))
            return
        if ends:
            return
        if flow.streams(calls):  # tool progress, agents used as tools: shown as they run
            last = None
            async with aclosing(flow.execute(calls)) as events:
                async for last in events:
                    yield last
        else:
            yield (last := await flow.call(calls))
        if last is None or flow.ends_turn(last) or last.actions.end_invocation:
            return
