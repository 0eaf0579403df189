"""Valid JSON of the wrong shape, generated from each format's event schema, fails the call.

Every example plays a whole turn (thinking, text, a tool call, usage, then a
second model call) through ``Runner.run_async`` against ``FakeProvider``, with
one field of one event replaced by a value of the wrong JSON type, or a
required field removed, or the whole event replaced. A field the adapter reads
must end the run with a stored ``provider_bad_response`` error event; any other
change must still end the run cleanly (an answer or a stored error event):
never a raw ``TypeError``/``AttributeError``/``ValueError`` out of ``run_async``.
"""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from headwater import Agent, RunConfig, Runner, StreamingMode
from headwater.errors import ERROR_CODES
from headwater.models.anthropic import AnthropicModel
from headwater.models.openai import OpenAIChatModel
from headwater.settings import Settings
from headwater.testing import FakeProvider, Scenario, render_anthropic, render_openai

FAST = Settings(model_backoff_initial=0.001, model_backoff_max=0.002, model_idle_timeout=5,
                model_total_timeout=20)
Json = Any  # raw wire JSON
Path = tuple[str | int, ...]

OPENAI_EVENTS: list[Json] = [
    {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
     "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                  "finish_reason": None}]},
    {"id": "c1", "choices": [{"index": 0, "delta": {"reasoning_content": "hmm"},
                              "finish_reason": None}]},
    {"id": "c1", "choices": [{"index": 0, "delta": {"content": "Hel"}, "finish_reason": None}]},
    {"id": "c1", "choices": [{"index": 0, "delta": {"tool_calls": [
        {"index": 0, "id": "call_1", "type": "function",
         "function": {"name": "f", "arguments": "{\"a\": "}}]}, "finish_reason": None}]},
    {"id": "c1", "choices": [{"index": 0, "delta": {"tool_calls": [
        {"index": 0, "function": {"arguments": "1}"}}]}, "finish_reason": None}]},
    {"id": "c1", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
    {"id": "c1", "choices": [], "usage": {
        "prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8,
        "prompt_tokens_details": {"cached_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 1}}},
]

ANTHROPIC_EVENTS: list[Json] = [
    {"type": "message_start", "message": {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude", "content": [],
        "stop_reason": None, "usage": {"input_tokens": 5, "output_tokens": 1,
                                       "cache_read_input_tokens": 0,
                                       "cache_creation_input_tokens": 0}}},
    {"type": "content_block_start", "index": 0,
     "content_block": {"type": "thinking", "thinking": ""}},
    {"type": "content_block_delta", "index": 0,
     "delta": {"type": "thinking_delta", "thinking": "hmm"}},
    {"type": "content_block_delta", "index": 0,
     "delta": {"type": "signature_delta", "signature": "sig"}},
    {"type": "content_block_stop", "index": 0},
    {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
    {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Hel"}},
    {"type": "content_block_stop", "index": 1},
    {"type": "content_block_start", "index": 2,
     "content_block": {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}},
    {"type": "content_block_delta", "index": 2,
     "delta": {"type": "input_json_delta", "partial_json": "{\"a\": 1}"}},
    {"type": "content_block_stop", "index": 2},
    {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
     "usage": {"output_tokens": 9}},
    {"type": "message_stop"},
]

_OPENAI_FIELDS: dict[str, type] = {
    "index": int, "delta": dict, "content": str, "reasoning_content": str, "refusal": str,
    "tool_calls": list, "function": dict, "name": str, "arguments": str,
    "finish_reason": str, "usage": dict, "prompt_tokens": int, "completion_tokens": int,
    "total_tokens": int, "prompt_tokens_details": dict, "cached_tokens": int,
    "completion_tokens_details": dict, "reasoning_tokens": int,
}
_TOKENS = {"input_tokens", "output_tokens", "cache_read_input_tokens",
           "cache_creation_input_tokens"}


def openai_schema(path: Path) -> type | None:
    """The type the adapter reads at ``path`` of a chunk (``None``: not read)."""
    if not path:
        return dict
    if path == ("choices",):
        return list
    if path[0] not in ("choices", "usage"):
        return None  # id, object, created, model: not read
    last = path[-1]
    if isinstance(last, int):
        return dict  # choices[n], tool_calls[n]
    if last == "id":
        return str if "tool_calls" in path else None
    return _OPENAI_FIELDS.get(last)


def anthropic_schema(event: Json, path: Path) -> type | None:
    """The type the adapter reads at ``path`` of an event (``None``: not read)."""
    if not path:
        return dict
    kind, last = event["type"], path[-1]
    if path == ("type",):
        return str
    if kind == "message_start":
        if path in (("message",), ("message", "usage")):
            return dict
        return int if path[:2] == ("message", "usage") and last in _TOKENS else None
    if kind == "content_block_start":
        if path == ("index",):
            return int
        if path == ("content_block",):
            return dict
        block = event["content_block"]["type"]
        wanted = {"type", "id", "name"} if block == "tool_use" else {"type", "text"}
        return str if len(path) == 2 and last in wanted else None
    if kind == "content_block_delta":
        if path == ("index",):
            return int
        return dict if path == ("delta",) else str if len(path) == 2 else None
    if kind == "message_delta":
        if path in (("delta",), ("usage",)):
            return dict
        if path == ("delta", "stop_reason"):
            return str
        return int if path[0] == "usage" and last in _TOKENS else None
    return None


REQUIRED = {
    "openai": {("choices",)},
    "anthropic": {("index",), ("content_block",), ("delta",), ("message",),
                  ("content_block", "type"), ("delta", "type"), ("content_block", "id"),
                  ("content_block", "name"), ("delta", "text"), ("delta", "thinking"),
                  ("delta", "signature"), ("delta", "partial_json")},
}


def paths(value: Json, prefix: Path = ()) -> list[Path]:
    found: list[Path] = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found += paths(item, (*prefix, key))
    elif isinstance(value, list):
        for n, item in enumerate(value):
            found += paths(item, (*prefix, n))
    return found


def set_at(value: Json, path: Path, new: Json, delete: bool) -> Json:
    if not path:
        return new
    parent = value
    for key in path[:-1]:
        parent = parent[key]
    if delete:
        del parent[path[-1]]
    else:
        parent[path[-1]] = new
    return value


JSON_VALUES = st.one_of(
    st.integers(-5, 10**6), st.booleans(), st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=5), st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))


@st.composite
def mutations(draw: st.DrawFn, fmt: str) -> tuple[list[Json], bool]:
    """A mutated event list, and whether the adapter must call it a bad response."""
    events = copy.deepcopy(OPENAI_EVENTS if fmt == "openai" else ANTHROPIC_EVENTS)
    n = draw(st.integers(0, len(events) - 1))
    event = events[n]
    path = draw(st.sampled_from(paths(event)))
    expected = (openai_schema(path) if fmt == "openai" else anthropic_schema(event, path))
    delete = bool(path) and isinstance(path[-1], str) and draw(st.booleans())
    if delete:
        kind = event.get("type")
        events[n] = set_at(event, path, None, delete=True)
        required = path in REQUIRED[fmt] and expected is not None
        if kind == "message_delta":
            required = False  # its delta and usage may be missing
        return events, required
    wrong = draw(JSON_VALUES.filter(lambda v: expected is None or type(v) is not expected))
    events[n] = set_at(event, path, wrong, delete=False)
    return events, expected is not None


def body(fmt: str, events: list[Json]) -> list[bytes]:
    if fmt == "openai":
        return [b"data: " + json.dumps(e).encode() + b"\n\n" for e in events] + [
            b"data: [DONE]\n\n"]
    out = []
    for e in events:
        name = e.get("type") if isinstance(e, dict) and isinstance(e.get("type"), str) else "x"
        out.append(f"event: {name}\n".encode() + b"data: " + json.dumps(e).encode() + b"\n\n")
    return out


def f(a: int) -> int:
    """A tool.

    Args:
        a: a number.
    """
    return a


async def play(fmt: str, events: list[Json]) -> tuple[list[Any], list[Any]]:
    async with FakeProvider() as provider, httpx.AsyncClient() as client:
        answer = (render_openai(text=["done"]) if fmt == "openai"
                  else render_anthropic(text=["done"]))
        provider.enqueue(Scenario(body=body(fmt, events), check_history=False),
                         Scenario(body=answer, check_history=False))
        model = (OpenAIChatModel("m", base_url=f"{provider.base_url}/v1", api_key="k",
                                 http_client=client, settings=FAST) if fmt == "openai" else
                 AnthropicModel("m", base_url=provider.base_url, api_key="k",
                                http_client=client, settings=FAST))
        runner = Runner(agent=Agent(name="bot", model=model, tools=[f]), app_name="app")
        session = await runner.create_session(user_id="u")
        async with runner.run_async(user_id="u", session_id=session.id, new_message="go",
                                    run_config=RunConfig(streaming_mode=StreamingMode.SSE)
                                    ) as stream:
            seen = [e async for e in stream]
        stored = await runner.session_service.get_session(app_name="app", user_id="u",
                                                          session_id=session.id)
        assert stored is not None
        return seen, stored.events


def check(fmt: str, events: list[Json], must_fail: bool) -> None:
    seen, stored = asyncio.run(play(fmt, events))
    last = seen[-1]
    assert not last.partial
    assert stored[-1].id == last.id  # the last event, error or answer, is the record's last
    if must_fail:
        assert last.error_code == "provider_bad_response", (last.error_code, last.text)
        assert "Traceback" not in (last.error_message or "")
    else:
        assert last.error_code is None or last.error_code in ERROR_CODES


def test_the_unmutated_streams_play_a_whole_tool_turn() -> None:
    for fmt, events in (("openai", OPENAI_EVENTS), ("anthropic", ANTHROPIC_EVENTS)):
        seen, stored = asyncio.run(play(fmt, events))
        assert seen[-1].text == "done" and seen[-1].error_code is None
        assert [r.response for e in stored for r in e.function_responses] == [{"result": 1}]


@pytest.mark.timeout(240)  # 60 runs on a real provider and store: long on a busy machine
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=mutations("openai"))
def test_openai_wrong_shapes_fail_the_call_with_a_stored_error(
        case: tuple[list[Json], bool]) -> None:
    check("openai", *case)


@pytest.mark.timeout(240)  # 60 runs on a real provider and store: long on a busy machine
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=mutations("anthropic"))
def test_anthropic_wrong_shapes_fail_the_call_with_a_stored_error(
        case: tuple[list[Json], bool]) -> None:
    check("anthropic", *case)


@settings(max_examples=20, deadline=None)
@given(fmt=st.sampled_from(["openai", "anthropic"]), data=JSON_VALUES.filter(
    lambda v: not isinstance(v, dict)))
def test_an_event_that_is_not_an_object_is_a_bad_response(fmt: str, data: Json) -> None:
    events = copy.deepcopy(OPENAI_EVENTS if fmt == "openai" else ANTHROPIC_EVENTS)
    events[1] = data
    check(fmt, events, True)


def test_an_html_page_with_status_200_is_a_bad_response_at_once() -> None:
    async def go() -> tuple[list[Any], int]:
        async with FakeProvider() as provider, httpx.AsyncClient() as client:
            page = Scenario(body=b"<html><body>Gateway login</body></html>", chunked=False,
                            content_type="text/html; charset=utf-8", check_history=False)
            provider.enqueue(page, page, page)
            model = OpenAIChatModel("m", base_url=f"{provider.base_url}/v1", api_key="k",
                                    http_client=client, settings=FAST)
            result = await Runner(agent=Agent(name="bot", model=model), app_name="app",
                                  auto_create_session=True).run_once(user_id="u",
                                                                     new_message="go")
            return result.events, len(provider.requests)

    events, requests = asyncio.run(go())
    assert events[-1].error_code == "provider_bad_response"
    assert requests == 1  # not retried
