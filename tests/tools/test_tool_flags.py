"""Tool flags: build-time checks, cache, return_direct, artifacts, budgets."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from headwater import Agent, Event, FunctionTool, RunConfig, Runner, StreamingMode, tool
from headwater.artifacts import InMemoryArtifactService
from headwater.testing import ScriptedCall, ScriptedModel, ScriptedTurn

SSE = RunConfig(streaming_mode=StreamingMode.SSE)


async def stream_it() -> AsyncIterator[str]:
    yield "x"


def plain() -> str:
    return "x"


@pytest.mark.parametrize(("func", "flags", "why"), [
    (stream_it, {"cache": True}, "a cache stores a single value"),
    (stream_it, {"cache": True, "cache_function": lambda a, r: True}, "a cache stores"),
    (stream_it, {"response_format": "content_and_artifact"}, "artifact channel needs the full"),
    (stream_it, {"return_direct": True}, "return-direct semantics"),
    (stream_it, {"long_running": True}, "ticket at once"),
    (plain, {"streaming": True}, "needs an async generator"),
    (stream_it, {"streaming": False}, "is a streaming tool"),
    (plain, {"cache_function": lambda a, r: True}, "only consulted with cache=True"),
    (plain, {"response_format": "xml"}, "response_format must be"),
    (plain, {"after_ticket": "ask_model"}, "needs long_running=True"),
    (plain, {"long_running": True, "after_ticket": "later"}, "after_ticket must be"),
])
def test_incoherent_flags_raise_at_construction(func: Any, flags: dict[str, Any],
                                                why: str) -> None:
    with pytest.raises(ValueError, match=why):
        FunctionTool(func, **flags)
    with pytest.raises(ValueError, match=why):
        tool(**flags)(func)


async def run(runner: Runner, message: str = "go") -> list[Event]:
    return [e async for e in runner.run_async(user_id="u", session_id="s", new_message=message,
                                              run_config=SSE)]


def runner_for(model: ScriptedModel, tools: list[Any], **kw: Any) -> Runner:
    return Runner(agent=Agent(name="bot", model=model, tools=tools), app_name="app",
                  auto_create_session=True, **kw)


async def test_cache_by_arguments_and_cache_function() -> None:
    calls: list[str] = []

    def keep(args: dict[str, Any], result: Any) -> bool:
        return "error" not in str(result)

    @tool(cache=True, cache_function=keep)
    def rate(currency: str) -> str:
        """A rate."""
        calls.append(currency)
        return "error: offline" if currency == "XXX" else f"{currency}=1.1"

    turn = ScriptedTurn(calls=[ScriptedCall("rate", {"currency": "EUR"}, id="1"),
                               ScriptedCall("rate", {"currency": "XXX"}, id="2")])
    model = ScriptedModel([turn]).reply("a").add(ScriptedTurn(calls=[
        ScriptedCall("rate", {"currency": "EUR"}, id="3"),
        ScriptedCall("rate", {"currency": "XXX"}, id="4")])).reply("b")
    runner = runner_for(model, [rate])
    await run(runner)
    await run(runner)
    assert sorted(calls) == ["EUR", "XXX", "XXX"]  # EUR cached, the error result never


async def test_return_direct_ends_the_run_with_the_tool_result() -> None:
    @tool(return_direct=True)
    def final_answer(text: str) -> str:
        """Answer the user directly."""
        return text

    model = ScriptedModel().call("final_answer", {"text": "42"})
    events = await run(runner_for(model, [final_answer]))
    assert len(model.requests) == 1  # no further model call
    assert events[-1].is_final_response()
    assert events[-1].function_responses[0].response == {"result": "42"}


async def test_content_and_artifact() -> None:
    @tool(response_format="content_and_artifact")
    def render_chart(title: str) -> tuple[str, bytes]:
        """Renders a chart."""
        return f"Chart '{title}' rendered.", b"\x89PNG fake bytes"

    artifacts = InMemoryArtifactService()
    model = ScriptedModel().call("render_chart", {"title": "sales"}, call_id="c1").reply("Done.")
    runner = runner_for(model, [render_chart], artifact_service=artifacts)
    events = await run(runner)
    response_event = next(e for e in events if e.function_responses)
    assert response_event.function_responses[0].response == {
        "result": "Chart 'sales' rendered."}
    assert response_event.actions.artifact_delta == {"render_chart-c1": 0}
    part = await artifacts.load_artifact(app_name="app", user_id="u", session_id="s",
                                         filename="render_chart-c1")
    assert part is not None and part.inline_data is not None
    assert part.inline_data.data == b"\x89PNG fake bytes"
    assert "PNG" not in repr(model.requests[1].contents)


async def test_content_and_artifact_without_a_service_is_an_error_result() -> None:
    @tool(response_format="content_and_artifact")
    def render_chart(title: str) -> tuple[str, bytes]:
        """Renders a chart."""
        return "ok", b"x"

    model = ScriptedModel().call("render_chart", {"title": "t"}).reply("hm")
    await run(runner_for(model, [render_chart]))
    response = model.requests[1].contents[-1].function_responses[0].response
    assert response["code"] == "tool_error" and "artifact_service" in response["error"]


async def test_tool_call_budget_per_run() -> None:
    ran: list[int] = []

    def step(n: int) -> int:
        ran.append(n)
        return n

    turn = ScriptedTurn(calls=[ScriptedCall("step", {"n": i}, id=str(i)) for i in range(4)])
    model = ScriptedModel([turn]).reply("ok")
    events = [e async for e in runner_for(model, [step]).run_async(
        user_id="u", session_id="s", new_message="go",
        run_config=RunConfig(streaming_mode=StreamingMode.SSE, max_tool_calls=2))]
    results = [r.response for e in events for r in e.function_responses]
    assert len(ran) == 2
    assert [r.get("code") for r in results].count("budget_exceeded") == 2


async def test_large_results_are_truncated_with_a_marker() -> None:
    from headwater.settings import Settings

    def big() -> str:
        """Big."""
        return "x" * 5000

    model = ScriptedModel().call("big").reply("ok")
    runner = runner_for(model, [big], settings=Settings(max_result_bytes=1000))
    await run(runner)
    response = model.requests[1].contents[-1].function_responses[0].response
    assert response["truncated"] is True
    assert len(response["result"]) == 1000 and "[truncated: 5014 characters" in response["result"]
