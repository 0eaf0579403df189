"""Safe bounds by default: tool calls per turn and per run, tokens per run, argument size,
large results off the event loop; unbounded only when asked for."""

from __future__ import annotations

import threading
from typing import Any

from headwater import Agent, Event, RunConfig, Runner
from headwater.settings import Settings
from headwater.testing import ScriptedCall, ScriptedModel, ScriptedTurn
from headwater.types import Usage


async def run(model: ScriptedModel, tools: list[Any], config: RunConfig | None = None,
              settings: Settings | None = None) -> tuple[list[Event], list[Event]]:
    runner = Runner(agent=Agent(name="bot", model=model, tools=tools), app_name="app",
                    auto_create_session=True, settings=settings)
    async with runner.run_async(user_id="u", session_id="s", new_message="go",
                                run_config=config) as stream:
        events = [e async for e in stream]
    session = await runner.session_service.get_session(app_name="app", user_id="u",
                                                       session_id="s")
    assert session is not None
    return events, session.events


def results(events: list[Event]) -> list[dict[str, Any]]:
    return [r.response for e in events for r in e.function_responses]


def many_calls(n: int) -> ScriptedTurn:
    return ScriptedTurn(calls=[ScriptedCall("tick", {"n": i}) for i in range(n)])


async def test_a_thousand_calls_in_one_turn_stop_at_the_default_bound() -> None:
    ran: list[int] = []

    async def tick(n: int) -> int:
        """Counts."""
        ran.append(n)
        return n

    per_turn = RunConfig().max_tool_calls_per_turn
    assert per_turn is not None and per_turn < 1000
    model = ScriptedModel([many_calls(1000)]).reply("done")
    events, stored = await run(model, [tick])
    answers = results(stored)
    assert len(answers) == 1000  # every call has its one result
    assert sorted(ran) == list(range(per_turn))
    assert answers[:per_turn] == [{"result": n} for n in range(per_turn)]
    assert {a.get("code") for a in answers[per_turn:]} == {"budget_exceeded"}
    assert events[-1].text == "done"


async def test_unbounded_is_an_explicit_choice() -> None:
    ran: list[int] = []

    async def tick(n: int) -> int:
        """Counts."""
        ran.append(n)
        return n

    config = RunConfig(max_tool_calls_per_turn=None, max_tool_calls=None,
                       max_tokens_per_run=None)
    model = ScriptedModel([many_calls(100)]).reply("done")
    _, stored = await run(model, [tick], config)
    assert len(ran) == 100 and all("code" not in a for a in results(stored))
    defaults = RunConfig()
    assert None not in (defaults.max_tool_calls, defaults.max_tool_calls_per_turn,
                        defaults.max_tokens_per_run)


async def test_the_run_budget_of_tool_calls_spans_turns() -> None:
    async def tick(n: int) -> int:
        """Counts."""
        return n

    model = ScriptedModel([many_calls(3), many_calls(3)]).reply("done")
    _, stored = await run(model, [tick], RunConfig(max_tool_calls=4))
    codes = [a.get("code") for a in results(stored)]
    assert codes == [None, None, None, None, "budget_exceeded", "budget_exceeded"]


async def test_the_token_budget_ends_the_run_before_the_next_model_call() -> None:
    async def tick(n: int) -> int:
        """Counts."""
        return n

    spend = Usage(input_tokens=500, output_tokens=100, total_tokens=600)
    model = (ScriptedModel().call("tick", {"n": 1}, usage=spend)
             .call("tick", {"n": 2}, usage=spend).reply("never"))
    events, stored = await run(model, [tick], RunConfig(max_tokens_per_run=1000))
    assert len(model.requests) == 2
    assert events[-1].error_code == "budget_exceeded"
    assert "max_tokens_per_run=1000" in (events[-1].error_message or "")
    assert stored[-1].id == events[-1].id


async def test_tool_arguments_over_the_size_bound_are_refused() -> None:
    ran: list[int] = []

    def store(blob: str) -> int:
        """Stores a blob."""
        ran.append(len(blob))
        return len(blob)

    model = ScriptedModel().call("store", {"blob": "x" * (2 << 20)}).call(
        "store", {"blob": "small"}).reply("done")
    _, stored = await run(model, [store])
    first, second = results(stored)
    assert first["code"] == "invalid_arguments" and "max_tool_args_bytes" in first["error"]
    assert second == {"result": 5}
    assert ran == [5]  # the 2 MiB call never ran


async def test_a_large_result_is_serialised_and_cut_off_the_event_loop() -> None:
    loop_thread = threading.get_ident()
    seen: list[int] = []

    class Probe:
        def __repr__(self) -> str:  # the serialiser's fallback for an unknown object
            seen.append(threading.get_ident())
            return "probe"

    async def big() -> dict[str, Any]:
        """A large result."""
        return {"rows": ["y" * 1000] * 5000, "probe": Probe()}

    limit = Settings().max_result_bytes
    model = ScriptedModel().call("big", {}).reply("done")
    _, stored = await run(model, [big])
    (answer,) = results(stored)
    assert answer["truncated"] is True and len(answer["result"]) <= limit
    assert seen and loop_thread not in seen
