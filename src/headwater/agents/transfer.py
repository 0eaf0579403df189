"""Transfer between LLM agents: who an agent may go to, and the built-in tool that goes.

An LLM agent may transfer to its sub-agents; to its parent unless
``disallow_transfer_to_parent``; to its peers (the parent's other sub-agents)
unless ``disallow_transfer_to_peers`` — parent and peers only when the parent
is an LLM agent (ADK's rule). An agent with anywhere to go is offered
``transfer_to_agent(agent_name)``, whose description lists those agents and
what they do. A call naming an agent it may go to records
``actions.transfer_to_agent`` on the call's result event, and the orchestrator
runs that agent next; any other name is an error result to the model. In a
live run the target must be able to run live too (an LLM agent whose model
has a live connection): any other is an error result (``live_unsupported``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..core.types import ToolDeclaration
from ..tools.context import ToolContext
from ..tools.function_tool import BaseTool
from ._execution import error_result
from .agent import Agent
from .base import BaseAgent

TRANSFER_TO_AGENT = "transfer_to_agent"


def transfer_targets(agent: Agent) -> list[BaseAgent]:
    """The agents ``agent`` may transfer to: sub-agents, then parent, then peers."""
    targets = list(agent.sub_agents)
    parent = agent.parent_agent
    if not isinstance(parent, Agent):
        return targets
    if not agent.disallow_transfer_to_parent:
        targets.append(parent)
    if not agent.disallow_transfer_to_peers:
        targets += [peer for peer in parent.sub_agents if peer is not agent]
    return targets


def returns_to(agent: BaseAgent) -> bool:
    """Whether the next user turn may go straight to ``agent`` (ADK's rule).

    True when it and every agent above it are LLM agents that may transfer to
    their parent: a conversation handed down such a chain can make its way
    back up.
    """
    current: BaseAgent | None = agent
    while current is not None:
        if not isinstance(current, Agent) or current.disallow_transfer_to_parent:
            return False
        current = current.parent_agent
    return True


def can_run_live(agent: BaseAgent) -> bool:
    """Whether a live run can hand the conversation to ``agent``: an LLM agent whose model
    has a live connection (native or emulated)."""
    return isinstance(agent, Agent) and agent.model.supports_live


class TransferToAgentTool(BaseTool):
    """``transfer_to_agent(agent_name)``, offered to an agent with somewhere to go.

    Args:
        agent: the agent the tool is offered to.
        targets: the agents it may go to (:func:`transfer_targets`).
        live: offered in a live run: a target that cannot run live is refused
            when called.
    """

    def __init__(self, agent: Agent, targets: Sequence[BaseAgent], *, live: bool = False
                 ) -> None:
        self.name = TRANSFER_TO_AGENT
        self._agent = agent
        self._live = live
        self._targets = {target.name: target for target in targets}
        parent = agent.parent_agent
        lines = []
        for target in targets:
            role = " (your parent)" if target is parent else ""
            about = target.description or "(no description)"
            lines.append(f"- {target.name}{role}: {about}")
        self.description = (
            "Transfer the conversation to another agent, when it is better suited to answer "
            "according to its description; it answers the user from there. When you "
            "transfer, say nothing else.\n\nAgents you can transfer to:\n" + "\n".join(lines))
        self._declaration = ToolDeclaration(
            name=self.name, description=self.description,
            parameters={"type": "object", "required": ["agent_name"], "properties": {
                "agent_name": {"type": "string", "enum": list(self._targets),
                               "description": "The name of the agent to transfer to."}}})

    @property
    def targets(self) -> list[str]:
        """The names of the agents it may go to."""
        return list(self._targets)

    def declaration(self) -> ToolDeclaration:
        return self._declaration

    async def run(self, args: dict[str, Any], context: ToolContext) -> Any:
        """Record the transfer, or answer why it cannot happen (an error result)."""
        name = args.get("agent_name")
        allowed = ", ".join(self._targets)
        if not isinstance(name, str) or name not in self._targets:
            known = isinstance(name, str) and self._agent.root_agent.find_agent(name) is not None
            code = "transfer_not_allowed" if known else "unknown_agent"
            why = ("may not be transferred to from here" if known
                   else "is no agent of this app")
            return error_result(code, f"{name!r} {why}; transfer to one of: {allowed}")
        if self._live and not can_run_live(self._targets[name]):
            return error_result("live_unsupported", f"{name!r} cannot take part in a live "
                                "conversation; answer here or transfer to another agent")
        context.actions.transfer_to_agent = name
        return None
