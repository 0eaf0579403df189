"""Plain agents for ``headwater serve served_agents:<attr>`` (dev mode: no auth).

Not a test module: test_gateway_process.py serves it from a child process.
``not_an_app`` is neither an ASGI app nor agents, so serving it must fail.
``build_agent``, ``build_agents`` and ``build_app`` are factories (called with no arguments, as
uvicorn's ``--factory``); ``needs_a_name``, ``builds_nothing`` and ``build_later``
are functions serving must refuse.
"""

from __future__ import annotations

import os
from typing import Any

from headwater import Agent
from headwater.gateway import create_app
from headwater.testing import ScriptedModel

agent = Agent(name="first", model=ScriptedModel().reply("hello"))
agents = [agent, Agent(name="second", model=ScriptedModel().reply("hi"))]
not_an_app = {"name": "not an app"}


def build_agent() -> Agent:
    """A factory: the agent, built in the process that serves it."""
    return Agent(name="built", model=ScriptedModel().reply(f"built in {os.getpid()}"))


def build_agents() -> list[Agent]:
    """A factory of several agents."""
    return [build_agent(), Agent(name="other", model=ScriptedModel().reply("other"))]


def build_app() -> Any:
    """A factory of an app (a dev-mode gateway over ``build_agent()``)."""
    return create_app(build_agent())


def needs_a_name(name: str) -> Agent:
    """Not a factory: it needs an argument."""
    return Agent(name=name, model=ScriptedModel().reply("hello"))


def builds_nothing() -> None:
    """A factory that returns nothing servable."""


async def build_later() -> Agent:
    """An async function without the ASGI arguments: not a factory serve can call."""
    return build_agent()
