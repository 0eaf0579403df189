"""Workflow agents: ``SequentialAgent``, ``ParallelAgent``, ``LoopAgent``.

They call no model: each runs its sub-agents in a fixed pattern, and the
orchestrator (``headwater.agents.tree``) drives them. Their sub-agents' events
reach the run's one stream, authored by the sub-agent that made them.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..core.errors import UserError
from .base import BaseAgent
from .callbacks import AfterAgentCallback, BeforeAgentCallback


class SequentialAgent(BaseAgent):
    """Runs its sub-agents one after the other, in order, on the same branch.

    A sub-agent that ends in an error event ends the sequence (the run ends
    with that error).
    """


class ParallelAgent(BaseAgent):
    """Runs its sub-agents concurrently, each on its own branch.

    A sub-agent ``sub`` of ``ParallelAgent(name="p")`` runs on branch
    ``"p.sub"`` (``"<branch>.p.sub"`` when ``p`` itself runs on a branch): every
    event it makes carries that branch, and the history its model sees leaves
    out the other branches' events. A branch that fails ends with its own error
    event and the others go on. The agent is done when every branch is.
    """


class LoopAgent(BaseAgent):
    """Runs its sub-agents in order, again and again.

    It stops after ``max_iterations`` rounds, or once a sub-agent has made an
    event with ``actions.escalate`` set (a tool sets
    ``tool_context.actions.escalate = True``): that sub-agent finishes its turn
    and no other runs — whichever comes first. A sub-agent that ends in an
    error event ends the loop.

    Args:
        max_iterations: the most rounds; ``None`` loops until an escalate
            (the run's budgets, e.g. ``max_llm_calls``, still bound it).

    Raises:
        UserError: ``max_iterations`` below 1.
    """

    def __init__(self, *, name: str, description: str = "",
                 sub_agents: Sequence[BaseAgent] = (), max_iterations: int | None = None,
                 before_agent_callback: BeforeAgentCallback | Sequence[BeforeAgentCallback]
                 | None = None,
                 after_agent_callback: AfterAgentCallback | Sequence[AfterAgentCallback]
                 | None = None) -> None:
        if max_iterations is not None and max_iterations < 1:
            raise UserError(f"LoopAgent {name!r}: max_iterations is at least 1 "
                            f"(or None: until an escalate), not {max_iterations!r}")
        super().__init__(name=name, description=description, sub_agents=sub_agents,
                         before_agent_callback=before_agent_callback,
                         after_agent_callback=after_agent_callback)
        self.max_iterations = max_iterations
