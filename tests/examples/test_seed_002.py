"""Seed 002's streaming-tools example runs unchanged: ``monitor_stock_price`` with the
user-declared ``stop_streaming``, over the emulation and both fake native sockets.

The agent and its tools are ``seed_002_streaming.py``'s, as the seed writes them; only the
model is the test's (a scripted model, or ``FakeLiveProvider`` playing the same responder
over Gemini Live and OpenAI Realtime). The seed's ``await asyncio.sleep(…)`` runs on a
``VirtualClock``: the module's ``asyncio`` name is bound to one whose ``sleep`` is the
clock's, so the seed's 48 seconds of prices pass in virtual time.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from types import SimpleNamespace

import pytest

from headwater import Agent, Runner
from headwater.agents.live_flow import STOP_DECLARATION
from headwater.models import BaseLlm, LlmRequest
from headwater.models.gemini_live import GeminiLiveModel
from headwater.models.openai_realtime import OpenAIRealtimeModel
from headwater.sessions import InMemorySessionService
from headwater.testing import (
    FakeLiveProvider,
    LiveHarness,
    ScriptedCall,
    ScriptedModel,
    ScriptedTurn,
    VirtualClock,
    wait_until,
)

from . import seed_002_streaming as seed

MODES = ("emulated", "gemini", "openai")
STOPPED = {"result": "Successfully stopped streaming function monitor_stock_price", "stopped": 1}


def monitoring_model(request: LlmRequest) -> ScriptedTurn:
    """The model's side of the seed's conversation (what Gemini would say, scripted)."""
    last = request.contents[-1]
    if last.function_responses:
        answered = last.function_responses[-1]
        if answered.name == "stop_streaming":
            return ScriptedTurn(text=["Stopped: ", str(answered.response.get("result"))])
        return ScriptedTurn(text=["Monitoring ", "GOOG."])
    text = last.text
    if text.startswith("Function monitor_stock_price returned: "):
        return ScriptedTurn(text=["Alert: ", text.removeprefix("Function monitor_stock_price "
                                                               "returned: ")])
    if text.startswith("Function monitor_stock_price "):  # the stream's end
        return ScriptedTurn(text=["The price watch has ended."])
    if text.lower().startswith("stop"):
        return ScriptedTurn(calls=[ScriptedCall("stop_streaming",
                                                {"function_name": "monitor_stock_price"})])
    if text.lower().startswith("monitor"):
        return ScriptedTurn(calls=[ScriptedCall("monitor_stock_price",
                                                {"stock_symbol": "GOOG"})])
    return ScriptedTurn(text=["I can monitor a stock price."])


@asynccontextmanager
async def seed_run(mode: str, monkeypatch: pytest.MonkeyPatch
                   ) -> AsyncIterator[tuple[LiveHarness, VirtualClock, list[LlmRequest],
                                            InMemorySessionService]]:
    """A live run of the seed's ``root_agent`` on ``mode``'s model, in virtual time, with
    what the model was asked (counted at the provider: the scripted model or the fake)."""
    fake: FakeLiveProvider | None = None
    if mode == "emulated":
        scripted = ScriptedModel(responder=monitoring_model)
        model: BaseLlm = scripted
        clock = VirtualClock()
        seen = scripted.requests
    else:
        fake = FakeLiveProvider(responder=monitoring_model)
        await fake.__aenter__()
        model = (GeminiLiveModel("gemini-live-test", base_url=fake.gemini_base_url,
                                 api_key="test-key") if mode == "gemini"
                 else OpenAIRealtimeModel("gpt-realtime-test", base_url=fake.openai_base_url,
                                          api_key="test-key"))
        clock = fake.virtual_clock()
        seen = fake.requests
    try:
        monkeypatch.setattr(seed, "asyncio", SimpleNamespace(sleep=clock.sleep))
        agent = seed.root_agent
        service = InMemorySessionService()
        runner = Runner(agent=Agent(name=agent.name, model=model, instruction=agent.instruction,
                                    tools=agent.tools),
                        app_name="seed", session_service=service, auto_create_session=True,
                        clock=clock)
        async with LiveHarness(runner, clock, close_timeout=10) as live:
            yield live, clock, seen, service
    finally:
        if fake is not None:
            await fake.__aexit__(None, None, None)


def prices(live: LiveHarness) -> list[str]:
    return live.told("Function monitor_stock_price")


async def answered(live: LiveHarness, clock: VirtualClock, text: str, *,
                   sleeping: int = 1) -> None:
    """Wait (real time, generously) until the model said ``text`` last and the seed's tool
    is asleep again: over a socket a round trip may outlast the clock's settling."""
    await wait_until(lambda: live.texts()[-1:] == [text] and clock.sleepers == sleeping,
                     timeout=20, message=f"the model never said {text!r}")
    await clock.settle()


