"""The toolsets of a tree of agents: found, opened before runs, closed with their owner.

``open_toolsets(root)`` lists every toolset of every agent a run of ``root`` may
reach (sub-agents, and agents used as tools), so that no run waits for a
listing; the gateway, the command line and ``headwater mcp`` call it before they
start runs. ``close_toolsets(root)`` closes them (``Runner.aclose``, the
gateway's shutdown, the command line's exit): no server process outlives them.
"""

from __future__ import annotations

import logging

from ..tools.toolset import BaseToolset
from .agent import Agent
from .agent_tool import AgentTool
from .base import BaseAgent

logger = logging.getLogger("headwater.tools")


def agents_of(root: BaseAgent) -> list[Agent]:
    """Every LLM agent a run of ``root`` may reach: the tree's, and those used as tools."""
    found: list[Agent] = []
    seen: set[int] = set()
    stack = [root]
    while stack:
        agent = stack.pop()
        for member in agent.walk():
            if id(member) in seen:
                continue
            seen.add(id(member))
            if isinstance(member, Agent):
                found.append(member)
                stack += [t.agent for t in member.known_tools if isinstance(t, AgentTool)]
    return found


def toolsets_of(root: BaseAgent) -> list[BaseToolset]:
    """The toolsets of :func:`agents_of` ``root``, each once."""
    found: dict[int, BaseToolset] = {}
    for agent in agents_of(root):
        for toolset in agent.toolsets:
            found.setdefault(id(toolset), toolset)
    return list(found.values())


async def open_toolsets(root: BaseAgent) -> None:
    """List every toolset ``root``'s runs may use (at once for those already listed), and
    check that their tools clash with no other tool of their agent.

    Raises:
        McpUnavailableError: a toolset's server could not be started or reached.
        UserError: a toolset's tool has the name of another tool of its agent.
    """
    for toolset in toolsets_of(root):
        await toolset.open()
    for agent in agents_of(root):
        if agent.toolsets:
            agent.known_tools  # noqa: B018 - merges (and checks) the listed tools


async def close_toolsets(root: BaseAgent) -> None:
    """Close every toolset of ``root``'s agents; a failure is logged, the others still close."""
    for toolset in toolsets_of(root):
        try:
            await toolset.aclose()
        except Exception as exc:  # one toolset's failure must not keep the others open
            logger.warning("closing %r failed: %s", toolset, type(exc).__name__)
