"""``max_llm_calls`` is checked before a request leaves, in every mode: no request beyond it.

The model's calls are counted at the provider (what the scripted model or the fake live
server was asked), never from the events a run yields. The model calls a tool on every
turn, so only the budget ends the run: after call N its tool results are stored, but the
request they would start (call N + 1) is never sent.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine
from typing import Any

import pytest

from headwater import Agent, Content, Event, LiveRequestQueue, Runner, tool
from headwater.context import CallbackContext
from headwater.models import BaseLlm, LlmRequest, LlmResponse
from headwater.models.gemini_live import GeminiLiveModel
from headwater.models.openai_realtime import OpenAIRealtimeModel
from headwater.run_config import RunConfig, StreamingMode
from headwater.sessions import InMemorySessionService
from headwater.testing import (
    FakeLiveProvider,
    ScriptedCall,
    ScriptedModel,
    ScriptedTurn,
    VirtualClock,
)

LIMIT = 3


def always_ping(request: LlmRequest) -> ScriptedTurn:
    """A model that calls ``ping`` on every turn (a fresh call id each time)."""
    turn = sum(1 for c in request.contents for _ in c.function_calls) + 1
    return ScriptedTurn(calls=[ScriptedCall("ping", {}, id=f"p{turn}")])


class Pings:
    def __init__(self) -> None:
        self.ran = 0

    def tool(self) -> Any:
        @tool
        async def ping() -> str:
            """Answers pong."""
            self.ran += 1
            return "pong"

        return ping


def runner_for(model: BaseLlm, tools: list[Any], service: InMemorySessionService,
               clock: VirtualClock | None = None) -> Runner:
    return Runner(agent=Agent(name="pinger", model=model, tools=tools), app_name="app",
                  session_service=service, auto_create_session=True, clock=clock)


async def stored(service: InMemorySessionService) -> list[Event]:
    session = await service.get_session(app_name="app", user_id="u", session_id="s")
    assert session is not None
    return session.events


def check_record(events: list[Event], history: list[Event], pings: Pings) -> None:
    assert events[-1].error_code == "budget_exceeded"
    assert f"max_llm_calls={LIMIT}" in (events[-1].error_message or "")
    assert history[-1].error_code == "budget_exceeded"
    assert pings.ran == LIMIT
    # Every call has its result: the history is valid for a next run.
    assert (sum(len(e.function_calls) for e in history)
            == sum(len(e.function_responses) for e in history) == LIMIT)


@pytest.mark.parametrize("mode", [StreamingMode.NONE, StreamingMode.SSE])
async def test_run_async_makes_exactly_max_llm_calls_requests(mode: StreamingMode) -> None:
    model, pings, service = ScriptedModel(responder=always_ping), Pings(), InMemorySessionService()
    runner = runner_for(model, [pings.tool()], service)
    stream = runner.run_async(user_id="u", session_id="s", new_message="go",
                              run_config=RunConfig(streaming_mode=mode, max_llm_calls=LIMIT))
    events = [e async for e in stream]
    assert len(model.requests) == LIMIT
    assert stream.stats.llm_calls == LIMIT
    check_record(events, await stored(service), pings)


def live_run(runner: Runner, first: str = "go"
             ) -> tuple[LiveRequestQueue, list[Event], Coroutine[Any, Any, None]]:
    """A live run under the budget, ``first`` sent: its queue, the list its events go to, and
    the coroutine that runs it (to await, or to start as a task)."""
    queue = LiveRequestQueue()
    queue.send_content(Content.from_text(first))
    config = RunConfig(streaming_mode=StreamingMode.BIDI, max_llm_calls=LIMIT)
    events: list[Event] = []

    async def consume() -> None:
        async for event in runner.run_live(user_id="u", session_id="s",
                                           live_request_queue=queue, run_config=config):
            events.append(event)

    return queue, events, consume()


async def live_until_it_ends(runner: Runner, first: str = "go") -> list[Event]:
    """A live run that ends by itself (its queue stays open), with its events."""
    queue, events, run = live_run(runner, first)
    await asyncio.wait_for(run, 30)
    queue.close()
    return events


async def test_an_emulated_live_run_makes_exactly_max_llm_calls_requests() -> None:
    model, pings, service = ScriptedModel(responder=always_ping), Pings(), InMemorySessionService()
    events = await live_until_it_ends(runner_for(model, [pings.tool()], service))
    assert len(model.requests) == LIMIT  # the results of call 3 never started a 4th
    check_record(events, await stored(service), pings)


@pytest.mark.parametrize("protocol", ["gemini", "openai"])
async def test_a_native_live_run_makes_exactly_max_llm_calls_model_turns(protocol: str) -> None:
    pings, service = Pings(), InMemorySessionService()
    async with FakeLiveProvider(responder=always_ping) as fake:
        model: BaseLlm = (
            GeminiLiveModel("gemini-live-test", base_url=fake.gemini_base_url, api_key="k")
            if protocol == "gemini" else
            OpenAIRealtimeModel("gpt-realtime-test", base_url=fake.openai_base_url,
                                api_key="k"))
        events = await live_until_it_ends(runner_for(model, [pings.tool()], service))
        await asyncio.wait_for(fake.sessions[0].closed.wait(), 10)
    assert len(fake.requests) == LIMIT  # turns the server played
    record = fake.sessions[0]
    if protocol == "gemini":  # the third turn's results were not sent: it was not continued
        assert len(record.of_kind("toolResponse")) == LIMIT - 1
    else:
        outputs = [m for m in record.of_kind("conversation.item.create")
                   if m["item"]["type"] == "function_call_output"]
        assert len(outputs) == LIMIT - 1
        assert len(record.of_kind("response.create")) == LIMIT
    check_record(events, await stored(service), pings)


async def test_emissions_past_the_budget_are_not_sent() -> None:
    """A live stream's values each start a turn; the one that would be call N + 1 is not sent."""
    clock = VirtualClock()

    @tool
    async def ticker() -> AsyncIterator[int]:
        """Counts, a value a second."""
        n = 0
        while True:
            await clock.sleep(1)
            n += 1
            yield n

    def respond(request: LlmRequest) -> ScriptedTurn:
        last = request.contents[-1]
        if last.text == "go":
            return ScriptedTurn(calls=[ScriptedCall("ticker", {}, id="t1")])
        return ScriptedTurn(text=["noted"])

    model, service = ScriptedModel(responder=respond), InMemorySessionService()
    runner = runner_for(model, [ticker], service, clock)
    queue, events, run = live_run(runner)
    task = asyncio.create_task(run)
    await clock.settle()
    for _ in range(5):
        await clock.advance(1)
    await asyncio.wait_for(task, 30)  # the budget ended the run
    queue.close()
    # Call 1: "go"; call 2: the pending status; call 3: the first value. The second value
    # was stored and shown, but the turn it would have started was refused.
    assert len(model.requests) == LIMIT
    assert [c.text for c in model.requests[-1].contents[-1:]] == [
        "Function ticker returned: 1"]
    assert events[-1].error_code == "budget_exceeded"
    history = await stored(service)
    assert history[-1].error_code == "budget_exceeded"