def alert(price: int) -> str:
    return f"Function monitor_stock_price returned: the price for GOOG is {price}"


@pytest.mark.parametrize("mode", MODES)
async def test_the_seeds_stop_streaming_stops_the_price_watcher_and_the_model_is_told(
        mode: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    async with seed_run(mode, monkeypatch) as (live, clock, seen, service):
        await live.say("Monitor the stock price of GOOG.")
        await answered(live, clock, "Monitoring GOOG.")
        assert live.responses("monitor_stock_price") == [
            {"status": "The function is running asynchronously and the results are pending."}]
        await clock.advance(4)
        await answered(live, clock, "Alert: the price for GOOG is 300")
        await clock.advance(4)
        await answered(live, clock, "Alert: the price for GOOG is 400")
        assert prices(live) == [alert(300), alert(400)]
        await live.say("Stop monitoring GOOG.")
        await answered(live, clock, "Stopped: Successfully stopped streaming function "
                                    "monitor_stock_price", sleeping=0)
        # The built-in stop ran (the seed's own `stop_streaming` returns None): the stream ended.
        assert live.responses("stop_streaming") == [STOPPED]
        await clock.advance(60)  # past the seed's 900 (t = 28) and 500 (t = 48)
        assert len(prices(live)) == 2
        assert live.texts()[-1] == (
            "Stopped: Successfully stopped streaming function monitor_stock_price")
        # The model was told so: its request after the stop carries the stop's result.
        told = [r.response for request in seen for content in request.contents[-1:]
                for r in content.function_responses if r.name == "stop_streaming"]
        assert told == [STOPPED]
        # Nothing after the stop reached the model or the record.
        assert not any("900" in c.text or "500" in c.text
                       for request in seen for c in request.contents)
        session = await service.get_session(app_name="seed", user_id="u", session_id="s")
        assert session is not None
        stored = [r.response for e in session.events for r in e.function_responses
                  if r.name == "stop_streaming"]
        assert stored == [STOPPED]
        # The model saw one stop_streaming: the built-in's parameters, the seed's description.
        [stop] = [d for d in seen[0].tools if d.name == "stop_streaming"]
        assert stop.description == "Stop the streaming"
        assert stop.parameters["properties"].keys() == {"function_name", "call_id"}
        assert stop.parameters["required"] == STOP_DECLARATION.parameters["required"]
        assert [d.name for d in seen[0].tools] == ["monitor_stock_price",
                                                            "stop_streaming"]
    printed = capsys.readouterr().out.splitlines()
    assert printed == ["Start monitor stock price for GOOG!", "the price for GOOG is 300",
                       "the price for GOOG is 400"]


@pytest.mark.parametrize("mode", MODES)
async def test_the_seeds_stream_runs_to_its_end_when_nobody_stops_it(
        mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    async with seed_run(mode, monkeypatch) as (live, clock, _, _):
        await live.say("Monitor the stock price of GOOG.")
        await answered(live, clock, "Monitoring GOOG.")
        for wait, price in ((4, 300), (4, 400), (20, 900)):
            await clock.advance(wait)
            await answered(live, clock, f"Alert: the price for GOOG is {price}")
        await clock.advance(20)
        await answered(live, clock, "The price watch has ended.", sleeping=0)
        assert prices(live) == [alert(300), alert(400), alert(900), alert(500),
                                "Function monitor_stock_price finished streaming."]
