"""DemoModel: the demo's prompts become the right calls and answers, deterministically."""

from __future__ import annotations

from headwater.cli._agents import demo_agents
from headwater.models import DemoModel
from headwater.models.demo import HELP, choose_call
from headwater.runner import Runner


async def answer(agent_index: int, message: str) -> tuple[list[str], str]:
    model = DemoModel(word_delay=0)
    agent = demo_agents(model)[agent_index]
    async with Runner(agent=agent, app_name=agent.name, auto_create_session=True) as runner:
        result = await runner.run_once(user_id="u", new_message=message)
    calls = [c.name for r in model.requests for c in r.contents[-1].function_calls]
    return calls, result.text


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