@pytest.mark.parametrize("mode", [StreamingMode.NONE, StreamingMode.SSE])
async def test_a_before_model_callback_that_answers_spends_no_model_call(
        mode: StreamingMode) -> None:
    """A model call is admitted right before it is made, after the before-model callbacks:
    one that answers instead of the model (a cache) is not refused for a spent budget, and
    the run's count is of the model's calls alone."""
    pings = Pings()

    def cached(*, callback_context: CallbackContext, llm_request: LlmRequest
               ) -> LlmResponse | None:
        if llm_request.contents[-1].function_responses:  # after the tool: from the cache
            return LlmResponse(content=Content.from_text("pong, from the cache", role="model"))
        return None

    model = ScriptedModel().call("ping", call_id="p1")
    runner = Runner(agent=Agent(name="pinger", model=model, tools=[pings.tool()],
                                before_model_callback=cached),
                    app_name="app", auto_create_session=True)
    stream = runner.run_async(user_id="u", session_id="s", new_message="ping it",
                              run_config=RunConfig(streaming_mode=mode, max_llm_calls=1))
    async with stream:
        events = [e async for e in stream]
    assert len(model.requests) == 1 and stream.stats.llm_calls == 1 and pings.ran == 1
    assert [e.error_code for e in events if e.error_code] == []
    assert events[-1].text == "pong, from the cache" and events[-1].is_final_response()
