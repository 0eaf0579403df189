"""Caller cancellation: break, aclose() and task cancel close the model stream,
cancel running tools and seal history so the next turn is valid."""

from __future__ import annotations

import asyncio
from contextlib import aclosing
from typing import Any

from agents.helpers import assert_valid_history
from headwater import Agent, Event, RunConfig, Runner, StreamingMode
from headwater.testing import ScriptedModel

SSE = RunConfig(streaming_mode=StreamingMode.SSE)


async def setup(model: ScriptedModel, tools: list[Any]) -> Runner:
    runner = Runner(agent=Agent(name="bot", model=model, tools=tools), app_name="app",
                    auto_create_session=True)
    return runner


def run(runner: Runner, message: str = "go") -> Any:
    return runner.run_async(user_id="u", session_id="s", new_message=message, run_config=SSE)


async def history(runner: Runner) -> list[Event]:
    session = await runner.session_service.get_session(app_name="app", user_id="u",
                                                       session_id="s")
    assert session is not None
    return session.events


async def test_break_mid_stream_closes_the_model_stream() -> None:
    model = ScriptedModel().reply(*[f"w{i} " for i in range(50)], delay=0.001).reply("next")
    runner = await setup(model, [])
    async with aclosing(run(runner)) as stream:
        async for event in stream:
            if event.partial and event.text == "w2 ":
                break
    assert model.streams[0].closed_early
    events = await history(runner)
    # What was shown is kept, marked interrupted, then the stop's record
    # (docs/frame-protocol.md, decision 5)
    assert [e.text for e in events] == ["go", "w0 w1 w2 ", ""]
    assert events[1].interrupted and events[2].error_code == "cancelled"
    again = [e async for e in run(runner, "again")]
    assert again[-1].text == "next"
    assert_valid_history(model.requests[1].contents)


async def test_plain_break_then_immediate_next_turn() -> None:
    model = ScriptedModel().reply(*[f"w{i} " for i in range(50)], delay=0.001).reply("next")
    runner = await setup(model, [])
    async for event in run(runner):
        if event.partial:
            break  # no aclosing: the generator is finalised by the event loop
    again = [e async for e in run(runner, "again")]
    assert again[-1].text == "next"
    assert model.streams[0].closed_early


async def test_break_after_the_call_event_never_runs_the_tool_and_seals_it() -> None:
    ran: list[str] = []

    def charge(amount: int) -> str:
        ran.append("charged")
        return "ok"

    model = ScriptedModel().call("charge", {"amount": 5}, call_id="pay-1").reply("next")
    runner = await setup(model, [charge])
    async with aclosing(run(runner)) as stream:
        async for event in stream:
            if event.function_calls:
                break
    assert ran == []
    sealed = [r for e in await history(runner) for r in e.function_responses]
    assert [(r.id, r.response["code"]) for r in sealed] == [("pay-1", "cancelled")]
    again = [e async for e in run(runner, "again")]
    assert again[-1].text == "next"
    assert_valid_history(model.requests[1].contents)
    assert model.requests[1].contents[2].function_responses[0].response["code"] == "cancelled"


async def test_cancelling_the_consumer_cancels_a_running_tool() -> None:
    started = asyncio.Event()
    outcome: list[str] = []

    async def long_job() -> str:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            outcome.append("cancelled")
            raise
        return "done"

    model = ScriptedModel().call("long_job", call_id="job-1").reply("next")
    runner = await setup(model, [long_job])

    async def consume() -> None:
        async for _ in run(runner):
            pass

    task = asyncio.create_task(consume())
    await asyncio.wait_for(started.wait(), 5)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert task.cancelled()
    assert outcome == ["cancelled"]
    sealed = [r for e in await history(runner) for r in e.function_responses]
    assert [(r.id, r.response["code"]) for r in sealed] == [("job-1", "cancelled")]
    again = [e async for e in run(runner, "again")]
    assert again[-1].text == "next"
    assert_valid_history(model.requests[1].contents)


async def test_aclose_while_two_tools_run_cancels_both() -> None:
    started = asyncio.Event()
    cancelled: list[int] = []

    async def slow(i: int) -> int:
        if i == 1:
            started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(i)
            raise
        return i

    from headwater.testing import ScriptedCall, ScriptedTurn
    model = ScriptedModel([ScriptedTurn(calls=[ScriptedCall("slow", {"i": 1}, id="a"),
                                               ScriptedCall("slow", {"i": 2}, id="b")])])
    model.reply("next")
    runner = await setup(model, [slow])
    stream = run(runner)
    first = await stream.__anext__()
    assert first.function_calls
    pending = asyncio.ensure_future(stream.__anext__())
    await asyncio.wait_for(started.wait(), 5)
    pending.cancel()
    await asyncio.gather(pending, return_exceptions=True)
    await stream.aclose()
    assert sorted(cancelled) == [1, 2]
    sealed = {r.id: r.response["code"] for e in await history(runner) for r in e.function_responses}
    assert sealed == {"a": "cancelled", "b": "cancelled"}


async def test_async_with_closes_the_run_at_the_end_of_the_block_while_the_stream_is_held(
) -> None:
    model = ScriptedModel().call("slow", {}).reply("never")
    started = asyncio.Event()
    cancelled = asyncio.Event()

    async def slow() -> str:
        """Hangs until cancelled."""
        started.set()
        try:
            await asyncio.sleep(3600)
        finally:
            cancelled.set()
        return "unreachable"

    runner = await setup(model, [slow])
    held = run(runner)
    async with held as stream:
        assert stream is held
        async for event in stream:
            if event.function_calls:
                break
    # The caller still holds `held`; leaving the block closed the run anyway.
    events = await history(runner)
    sealed = [r.response for e in events for r in e.function_responses]
    assert sealed == [{"error": "The call was cancelled before it returned a result.",
                       "code": "cancelled"}]
    assert not started.is_set() or cancelled.is_set()
    assert len(model.requests) == 1
