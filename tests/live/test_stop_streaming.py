"""``stop_streaming`` in a live run is always the built-in stop, declared by the agent or not.

ADK's docs (seed 002) have the agent declare ``def stop_streaming(function_name: str)``
itself; in a live run that declaration only lends the built-in its description, and its
function never runs. Outside live runs a tool of that name is an ordinary tool.
"""

from __future__ import annotations

from typing import Any

from headwater import Agent, FunctionTool, Runner
from headwater.agents.live_flow import STOP_DECLARATION, STOP_STREAMING
from headwater.gateway.core import exposes_of
from headwater.models import LlmRequest
from headwater.testing import ScriptedCall, ScriptedModel, ScriptedTurn, VirtualClock

from .test_live import Live, Quotes, live_responder, watcher


def user_stop(ran: list[str]) -> FunctionTool:
    """The agent's own ``stop_streaming``, as ADK's docs write it (it records each run)."""

    def stop_streaming(function_name: str) -> None:
        """Stop the streaming

        Args:
          function_name: The name of the streaming function to stop.
        """
        ran.append(function_name)

    return FunctionTool(stop_streaming)


def stops(live: Live) -> list[dict[str, Any]]:
    return [r.response for e in live.events if not e.partial for r in e.function_responses
            if r.name == STOP_STREAMING]


async def test_a_declared_stop_streaming_stops_by_name_and_by_call_id_and_never_runs() -> None:
    clock, quotes, ran = VirtualClock(), Quotes(), []
    async with Live([watcher(quotes), user_stop(ran)], clock) as live:
        await live.say("watch GOOG MSFT")
        await live.say("stop call w-GOOG")
        assert stops(live) == [{"result": "Successfully stopped streaming function watch_price",
                                "stopped": 1}]
        await clock.advance(10)
        assert {s for s, _ in quotes.polls[-2:]} == {"MSFT"}  # only the GOOG stream stopped
        await live.say("stop")
        assert stops(live)[1:] == [{"result": "Successfully stopped streaming function "
                                              "watch_price", "stopped": 1}]
        polls = len(quotes.polls)
        await clock.advance(60)
        assert len(quotes.polls) == polls
        assert live.texts()[-1] == "Stopped."
    assert ran == []  # the agent's function never ran
    # Declared once, with the built-in's parameters (call_id too) and the agent's description.
    tools = live.model.requests[0].tools
    assert [d.name for d in tools] == ["watch_price", STOP_STREAMING]
    assert tools[1].description == "Stop the streaming"
    assert tools[1].parameters == STOP_DECLARATION.parameters


async def test_without_live_tools_a_declared_stop_streaming_is_still_the_built_in() -> None:
    ran: list[str] = []

    def respond(request: LlmRequest) -> ScriptedTurn:
        last = request.contents[-1]
        if last.function_responses:
            return ScriptedTurn(text=[str(last.function_responses[0].response["result"])])
        return ScriptedTurn(calls=[ScriptedCall(STOP_STREAMING, {"function_name": "ticker"},
                                                id="s1")])

    async with Live([user_stop(ran)], VirtualClock(), responder=respond) as live:
        await live.say("stop the ticker")
        assert stops(live) == [{"result": "No active streaming function named ticker"}]
        assert live.texts()[-1] == "No active streaming function named ticker"
    assert ran == []
    [declaration] = live.model.requests[0].tools
    assert declaration.name == STOP_STREAMING
    assert declaration.parameters == STOP_DECLARATION.parameters


async def test_outside_live_runs_a_declared_stop_streaming_is_an_ordinary_tool() -> None:
    ran: list[str] = []
    model = ScriptedModel(responder=live_responder)
    runner = Runner(agent=Agent(name="market_watch", model=model, tools=[user_stop(ran)]),
                    app_name="app", auto_create_session=True)
    events = [e async for e in runner.run_async(user_id="u", session_id="s",
                                                new_message="stop")]
    assert ran == ["watch_price"]
    assert [r.response for e in events for r in e.function_responses] == [{"result": None}]
    assert [d.description for d in model.requests[0].tools] == ["Stop the streaming"]


def test_the_gateway_shows_stop_streaming_raw_in_live_runs_whoever_declared_it() -> None:
    ran: list[str] = []
    declared = Agent(name="a", model=ScriptedModel(), tools=[user_stop(ran)])
    builtin = Agent(name="b", model=ScriptedModel(), tools=[watcher(Quotes())])
    assert exposes_of(declared, live=True)(STOP_STREAMING)
    assert exposes_of(builtin, live=True)(STOP_STREAMING)
    assert exposes_of(builtin)(STOP_STREAMING)
    assert not exposes_of(declared)(STOP_STREAMING)  # outside live runs: the tool's own option
