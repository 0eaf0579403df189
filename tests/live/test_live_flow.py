"""Live runs share the step engine: budgets, model callbacks, the stream contract, stop."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from headwater import Agent, Event, Runner, ToolContext, tool
from headwater.agents import Flow, InvocationContext
from headwater.context import CallbackContext
from headwater.errors import UserError
from headwater.models import LlmRequest, LlmResponse
from headwater.run_config import RunConfig, StreamingMode
from headwater.sessions import InMemorySessionService
from headwater.settings import Settings
from headwater.testing import LiveHarness, ScriptedModel, ScriptedTurn, VirtualClock
from headwater.types import Content, Part, Usage

from .test_live_more import responder_for


def chat(request: LlmRequest) -> ScriptedTurn:
    return ScriptedTurn(text=["You said ", request.contents[-1].text])


def harness(model: ScriptedModel, clock: VirtualClock, tools: list[Any] = (),  # type: ignore[assignment]
            **agent: Any) -> LiveHarness:
    runner = Runner(agent=Agent(name="live", model=model, tools=tools, **agent),
                    app_name="app", auto_create_session=True, clock=clock)
    return LiveHarness(runner, clock)


async def stored(h: LiveHarness) -> list[Event]:
    session = await h.runner.session_service.get_session(app_name="app", user_id="u",
                                                         session_id="s")
    assert session is not None
    return session.events


async def test_max_llm_calls_ends_a_live_run_with_budget_exceeded() -> None:
    clock = VirtualClock()
    h = harness(ScriptedModel(responder=chat), clock)
    stream_config = RunConfig(streaming_mode=StreamingMode.BIDI, max_llm_calls=2)

    async def consume() -> None:
        async for event in h.runner.run_live(user_id="u", session_id="s",
                                             live_request_queue=h.queue,
                                             run_config=stream_config):
            h.events.append(event)

    import asyncio
    task = asyncio.create_task(consume())
    for text in ("one", "two", "three"):
        h.queue.send_content(Content.from_text(text))
        await clock.settle()
    await asyncio.wait_for(task, 2)  # the run ended by itself: the queue is still open
    assert h.texts() == ["one", "You said one", "two", "You said two"]
    last = h.events[-1]
    assert last.error_code == "budget_exceeded" and "max_llm_calls=2" in (
        last.error_message or "")
    assert [e.error_code for e in await stored(h)][-1] == "budget_exceeded"


async def test_model_callbacks_run_in_live_runs() -> None:
    seen: list[str] = []

    def before(*, callback_context: CallbackContext, llm_request: LlmRequest) -> None:
        seen.append(f"before {len(llm_request.tools)} tools")
        llm_request.system_instruction = "Be brief."

    def after(*, callback_context: CallbackContext, llm_response: LlmResponse
              ) -> LlmResponse | None:
        seen.append(f"after {llm_response.content.text if llm_response.content else ''}")
        if llm_response.content is not None and "secret" in llm_response.content.text:
            return LlmResponse(content=Content("model", [Part(text="[redacted]")]),
                               turn_complete=True)
        return None

    clock = VirtualClock()
    model = ScriptedModel(responder=chat)
    async with harness(model, clock, before_model_callback=before,
                       after_model_callback=after) as h:
        await h.say("hello")
        await h.say("secret")
    assert seen == ["before 0 tools", "after You said hello", "after You said secret"]
    assert model.requests[0].system_instruction == "Be brief."
    assert h.texts() == ["hello", "You said hello", "secret", "[redacted]"]
    assert [e.text for e in await stored(h) if e.author == "live"] == [
        "You said hello", "[redacted]"]


async def test_a_before_model_response_is_the_first_turn() -> None:
    def greet(*, callback_context: CallbackContext, llm_request: LlmRequest) -> LlmResponse:
        return LlmResponse(content=Content("model", [Part(text="Welcome back.")]))

    clock = VirtualClock()
    async with harness(ScriptedModel(responder=chat), clock, before_model_callback=greet) as h:
        await h.say("hi")
    assert h.texts() == ["Welcome back.", "hi", "You said hi"]
    assert h.events[0].turn_complete


@pytest.mark.parametrize("broken", ["usage on a partial", "final is not the partials"])
async def test_a_live_model_breaking_the_stream_contract_gets_a_violation(broken: str) -> None:
    def respond(request: LlmRequest) -> ScriptedTurn:
        usage = Usage(1, 1, 2) if broken == "usage on a partial" else None
        partial = LlmResponse(content=Content("model", [Part(text="Hel")]), partial=True,
                              usage=usage)
        final = LlmResponse(content=Content("model", [Part(text="Goodbye")]))
        return ScriptedTurn(responses=[partial, final])

    clock = VirtualClock()
    async with harness(ScriptedModel(responder=respond), clock) as h:
        await h.say("hi")
    errors = [e for e in h.events if e.error_code is not None]
    assert [e.error_code for e in errors] == ["model_protocol_violation"]
    assert errors[0].content is None
    records = await stored(h)
    assert [(e.author, e.text, e.error_code) for e in records] == [
        ("user", "hi", None), ("live", "", "model_protocol_violation")]


async def test_nothing_of_a_stream_is_told_or_stored_after_stop_streaming_returns() -> None:
    """A held value (min_interval) must not leak out after the stop, however timed."""

    @tool(min_interval=5)
    async def ticker(tool_context: ToolContext) -> AsyncIterator[int]:
        """Ticks."""
        i = 0
        while True:
            yield i
            i += 1
            await tool_context.clock.sleep(1)

    for round_ in range(200):
        clock = VirtualClock()
        model = ScriptedModel(responder=responder_for("ticker"))
        async with harness(model, clock, [ticker]) as h:
            await h.say("go")
            await clock.advance(round_ % 7 + 1)  # some rounds hold a value, some flush it
            await h.say("stop")
            await clock.advance(20)
        for events in (h.events, await stored(h)):
            records = [e for e in events if not e.partial]
            stop_at = next(i for i, e in enumerate(records)
                           if any(r.name == "stop_streaming" for r in e.function_responses))
            late = [e.text for e in records[stop_at:] if e.branch is not None]
            assert late == [], f"round {round_}: {late}"
        stop = [r.response for e in h.events for r in e.function_responses
                if r.name == "stop_streaming"]
        assert stop == [{"result": "Successfully stopped streaming function ticker",
                         "stopped": 1}]


async def test_a_flow_without_a_recorder_is_refused_when_built() -> None:
    session = await InMemorySessionService().create_session(app_name="app", user_id="u")
    ctx = InvocationContext(invocation_id="inv", app_name="app", session=session,
                            run_config=RunConfig(streaming_mode=StreamingMode.BIDI),
                            settings=Settings())
    with pytest.raises(UserError, match="recorder"):
        Flow(Agent(name="a", model=ScriptedModel()), ctx, None)
