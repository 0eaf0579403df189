"""Plain agents for ``headwater serve served_agents:<attr>`` (dev mode: no auth).

Not a test module: test_gateway_process.py serves it from a child process.
``not_an_app`` is neither an ASGI app nor agents, so serving it must fail.
"""

from __future__ import annotations

from headwater import Agent
from headwater.testing import ScriptedModel

agent = Agent(name="first", model=ScriptedModel().reply("hello"))
agents = [agent, Agent(name="second", model=ScriptedModel().reply("hi"))]
not_an_app = {"name": "not an app"}
