"""``TreeRun``: one run of an agent tree — which agent takes the turn, then each kind driven.

A run (``headwater.run``) hands the root agent to a ``TreeRun`` and reads
:meth:`TreeRun.run` (or :meth:`TreeRun.live`); that yields the events of whichever
agents run, in the order they are committed. Every agent writes through the run's
one recorder (persist, then yield) and spends the run's one
:class:`~headwater.agents.invocation.RunStats` (``max_llm_calls`` counts every
agent's model calls).

- **Who takes the turn** (ADK's rule, :meth:`TreeRun.agent_to_run`): a message
  answering calls (approvals, long-running results) goes to the agent that made
  them; otherwise the agent that last spoke as a model, when the conversation
  can find its way back up from it (it and every agent above it are LLM agents
  that may transfer to their parent, ``transfer.returns_to``); otherwise the
  latest such speaker before it, else the root.
- **Agent callbacks** (any kind): the before-agent callbacks run first, and a
  ``Content`` one returns is the agent's reply instead of its run; the
  after-agent callbacks run after a run that did not stop (ADK's ``run_async``).
- **An LLM agent** runs its :class:`~headwater.agents.flow.Flow`. A result event
  carrying ``actions.transfer_to_agent`` ends its turn and the named agent runs
  next, on the same branch.
- **SequentialAgent** runs its sub-agents in order; **LoopAgent** in rounds until
  ``max_iterations`` or an ``escalate``; both stop at a sub-agent that ends in
  an error or with ``end_invocation``. **ParallelAgent** runs each sub-agent on its own branch
  (``"<parallel>.<sub>"``) in one task group; their events reach the stream
  through a :class:`~headwater.agents.handoff.Handoff` (nothing is yielded
  from inside the group; the one hand-off agents used as tools and tool
  progress use too), and each branch goes on only once its event has been
  yielded. A branch that fails ends with its own error event; the others go on.

A lone LLM agent (no sub-agents, no parent, no agent callbacks) is its ``Flow``'s run, with no
generator of the tree's around it. The run's last event releases the session's
lease in its own write only where the tree says it is last (the tail of the
run); elsewhere the run releases it when it ends.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing
from dataclasses import replace

from ..core.errors import ERROR_MESSAGES, ErrorCode, SessionError, UserError
from ..core.events import Event, EventActions
from ..core.live_request_queue import LiveRequestQueue
from ..core.run_config import StreamingMode
from ..core.types import Content, FunctionCall
from ..sessions.ledger import CallRecord, call_branch
from ._execution import CallOutcome, InnerRun, maybe_await
from .agent import Agent
from .agent_tool import AgentTool
from .approvals import Resume
from .base import BaseAgent
from .callbacks import AfterAgentCallback, BeforeAgentCallback
from .expiry import seal_event
from .flow import Flow, Recorder, recorded
from .handoff import Handoff
from .invocation import AgentOutcome, InvocationContext
from .live_flow import LiveFlow
from .resume_plan import ResumePlan, plan_resume
from .transfer import returns_to
from .workflow import LoopAgent, ParallelAgent, SequentialAgent

logger = logging.getLogger("headwater.agents")


_Outcome = AgentOutcome


def calls_back(agent: BaseAgent) -> bool:
    """Whether ``agent`` has before- or after-agent callbacks."""
    return bool(agent.before_agent_callbacks or agent.after_agent_callbacks)


class _NotLast:
    """A recorder for agents whose last event may not be the run's last: never releases."""

    __slots__ = ("_commit",)

    def __init__(self, recorder: Recorder) -> None:
        self._commit = recorder.commit

    async def commit(self, event: Event, *, last: bool = False) -> None:
        await self._commit(event)


