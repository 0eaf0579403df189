"""DemoModel: the demo's prompts become the right calls and answers, deterministically."""

from __future__ import annotations

import pytest

from headwater.agents.agent import Agent
from headwater.cli._agents import PROMPT_AGENTS, build_coordinator, demo_agents
from headwater.events import ApprovalRequest, Event
from headwater.examples import deploy, docs_search, support
from headwater.models import DemoModel
from headwater.models.demo import HELP, PROMPTS, answer_from_emission, choose_call
from headwater.runner import Runner
from headwater.tools.approval import approval_response
from headwater.types import Content

EXAMPLES = {"support": support.build_agent, "docs": docs_search.build_agent,
            "deploy": deploy.build_agent}


async def answer(agent: str | Agent, message: str) -> tuple[list[str], str]:
    """The calls the model made and the run's final text (``agent``: an example's name)."""
    model = DemoModel(word_delay=0)
    model.record = True  # the demo keeps nothing by default: it serves for days
    if isinstance(agent, str):
        agent = EXAMPLES[agent](model)
    else:
        agent.model = model
        for sub in agent.sub_agents:
            assert isinstance(sub, Agent)
            sub.model = model
    async with Runner(agent=agent, app_name=agent.name, auto_create_session=True) as runner:
        result = await runner.run_once(user_id="u", new_message=message)
    calls = {c.id: c.name for r in model.requests for content in r.contents
             for c in content.function_calls}  # every request holds the calls made before it
    return list(calls.values()), result.text


async def routed(message: str) -> list[tuple[str, str | None]]:
    """Who made each stored event of one coordinator turn, and where each transfer went."""
    agent = build_coordinator(DemoModel(word_delay=0))
    async with Runner(agent=agent, app_name=agent.name, auto_create_session=True) as runner:
        session = await runner.create_session(user_id="u")
        return [(event.author, event.actions.transfer_to_agent)
                async for event in runner.run_async(user_id="u", session_id=session.id,
                                                    new_message=message)
                if not event.partial]


def test_the_demo_model_keeps_no_request() -> None:
    assert DemoModel(word_delay=0).record is False


def test_prompts_choose_calls() -> None:
    assert choose_call("Where is order 1042?") == ("lookup_order", {"order_id": "1042"})
    assert choose_call("Search the docs for streaming") == ("search_docs",
                                                            {"query": "streaming"})
    assert choose_call("Deploy version 2 to staging") == (
        "deploy", {"version": "2", "environment": "staging"})
    assert choose_call("Watch GOOG")[0] == "watch_price"  # type: ignore[index]
    assert choose_call("Tell me a long story") is None
    assert choose_call("hello") is None


async def test_support_and_docs_answer_from_their_tools() -> None:
    _, text = await answer("support", "Where is order 1042?")
    assert text == "Order 1042 shipped on 30 September and is due Monday."
    _, text = await answer("docs", "Search the docs for streaming")
    assert text.startswith("I found 3 pages about streaming: Streaming events")


async def test_story_help_and_a_missing_tool() -> None:
    _, story = await answer("support", "Tell me a long story")
    assert len(story.split()) > 300
    _, text = await answer("support", "hello")
    assert text == HELP
    # An agent asked for what none of its tools does names only the tools it has.
    _, text = await answer("support", "Deploy version 2 to staging")
    assert text == "I cannot do that here: my tools are lookup_order."
    _, text = await answer("support", "Check that rivers are long")
    assert text == HELP  # no claim checker anywhere: "check" is not check_claim's


@pytest.mark.parametrize("prompt", PROMPTS)
async def test_the_coordinator_transfers_each_prompt_to_the_agent_that_answers_it(
        prompt: str) -> None:
    events = await routed(prompt)
    agent = PROMPT_AGENTS[prompt]
    if agent == "coordinator":  # the story: no agent has a tool for it
        assert events == [("coordinator", None)]
        return
    assert events[:2] == [("coordinator", None), ("coordinator", agent)]
    assert {author for author, _ in events[2:]} == {agent}


async def test_the_target_is_read_from_the_transfer_declaration() -> None:
    # The coordinator's sub-agents with other names and descriptions: the model follows the
    # description that names the tool, not a table of names.
    model = DemoModel(word_delay=0)
    shop = support.build_agent(model)
    shop.name, shop.description = "orders", "Knows where parcels are (lookup_order)."
    front = Agent(name="front", model=model, sub_agents=[
        Agent(name="other", model=model, description="Nothing useful."), shop])
    async with Runner(agent=front, app_name="front", auto_create_session=True) as runner:
        session = await runner.create_session(user_id="u")
        events = [e async for e in runner.run_async(user_id="u", session_id=session.id,
                                                    new_message="Where is order 2001?")
                  if not e.partial]
    assert [(e.author, [(c.name, c.args) for c in e.function_calls]) for e in events][:1] == [
        ("front", [("transfer_to_agent", {"agent_name": "orders"})])]
    assert events[-1].author == "orders"
    assert events[-1].text == "Order 2001 is packing and is due Thursday."


