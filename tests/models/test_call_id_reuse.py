"""A provider that reuses a call id: each adapter's wire format shows the fresh id consistently.

Over FakeProvider on loopback, a model makes ``call_1``, gets its result, then
makes ``call_1`` again (a local server numbering its calls per response). The
run goes on; the request of the third model call carries the first call and
its result under ``call_1``, and the second under its fresh id, call and result
alike (FakeProvider answers 400 to a history whose results do not pair up).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from headwater import Agent, Event, RunConfig, Runner, StreamingMode
from headwater.models import BaseLlm
from headwater.models.anthropic import AnthropicModel
from headwater.models.gemini import GeminiModel
from headwater.models.openai import OpenAIChatModel
from headwater.models.openai_responses import OpenAIResponsesModel
from headwater.settings import Settings
from headwater.testing import (
    FakeProvider,
    Scenario,
    ToolCallSpec,
    render_anthropic,
    render_gemini,
    render_openai,
    render_openai_responses,
)

FAST = Settings(model_backoff_initial=0.01, model_backoff_max=0.02, model_idle_timeout=5,
                model_total_timeout=20)
Json = Any  # raw wire JSON


def lookup(order_id: str) -> dict[str, str]:
    """Find an order."""
    return {"order": order_id}


def openai_chat(provider: FakeProvider, client: httpx.AsyncClient) -> BaseLlm:
    return OpenAIChatModel("gpt-4o-mini", base_url=f"{provider.base_url}/v1", api_key="sk-test",
                           http_client=client, settings=FAST)


def openai_responses(provider: FakeProvider, client: httpx.AsyncClient) -> BaseLlm:
    return OpenAIResponsesModel("gpt-4o-mini", base_url=f"{provider.base_url}/v1",
                                api_key="sk-test", http_client=client, settings=FAST)


def anthropic(provider: FakeProvider, client: httpx.AsyncClient) -> BaseLlm:
    return AnthropicModel("claude-test", base_url=provider.base_url, api_key="sk-ant-test",
                          http_client=client, settings=FAST)


def gemini(provider: FakeProvider, client: httpx.AsyncClient) -> BaseLlm:
    return GeminiModel("gemini-2.5-flash", base_url=f"{provider.base_url}/v1beta",
                       api_key="AIza-test-key", http_client=client, settings=FAST)


def ids_openai_chat(body: Json) -> list[tuple[str, str]]:
    found = []
    for message in body["messages"]:
        found += [("call", c["id"]) for c in message.get("tool_calls") or ()]
        if message["role"] == "tool":
            found.append(("result", message["tool_call_id"]))
    return found


def ids_openai_responses(body: Json) -> list[tuple[str, str]]:
    kinds = {"function_call": "call", "function_call_output": "result"}
    return [(kinds[item["type"]], item["call_id"]) for item in body["input"]
            if item.get("type") in kinds]


def ids_anthropic(body: Json) -> list[tuple[str, str]]:
    found = []
    for message in body["messages"]:
        for block in message["content"] if isinstance(message["content"], list) else ():
            if block["type"] == "tool_use":
                found.append(("call", block["id"]))
            elif block["type"] == "tool_result":
                found.append(("result", block["tool_use_id"]))
    return found


def ids_gemini(body: Json) -> list[tuple[str, str]]:
    found = []
    for content in body["contents"]:
        for part in content["parts"]:
            if "functionCall" in part:
                found.append(("call", part["functionCall"]["id"]))
            elif "functionResponse" in part:
                found.append(("result", part["functionResponse"]["id"]))
    return found


def call_turn(fmt: str, *calls: ToolCallSpec) -> list[bytes]:
    if fmt == "openai_chat":
        return render_openai(tool_calls=calls, finish_reason="tool_calls")
    if fmt == "openai_responses":
        return render_openai_responses(tool_calls=calls)
    if fmt == "anthropic":
        return render_anthropic(tool_calls=calls, stop_reason="tool_use")
    return render_gemini(tool_calls=calls)


def text_turn(fmt: str, text: str) -> list[bytes]:
    render: dict[str, Callable[..., list[bytes]]] = {
        "openai_chat": render_openai, "openai_responses": render_openai_responses,
        "anthropic": render_anthropic, "gemini": render_gemini}
    return render[fmt](text=[text])


ADAPTERS = {
    "openai_chat": (openai_chat, ids_openai_chat),
    "openai_responses": (openai_responses, ids_openai_responses),
    "anthropic": (anthropic, ids_anthropic),
    "gemini": (gemini, ids_gemini),
}


async def find_1_and_2(make: Callable[[FakeProvider, httpx.AsyncClient], BaseLlm],
                       provider: FakeProvider) -> list[Event]:
    """One SSE run of a bot with ``lookup`` over ``make``'s model, asked to find 1 and 2."""
    async with httpx.AsyncClient() as client:
        runner = Runner(agent=Agent(name="bot", model=make(provider, client), tools=[lookup]),
                        app_name="app", auto_create_session=True)
        return [e async for e in runner.run_async(
            user_id="u", session_id="s", new_message="find 1 and 2",
            run_config=RunConfig(streaming_mode=StreamingMode.SSE))]