class TreeRun:
    """One run of an agent tree on a session.

    Args:
        root: the root agent (any kind).
        ctx: the run; each agent gets a copy on its branch, sharing the
            session, the ledger and the stats.
        recorder: the runner's recorder; every event goes through it.

    Raises:
        UserError: no recorder.
    """

    __slots__ = ("_not_last", "ctx", "recorder", "root")

    def __init__(self, root: BaseAgent, ctx: InvocationContext, recorder: Recorder | None
                 ) -> None:
        self.root = root
        self.ctx = ctx
        self.recorder = recorded(recorder)
        self._not_last: _NotLast | None = None  # made when a nested agent first needs it
        ctx.driver = self.drive  # agents used as tools run through this run

    @property
    def name(self) -> str:
        """The root agent's name: the author of the run's own records (errors, seals)."""
        return self.root.name

    def _inner(self) -> _NotLast:
        """The recorder of agents whose last event is not the run's last."""
        if self._not_last is None:
            self._not_last = _NotLast(self.recorder)
        return self._not_last

    def end(self) -> None:
        """The run is over: its context drives no more agents.

        Drops the context's reference back to this run, so the run's objects go
        with their last reference rather than waiting for the cycle collector.
        """
        if self.ctx.driver == self.drive:
            self.ctx.driver = None

    # -- the run's sources of events ------------------------------------------------------------

    def run(self) -> AsyncGenerator[Event, None]:
        """The run's events: the agent that takes the turn, and whatever runs after it.

        A message that answers calls (approvals, long-running results) resumes the
        tree where it paused instead: each agent whose calls it answers goes on,
        then whatever was waiting for it (docs/multi-agent.md, "A pause inside a
        tree"). Closing the generator closes every running agent's model stream
        and cancels their tools. Call it once the user's message is committed.

        Raises (when iterated):
            UserError: an agent kind the orchestrator cannot run, or an
                instruction naming a state key the session does not hold.
        """
        root = self.root
        lone = (isinstance(root, Agent) and not root.sub_agents and root.parent_agent is None
                and not calls_back(root))
        plan = self._plan() if not lone or self.ctx.ledger.in_calls else None
        if lone and (plan is None or plan.marks == {(root.name, None)}):
            assert isinstance(root, Agent)
            return Flow(root, self.ctx, self.recorder).run()  # a lone agent: its flow's run
        if plan is not None:
            return self._resume(root, None, True, _Outcome(), plan)
        agent, branch = self.agent_to_run()
        return self._run(agent, branch, True, _Outcome(), self.ctx.resume)

    def drive(self, agent: BaseAgent, branch: str | None = None,
              message: Content | None = None, outcome: AgentOutcome | None = None
              ) -> AsyncGenerator[Event, None]:
        """The events of ``agent`` (any kind) running on ``branch`` within this run.

        The seam for running an agent inside another's turn (an ``AgentTool``
        drives its agent on its call's branch, ``sessions.ledger.call_branch``):
        ``message``, when given, is committed first as the user's turn on that
        branch (what the agent is asked); then the agent's events. Everything is
        committed through the run's recorder, never as the run's last event, and
        spends the run's budgets. ``outcome`` learns how the agent ended (it
        paused, say). Closing the generator stops it as closing the run would.
        """
        done = outcome if outcome is not None else _Outcome()
        if message is None:
            return self._run(agent, branch, False, done)
        return self._asked(agent, branch, message, done)

    async def _asked(self, agent: BaseAgent, branch: str | None, message: Content,
                     outcome: AgentOutcome) -> AsyncGenerator[Event, None]:
        asked = Event(invocation_id=self.ctx.invocation_id, author="user", branch=branch,
                      content=message)
        await self._inner().commit(asked)
        yield asked
        async with aclosing(self._run(agent, branch, False, outcome)) as events:
            async for event in events:
                yield event

    def live(self, queue: LiveRequestQueue) -> AsyncGenerator[Event, None]:
        """A live run: the LLM agent that takes the turn, over one connection at a time.

        The agent is :meth:`agent_to_run`'s, as for :meth:`run`. It is offered
        ``transfer_to_agent`` when it has somewhere to go; a transfer closes its
        connection and opens the target's on the same history
        (:class:`~headwater.agents.live_flow.LiveFlow`).

        Raises:
            UserError: the agent that takes the turn is not an LLM agent.
        """
        agent, branch = self.agent_to_run()
        if not isinstance(agent, Agent):
            which = "the root" if agent is self.root else "the agent taking this turn"
            raise UserError(f"run_live drives an LLM agent; {which} {agent.name!r} is a "
                            f"{type(agent).__name__}: run it with run_async")
        ctx = self.ctx if branch == self.ctx.branch else replace(self.ctx, branch=branch)
        recorder = self.recorder

        def flow_of(llm_agent: Agent) -> Flow:
            return Flow(llm_agent, ctx, recorder, live=True)

        return LiveFlow(flow_of(agent), queue, flow_of, self.resume_calls).events()

    def error_event(self, code: ErrorCode, message: str) -> Event:
        """An error record of the run, authored by the root."""
        logger.warning("agent %s: %s: %s", self.root.name, code, message)
        return Event(invocation_id=self.ctx.invocation_id, author=self.root.name,
                     error_code=code, error_message=message)

    def seal(self, reason: str) -> Event | None:
        """One event giving every dangling call of the session a ``reason`` result, or ``None``."""
        return seal_event(self.ctx, self.root.name, reason)

    async def repair(self) -> Event | None:
        """After a crash: each dangling call to an ``idempotent`` tool runs again on the
        agent that made it; the others get ``interrupted`` results. ``None``: nothing dangles."""
        ledger = self.ctx.ledger
        dangling = ledger.dangling()
        if not dangling:
            return None
        by_author: dict[str, list[FunctionCall]] = {}
        for call in dangling:
            record = ledger.record(call.id)
            author = record.author if record is not None and record.author else self.root.name
            by_author.setdefault(author, []).append(call)
        results = {}
        for author, calls in by_author.items():
            agent = self.root.find_agent(author)
            if isinstance(agent, Agent):
                flow = Flow(agent, self.ctx, self.recorder, transfer=False)
                results.update(await flow.rerun(calls))
        return seal_event(self.ctx, self.root.name, "interrupted", results)

    def agent_to_run(self) -> tuple[BaseAgent, str | None]:
        """The agent that takes this turn, and the branch it runs on (see the module docstring)."""
        root, ctx = self.root, self.ctx
        if not root.sub_agents:
            return root, None
        ledger = ctx.ledger
        for call_id in [call.id for call, _ in ctx.resume] or self._results_sent():
            record = ledger.record(call_id)
            if record is not None and (agent := root.find_agent(record.author)) is not None:
                return agent, record.branch
        for name in ledger.speakers():
            if name == root.name:
                return root, None
            found = root.find_sub_agent(name)
            if found is not None and returns_to(found):
                return found, None
        return root, None

    # -- driving each kind ------------------------------------------------------------------

    def _run(self, agent: BaseAgent, branch: str | None, tail: bool, outcome: _Outcome,
             resume: Resume | None = None) -> AsyncGenerator[Event, None]:
        events = (self._called_back(agent, branch, tail, outcome, resume) if calls_back(agent)
                  else self._kind(agent, branch, tail, outcome, resume))
        return self.ctx.trace.agent(agent.name, branch, events)  # its turn's span

    async def _called_back(self, agent: BaseAgent, branch: str | None, tail: bool,
                           outcome: _Outcome, resume: Resume | None
                           ) -> AsyncGenerator[Event, None]:
        """``agent``'s run between its before- and after-agent callbacks (ADK's
        ``BaseAgent.run_async``): a before-callback's content is its reply instead of
        the run; an after-callback's is one more reply, unless the run stopped."""
        reply = await self._agent_reply(agent, branch, agent.before_agent_callbacks)
        if reply is not None:
            yield reply
            if reply.content is not None:
                return
        after = agent.after_agent_callbacks
        async with aclosing(self._kind(agent, branch, tail and not after, outcome,
                                       resume)) as events:
            async for event in events:
                yield event
        if outcome.stopped or outcome.paused:  # a paused agent's run is not over yet
            return
        reply = await self._agent_reply(agent, branch, after)
        if reply is not None:
            yield reply

    async def _agent_reply(self, agent: BaseAgent, branch: str | None,
                           callbacks: Sequence[BeforeAgentCallback | AfterAgentCallback]
                           ) -> Event | None:
        """Call ``callbacks`` in order until one returns content; the committed event with
        that content and the state they changed (``None``: no content, no change)."""
        if not callbacks:
            return None
        context = self.ctx.callback_context(agent.name)
        content: Content | None = None
        for callback in callbacks:
            content = await maybe_await(callback(callback_context=context))
            if content is not None:
                break
        if content is None and not context.actions.state_delta:
            return None
        event = Event(invocation_id=self.ctx.invocation_id, author=agent.name, branch=branch,
                      content=content, actions=context.actions)
        await self._inner().commit(event)
        return event

    def _kind(self, agent: BaseAgent, branch: str | None, tail: bool, outcome: _Outcome,
              resume: Resume | None = None) -> AsyncGenerator[Event, None]:
        if isinstance(agent, Agent):
            return self._llm(agent, branch, tail, outcome, resume or [])
        if isinstance(agent, SequentialAgent):
            return self._sequence(agent.sub_agents, branch, tail, outcome)
        if isinstance(agent, LoopAgent):
            return self._loop(agent, branch, outcome)
        if isinstance(agent, ParallelAgent):
            return self._parallel(agent, branch, outcome)
        raise UserError(f"agent {agent.name!r} is a {type(agent).__name__}, which the runner "
                        "cannot drive: use Agent, SequentialAgent, ParallelAgent or LoopAgent")

    async def _llm(self, agent: Agent, branch: str | None, tail: bool, outcome: _Outcome,
                   resume: Resume, decided: Sequence[CallOutcome] = ()
                   ) -> AsyncGenerator[Event, None]:
        recorder = self.recorder if tail else self._inner()
        resumed = bool(resume or decided)  # answers may leave others of its calls waiting
        while True:
            flow = Flow(agent, replace(self.ctx, branch=branch, resume=resume), recorder)
            resume = []
            last: Event | None = None
            async with aclosing(flow.run(decided)) as events:
                async for event in events:
                    yield event
                    if not event.partial:
                        last = event
                        if event.actions.escalate and event.branch == branch:
                            outcome.escalated = True  # (not one inside an agent used as a tool)
            decided = ()
            if last is None:
                return
            if last.error_code is not None or last.actions.end_invocation:
                outcome.stopped = True
                return
            if last.long_running_tool_ids or (resumed and self.ctx.ledger.holds(agent.name,
                                                                                branch)):
                outcome.paused = True  # a call of its waits for a human, or for an agent
                return
            resumed = False
            name = last.actions.transfer_to_agent
            target = agent.root_agent.find_agent(name) if name else None
            if target is None:
                return
            self.ctx.trace.transfer(agent.name, target.name, branch)
            if not isinstance(target, Agent) or calls_back(target):
                async with aclosing(self._run(target, branch, tail, outcome)) as events:
                    async for event in events:
                        yield event
                return
            agent = target  # LLM to LLM: a loop, not a nested generator per transfer

    async def _sequence(self, subs: Sequence[BaseAgent], branch: str | None, tail: bool,
                        outcome: _Outcome, plan: ResumePlan | None = None
                        ) -> AsyncGenerator[Event, None]:
        start = 0 if plan is None else plan.marked(subs, branch)
        for n in range(start, len(subs)):
            done = _Outcome()
            last_step = tail and n == len(subs) - 1
            steps = (self._resume(subs[n], branch, last_step, done, plan)
                     if plan is not None and n == start else
                     self._run(subs[n], branch, last_step, done))
            async with aclosing(steps) as events:
                async for event in events:
                    yield event
            outcome.escalated = outcome.escalated or done.escalated
            if done.stopped or done.paused:  # a paused step: the next ones wait for it
                outcome.stopped, outcome.paused = done.stopped, done.paused
                return

    async def _loop(self, agent: LoopAgent, branch: str | None, outcome: _Outcome,
                    plan: ResumePlan | None = None) -> AsyncGenerator[Event, None]:
        limit, rounds, made = agent.max_iterations, 0, True
        subs = agent.sub_agents
        start = 0 if plan is None else plan.marked(subs, branch)  # resumed mid-round
        while made and (limit is None or rounds < limit):
            rounds, made = rounds + 1, False  # a round that made no event would spin forever
            for n in range(start, len(subs)):
                done = _Outcome()
                steps = (self._resume(subs[n], branch, False, done, plan)
                         if plan is not None and n == start else
                         self._run(subs[n], branch, False, done))
                async with aclosing(steps) as events:
                    async for event in events:
                        made = True
                        yield event
                if done.stopped or done.paused:
                    outcome.stopped, outcome.paused = done.stopped, done.paused
                    return
                if done.escalated:
                    outcome.escalated = True  # as in ADK: an enclosing loop stops too
                    return
            start, plan = 0, None

    def _parallel(self, agent: ParallelAgent, branch: str | None, outcome: _Outcome,
                  plan: ResumePlan | None = None) -> AsyncGenerator[Event, None]:
        handoff = Handoff()
        ledger = self.ctx.ledger
        runs: list[tuple[BaseAgent, str, bool]] = []  # (sub, its branch, resumed)
        for sub in agent.sub_agents:
            sub_branch = f"{branch}.{agent.name}.{sub.name}" if branch else \
                f"{agent.name}.{sub.name}"
            if plan is None:
                runs.append((sub, sub_branch, False))
            elif (sub.name, sub_branch) in plan.marks:
                runs.append((sub, sub_branch, True))
            elif ledger.pending_under(sub_branch):  # still paused: no answer for it yet
                outcome.paused = True
            # else: that branch ended in an earlier run

        async def one(sub: BaseAgent, sub_branch: str, resumed: bool) -> None:
            done = _Outcome()
            try:
                steps = (self._resume(sub, sub_branch, False, done, plan)
                         if resumed and plan is not None else
                         self._run(sub, sub_branch, False, done))
                async with aclosing(steps) as events:
                    async for event in events:
                        await handoff.hand(event)  # go on once the caller has the event
            except SessionError:
                raise
            except Exception as exc:  # this branch fails alone; the others go on
                logger.error("agent %s (branch %s) failed: %s: %s", sub.name, sub_branch,
                             type(exc).__name__, exc, exc_info=exc)
                failed = Event(invocation_id=self.ctx.invocation_id, author=sub.name,
                               branch=sub_branch, error_code="internal",
                               error_message=ERROR_MESSAGES["internal"])
                await self.recorder.commit(failed)
                done.stopped = True
                await handoff.hand(failed)
            outcome.stopped = outcome.stopped or done.stopped
            outcome.escalated = outcome.escalated or done.escalated
            outcome.paused = outcome.paused or done.paused  # the others go on to their end

        async def branches() -> None:
            try:
                async with asyncio.TaskGroup() as group:
                    for sub, sub_branch, resumed in runs:
                        group.create_task(one(sub, sub_branch, resumed))
            except BaseExceptionGroup as group:  # one branch's store failure: as itself
                raise group.exceptions[0] from None

        return handoff.relay(branches)

    # -- resuming a paused tree -------------------------------------------------------------

    def _plan(self) -> ResumePlan | None:
        """Where this run's message resumes the tree: the agents whose calls it answers and
        the way to them; ``None`` when it answers none (or the tree no longer has them:
        :meth:`agent_to_run` then picks the agent, as before)."""
        ctx = self.ctx
        if ctx.resume:
            return plan_resume(self.root, ctx.ledger, ctx.resume, [])
        sent = self._results_sent()
        return plan_resume(self.root, ctx.ledger, [], sent) if sent else None

    def _results_sent(self) -> list[str]:
        """The calls whose long-running results this run's message (the session's last
        event, the user's) carries."""
        events = self.ctx.session.events
        last = events[-1] if events else None
        if last is None or last.author != "user" or last.content is None:
            return []
        return [response.id for response in last.content.function_responses]

    def _resume(self, agent: BaseAgent, branch: str | None, tail: bool, outcome: _Outcome,
                plan: ResumePlan) -> AsyncGenerator[Event, None]:
        """A marked agent going on from its pause; its after-agent callbacks once it is done
        (its before-agent ones ran when it started). One span of the inspector, as a turn."""
        return self.ctx.trace.agent(agent.name, branch,
                                    self._going_on(agent, branch, tail, outcome, plan))

    async def _going_on(self, agent: BaseAgent, branch: str | None, tail: bool,
                        outcome: _Outcome, plan: ResumePlan) -> AsyncGenerator[Event, None]:
        after = agent.after_agent_callbacks
        async with aclosing(self._resume_kind(agent, branch, tail and not after, outcome,
                                              plan)) as events:
            async for event in events:
                yield event
        if after and not (outcome.stopped or outcome.paused):
            reply = await self._agent_reply(agent, branch, after)
            if reply is not None:
                yield reply

    def _resume_kind(self, agent: BaseAgent, branch: str | None, tail: bool,
                     outcome: _Outcome, plan: ResumePlan) -> AsyncGenerator[Event, None]:
        if isinstance(agent, Agent):
            return self._resume_llm(agent, branch, tail, outcome, plan)
        if isinstance(agent, SequentialAgent):
            return self._sequence(agent.sub_agents, branch, tail, outcome, plan)
        if isinstance(agent, LoopAgent):
            return self._loop(agent, branch, outcome, plan)
        if isinstance(agent, ParallelAgent):
            return self._parallel(agent, branch, outcome, plan)
        return self._kind(agent, branch, tail, outcome)  # refused there

    async def _resume_llm(self, agent: Agent, branch: str | None, tail: bool,
                          outcome: _Outcome, plan: ResumePlan) -> AsyncGenerator[Event, None]:
        """An LLM agent going on: its answered calls run (or are denied), the agents used
        as tools it waits for go on, and those that finish give their calls' results;
        then its model, as after any results. An agent marked only because an agent it
        transferred to paused hands over to that agent."""
        answers = plan.answers.get((agent.name, branch))
        waiting = self._waiting(agent, branch, plan)
        if answers is None and not waiting:
            target = plan.marked_agent(agent.sub_agents, branch)
            if target is not None:  # it transferred; the agent it went to paused
                async with aclosing(self._resume(target, branch, tail, outcome, plan)) as events:
                    async for event in events:
                        yield event
            return
        decided: list[CallOutcome] = []
        shown = self.ctx.run_config.streaming_mode is not StreamingMode.NONE
        async with aclosing(self._go_on(waiting, plan, decided)) as events:
            async for event in events:
                if shown:  # under NONE an inner run is stored, not shown (as its start)
                    yield event
        if not decided and answers is None:
            outcome.paused = True  # every agent it waits for is still waiting
            return
        async with aclosing(self._llm(agent, branch, tail, outcome, answers or [],
                                      decided)) as events:
            async for event in events:
                yield event

    def resume_calls(self, agent: Agent, branch: str | None, resume: Resume,
                     decided: list[CallOutcome]) -> AsyncGenerator[Event, None]:
        """Within a live run: the agents used as tools by ``agent`` (on ``branch``) that wait
        for the calls ``resume`` answers go on; the outcomes of the calls whose agent
        finished are added to ``decided`` (the live flow tells its model). The events
        yielded are committed already."""
        plan = plan_resume(self.root, self.ctx.ledger, resume, [])
        if plan is None:
            return _nothing()
        return self._go_on(self._waiting(agent, branch, plan), plan, decided)

    def _waiting(self, agent: Agent, branch: str | None, plan: ResumePlan
                 ) -> list[tuple[CallRecord, AgentTool, str]]:
        """The calls of ``agent`` on ``branch`` that wait for an agent the plan resumes: each
        record, its ``AgentTool`` and the branch its agent runs on."""
        tools = agent.tools_by_name
        found: list[tuple[CallRecord, AgentTool, str]] = []
        for record in self.ctx.ledger.waiting(agent.name, branch):
            tool = tools.get(record.call.name)
            inner = call_branch(branch, agent.name, record.call.id)
            if isinstance(tool, AgentTool) and (tool.agent.name, inner) in plan.marks:
                found.append((record, tool, inner))
        return found

    async def _go_on(self, waiting: list[tuple[CallRecord, AgentTool, str]], plan: ResumePlan,
                     decided: list[CallOutcome]) -> AsyncGenerator[Event, None]:
        """Resume the agent each waiting call ran, in call order; a call whose agent
        finishes gets its result in ``decided`` (:class:`InnerRun`, as on its first run)."""
        for record, tool, inner_branch in waiting:
            seen, done = InnerRun(), _Outcome()
            async with aclosing(self._resume(tool.agent, inner_branch, False, done,
                                             plan)) as events:
                async for event in events:
                    yield event
                    seen.see(event)
            if not done.paused:
                actions = EventActions()
                decided.append(CallOutcome(record.call, seen.result(tool, actions), actions))


async def _nothing() -> AsyncGenerator[Event, None]:
    return
    yield  # (an async generator that yields nothing)
