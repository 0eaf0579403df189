"""Where a message that answers calls resumes a paused tree (docs/multi-agent.md, "A pause
inside a tree").

A run pauses wherever a call waits for a human — in an agent used as a tool
(nested too), a sequence or loop step, a parallel branch. The answer names
calls; each call's record (its author and branch, ``sessions.ledger``) places
the agent that made it, and the way up from it to the root is marked: through
its workflow agents and transfers (``parent_agent``, a parallel agent's
``"<parallel>.<sub>"`` branch stripped), and through each agent used as a tool
to the call that ran it (the branch's ``"<agent>:<call id>"`` segments). The
orchestrator (``TreeRun``) then walks down the marks: what is marked goes on,
what came after it in a workflow runs, what ended before is left alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..sessions.ledger import CallLedger, CallRecord, call_branch, calls_above
from .agent import Agent
from .agent_tool import AgentTool
from .approvals import Resume
from .base import BaseAgent
from .workflow import ParallelAgent


@dataclass(slots=True)
class ResumePlan:
    """Where a message that answers calls resumes the tree."""

    answers: dict[tuple[str, str | None], Resume]
    """Each agent (and branch) whose own calls the message answers: the approval
    decisions for it (none for long-running results, which the message carries)."""
    marks: set[tuple[str, str | None]]
    """The agents (and branches) on the way from the root to each of them, through
    the calls of agents used as tools that wait for them."""

    def marked(self, subs: Sequence[BaseAgent], branch: str | None) -> int:
        """The index of the sub-agent a resumed sequence or loop goes on from."""
        for n, sub in enumerate(subs):
            if (sub.name, branch) in self.marks:
                return n
        return len(subs)  # none: nothing of it paused (the plan passed it by)

    def marked_agent(self, subs: Sequence[BaseAgent], branch: str | None
                     ) -> BaseAgent | None:
        """The sub-agent (on ``branch``) a resumed run goes on with, if one is marked."""
        for sub in subs:
            if (sub.name, branch) in self.marks:
                return sub
        return None


def plan_resume(root: BaseAgent, ledger: CallLedger, resume: Resume, answered: list[str]
                ) -> ResumePlan | None:
    """The plan for approval answers ``resume`` and long-running results for the calls
    ``answered``; ``None`` when they name no call of the session, or one the tree no
    longer has a place for (the orchestrator then picks the agent as for any message)."""
    answers: dict[tuple[str, str | None], Resume] = {}
    for call, decision in resume:
        record = ledger.record(call.id)
        if record is not None:
            answers.setdefault((record.author, record.branch), []).append((call, decision))
    for call_id in answered:
        record = ledger.record(call_id)
        if record is not None:
            answers.setdefault((record.author, record.branch), [])
    if not answers:
        return None
    marks: set[tuple[str, str | None]] = set()
    for author, branch in answers:
        if not _mark(root, ledger, author, branch, marks):
            return None
    return ResumePlan(answers, marks)


def _level(root: BaseAgent, ledger: CallLedger, branch: str | None
           ) -> tuple[BaseAgent, str | None, CallRecord | None] | None:
    """The top agent of the run ``branch`` lies in, the branch it runs on, and the call
    that runs it: the root on no call's branch; else the agent of the ``AgentTool``
    whose call's branch holds ``branch`` (the innermost). ``None``: not in this tree."""
    above = calls_above(branch)
    if not above:
        return root, None, None
    call_id = above[-1]
    record = ledger.record(call_id)
    if record is None:
        return None
    outer = _level(root, ledger, record.branch)
    caller = outer[0].find_agent(record.author) if outer is not None else None
    tool = caller.tools_by_name.get(record.call.name) if isinstance(caller, Agent) else None
    if not isinstance(tool, AgentTool):
        return None
    return tool.agent, call_branch(record.branch, record.author, call_id), record


def _mark(root: BaseAgent, ledger: CallLedger, author: str, branch: str | None,
          marks: set[tuple[str, str | None]]) -> bool:
    """Mark ``author`` on ``branch`` and the agents above it up to the root, through the
    waiting calls that ran them. ``False``: the tree does not have that place."""
    level = _level(root, ledger, branch)
    if level is None:
        return False
    top, top_branch, call = level
    if call is not None and not _mark(root, ledger, call.author, call.branch, marks):
        return False
    agent = top.find_agent(author)
    if agent is None:
        return False
    while True:
        marks.add((agent.name, branch))
        if agent is top:
            return branch == top_branch
        parent = agent.parent_agent
        if parent is None:
            return False
        if isinstance(parent, ParallelAgent):  # "<branch>.<parallel>.<sub>" back to <branch>
            own = f"{parent.name}.{agent.name}"
            if branch == own:
                branch = None
            elif branch is not None and branch.endswith("." + own):
                branch = branch[:-len(own) - 1]
            else:
                return False
        agent = parent
