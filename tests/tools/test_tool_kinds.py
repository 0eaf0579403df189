"""Tool kinds (call, progress, live): decided once when the tool is built, and what they mean."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from headwater import (
    Agent,
    Event,
    LiveRequestQueue,
    RunConfig,
    Runner,
    StreamingMode,
    ToolContext,
    ToolStreamEvent,
    tool,
)
from headwater.errors import UserError
from headwater.models import LlmRequest
from headwater.testing import LiveHarness, ScriptedCall, ScriptedModel, ScriptedTurn, VirtualClock
from headwater.tools import BaseTool, FunctionTool, ToolOptions
from headwater.types import ToolDeclaration


def plain_sync(x: int) -> int:
    """Doubles."""
    return 2 * x


async def plain_async(x: int) -> int:
    """Doubles, awaited."""
    return 2 * x


async def count_to(n: int) -> AsyncIterator[int]:
    """Counts from 1 to n."""
    for i in range(1, n + 1):
        yield i


async def with_done() -> AsyncIterator[ToolStreamEvent]:
    """Reports, then answers."""
    yield ToolStreamEvent(type="part_delta", delta="working")
    yield ToolStreamEvent(type="done", response="answer")


@pytest.mark.parametrize(("func", "keywords", "kind"), [
    (plain_sync, {}, "call"),
    (plain_async, {}, "call"),
    (plain_sync, {"streaming": False}, "call"),
    (plain_async, {"kind": "call"}, "call"),
    (count_to, {}, "live"),
    (count_to, {"streaming": True}, "progress"),
    (count_to, {"kind": "progress"}, "progress"),
    (count_to, {"kind": "live"}, "live"),
    (count_to, {"kind": "progress", "streaming": True}, "progress"),
    (count_to, {"options": ToolOptions(kind="live", max_lifetime=60)}, "live"),
    (count_to, {"options": ToolOptions(kind="live"), "streaming": True}, "progress"),
])
def test_kind_is_inferred_once_from_the_shape_and_the_flags(
        func: Callable[..., Any], keywords: dict[str, Any], kind: str) -> None:
    built = FunctionTool(func, **keywords)
    assert built.options.kind == kind
    assert tool(**keywords)(func).options.kind == kind


def test_options_given_as_an_object_keep_their_other_fields() -> None:
    built = FunctionTool(count_to, options=ToolOptions(kind="live", max_lifetime=60),
                         max_emissions=3)
    assert (built.options.max_lifetime, built.options.max_emissions) == (60, 3)


@pytest.mark.parametrize(("func", "keywords", "says"), [
    (count_to, {"kind": "call"}, r"kind='call' needs a plain function.*omit kind"),
    (count_to, {"options": ToolOptions()}, r"kind='call' needs a plain function"),
    (plain_sync, {"kind": "progress"}, r"kind='progress' needs an async generator"),
    (plain_async, {"kind": "live"}, r"kind='live' needs an async generator"),
    (plain_async, {"options": ToolOptions(kind="live")}, r"kind='live' needs an async gen"),
    (count_to, {"streaming": True, "kind": "live"}, r"streaming=True means kind='progress'"),
    (count_to, {"streaming": False, "kind": "live"}, r"streaming=False means kind='call'"),
    (count_to, {"kind": "stream"}, r"kind must be 'call', 'progress' or 'live'"),
    (count_to, {"kind": "live", "return_direct": True}, r"kind='live'.*return-direct"),
])
def test_a_kind_the_function_cannot_be_is_refused_with_what_to_do(
        func: Callable[..., Any], keywords: dict[str, Any], says: str) -> None:
    with pytest.raises(ValueError, match=says) as refused:
        FunctionTool(func, name="t", **keywords)
    assert str(refused.value).startswith("tool 't': ")
    with pytest.raises(ValueError, match=says):
        tool(name="t", **keywords)(func)


def test_an_unknown_option_name_is_a_type_error_naming_the_options() -> None:
    with pytest.raises(TypeError, match=r"unknown option 'timout' \(did you mean 'timeout'\?\)"):
        FunctionTool(plain_sync, timout=3)
    with pytest.raises(TypeError,
                       match="the options are streaming, after_ticket, approval_summary, cache,"):
        tool(colour="red")(plain_sync)


def test_tool_options_refuse_incoherence_when_made_and_are_frozen() -> None:
    with pytest.raises(ValueError, match="a cache stores a single value"):
        ToolOptions(kind="progress", cache=True)
    with pytest.raises(ValueError, match="only consulted with cache=True"):
        ToolOptions(cache_function=lambda args, result: True)
    options = ToolOptions(timeout=3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.timeout = 4  # type: ignore[misc]
    built = FunctionTool(plain_sync, options=options)
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.options.kind = "live"  # type: ignore[misc]
    assert built.options == ToolOptions(timeout=3)


def test_repr_states_the_kind() -> None:
    assert repr(FunctionTool(count_to, name="watch")) == "FunctionTool('watch', kind='live')"
    assert repr(FunctionTool(count_to, streaming=True)) == \
        "FunctionTool('count_to', kind='progress')"
    assert repr(FunctionTool(plain_sync)) == "FunctionTool('plain_sync', kind='call')"


class Echo(BaseTool):
    """A tool written by a user from BaseTool, without options."""

    name = "echo"
    description = "Echoes."

    def declaration(self) -> ToolDeclaration:
        return ToolDeclaration(name=self.name, description=self.description,
                               parameters={"type": "object", "properties": {}})

    async def run(self, args: dict[str, Any], context: ToolContext) -> Any:
        return "echoed"


async def test_a_base_tool_subclass_gets_default_options_and_runs_as_a_call() -> None:
    echo = Echo()
    assert echo.options == ToolOptions() and echo.options.kind == "call"
    assert not echo.consumes_input_stream
    assert repr(echo) == "Echo('echo', kind='call')"
    model = ScriptedModel().call("echo").reply("ok")
    await run_async(model, [echo], SSE)
    assert model.requests[1].contents[-1].function_responses[0].response == {"result": "echoed"}


def test_consumes_input_stream_is_true_only_with_a_live_request_queue_parameter() -> None:
    async def counter(input_stream: LiveRequestQueue) -> AsyncIterator[int]:
        """Counts frames."""
        yield 0

    assert FunctionTool(counter).consumes_input_stream
    assert "input_stream" not in str(FunctionTool(counter).declaration().parameters)
    assert not FunctionTool(count_to).consumes_input_stream
    assert not FunctionTool(plain_sync).consumes_input_stream

    def snapshot(input_stream: LiveRequestQueue) -> str:
        return "x"

    with pytest.raises(UserError, match="not an async generator"):
        FunctionTool(snapshot)


# -- the documented rule for a bare async generator ("live"), one test per mode ------------------

SSE = RunConfig(streaming_mode=StreamingMode.SSE)
NONE = RunConfig(streaming_mode=StreamingMode.NONE)


async def run_async(model: ScriptedModel, tools: list[Any], config: RunConfig) -> list[Event]:
    runner = Runner(agent=Agent(name="bot", model=model, tools=tools), app_name="app",
                    auto_create_session=True)
    return [e async for e in runner.run_async(user_id="u", session_id="s", new_message="go",
                                              run_config=config)]


async def test_live_tool_in_run_async_sse_is_progress_and_its_last_value_the_result() -> None:
    model = ScriptedModel().call("count_to", {"n": 3}, call_id="c1").reply("three")
    events = await run_async(model, [count_to], SSE)
    progress = [e for e in events if e.tool_progress is not None]
    assert [e.tool_progress.event.delta for e in progress] == [  # type: ignore[union-attr]
        "1", "2", "3"]
    assert all(e.partial for e in progress)
    seen = model.requests[1].contents[-1].function_responses
    assert [(r.id, r.response) for r in seen] == [("c1", {"result": 3})]  # one result, the last
    assert not any(e.branch for e in events)  # nothing was told as a live stream


async def test_live_tool_in_run_async_none_gives_the_model_its_last_value() -> None:
    model = ScriptedModel().call("count_to", {"n": 3}).reply("three")
    events = await run_async(model, [count_to], NONE)
    assert not any(e.tool_progress for e in events)
    assert model.requests[1].contents[-1].function_responses[0].response == {"result": 3}


async def test_a_done_event_is_the_result_of_a_live_tool_in_run_async() -> None:
    model = ScriptedModel().call("with_done").reply("ok")
    events = await run_async(model, [with_done], SSE)
    assert [e.tool_progress.event.delta for e in events if e.tool_progress] == ["working"]
    assert model.requests[1].contents[-1].function_responses[0].response == {"result": "answer"}


def counting_responder(request: LlmRequest) -> ScriptedTurn:
    last = request.contents[-1]
    if last.text == "count":
        return ScriptedTurn(calls=[ScriptedCall("count_to", {"n": 3}, id="c1")])
    return ScriptedTurn(text=["ok"])


async def live_run(counter: FunctionTool) -> tuple[LiveHarness, ScriptedModel]:
    clock = VirtualClock()
    model = ScriptedModel(responder=counting_responder)
    runner = Runner(agent=Agent(name="bot", model=model, tools=[counter]), app_name="app",
                    auto_create_session=True, clock=clock)
    async with LiveHarness(runner, clock) as live:
        await live.say("count")
    return live, model


async def test_live_tool_in_run_live_tells_the_model_each_value() -> None:
    live, model = await live_run(FunctionTool(count_to))
    assert live.responses("count_to") == [{"status": "The function is running asynchronously "
                                                     "and the results are pending."}]
    assert live.told() == ["Function count_to returned: 1", "Function count_to returned: 2",
                           "Function count_to returned: 3", "Function count_to finished streaming."]
    told_model = [c.text for r in model.requests for c in r.contents]
    assert "Function count_to returned: 2" in told_model
    assert any(r.tools and "stop_streaming" in {t.name for t in r.tools} for r in model.requests)


async def test_a_progress_tool_in_run_live_answers_once_and_is_not_a_live_stream() -> None:
    live, _ = await live_run(FunctionTool(count_to, streaming=True))
    assert live.told() == []
    assert live.responses("count_to") == [{"result": 3}]
