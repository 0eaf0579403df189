"""Helpers of the ADK-sample tests: each sample's agents get a ScriptedModel, nothing else
of the sample changes."""

from __future__ import annotations

import importlib
from typing import Any

from headwater.events import Event
from headwater.runner import InMemoryRunner, Runner
from headwater.testing import ScriptedModel
from headwater.types import Content, Part


def script(model: ScriptedModel, *agents: Any) -> ScriptedModel:
    """Give each agent ``model`` in place of the sample's model string (nothing else changes)."""
    for agent in agents:
        agent.model = model
    return model


async def say(runner: Runner, session_id: str, text: str, user_id: str = "user1",
              **kwargs: Any) -> list[Event]:
    """One turn, as the samples' ``main.py`` sends it: a user Content of one text part."""
    message = Content(role="user", parts=[Part(text=text)])
    return [e async for e in runner.run_async(user_id=user_id, session_id=session_id,
                                              new_message=message, **kwargs)]


def sample(name: str) -> Any:
    return importlib.import_module(f"{__package__}.{name}")


async def runner_for(agent: Any, app_name: str) -> tuple[InMemoryRunner, str]:
    runner = InMemoryRunner(agent=agent, app_name=app_name)
    session = await runner.session_service.create_session(app_name=app_name, user_id="user1")
    return runner, session.id
