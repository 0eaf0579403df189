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
  through a :class:`~headwater.agents._execution.Handoff` (nothing is yielded
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
from dataclasses import dataclass, replace

from ..core.errors import ERROR_MESSAGES, ErrorCode, SessionError, UserError
from ..core.events import Event
from ..core.live_request_queue import LiveRequestQueue
from ..core.types import Content, FunctionCall
from ._execution import Handoff, maybe_await
from .agent import Agent
from .approvals import Resume
from .base import BaseAgent
from .callbacks import AfterAgentCallback, BeforeAgentCallback
from .flow import Flow, Recorder, recorded, seal_event
from .invocation import InvocationContext
from .live_flow import LiveFlow
from .transfer import returns_to
from .workflow import LoopAgent, ParallelAgent, SequentialAgent

logger = logging.getLogger("headwater.agents")


@dataclass(slots=True)
class _Outcome:
    """How an agent's turn ended, for the workflow agent above it."""

    stopped: bool = False  # its last event was an error, or ended the run (end_invocation)
    escalated: bool = False  # it (or an agent under it) made an event with ``escalate``


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

        Closing the generator closes every running agent's model stream and
        cancels their tools. Call it once the user's message is committed.

        Raises (when iterated):
            UserError: an agent kind the orchestrator cannot run, or an
                instruction naming a state key the session does not hold.
        """
        root = self.root
        if (isinstance(root, Agent) and not root.sub_agents and root.parent_agent is None
                and not calls_back(root)):
            return Flow(root, self.ctx, self.recorder).run()  # a lone agent: its flow's run
        agent, branch = self.agent_to_run()
        return self._run(agent, branch, True, _Outcome(), self.ctx.resume)

    def drive(self, agent: BaseAgent, branch: str | None = None,
              message: Content | None = None) -> AsyncGenerator[Event, None]:
        """The events of ``agent`` (any kind) running on ``branch`` within this run.

        The seam for running an agent inside another's turn (an ``AgentTool``
        drives its agent on its call's branch, ``sessions.ledger.call_branch``):
        ``message``, when given, is committed first as the user's turn on that
        branch (what the agent is asked); then the agent's events. Everything is
        committed through the run's recorder, never as the run's last event, and
        spends the run's budgets. Closing the generator stops it as closing the
        run would.
        """
        if message is None:
            return self._run(agent, branch, False, _Outcome())
        return self._asked(agent, branch, message)

    async def _asked(self, agent: BaseAgent, branch: str | None, message: Content
                     ) -> AsyncGenerator[Event, None]:
        asked = Event(invocation_id=self.ctx.invocation_id, author="user", branch=branch,
                      content=message)
        await self._inner().commit(asked)
        yield asked
        async with aclosing(self._run(agent, branch, False, _Outcome())) as events:
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

        return LiveFlow(flow_of(agent), queue, flow_of).events()

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
        answered = [call.id for call, _ in ctx.resume]
        events = ctx.session.events
        if not answered and events and events[-1].author == "user":
            answered = [response.id for response in events[-1].function_responses]
        for call_id in answered:
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
        if outcome.stopped:
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
                   resume: Resume) -> AsyncGenerator[Event, None]:
        recorder = self.recorder if tail else self._inner()
        while True:
            flow = Flow(agent, replace(self.ctx, branch=branch, resume=resume), recorder)
            resume = []
            last: Event | None = None
            async with aclosing(flow.run()) as events:
                async for event in events:
                    yield event
                    if not event.partial:
                        last = event
                        if event.actions.escalate and event.branch == branch:
                            outcome.escalated = True  # (not one inside an agent used as a tool)
            if last is None:
                return
            if last.error_code is not None or last.actions.end_invocation:
                outcome.stopped = True
                return
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
                        outcome: _Outcome) -> AsyncGenerator[Event, None]:
        for n, sub in enumerate(subs):
            done = _Outcome()
            async with aclosing(self._run(sub, branch, tail and n == len(subs) - 1,
                                          done)) as events:
                async for event in events:
                    yield event
            outcome.escalated = outcome.escalated or done.escalated
            if done.stopped:
                outcome.stopped = True
                return

    async def _loop(self, agent: LoopAgent, branch: str | None, outcome: _Outcome
                    ) -> AsyncGenerator[Event, None]:
        limit, rounds, made = agent.max_iterations, 0, True
        while made and (limit is None or rounds < limit):
            rounds, made = rounds + 1, False  # a round that made no event would spin forever
            for sub in agent.sub_agents:
                done = _Outcome()
                async with aclosing(self._run(sub, branch, False, done)) as events:
                    async for event in events:
                        made = True
                        yield event
                if done.stopped:
                    outcome.stopped = True
                    return
                if done.escalated:
                    outcome.escalated = True  # as in ADK: an enclosing loop stops too
                    return

    def _parallel(self, agent: ParallelAgent, branch: str | None, outcome: _Outcome
                  ) -> AsyncGenerator[Event, None]:
        handoff = Handoff()

        async def one(sub: BaseAgent) -> None:
            sub_branch = f"{branch}.{agent.name}.{sub.name}" if branch else \
                f"{agent.name}.{sub.name}"
            done = _Outcome()
            try:
                async with aclosing(self._run(sub, sub_branch, False, done)) as events:
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

        async def branches() -> None:
            try:
                async with asyncio.TaskGroup() as group:
                    for sub in agent.sub_agents:
                        group.create_task(one(sub))
            except BaseExceptionGroup as group:  # one branch's store failure: as itself
                raise group.exceptions[0] from None

        return handoff.relay(branches)
