"""Call ids are unique within a session: a model that reuses one gets a fresh id for the call.

A scripted model, or a local server that numbers its calls per response, gives
``call_1`` again in a later turn (or twice in one response). The call is stored
under a fresh id before its tool runs, so its result, the stored history and
every later request name it consistently, and the run goes on.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from headwater import Agent, Runner
from headwater.events import Event
from headwater.models import LlmRequest
from headwater.models.openai_realtime import OpenAIRealtimeModel
from headwater.sessions import BaseSessionService
from headwater.sessions.ledger import CallLedger
from headwater.testing import (
    FakeLiveProvider,
    LiveHarness,
    LiveTurn,
    ScriptedCall,
    ScriptedModel,
    ScriptedTurn,
    wait_until,
)
from headwater.types import Content, FunctionCall, FunctionResponse, Part


def lookup(order_id: str) -> dict[str, str]:
    """Find an order."""
    return {"order": order_id}


async def history(runner: Runner, session_id: str = "s") -> list[Event]:
    session = await runner.session_service.get_session(app_name="app", user_id="u",
                                                       session_id=session_id)
    assert session is not None
    return session.events


def calls_and_results(events: list[Event]) -> tuple[list[str], list[str]]:
    """Call ids and result ids of a history, in order."""
    calls = [c.id for e in events for c in e.function_calls]
    results = [r.id for e in events for r in e.function_responses]
    return calls, results


def assert_valid(events: list[Event]) -> None:
    """Every call id once, and exactly one result for each."""
    calls, results = calls_and_results(events)
    assert len(set(calls)) == len(calls), calls
    assert Counter(results) == Counter(calls)


def pairs(request: LlmRequest) -> list[tuple[str, str]]:
    """(kind, id) of each call and result a model request carries, in order."""
    found: list[tuple[str, str]] = []
    for content in request.contents:
        found += [("call", c.id) for c in content.function_calls]
        found += [("result", r.id) for r in content.function_responses]
    return found


async def test_a_call_id_reused_in_a_later_turn_gets_a_fresh_id(
        service: BaseSessionService) -> None:
    model = (ScriptedModel().call("lookup", {"order_id": "1"}, call_id="call_1").reply("one")
             .call("lookup", {"order_id": "2"}, call_id="call_1").reply("two"))
    runner = Runner(agent=Agent(name="bot", model=model, tools=[lookup]), app_name="app",
                    session_service=service, auto_create_session=True)
    async with runner:
        first = await runner.run_once(user_id="u", session_id="s", new_message="first")
        second = await runner.run_once(user_id="u", session_id="s", new_message="second")
        assert (first.text, first.error_code) == ("one", None)
        assert (second.text, second.error_code) == ("two", None)  # not `internal`
        events = await history(runner)
    assert_valid(events)
    calls, results = calls_and_results(events)
    fresh = calls[1]
    assert calls[0] == "call_1" and fresh != "call_1"
    assert results == ["call_1", fresh]
    assert [r.response for e in events for r in e.function_responses] == [
        {"order": "1"}, {"order": "2"}]  # each result under its own call
    # What the run yielded is what was stored.
    yielded = [c.id for e in second.events for c in e.function_calls]
    assert yielded == [fresh]
    # The model's request after the second call shows the fresh id paired with its result.
    assert pairs(model.requests[3]) == [("call", "call_1"), ("result", "call_1"),
                                        ("call", fresh), ("result", fresh)]


async def test_two_calls_with_one_id_in_one_response_both_run_under_their_own_ids() -> None:
    turn = ScriptedTurn(calls=(ScriptedCall("lookup", {"order_id": "1"}, id="call_1"),
                               ScriptedCall("lookup", {"order_id": "2"}, id="call_1")))
    model = ScriptedModel([turn]).reply("both")
    runner = Runner(agent=Agent(name="bot", model=model, tools=[lookup]), app_name="app",
                    auto_create_session=True)
    result = await runner.run_once(user_id="u", session_id="s", new_message="go")
    assert (result.text, result.error_code) == ("both", None)
    events = await history(runner)
    assert_valid(events)
    calls, _ = calls_and_results(events)
    assert calls[0] == "call_1" and calls[1] != "call_1"
    answers = {r.id: r.response for e in events for r in e.function_responses}
    assert answers == {calls[0]: {"order": "1"}, calls[1]: {"order": "2"}}
    assert pairs(model.requests[1]) == [("call", calls[0]), ("call", calls[1]),
                                        ("result", calls[0]), ("result", calls[1])]


def test_the_ledger_replaces_only_taken_ids_and_leaves_the_content_alone() -> None:
    ledger = CallLedger.of([Event(author="bot", content=Content("model", [
        Part(function_call=FunctionCall("call_1", "lookup"))]))])
    content = Content("model", [Part(text="checking"),
                                Part(function_call=FunctionCall("call_1", "lookup", {"a": 1})),
                                Part(function_call=FunctionCall("call_2", "lookup")),
                                Part(function_call=FunctionCall("call_2", "lookup"))])
    unique = ledger.unique_calls(content)
    ids = [c.id for c in unique.function_calls]
    assert ids[0] != "call_1" and ids[1] == "call_2" and ids[2] not in ("call_1", "call_2")
    assert len(set(ids)) == 3
    assert unique.parts[0].text == "checking" and unique.function_calls[0].args == {"a": 1}
    assert [c.id for c in content.function_calls] == ["call_1", "call_2", "call_2"]  # untouched
    fine = Content("model", [Part(function_call=FunctionCall("call_9", "lookup"))])
    assert ledger.unique_calls(fine) is fine
    # A stored result to no call takes its id too: the store would refuse another result.
    ledger.observe(Event(author="user", content=Content("user", [
        Part(function_response=FunctionResponse("call_9", "lookup", {"late": True}))])))
    assert ledger.unique_calls(fine).function_calls[0].id != "call_9"


async def test_a_live_emulated_run_that_reuses_a_call_id_goes_on() -> None:
    model = (ScriptedModel().call("lookup", {"order_id": "1"}, call_id="call_1").reply("one")
             .call("lookup", {"order_id": "2"}, call_id="call_1").reply("two"))
    runner = Runner(agent=Agent(name="bot", model=model, tools=[lookup]), app_name="app",
                    auto_create_session=True)
    assert (await runner.run_once(user_id="u", session_id="s", new_message="first")).text == "one"
    async with LiveHarness(runner) as live:
        await live.say("second")
        await wait_until(lambda: any(e.text == "two" for e in live.events))
    assert not [e for e in live.events if e.error_code is not None]
    events = await history(runner)
    assert_valid(events)
    calls, results = calls_and_results(events)
    assert calls[0] == "call_1" and calls[1] != "call_1"
    assert results == calls
    # The emulated connection keeps the model's own ids: the result went back under
    # call_1, right after the call that gave it.
    assert pairs(model.requests[-1])[-2:] == [("call", "call_1"), ("result", "call_1")]


async def test_a_native_live_connection_gets_the_result_under_the_id_it_gave(
        service: BaseSessionService) -> None:
    scripted = ScriptedModel().call("lookup", {"order_id": "1"}, call_id="call-7").reply("one")
    first = Runner(agent=Agent(name="bot", model=scripted, tools=[lookup]), app_name="app",
                   session_service=service, auto_create_session=True)
    assert (await first.run_once(user_id="u", session_id="s", new_message="first")).text == "one"
    async with FakeLiveProvider(turns=[
            LiveTurn(calls=[ScriptedCall("lookup", {"order_id": "2"}, id="call-7")]),
            LiveTurn(text=["two"])]) as fake:
        model = OpenAIRealtimeModel("gpt-realtime-test", base_url=fake.openai_base_url,
                                    api_key="test-key")
        runner = Runner(agent=Agent(name="bot", model=model, tools=[lookup]), app_name="app",
                        session_service=service)
        async with LiveHarness(runner) as live:
            await live.say("second")
            await wait_until(lambda: any(e.text == "two" for e in live.events))
        record = fake.sessions[0]
    assert not [e for e in live.events if e.error_code is not None]
    events = await history(runner)
    assert_valid(events)
    calls, results = calls_and_results(events)
    assert calls[0] == "call-7" and calls[1] != "call-7" and results == calls
    items: list[dict[str, Any]] = [m["item"] for m in record.of_kind("conversation.item.create")]
    outputs = [i for i in items if i["type"] == "function_call_output"]
    # The seeded history carries the stored ids; the live call is answered as the server named it.
    assert [o["call_id"] for o in outputs] == ["call-7", "call-7"]
    assert outputs[-1]["output"] == '{"order": "2"}'
