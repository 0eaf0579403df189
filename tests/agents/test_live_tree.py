"""Live runs over a tree: the agent taking the turn, offered transfer (see test_live_transfer)."""

from __future__ import annotations

import asyncio

import pytest

from headwater import Agent, LiveRequestQueue, Runner, SequentialAgent
from headwater.errors import UserError
from headwater.models import LlmRequest
from headwater.testing import ScriptedModel, ScriptedTurn
from headwater.types import Content


def chat(request: LlmRequest) -> ScriptedTurn:
    return ScriptedTurn(text=["You said ", request.contents[-1].text])


async def test_a_live_run_of_a_tree_runs_the_root_offering_transfer() -> None:
    model = ScriptedModel(responder=chat)
    root = Agent(name="coordinator", model=model, sub_agents=[
        Agent(name="billing", model=ScriptedModel())])
    runner = Runner(agent=root, app_name="app", auto_create_session=True)
    queue = LiveRequestQueue()
    queue.send_content(Content.from_text("hi"))
    events = []
    async with runner.run_live(user_id="u", session_id="s", live_request_queue=queue) as stream:
        async for event in stream:
            events.append(event)
            if not event.partial and event.author == "coordinator" and event.turn_complete:
                break
    assert [t.name for t in model.requests[0].tools] == ["transfer_to_agent"]
    assert events[-1].text == "You said hi"


async def test_a_live_run_of_a_workflow_root_is_refused_clearly() -> None:
    root = SequentialAgent(name="pipeline", sub_agents=[Agent(name="a", model=ScriptedModel())])
    runner = Runner(agent=root, app_name="app", auto_create_session=True)
    stream = runner.run_live(user_id="u", session_id="s", live_request_queue=LiveRequestQueue())
    with pytest.raises(UserError, match=r"run_live drives an LLM agent.*SequentialAgent"):
        await asyncio.wait_for(stream.start(), 10)
    # The session was given back: a run_async of another root may take it at once.
    other = Runner(agent=Agent(name="a2", model=ScriptedModel().reply("ok")), app_name="app",
                   session_service=runner.session_service)
    async with other.run_async(user_id="u", session_id="s", new_message="hi") as run:
        assert [e.text async for e in run] == ["ok"]