@pytest.mark.parametrize("fmt", list(ADAPTERS))
async def test_a_reused_call_id_is_replaced_consistently_on_the_wire(
        fmt: str, provider: FakeProvider) -> None:
    make, ids_of = ADAPTERS[fmt]
    provider.enqueue(
        Scenario(body=call_turn(fmt, {"id": "call_1", "name": "lookup",
                                      "arguments": {"order_id": "1"}})),
        Scenario(body=call_turn(fmt, {"id": "call_1", "name": "lookup",
                                      "arguments": {"order_id": "2"}})),
        Scenario(body=text_turn(fmt, "Both found.")))
    events = await find_1_and_2(make, provider)
    assert [e.error_code for e in events if e.error_code] == []
    assert events[-1].text == "Both found."  # a 400 for the history would be an error event
    calls = [c.id for e in events if not e.partial for c in e.function_calls]
    results = [r.id for e in events if not e.partial for r in e.function_responses]
    assert calls[0] == "call_1" and calls[1] != "call_1"
    assert results == calls
    fresh = calls[1]
    assert len(provider.requests) == 3
    assert ids_of(provider.requests[2].json()) == [("call", "call_1"), ("result", "call_1"),
                                                   ("call", fresh), ("result", fresh)]
    assert ids_of(provider.requests[1].json()) == [("call", "call_1"), ("result", "call_1")]


@pytest.mark.parametrize("fmt", list(ADAPTERS))
async def test_two_calls_with_one_id_in_one_response_pair_up_on_the_wire(
        fmt: str, provider: FakeProvider) -> None:
    make, ids_of = ADAPTERS[fmt]
    provider.enqueue(
        Scenario(body=call_turn(fmt, {"id": "call_1", "name": "lookup", "fragments": 3,
                                      "arguments": {"order_id": "1"}},
                                {"id": "call_1", "name": "lookup", "fragments": 3,
                                 "arguments": {"order_id": "2"}})),
        Scenario(body=text_turn(fmt, "Both found.")))
    events = await find_1_and_2(make, provider)
    assert events[-1].text == "Both found.", [e.error_code for e in events]
    calls = [c.id for e in events if not e.partial for c in e.function_calls]
    answers = {r.id: r.response for e in events if not e.partial for r in e.function_responses}
    assert calls[0] == "call_1" and calls[1] != "call_1"
    assert answers == {calls[0]: {"order": "1"}, calls[1]: {"order": "2"}}
    assert ids_of(provider.requests[1].json()) == [("call", calls[0]), ("call", calls[1]),
                                                   ("result", calls[0]), ("result", calls[1])]
