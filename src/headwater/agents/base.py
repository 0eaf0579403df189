"""``BaseAgent``: what every agent kind shares — a name, a description, sub-agents, a parent.

Agents form a tree: an agent lists its ``sub_agents`` when it is built and
becomes their parent. A tree is checked as it is built: an agent has one
parent, and names are unique in the tree (a name authors events and routes the
next user turn, so two agents under one name could not be told apart).

An agent holds no run state and runs nothing itself: the runner hands the tree
to the orchestrator (``headwater.agents.tree``), which drives each kind.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import TypeVar

from ..core.errors import UserError
from .callbacks import AfterAgentCallback, BeforeAgentCallback

_C = TypeVar("_C")


def as_callbacks(callbacks: _C | Sequence[_C] | None) -> tuple[_C, ...]:
    """One callback, a list of them, or ``None``, as a tuple (tried in order)."""
    if callbacks is None:
        return ()
    if isinstance(callbacks, Sequence):
        return tuple(callbacks)
    return (callbacks,)

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


def check_name(name: object) -> str:
    """``name`` as an agent's name.

    Raises:
        UserError: not an identifier, or ``user`` (reserved).
    """
    if not isinstance(name, str) or not _NAME.match(name) or name == "user":
        raise UserError(f"agent name {name!r} must be an identifier other than 'user'")
    return name


class BaseAgent:
    """The part of every agent kind that makes the tree.

    Args:
        name: identifier, unique in the tree; the author of the agent's events.
        description: what the agent does; other agents read it to decide on
            a transfer, and UIs show it.
        sub_agents: the agent's children; each becomes this agent's.
        before_agent_callback: ``(callback_context=)``, or a list of them tried in
            order until one returns a ``Content``: that content is the agent's
            reply and the agent does not run (ADK's). State a callback sets is
            stored (with the reply, or in an event of its own without one).
        after_agent_callback: the same, after the agent's run (not after one that
            ended in an error or ended the run): a returned ``Content`` is one
            more reply of the agent.

    Attributes:
        parent_agent: the agent that lists this one in its ``sub_agents``
            (``None`` for a root).

    Raises:
        UserError: a bad name; a sub-agent that already has a parent; two
            agents of the tree under one name.
    """

    def __init__(self, *, name: str, description: str = "",
                 sub_agents: Sequence[BaseAgent] = (),
                 before_agent_callback: BeforeAgentCallback | Sequence[BeforeAgentCallback]
                 | None = None,
                 after_agent_callback: AfterAgentCallback | Sequence[AfterAgentCallback]
                 | None = None) -> None:
        self.name = check_name(name)
        self.description = description
        self.before_agent_callbacks = as_callbacks(before_agent_callback)
        self.after_agent_callbacks = as_callbacks(after_agent_callback)
        self.parent_agent: BaseAgent | None = None
        subs = tuple(sub_agents)
        seen: dict[str, BaseAgent] = {name: self}
        for sub in subs:
            if not isinstance(sub, BaseAgent):
                raise UserError(f"sub_agents of {name!r} must be agents, not {sub!r}")
            if sub.parent_agent is not None:
                raise UserError(
                    f"agent {sub.name!r} is already a sub-agent of {sub.parent_agent.name!r}; "
                    f"an agent has one parent: build another agent to put under {name!r}")
            for agent in sub.walk():
                if agent.name in seen:
                    raise UserError(
                        f"two agents named {agent.name!r} in the tree of {name!r}: names are "
                        "unique in a tree (they author events and route the next turn)")
                seen[agent.name] = agent
        self.sub_agents: tuple[BaseAgent, ...] = subs
        for sub in subs:
            sub.parent_agent = self

    @property
    def root_agent(self) -> BaseAgent:
        """The root of this agent's tree."""
        agent = self
        while agent.parent_agent is not None:
            agent = agent.parent_agent
        return agent

    def walk(self) -> Iterator[BaseAgent]:
        """This agent and every agent under it, depth first."""
        yield self
        for sub in self.sub_agents:
            yield from sub.walk()

    def find_agent(self, name: str) -> BaseAgent | None:
        """This agent or one under it named ``name``, or ``None``."""
        return next((agent for agent in self.walk() if agent.name == name), None)

    def find_sub_agent(self, name: str) -> BaseAgent | None:
        """An agent under this one (not this one) named ``name``, or ``None``."""
        for sub in self.sub_agents:
            found = sub.find_agent(name)
            if found is not None:
                return found
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"
