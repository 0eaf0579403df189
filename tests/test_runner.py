"""The runner's step loop, persistence order and the event contract at run time."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from typing import Any

import pytest

from headwater import Agent, Event, RunConfig, Runner, StreamingMode, ToolContext
from headwater.errors import SessionNotFoundError, UserError
from headwater.models import BaseLlm, LlmRequest, LlmResponse
from headwater.sessions import InMemorySessionService
from headwater.testing import ScriptedCall, ScriptedModel, ScriptedTurn
from headwater.types import Content, FunctionCall, Part, Usage

SSE = RunConfig(streaming_mode=StreamingMode.SSE)
NONE = RunConfig(streaming_mode=StreamingMode.NONE)

ORDER = {"status": "shipped", "shipped_on": "30 September", "due": "Monday"}
ANSWER = ("Order 1042 shipped ", "on 30 September and ", "is due Monday.")


def lookup_order(order_id: str) -> dict[str, str]:
    """Find an order by its number.

    Args:
        order_id: the order number, e.g. "1042".
    """
    assert order_id == "1042"
    return ORDER


def order_model() -> ScriptedModel:
    return (ScriptedModel()
            .call("lookup_order", {"order_id": "1042"}, call_id="call-1")
            .reply(*ANSWER, usage=Usage(input_tokens=30, output_tokens=12, total_tokens=42)))


async def make(model: BaseLlm, tools: list[Any] | None = None, **agent_kw: Any
               ) -> tuple[Runner, str]:
    agent = Agent(name="support", model=model, tools=tools or [], **agent_kw)
    runner = Runner(agent=agent, app_name="shop", session_service=InMemorySessionService())
    session = await runner.session_service.create_session(app_name="shop", user_id="u1")
    return runner, session.id


async def collect(runner: Runner, sid: str, message: str = "Where is order 1042?",
                  config: RunConfig = SSE) -> list[Event]:
    return [e async for e in runner.run_async(user_id="u1", session_id=sid,
                                              new_message=message, run_config=config)]


async def stored(runner: Runner, sid: str) -> list[Event]:
    session = await runner.session_service.get_session(app_name="shop", user_id="u1",
                                                       session_id=sid)
    assert session is not None
    return session.events


def shape(events: list[Event]) -> list[str]:
    out = []
    for e in events:
        if e.error_code:
            out.append(f"error:{e.error_code}")
        elif e.partial:
            out.append(f"delta:{e.text}")
        elif e.function_calls:
            out.append("call:" + ",".join(c.name for c in e.function_calls))
        elif e.function_responses:
            out.append("result:" + ",".join(r.name for r in e.function_responses))
        else:
            out.append(f"{e.author}:{e.text}")
    return out


async def test_seed_004_worked_example_sse() -> None:
    runner, sid = await make(order_model(), [lookup_order])
    events = await collect(runner, sid)
    assert shape(events) == [
        "call:lookup_order", "result:lookup_order",
        *(f"delta:{t}" for t in ANSWER),
        "support:Order 1042 shipped on 30 September and is due Monday.",
    ]
    assert [e.is_final_response() for e in events] == [False, False, False, False, False, True]
    history = await stored(runner, sid)
    assert shape(history) == ["user:Where is order 1042?", "call:lookup_order",
                              "result:lookup_order",
                              "support:Order 1042 shipped on 30 September and is due Monday."]
    assert not any(e.partial for e in history)
    assert history[2].function_responses[0].response == ORDER


async def test_none_mode_leaves_the_same_history() -> None:
    runner_sse, sid_sse = await make(order_model(), [lookup_order])
    await collect(runner_sse, sid_sse, config=SSE)
    runner_none, sid_none = await make(order_model(), [lookup_order])
    events = await collect(runner_none, sid_none, config=NONE)
    assert not any(e.partial for e in events)

    def record(events: list[Event]) -> list[Any]:
        return [(e.author, e.content, e.finish_reason, e.usage) for e in events]

    assert record(await stored(runner_none, sid_none)) == record(await stored(runner_sse, sid_sse))


async def test_persist_then_yield() -> None:
    runner, sid = await make(order_model(), [lookup_order])
    async for event in runner.run_async(user_id="u1", session_id=sid,
                                        new_message="Where is order 1042?", run_config=SSE):
        ids = [e.id for e in await stored(runner, sid)]
        assert (event.id in ids) is (not event.partial)


async def test_model_request_is_built_from_persisted_history_only() -> None:
    model = order_model()
    runner, sid = await make(model, [lookup_order], instruction="You are a support agent.")
    await collect(runner, sid)
    second = model.requests[1]
    assert second.system_instruction == "You are a support agent."
    assert [c.role for c in second.contents] == ["user", "model", "user"]
    assert second.contents[1].function_calls[0].args == {"order_id": "1042"}
    assert second.contents[2].function_responses[0].response == ORDER
    assert [t.name for t in second.tools] == ["lookup_order"]


async def test_fragmented_tool_call_runs_once_with_full_arguments() -> None:
    seen: list[dict[str, Any]] = []

    def record(query: str, filters: dict[str, list[int]], limit: int = 10) -> str:
        seen.append({"query": query, "filters": filters, "limit": limit})
        return "ok"

    args = {"query": "naïve \"quoted\" ✓ text", "filters": {"ids": [1, 2, 3]}, "limit": 7}
    model = ScriptedModel().call("record", args, fragments=25).reply("done")
    runner, sid = await make(model, [record])
    events = await collect(runner, sid)
    assert seen == [args]
    assert [c.args for e in events for c in e.function_calls] == [args]
    assert not any(e.function_calls for e in events if e.partial)


async def test_usage_only_on_aggregates_and_totalled_per_run() -> None:
    model = (ScriptedModel()
             .call("lookup_order", {"order_id": "1042"}, usage=Usage(10, 2, 12))
             .reply(*ANSWER, usage=Usage(20, 8, 28)))
    runner, sid = await make(model, [lookup_order])
    stream = runner.run_async(user_id="u1", session_id=sid, new_message="hi", run_config=SSE)
    events = [e async for e in stream]
    assert all(e.usage is None for e in events if e.partial)
    assert [e.usage for e in events if e.usage] == [Usage(10, 2, 12), Usage(20, 8, 28)]
    assert stream.usage == Usage(30, 10, 40)
    assert stream.stats.llm_calls == 2


async def test_max_llm_calls_budget() -> None:
    calls = 0

    def ping() -> str:
        nonlocal calls
        calls += 1
        return "pong"

    model = ScriptedModel(responder=lambda request: ScriptedTurn(calls=[ScriptedCall("ping")]))
    runner, sid = await make(model, [ping])
    events = await collect(runner, sid, config=RunConfig(max_llm_calls=3))
    assert len(model.requests) == 3
    assert calls == 3
    assert events[-1].error_code == "budget_exceeded"
    history = await stored(runner, sid)
    assert history[-1].error_code == "budget_exceeded"
    # History stays valid: every call has its result.
    assert sum(len(e.function_calls) for e in history) == sum(
        len(e.function_responses) for e in history) == 3


async def test_tool_failures_are_results_the_model_sees() -> None:
    def explode(n: int) -> int:
        raise ValueError("the tool broke")

    turn = ScriptedTurn(calls=[ScriptedCall("explode", {"n": 1}, id="a"),
                               ScriptedCall("explode", {"n": "not a number"}, id="b"),
                               ScriptedCall("missing_tool", {}, id="c"),
                               ScriptedCall("explode", {"n": 1, "extra": True}, id="d")])
    model = ScriptedModel([turn]).reply("sorry")
    runner, sid = await make(model, [explode])
    events = await collect(runner, sid)
    results = {r.id: r.response for e in events for r in e.function_responses}
    assert results["a"] == {"error": "ValueError: the tool broke", "code": "tool_error"}
    assert results["b"]["code"] == "invalid_arguments" and "n" in results["b"]["error"]
    assert results["c"] == {"error": "there is no tool named 'missing_tool'",
                            "code": "unknown_tool"}
    assert results["d"]["code"] == "invalid_arguments"
    assert events[-1].text == "sorry"
    assert model.requests[1].contents[-1].function_responses[0].response == results["a"]


async def test_unknown_tool_is_logged_as_security_event(caplog: pytest.LogCaptureFixture
                                                        ) -> None:
    model = ScriptedModel().call("rm_rf", {"path": "/"}).reply("ok")
    runner, sid = await make(model)
    with caplog.at_level("WARNING", logger="headwater.security"):
        await collect(runner, sid)
    assert any("rm_rf" in r.getMessage() for r in caplog.records
               if r.name == "headwater.security")


async def test_tool_timeout() -> None:
    from headwater import tool

    @tool(timeout=0.05)
    async def slow() -> str:
        await asyncio.sleep(10)
        return "never"

    runner, sid = await make(ScriptedModel().call("slow").reply("gave up"), [slow])
    events = await collect(runner, sid)
    response = events[1].function_responses[0].response
    assert response["code"] == "timeout"


async def test_calls_of_one_turn_run_concurrently_and_bounded() -> None:
    running = 0
    peak = 0

    async def work(i: int) -> int:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.02)
        running -= 1
        return i

    turn = ScriptedTurn(calls=[ScriptedCall("work", {"i": i}, id=f"c{i}") for i in range(12)])
    runner, sid = await make(ScriptedModel([turn]).reply("ok"), [work])
    runner.settings = runner.settings.model_copy(update={"max_parallel_tools": 4})
    events = await collect(runner, sid)
    assert peak == 4
    assert [r.response for r in events[1].function_responses] == [
        {"result": i} for i in range(12)]


async def test_sync_tools_run_off_the_event_loop() -> None:
    loop_thread = threading.get_ident()
    seen: list[int] = []

    def where() -> str:
        seen.append(threading.get_ident())
        return "here"

    runner, sid = await make(ScriptedModel().call("where").reply("ok"), [where])
    await collect(runner, sid)
    assert seen and seen[0] != loop_thread


async def test_tool_context_injection_and_state_delta() -> None:
    def remember(color: str, tool_context: ToolContext) -> str:
        tool_context.state["color"] = color
        tool_context.state["temp:scratch"] = 1
        return tool_context.function_call_id

    agent_tools = [remember]
    model = ScriptedModel().call("remember", {"color": "blue"}, call_id="k1").reply("noted")
    runner, sid = await make(model, agent_tools)
    assert "tool_context" not in str(runner.agent.tools[0].declaration().parameters)
    events = await collect(runner, sid)
    assert events[1].function_responses[0].response == {"result": "k1"}
    assert events[1].actions.state_delta["color"] == "blue"
    session = await runner.session_service.get_session(app_name="shop", user_id="u1",
                                                       session_id=sid)
    assert session is not None
    assert session.state == {"color": "blue"}


async def test_instruction_callable_and_model_callbacks() -> None:
    async def instruction(ctx: Any) -> str:
        return f"Help user {ctx.user_id}."

    def before_model(callback_context: Any, llm_request: LlmRequest) -> LlmResponse | None:
        if "canned" in llm_request.contents[-1].text:
            return LlmResponse(content=Content.from_text("canned answer", role="model"))
        return None

    def after_model(callback_context: Any, llm_response: LlmResponse) -> LlmResponse | None:
        callback_context.state["answered"] = True
        return None

    model = ScriptedModel().reply("real answer")
    runner, sid = await make(model, instruction=instruction, before_model_callback=before_model,
                             after_model_callback=after_model)
    events = await collect(runner, sid, message="canned please")
    assert [e.text for e in events] == ["canned answer"]
    assert model.requests == []
    events = await collect(runner, sid, message="hello")
    assert events[-1].text == "real answer"
    assert model.requests[0].system_instruction == "Help user u1."
    assert events[-1].actions.state_delta == {"answered": True}


async def test_tool_callbacks_can_short_circuit_and_replace() -> None:
    ran: list[str] = []

    def guarded(x: int) -> int:
        ran.append("guarded")
        return x

    def before(tool: Any, args: dict[str, Any], tool_context: ToolContext) -> Any:
        return {"blocked": True} if args["x"] < 0 else None

    async def after(tool: Any, args: dict[str, Any], tool_context: ToolContext,
                    tool_response: Any) -> Any:
        return {"wrapped": tool_response}

    turn = ScriptedTurn(calls=[ScriptedCall("guarded", {"x": -1}, id="n"),
                               ScriptedCall("guarded", {"x": 2}, id="p")])
    runner, sid = await make(ScriptedModel([turn]).reply("ok"), [guarded],
                             before_tool_callback=before, after_tool_callback=[after])
    events = await collect(runner, sid)
    assert [r.response for r in events[1].function_responses] == [
        {"wrapped": {"blocked": True}}, {"wrapped": 2}]  # the raw value; after runs on both
    assert ran == ["guarded"]


async def test_in_band_error_is_a_persisted_event_with_the_text_so_far() -> None:
    model = ScriptedModel().reply("The answer is", finish_reason="content_filter",
                                  error=("provider_error", "content filtered"))
    runner, sid = await make(model)
    events = await collect(runner, sid)
    assert events[-1].error_code == "provider_error"
    assert events[-1].text == "The answer is"
    assert (await stored(runner, sid))[-1].finish_reason == "content_filter"


async def test_missing_session_and_bidi_are_clear_errors() -> None:
    runner, _ = await make(ScriptedModel())
    with pytest.raises(SessionNotFoundError, match="create_session"):
        await collect(runner, "nope")
    with pytest.raises(UserError, match="run_live"):
        runner.run_async(user_id="u1", session_id="x", new_message="hi",
                         run_config=RunConfig(streaming_mode=StreamingMode.BIDI))


async def test_auto_create_session() -> None:
    agent = Agent(name="a", model=ScriptedModel().reply("hi"))
    runner = Runner(agent=agent, app_name="shop", auto_create_session=True)
    events = await collect(runner, "fresh")
    assert events[-1].text == "hi"


def test_sync_run() -> None:
    agent = Agent(name="support", model=order_model(), tools=[lookup_order])
    with Runner(agent=agent, app_name="shop", auto_create_session=True) as runner:
        events = list(runner.run(user_id="u1", session_id="s", new_message="Where?",
                                 run_config=SSE))
    assert events[-1].text == "".join(ANSWER)


class _ExplodingModel(BaseLlm):
    async def generate_content(self, request: LlmRequest, stream: bool = False
                               ) -> AsyncIterator[LlmResponse]:
        raise RuntimeError("adapter bug")
        yield LlmResponse()  # pragma: no cover - makes this a generator


async def test_an_adapter_bug_propagates_and_the_session_stays_usable() -> None:
    runner, sid = await make(_ExplodingModel("boom"))
    with pytest.raises(RuntimeError, match="adapter bug"):
        await collect(runner, sid)
    runner.agent.model = ScriptedModel().reply("fine")
    assert (await collect(runner, sid))[-1].text == "fine"


async def test_calls_dangling_in_history_are_sealed_once_before_the_next_turn() -> None:
    runner, sid = await make(ScriptedModel().reply("ok"))
    session = await runner.session_service.get_session(app_name="shop", user_id="u1",
                                                       session_id=sid)
    assert session is not None
    await runner.session_service.append_event(session, Event(
        author="support", content=Content("model", [Part(function_call=FunctionCall(
            id="lost", name="lookup_order", args={}))])))
    await collect(runner, sid)
    other = Runner(agent=Agent(name="support", model=ScriptedModel().reply("again")),
                   app_name="shop", session_service=runner.session_service)
    await collect(other, sid)
    history = await stored(runner, sid)
    sealed = [r for e in history for r in e.function_responses if r.id == "lost"]
    assert len(sealed) == 1 and sealed[0].response["code"] == "interrupted"
    assert shape(history) == ["call:lookup_order", "result:lookup_order",
                              "user:Where is order 1042?", "support:ok",
                              "user:Where is order 1042?", "support:again"]


async def test_after_a_crash_only_idempotent_calls_run_again() -> None:
    from headwater import tool

    ran: list[str] = []

    @tool(idempotent=True)
    def lookup(order_id: str) -> str:
        """Reads an order."""
        ran.append(order_id)
        return f"order {order_id}"

    def charge(amount: int) -> str:
        ran.append(f"charge {amount}")
        return "charged"

    runner, sid = await make(ScriptedModel().reply("back"), [lookup, charge])
    session = await runner.session_service.get_session(app_name="shop", user_id="u1",
                                                       session_id=sid)
    assert session is not None
    await runner.session_service.append_event(session, Event(
        author="support", content=Content("model", [
            Part(function_call=FunctionCall(id="l1", name="lookup", args={"order_id": "7"})),
            Part(function_call=FunctionCall(id="c1", name="charge", args={"amount": 5}))])))
    await collect(runner, sid)
    assert ran == ["7"]  # the charge is never re-run
    history = await stored(runner, sid)
    results = {r.id: r.response for e in history for r in e.function_responses}
    assert results["l1"] == {"result": "order 7"}
    assert results["c1"]["code"] == "interrupted"
