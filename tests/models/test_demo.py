"""DemoModel: the demo's prompts become the right calls and answers, deterministically."""

from __future__ import annotations

from headwater.cli._agents import demo_agents
from headwater.models import DemoModel
from headwater.models.demo import HELP, answer_from_emission, choose_call
from headwater.runner import Runner


async def answer(agent_index: int, message: str) -> tuple[list[str], str]:
    model = DemoModel(word_delay=0)
    model.record = True  # the demo keeps nothing by default: it serves for days
    agent = demo_agents(model)[agent_index]
    async with Runner(agent=agent, app_name=agent.name, auto_create_session=True) as runner:
        result = await runner.run_once(user_id="u", new_message=message)
    calls = [c.name for r in model.requests for c in r.contents[-1].function_calls]
    return calls, result.text


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
    _, text = await answer(0, "Where is order 1042?")
    assert text == "Order 1042 shipped on 30 September and is due Monday."
    _, text = await answer(1, "Search the docs for streaming")
    assert text.startswith("I found 3 pages about streaming: Streaming events")


async def test_story_help_and_a_missing_tool() -> None:
    _, story = await answer(0, "Tell me a long story")
    assert len(story.split()) > 300
    _, text = await answer(0, "hello")
    assert text == HELP
    _, text = await answer(0, "Deploy version 2 to staging")
    assert "deploy tool, which this agent does not have" in text


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