async def test_a_specialist_hands_a_question_for_a_peer_to_that_peer() -> None:
    agent = build_coordinator(DemoModel(word_delay=0))
    async with Runner(agent=agent, app_name=agent.name, auto_create_session=True) as runner:
        session = await runner.create_session(user_id="u")
        first = await runner.run_once(user_id="u", session_id=session.id,
                                      new_message="Where is order 1042?")
        assert first.text.startswith("Order 1042 shipped")
        # The next turn goes to support, which has no search_docs: it goes to docs itself.
        authors = [(e.author, e.actions.transfer_to_agent) async for e in runner.run_async(
            user_id="u", session_id=session.id, new_message="Search the docs for approval")
            if not e.partial]
    assert authors[:2] == [("support", None), ("support", "docs")]
    assert authors[-1] == ("docs", None)


async def test_a_live_tool_outside_a_live_run_is_answered_in_words() -> None:
    events = await routed("Watch GOOG")
    assert events == [("coordinator", None), ("coordinator", "market"), ("market", None)]
    [market] = [a for a in demo_agents(DemoModel(word_delay=0)) if a.name == "market"]
    calls, text = await answer(market, "Watch GOOG")
    assert calls == []
    assert text == "Watching a price is a live stream: it runs in a live session."


def test_live_prompts_choose_calls_and_stop_the_agents_own_stream() -> None:
    assert choose_call("Count the people") == ("count_people", {})
    assert choose_call("How many people can you see?") == ("count_people", {})
    assert choose_call("Watch GOOG") == ("watch_price", {"symbol": "GOOG", "min_move_pct": 0.5})
    assert choose_call("Now watch MSFT and tell me about 2% moves.") == (
        "watch_price", {"symbol": "MSFT", "min_move_pct": 2.0})
    stop = ("stop_streaming", {"function_name": "watch_price"})
    assert choose_call("Stop watching.") == stop  # not a new watch
    assert choose_call("Stop counting.") == ("stop_streaming", {"function_name": "count_people"})
    assert choose_call("Stop.", {"count_people", "stop_streaming"}) == (
        "stop_streaming", {"function_name": "count_people"})
    assert choose_call("Stop.", {"watch_price"}) == stop


def test_emissions_become_sentences() -> None:
    assert answer_from_emission("count_people", '{"people": 0}') == "Nobody is in view."
    assert answer_from_emission("count_people", '{"people": 1}') == "I can see 1 person."
    assert answer_from_emission("count_people", '{"people": 3}') == "I can see 3 people."
    earlier = ['Function watch_price returned: {"symbol": "GOOG", "price": 100.0}',
               'Function watch_price returned: {"symbol": "MSFT", "price": 50.0}', "hello"]
    price = '{"symbol": "GOOG", "price": 98.5}'
    assert answer_from_emission("watch_price", price) == "GOOG is at 98.50."
    assert answer_from_emission("watch_price", price, earlier) == "GOOG fell 1.5% to 98.50."
    assert answer_from_emission("watch_price", '{"symbol": "GOOG", "error": "feed down"}') == (
        "I can no longer watch GOOG: feed down.")
    assert answer_from_emission("x", "not json") == "The x tool said: not json"


async def test_the_people_agent_counts_live_frames_in_the_demo() -> None:
    from headwater.examples.people_counter import scene_frames
    from headwater.testing import LiveHarness, VirtualClock

    model = DemoModel(word_delay=0)
    [agent] = [a for a in demo_agents(model) if a.name == "people"]
    clock = VirtualClock()
    runner = Runner(agent=agent, app_name="people", clock=clock, auto_create_session=True)
    async with LiveHarness(runner, clock) as live:
        await live.say("Count the people")
        for frame in scene_frames()[:12]:  # three seconds: 0, 1, 1 people
            live.queue.send_realtime(frame)
            await clock.advance(0.25)
        said = [t for t in live.texts() if not t.startswith("Function")]
        assert said == ["Count the people", "Counting. I'll tell you when the number changes.",
                        "Nobody is in view.", "I can see 1 person."]
        await live.say("Stop counting.")
        assert live.texts()[-1] == "Stopped counting."


TWO_PARTS = "Check where order 1042 is, then deploy version 2 to staging"


