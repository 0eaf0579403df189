"""Progress-streaming tools (seed 001): progress for the caller, one result for the model."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest

from headwater import Agent, Event, RunConfig, Runner, StreamingMode, ToolStreamEvent, tool
from headwater.settings import Settings
from headwater.testing import ScriptedCall, ScriptedModel, ScriptedTurn
from headwater.tools import ToolInvocation

SSE = RunConfig(streaming_mode=StreamingMode.SSE)
NONE = RunConfig(streaming_mode=StreamingMode.NONE)


@tool(name="search_documents", description="Search the corpus for documents matching a query.",
      streaming=True)
async def search_documents(query: str) -> AsyncIterator[ToolStreamEvent]:
    yield ToolStreamEvent(type="part_start", index=0)
    yield ToolStreamEvent(type="part_delta", delta=f"Searching '{query}'…")
    yield ToolStreamEvent(type="part_delta", delta=" scanning index…")
    yield ToolStreamEvent(type="part_end", index=0)
    yield ToolStreamEvent(type="done", response="Found 3 documents: doc_a, doc_b, doc_c.")


def search_model() -> ScriptedModel:
    return (ScriptedModel().call("search_documents", {"query": "streaming"}, call_id="s1")
            .reply("Three documents match."))


async def run(runner: Runner, message: str = "Find docs about streaming.",
              config: RunConfig = SSE) -> list[Event]:
    return [e async for e in runner.run_async(user_id="u", session_id="s", new_message=message,
                                              run_config=config)]


def make_runner(model: ScriptedModel, tools: list[Any], **kw: Any) -> Runner:
    settings = kw.pop("settings", None)
    return Runner(agent=Agent(name="bot", model=model, tools=tools, **kw), app_name="app",
                  auto_create_session=True, settings=settings)


async def test_seed_001_consumer_loop_under_sse(capsys: pytest.CaptureFixture[str]) -> None:
    model = search_model()
    runner = make_runner(model, [search_documents])
    async for event in runner.run_async(user_id="u", session_id="s",
                                        new_message="Find docs about streaming.",
                                        run_config=SSE):
        if event.tool_progress is not None:
            inner = event.tool_progress.event
            if inner.delta is not None:
                print(inner.delta, end="", flush=True)
        for response in event.function_responses:
            print("\n[final]:", response.response["result"])
    out = capsys.readouterr().out
    assert out == ("Searching 'streaming'… scanning index…\n"
                   "[final]: Found 3 documents: doc_a, doc_b, doc_c.\n")


async def test_progress_is_partial_sequenced_and_never_stored() -> None:
    model = search_model()
    runner = make_runner(model, [search_documents])
    events = await run(runner)
    progress = [e for e in events if e.tool_progress is not None]
    assert [e.tool_progress.event.type for e in progress] == [  # type: ignore[union-attr]
        "part_start", "part_delta", "part_delta", "part_end"]
    assert all(e.partial for e in progress)
    assert [e.tool_progress.sequence for e in progress] == [1, 2, 3, 4]  # type: ignore[union-attr]
    assert {(e.tool_progress.call_id, e.tool_progress.tool_name)  # type: ignore[union-attr]
            for e in progress} == {("s1", "search_documents")}
    session = await runner.session_service.get_session(app_name="app", user_id="u",
                                                       session_id="s")
    assert session is not None
    assert not any(e.tool_progress or e.partial for e in session.events)
    # The model request after the tool holds only the done response.
    after = model.requests[1].contents
    assert [r.response for c in after for r in c.function_responses] == [
        {"result": "Found 3 documents: doc_a, doc_b, doc_c."}]
    assert "scanning" not in repr(after)


async def test_none_mode_drains_with_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    model = search_model()
    runner = make_runner(model, [search_documents])
    with caplog.at_level(logging.WARNING, logger="headwater.tools"):
        events = await run(runner, config=NONE)
    assert not any(e.partial for e in events)
    warnings = [r for r in caplog.records if r.name == "headwater.tools"]
    assert len(warnings) == 1 and "StreamingMode.NONE" in warnings[0].getMessage()
    assert model.requests[1].contents[-1].function_responses[0].response == {
        "result": "Found 3 documents: doc_a, doc_b, doc_c."}
    assert events[-1].text == "Three documents match."


@pytest.mark.parametrize(("body", "code", "words"), [
    ("no_done", "stream_incomplete", "without a 'done'"),
    ("raises", "tool_error", "RuntimeError: index offline"),
])
async def test_a_stream_without_done_or_that_raises_is_an_error_result(
        body: str, code: str, words: str) -> None:
    closed: list[bool] = []

    @tool(name="flaky", streaming=True)
    async def flaky() -> AsyncIterator[ToolStreamEvent]:
        try:
            yield ToolStreamEvent(type="part_delta", delta="working")
            if body == "raises":
                raise RuntimeError("index offline")
        finally:
            closed.append(True)

    model = ScriptedModel().call("flaky", call_id="f1").reply("sorry")
    events = await run(make_runner(model, [flaky]))
    result = model.requests[1].contents[-1].function_responses[0].response
    assert result["code"] == code and words in result["error"]
    assert closed == [True]
    assert events[-1].text == "sorry"


async def test_plain_values_are_progress_and_the_last_is_the_result() -> None:
    async def count_to(n: int) -> AsyncIterator[int]:
        """Counts."""
        for i in range(1, n + 1):
            yield i

    for config in (SSE, NONE):
        model = ScriptedModel().call("count_to", {"n": 3}).reply("done")
        events = await run(make_runner(model, [count_to]), config=config)
        deltas = [e.tool_progress.event.delta for e in events if e.tool_progress]
        assert deltas == (["1", "2", "3"] if config is SSE else [])
        assert model.requests[1].contents[-1].function_responses[0].response == {"result": 3}


async def test_progress_past_its_bounds_is_coalesced_latest_wins() -> None:
    @tool(streaming=True)
    async def chatty() -> AsyncIterator[ToolStreamEvent]:
        """Talks a lot."""
        for i in range(50):
            yield ToolStreamEvent(type="part_delta", delta=f"step {i}")
        yield ToolStreamEvent(type="done", response="ok")

    settings = Settings(max_progress_events=5)
    model = ScriptedModel().call("chatty").reply("fine")
    events = await run(make_runner(model, [chatty], settings=settings))
    progress = [e.tool_progress for e in events if e.tool_progress]
    assert [p.event.delta for p in progress] == [  # type: ignore[union-attr]
        "step 0", "step 1", "step 2", "step 3", "step 4", "step 49"]
    assert progress[-1].coalesced == 44  # type: ignore[union-attr]
    by_bytes = Settings(max_progress_bytes=20)
    model = ScriptedModel().call("chatty").reply("fine")
    events = await run(make_runner(model, [chatty], settings=by_bytes))
    sent = [e.tool_progress.event.delta for e in events if e.tool_progress]
    assert sent == ["step 0", "step 1", "step 2", "step 49"]


async def test_parallel_streaming_calls_interleave_progress() -> None:
    gate = asyncio.Event()

    @tool(streaming=True)
    async def worker(name: str) -> AsyncIterator[ToolStreamEvent]:
        """Works."""
        yield ToolStreamEvent(type="part_delta", delta=f"{name} started")
        if name == "a":
            await gate.wait()
        else:
            gate.set()
        yield ToolStreamEvent(type="done", response=name)

    turn = ScriptedTurn(calls=[ScriptedCall("worker", {"name": "a"}, id="a"),
                               ScriptedCall("worker", {"name": "b"}, id="b")])
    model = ScriptedModel([turn]).reply("both done")
    events = await run(make_runner(model, [worker]))
    started = [e.tool_progress.call_id for e in events if e.tool_progress]
    assert sorted(started) == ["a", "b"]
    results = [r.response for e in events for r in e.function_responses]
    assert results == [{"result": "a"}, {"result": "b"}]


async def test_middleware_sees_one_final_value_per_call_streaming_or_not() -> None:
    seen: list[tuple[str, Any]] = []

    async def outer(invocation: ToolInvocation, call_next: Any) -> Any:
        seen.append(("outer-in", invocation.tool.name))
        value = await call_next(invocation)
        seen.append(("outer-out", value))
        return value

    async def inner(invocation: ToolInvocation, call_next: Any) -> Any:
        value = await call_next(invocation.with_args({**invocation.args, "query": "rewritten"}))
        seen.append(("inner-out", value))
        return value

    def plain(query: str) -> str:
        return f"plain {query}"

    turn = ScriptedTurn(calls=[ScriptedCall("search_documents", {"query": "q"}, id="1"),
                               ScriptedCall("plain", {"query": "q"}, id="2")])
    model = ScriptedModel([turn]).reply("ok")
    events = await run(make_runner(model, [search_documents, plain],
                                   tool_middleware=[outer, inner]))
    final = "Found 3 documents: doc_a, doc_b, doc_c."
    assert sorted(v for k, v in seen if k == "outer-out") == sorted([final, "plain rewritten"])
    assert len([k for k, _ in seen if k == "inner-out"]) == 2
    deltas = [e.tool_progress.event.delta for e in events if e.tool_progress]
    assert "Searching 'rewritten'…" in deltas


async def test_closing_the_run_closes_a_streaming_tool() -> None:
    cleaned: list[str] = []
    started = asyncio.Event()

    @tool(streaming=True)
    async def endless() -> AsyncIterator[ToolStreamEvent]:
        """Never ends."""
        try:
            while True:
                yield ToolStreamEvent(type="part_delta", delta="tick")
                started.set()
                await asyncio.sleep(0.01)
        finally:
            cleaned.append("closed")

    model = ScriptedModel().call("endless", call_id="e1").reply("next")
    runner = make_runner(model, [endless])
    stream = runner.run_async(user_id="u", session_id="s", new_message="go", run_config=SSE)
    async for event in stream:
        if event.tool_progress is not None:
            break
    await stream.aclose()
    assert cleaned == ["closed"]
    session = await runner.session_service.get_session(app_name="app", user_id="u",
                                                       session_id="s")
    assert session is not None
    sealed = [r.response["code"] for e in session.events for r in e.function_responses]
    assert sealed == ["cancelled"]
