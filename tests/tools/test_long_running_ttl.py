"""A long-running call whose result never comes gets an ``expired`` result after the TTL."""

from __future__ import annotations

import asyncio

import pytest

from headwater import Agent, Content, Part, Runner, tool
from headwater.errors import UserError
from headwater.settings import Settings
from headwater.testing import ScriptedModel
from headwater.types import FunctionResponse


@tool(long_running=True)
def start_export(table: str) -> dict[str, str]:
    """Starts an export job."""
    return {"ticket": f"job-{table}"}


def make(ttl: float) -> tuple[ScriptedModel, Runner]:
    model = (ScriptedModel().call("start_export", {"table": "orders"}, call_id="x1")
             .reply("Still waiting."))
    runner = Runner(agent=Agent(name="bot", model=model, tools=[start_export]),
                    app_name="app", auto_create_session=True,
                    settings=Settings(long_running_ttl=ttl))
    return model, runner


async def test_within_the_default_ttl_the_ticket_stays_pending() -> None:
    model, runner = make(Settings().long_running_ttl)
    await runner.run_once(user_id="u", session_id="s", new_message="export orders")
    await runner.run_once(user_id="u", session_id="s", new_message="news?")
    assert model.requests[1].contents[2].function_responses[0].response == {
        "ticket": "job-orders"}  # still the ticket: no expiry


async def test_a_ticket_without_its_result_expires_after_the_ttl() -> None:
    model, runner = make(0.001)
    first = await runner.run_once(user_id="u", session_id="s", new_message="export orders")
    assert first.events[-1].long_running_tool_ids == ["x1"]
    await asyncio.sleep(0.01)
    await runner.run_once(user_id="u", session_id="s", new_message="news?")
    seen = model.requests[1].contents[2].function_responses[0].response
    assert seen["code"] == "expired"
    session = await runner.session_service.get_session(app_name="app", user_id="u",
                                                       session_id="s")
    assert session is not None
    stored = [r.response for e in session.events for r in e.function_responses]
    assert [r.get("code") for r in stored] == [None, "expired"]  # the ticket, then its end
    with pytest.raises(UserError, match="no pending long-running call"):
        await runner.run_once(user_id="u", session_id="s", new_message=Content(
            "user", [Part(function_response=FunctionResponse(
                id="x1", name="start_export", response={"rows": 42}))]))
