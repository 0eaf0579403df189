"""check_stream_contract against ScriptedModel and the broken shapes of seed 003."""

from __future__ import annotations

from typing import Any

import pytest

from headwater import Agent, Event, RunConfig, Runner, StreamingMode
from headwater.errors import UserError
from headwater.models import LlmRequest, LlmResponse
from headwater.testing import (
    ScriptedCall,
    ScriptedModel,
    ScriptedTurn,
    StreamContractError,
    check_stream_contract,
)
from headwater.types import Content, FunctionCall, Part, Usage

PIECES = ("The order ", "ships ", "Tuesday.")


def partial(text: str, **kw: Any) -> LlmResponse:
    return LlmResponse(content=Content("model", [Part(text=text)]), partial=True, **kw)


def final(text: str, **kw: Any) -> LlmResponse:
    return LlmResponse(content=Content("model", [Part(text=text)]), **kw)


BROKEN: dict[str, tuple[list[LlmResponse], str]] = {
    "no final": ([partial(p) for p in PIECES], "one_final_last"),
    "every chunk final": ([final(p) for p in PIECES], "one_final_last"),
    "final holds only the last delta": (
        [*(partial(p) for p in PIECES), final(PIECES[-1])], "text_concatenation"),
    "usage on a partial": (
        [partial(PIECES[0], usage=Usage(1, 1, 2)), *(partial(p) for p in PIECES[1:]),
         final("".join(PIECES))], "usage_only_on_final"),
    "call on a partial": (
        [LlmResponse(content=Content("model", [Part(function_call=FunctionCall("c", "f"))]),
                     partial=True), final("")], "calls_only_on_final"),
    "final not last": ([final("".join(PIECES)), partial("late")], "one_final_last"),
}


async def play(model: ScriptedModel, stream: bool) -> list[LlmResponse]:
    return [r async for r in model.generate_content(LlmRequest(), stream=stream)]


async def test_scripted_model_follows_the_protocol() -> None:
    model = ScriptedModel().add(ScriptedTurn(
        thoughts=("Let me ", "check."), text=PIECES,
        calls=[ScriptedCall("get_order", {"id": "A17"}, fragments=6),
               ScriptedCall("get_order", {"id": "B2"}, fragments=3)],
        usage=Usage(5, 7, 12), finish_reason="tool_calls"))
    responses = await play(model, stream=True)
    last = check_stream_contract(responses)
    assert all(r.partial for r in responses[:-1]) and not last.partial
    assert last.content is not None
    assert last.content.text == "".join(PIECES)
    assert last.content.thought_text == "Let me check."
    assert [c.args for c in last.content.function_calls] == [{"id": "A17"}, {"id": "B2"}]
    assert last.usage == Usage(5, 7, 12) and last.finish_reason == "tool_calls"
    assert model.streams[0].completed and model.streams[0].closed


async def test_scripted_model_without_stream_sends_one_response() -> None:
    responses = await play(ScriptedModel().reply(*PIECES), stream=False)
    assert len(responses) == 1 and not responses[0].partial
    expected = Content("model", [Part(text="".join(PIECES))])
    assert check_stream_contract(responses).content == expected


async def test_scripted_model_records_requests_and_runs_out_loudly() -> None:
    model = ScriptedModel().reply("one")
    request = LlmRequest(contents=[Content.from_text("hi")])
    await play(model, stream=True)
    assert len(model.requests) == 1
    with pytest.raises(UserError, match="no scripted turn left"):
        [r async for r in model.generate_content(request, stream=True)]


@pytest.mark.parametrize("name", list(BROKEN))
def test_contract_check_rejects_each_broken_shape(name: str) -> None:
    responses, invariant = BROKEN[name]
    with pytest.raises(StreamContractError) as info:
        check_stream_contract(responses)
    assert info.value.invariant == invariant
    assert invariant in str(info.value)


@pytest.mark.parametrize("name", list(BROKEN))
async def test_runner_turns_each_broken_shape_into_a_violation(name: str) -> None:
    responses, _ = BROKEN[name]
    model = ScriptedModel().add(ScriptedTurn(responses=responses))
    agent = Agent(name="a", model=model)
    runner = Runner(agent=agent, app_name="app", auto_create_session=True)
    events: list[Event] = [e async for e in runner.run_async(
        user_id="u", session_id="s", new_message="where is A17?",
        run_config=RunConfig(streaming_mode=StreamingMode.SSE))]
    assert events[-1].error_code == "model_protocol_violation"
    assert events[-1].content is None
    assert not any(e.function_calls for e in events)
    session = await runner.session_service.get_session(app_name="app", user_id="u",
                                                       session_id="s")
    assert session is not None
    # The user message and the error record; not one fragment of the model's text.
    assert [(e.author, e.text, e.error_code) for e in session.events] == [
        ("user", "where is A17?", None), ("a", "", "model_protocol_violation")]
    assert model.streams[0].closed


async def test_a_turn_queued_first_plays_before_the_queued_ones() -> None:
    model = ScriptedModel().reply("second").call("tool", first=True)
    model.reply("zeroth", first=True).add(ScriptedTurn(text=("third",)))
    assert model.pending == 4
    finals = [check_stream_contract(await play(model, stream=True)) for _ in range(4)]
    assert [(f.content.text, [c.name for c in f.content.function_calls]) for f in finals
            if f.content is not None] == [("zeroth", []), ("", ["tool"]), ("second", []),
                                          ("third", [])]


async def test_a_repeating_script_plays_again_for_every_message() -> None:
    # The README's served agent: one scripted answer, and every message of a session gets it.
    model = ScriptedModel(repeat=True).call("lookup_order", {"order_id": "1042"}).reply("Due.")

    def lookup_order(order_id: str) -> dict[str, str]:
        """Find an order."""
        return {"order_id": order_id, "status": "shipped"}

    agent = Agent(name="support", model=model, tools=[lookup_order])
    async with Runner(agent=agent, app_name="shop", auto_create_session=True) as runner:
        texts = [(await runner.run_once(user_id="u", session_id="s", new_message=m)).text
                 for m in ("Where is order 1042?", "And now?", "Still?")]
    assert texts == ["Due."] * 3
    assert model.pending == 2  # the script, whole again
    last = model.requests[-1].contents  # the third turn's answer: the whole session
    assert [r.response for content in last for r in content.function_responses] == [
        {"order_id": "1042", "status": "shipped"}] * 3