async def turn(runner: Runner, session_id: str, message: str | Content
               ) -> tuple[list[Event], list[ApprovalRequest]]:
    """One run's stored events and the approvals it waits for."""
    events = [e async for e in runner.run_async(user_id="u", session_id=session_id,
                                                new_message=message) if not e.partial]
    return events, [a for e in events for a in e.actions.requested_approvals]


def steps(events: list[Event]) -> list[tuple[str, str]]:
    """Each stored event as (author, what it did): a call, a transfer, or its text."""
    out = []
    for event in events:
        calls = [c.name for c in event.function_calls if c.name != "transfer_to_agent"]
        if event.text and not event.function_responses:
            out.append((event.author, event.text))
        if event.actions.transfer_to_agent:
            out.append((event.author, f"-> {event.actions.transfer_to_agent}"))
        if calls:
            out.append((event.author, f"call {', '.join(calls)}"))
    return out


def assert_history_valid(events: list[Event]) -> None:
    """Every call of the session has exactly one result, after it; no error event."""
    calls: dict[str, int] = {}
    for index, event in enumerate(events):
        assert event.error_code is None, event.error_message
        for call in event.function_calls:
            calls[call.id] = index
        for response in event.function_responses:
            assert calls.get(response.id, len(events)) < index, response
            calls[response.id] = -1
    assert all(at == -1 for at in calls.values()), calls


async def test_a_two_part_request_is_handed_on_in_turn() -> None:
    model = DemoModel(word_delay=0)
    model.record = True
    agent = build_coordinator(model)
    async with Runner(agent=agent, app_name=agent.name, auto_create_session=True) as runner:
        session = await runner.create_session(user_id="u")
        first, approvals = await turn(runner, session.id, TWO_PARTS)
        # The coordinator hands the first part to support; support answers it and hands
        # the second part to deploy, which asks for approval.
        assert steps(first) == [
            ("coordinator", "-> support"), ("support", "call lookup_order"),
            ("support", "Order 1042 shipped on 30 September and is due Monday. Next, deploy "
                        "version 2 to staging: over to deploy."),
            ("support", "-> deploy"), ("deploy", "call deploy")]
        assert [(a.tool_name, a.args) for a in approvals] == [
            ("deploy", {"version": "2", "environment": "staging"})]
        second, left = await turn(runner, session.id, approval_response(approvals[0], True))
        assert left == []
        assert steps(second)[-1] == ("deploy", "Version 2 is live on staging.")
        # The next message goes to deploy, the agent that answered; it hands it on.
        third, _ = await turn(runner, session.id, "Where is order 2001?")
        assert steps(third) == [("deploy", "-> support"), ("support", "call lookup_order"),
                                ("support", "Order 2001 is packing and is due Thursday.")]
        stored = await runner.session_service.get_session(
            app_name=agent.name, user_id="u", session_id=session.id)
    assert stored is not None
    assert_history_valid(stored.events)
    said = " ".join(e.text for e in stored.events)
    assert "check_claim" not in said and "does not have" not in said
    # Each request holds only declared tools' calls, each followed by its result.
    for request in model.requests:
        declared = {d.name for d in request.tools}
        own = [c.name for content in request.contents if content.role == "model"
               for c in content.function_calls]
        assert set(own) <= declared | {"transfer_to_agent"}


async def test_the_parts_go_in_the_order_asked() -> None:
    agent = build_coordinator(DemoModel(word_delay=0))
    async with Runner(agent=agent, app_name=agent.name, auto_create_session=True) as runner:
        session = await runner.create_session(user_id="u")
        first, approvals = await turn(
            runner, session.id, "Deploy version 2 to staging, then check where order 1042 is")
        assert steps(first) == [("coordinator", "-> deploy"), ("deploy", "call deploy")]
        second, _ = await turn(runner, session.id, approval_response(approvals[0], False))
        assert steps(second) == [
            ("deploy", "Understood: the deploy call was denied, so I did not run it. Nothing "
                       "changed. Next, check where order 1042 is: over to support."),
            ("deploy", "-> support"), ("support", "call lookup_order"),
            ("support", "Order 1042 shipped on 30 September and is due Monday.")]
        # Two parts for one agent: it does both, one call after the other.
        third, _ = await turn(runner, session.id, "Where is order 1042; then order 2001?")
        assert steps(third) == [
            ("support", "call lookup_order"),
            ("support", "Order 1042 shipped on 30 September and is due Monday."),
            ("support", "call lookup_order"),
            ("support", "Order 2001 is packing and is due Thursday.")]
        stored = await runner.session_service.get_session(
            app_name=agent.name, user_id="u", session_id=session.id)
    assert stored is not None
    assert_history_valid(stored.events)
