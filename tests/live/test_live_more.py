"""Live runs: approvals through the queue, emission pacing, stop cleanup, consumer cancel."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from headwater import Agent, Runner, ToolContext, ToolStreamEvent, tool
from headwater.models import LlmRequest
from headwater.sessions import InMemorySessionService
from headwater.testing import ScriptedCall, ScriptedModel, ScriptedTurn, VirtualClock, wait_until
from headwater.tools import approval_response

from .test_live import Live


def responder_for(name: str, args: dict[str, Any] | None = None):  # type: ignore[no-untyped-def]
    def respond(request: LlmRequest) -> ScriptedTurn:
        last = request.contents[-1]
        if last.text == "go":
            return ScriptedTurn(calls=[ScriptedCall(name, args or {}, id="c1")])
        if last.text == "stop":
            return ScriptedTurn(calls=[ScriptedCall("stop_streaming", {"function_name": name},
                                                    id="s1")])
        if last.function_responses:
            return ScriptedTurn(text=[f"result {last.function_responses[0].response}"])
        return ScriptedTurn(text=["ok"])

    return respond


async def test_approval_gate_in_live_mode_answer_through_the_queue() -> None:
    ran: list[str] = []

    @tool(requires_approval=True)
    def deploy(env: str) -> str:
        """Deploys."""
        ran.append(env)
        return "deployed"

    async with Live([deploy], VirtualClock(), responder=responder_for(
            "deploy", {"env": "prod"})) as live:
        await live.say("go")
        gate = [e for e in live.events if e.actions.requested_approvals]
        assert len(gate) == 1 and gate[0].long_running_tool_ids == ["c1"]
        assert ran == []
        live.queue.send_content(approval_response("c1", True, args_sha256="0" * 64))
        await live.clock.settle()
        refused = [e for e in live.events if e.error_code and e.partial]
        assert len(refused) == 1 and "other arguments" in (refused[0].error_message or "")
        live.queue.send_content(approval_response(gate[0].actions.requested_approvals[0], True))
        # A sync tool runs on a worker thread, which settling the loop does not wait for.
        await wait_until(lambda: live.texts()[-1:] == ["result {'result': 'deployed'}"])
        assert ran == ["prod"]


async def test_min_interval_paces_emissions_latest_wins() -> None:
    clock = VirtualClock()

    @tool(min_interval=10)
    async def ticker(tool_context: ToolContext) -> AsyncIterator[int]:
        """Ticks every second."""
        for i in range(25):
            yield i
            await tool_context.clock.sleep(1)

    async with Live([ticker], clock, responder=responder_for("ticker")) as live:
        await live.say("go")
        await clock.advance(40)
        told = live.told("Function ticker")
        # One emission per 10 s, each the latest value at that moment (9 at t=10, 19 at
        # t=20: the value of t=10 arrives just after the flush), the held 24 at the end.
        assert told == ["Function ticker returned: 0", "Function ticker returned: 9",
                        "Function ticker returned: 19", "Function ticker returned: 24",
                        "Function ticker finished streaming."]


async def test_stop_runs_the_tools_cleanup() -> None:
    cleaned: list[str] = []

    @tool
    async def forever(tool_context: ToolContext) -> AsyncIterator[int]:
        """Runs until stopped."""
        try:
            i = 0
            while True:
                i += 1
                yield i
                await tool_context.clock.sleep(5)
        finally:
            cleaned.append("finally")

    async with Live([forever], VirtualClock(), responder=responder_for("forever")) as live:
        await live.say("go")
        await live.say("stop")
        assert cleaned == ["finally"]


async def test_progress_tools_stream_progress_in_live_mode_too() -> None:
    @tool(streaming=True)
    async def build(target: str) -> AsyncIterator[ToolStreamEvent]:
        """Builds."""
        yield ToolStreamEvent(type="part_delta", delta=f"building {target}")
        yield ToolStreamEvent(type="done", response="built")

    async with Live([build], VirtualClock(), responder=responder_for(
            "build", {"target": "app"})) as live:
        await live.say("go")
        progress = [e.tool_progress.event.delta for e in live.events if e.tool_progress]
        assert progress == ["building app"]
        assert live.texts()[-1] == "result {'result': 'built'}"
        assert not live.told("Function build")


async def test_cancelling_the_consumer_tears_everything_down() -> None:
    clock = VirtualClock()

    @tool
    async def forever(tool_context: ToolContext) -> AsyncIterator[int]:
        """Runs until stopped."""
        while True:
            yield 1
            await tool_context.clock.sleep(5)

    before = asyncio.all_tasks()
    live = Live([forever], clock, responder=responder_for("forever"))
    await live.__aenter__()
    await live.say("go")
    assert live.task is not None
    live.task.cancel()
    await asyncio.wait([live.task], timeout=1.0)
    assert asyncio.all_tasks() - before == set()  # structured: nothing outlives the run


async def test_a_value_produced_at_the_lifetime_limit_is_not_sent() -> None:
    clock = VirtualClock()

    @tool(max_lifetime=10)
    async def poller(tool_context: ToolContext) -> AsyncIterator[int]:
        """Yields on every poll."""
        i = 0
        while True:
            yield i
            i += 1
            await tool_context.clock.sleep(5)

    async with Live([poller], clock, responder=responder_for("poller")) as live:
        await live.say("go")
        await clock.advance(30)
        assert live.told("Function poller") == [
            "Function poller returned: 0", "Function poller returned: 1",
            "Function poller stopped streaming: it reached its maximum lifetime of 10 s."]


async def test_a_failing_model_turn_is_an_error_event_not_a_hang(
        caplog: pytest.LogCaptureFixture) -> None:
    def responder(request: LlmRequest) -> ScriptedTurn:
        raise RuntimeError("responder bug")

    async with Live([], VirtualClock(), responder=responder) as live:
        await live.say("hello")
        errors = [e for e in live.events if e.error_code]
        assert [(e.error_code, e.turn_complete) for e in errors] == [("internal", True)]
        assert "responder bug" in caplog.text


async def test_a_live_run_supersedes_approvals_asked_before_it_and_keeps_its_own() -> None:
    ran: list[str] = []

    @tool(requires_approval=True)
    def deploy(env: str) -> str:
        """Deploys."""
        ran.append(env)
        return "deployed"

    service = InMemorySessionService()
    before = Runner(agent=Agent(name="market_watch", model=ScriptedModel(
        responder=responder_for("deploy", {"env": "old"})), tools=[deploy]), app_name="app",
        session_service=service, auto_create_session=True)
    events = [e async for e in before.run_async(user_id="u", session_id="s", new_message="go")]
    (asked_before,) = events[-1].actions.requested_approvals
    async with Live([deploy], VirtualClock(), service=service, responder=responder_for(
            "deploy", {"env": "prod"})) as live:
        await live.say("go")
        # Going live is a new turn: the call asked before it was answered "superseded" as
        # the run started, so the model's first request holds a valid history.
        history = live.model.requests[0].contents
        assert history[2].function_responses[0].response["code"] == "superseded"
        (asked,) = [a for e in live.events for a in e.actions.requested_approvals]
        await live.say("hello")  # in a live run the user talks on while an approval waits
        live.queue.send_content(approval_response(asked_before, True))
        await live.clock.settle()
        refused = [e for e in live.events if e.error_code and e.partial]
        assert len(refused) == 1 and "superseded" in (refused[0].error_message or "")
        live.queue.send_content(approval_response(asked, True))
        await wait_until(lambda: live.texts()[-1:] == ["result {'result': 'deployed'}"])
    assert ran == ["prod"]
