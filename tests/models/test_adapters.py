"""Both HTTP adapters against FakeProvider: fixtures, retries, cuts, timeouts, cancel."""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import aclosing
from pathlib import Path
from typing import Any

import httpx
import pytest

from headwater import Agent, Event, RunConfig, Runner, StreamingMode
from headwater.errors import ModelHTTPError, ProviderTimeout, ProviderUnavailable
from headwater.models import BaseLlm, LlmRequest, LlmResponse
from headwater.models.anthropic import AnthropicModel
from headwater.models.openai import OpenAIChatModel
from headwater.settings import Settings
from headwater.testing import (
    Close,
    FakeProvider,
    Reset,
    Scenario,
    Stall,
    Trickle,
    check_stream_contract,
    cut_inside_utf8,
    render_anthropic,
    render_openai,
    split_inside_characters,
)
from headwater.types import Content, Usage

FIXTURES = Path(__file__).parents[1] / "fixtures" / "provider-streams"
FAST = Settings(model_backoff_initial=0.01, model_backoff_max=0.02, model_idle_timeout=5,
                model_total_timeout=20)

FORMATS = ["openai", "anthropic"]


def make_model(fmt: str, provider: FakeProvider, client: httpx.AsyncClient,
               settings: Settings = FAST) -> OpenAIChatModel | AnthropicModel:
    if fmt == "openai":
        return OpenAIChatModel("gpt-4o-mini", base_url=f"{provider.base_url}/v1", api_key="sk-test",
                               http_client=client, settings=settings)
    return AnthropicModel("claude-test", base_url=provider.base_url, api_key="sk-ant-test",
                          http_client=client, settings=settings)


def render(fmt: str, text: list[str], **kw: Any) -> list[bytes]:
    return render_openai(text=text, **kw) if fmt == "openai" else render_anthropic(text=text, **kw)


REQUEST = LlmRequest(contents=[Content.from_text("hello")])


async def responses(model: BaseLlm, stream: bool = True) -> list[LlmResponse]:
    return [r async for r in model.generate_content(REQUEST, stream=stream)]


# -- every fixture through its adapter --------------------------------------------------------

def fixture_cases() -> list[Any]:
    cases = []
    for folder in ("openai-chat", "anthropic-messages"):
        for sse in sorted((FIXTURES / folder).glob("*.sse")):
            cases.append(pytest.param(folder, sse, id=sse.stem))
    return cases


def expected_usage(folder: str, usage: dict[str, Any] | None) -> Usage | None:
    if usage is None:
        return None
    if folder == "openai-chat":
        raw = usage["raw"]
        return Usage(
            input_tokens=raw["prompt_tokens"], output_tokens=raw["completion_tokens"],
            total_tokens=raw["total_tokens"],
            cached_input_tokens=(raw.get("prompt_tokens_details") or {}).get("cached_tokens", 0),
            reasoning_tokens=(raw.get("completion_tokens_details") or {}).get(
                "reasoning_tokens", 0))
    prompt = (usage["input_tokens"] + usage.get("cache_read_input_tokens", 0)
              + usage.get("cache_creation_input_tokens", 0))
    return Usage(input_tokens=prompt, output_tokens=usage["output_tokens"],
                 total_tokens=prompt + usage["output_tokens"],
                 cached_input_tokens=usage.get("cache_read_input_tokens", 0))


def load_fixture(sse: Path) -> tuple[bytes, dict[str, Any]]:
    return sse.read_bytes(), json.loads(sse.with_suffix(".json").read_text())["expected"]


@pytest.mark.parametrize(("folder", "sse"), fixture_cases())
async def test_fixture_through_adapter(folder: str, sse: Path, provider: FakeProvider,
                                       client: httpx.AsyncClient) -> None:
    body, expected = load_fixture(sse)
    provider.enqueue(Scenario(body=split_inside_characters(body)))
    model = make_model("openai" if folder == "openai-chat" else "anthropic", provider, client)
    out = await responses(model)
    final = check_stream_contract(out)
    content = final.content
    text = content.text if content else ""
    thought = content.thought_text if content else ""
    assert text == expected["text"] + (expected.get("refusal") or "")
    assert thought == (expected.get("reasoning") or expected.get("thinking") or "")
    complete = [c for c in expected["tool_calls"] if c.get("arguments_complete", True)]
    cut_short = (bool(expected["errors"])
                 or expected.get("finish_reason") in ("length", "content_filter")
                 or expected.get("stop_reason") in ("max_tokens", "refusal"))
    calls = [(c.id, c.name, c.args) for c in content.function_calls] if content else []
    if cut_short:
        assert final.error_code == "provider_error"
        assert calls == []  # no tool may run from a turn that was cut short
    else:
        assert final.error_code is None
        assert calls == [(c["id"], c["name"], c["arguments"]) for c in complete]
    reason = expected.get("finish_reason", expected.get("stop_reason"))
    assert final.finish_reason == reason
    assert final.usage == expected_usage(folder, expected["usage"])
    assert len(provider.requests) == 1


@pytest.mark.parametrize("fmt", FORMATS)
async def test_request_body_and_headers(fmt: str, provider: FakeProvider,
                                        client: httpx.AsyncClient) -> None:
    provider.enqueue(Scenario(body=render(fmt, ["hi"])))
    model = make_model(fmt, provider, client)
    await responses(model)
    request = provider.requests[0]
    body = request.json()
    assert body["stream"] is True
    if fmt == "openai":
        assert request.path == "/v1/chat/completions"
        assert request.headers["authorization"] == "Bearer sk-test"
        assert body["stream_options"] == {"include_usage": True}
    else:
        assert request.path == "/v1/messages"
        assert request.headers["x-api-key"] == "sk-ant-test"
        assert request.headers["anthropic-version"] == "2023-06-01"
        assert body["max_tokens"] == FAST.anthropic_max_tokens
    assert "sk-" not in repr(model)


# -- retries: only before the first chunk ------------------------------------------------------

def ok(fmt: str) -> Scenario:
    return Scenario(body=render(fmt, ["fine"]))


def err(fmt: str, status: int, **headers: str) -> Scenario:
    return Scenario.error(status, "nope", headers=headers or None, format=fmt)


RETRY_MATRIX: list[tuple[str, Callable[[str], list[Scenario]], int, str | None]] = [
    ("429 Retry-After 1", lambda f: [err(f, 429, **{"retry-after": "1"}), ok(f)], 2, None),
    ("503 503 ok", lambda f: [err(f, 503), err(f, 503), ok(f)], 3, None),
    ("500 x3", lambda f: [err(f, 500), err(f, 500), err(f, 500)], 3, "provider_unavailable"),
    ("400", lambda f: [err(f, 400)], 1, "provider_rejected"),
    ("401", lambda f: [err(f, 401)], 1, "provider_rejected"),
    ("403", lambda f: [err(f, 403)], 1, "provider_rejected"),
    ("404", lambda f: [err(f, 404)], 1, "provider_rejected"),
    ("422", lambda f: [err(f, 422)], 1, "provider_rejected"),
    ("503 x-should-retry false", lambda f: [err(f, 503, **{"x-should-retry": "false"})], 1,
     "provider_unavailable"),
    ("529 ok", lambda f: [err(f, 529), ok(f)], 2, None),
    ("in-band error before content, ok", lambda f: [
        Scenario(body=render(f, [], error={"type": "overloaded_error", "message": "busy"},
                             **({"done": False} if f == "openai" else {"message_stop": False}))),
        ok(f)], 2, None),
]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize(("name", "scenarios", "attempts", "code"), RETRY_MATRIX,
                         ids=[r[0] for r in RETRY_MATRIX])
async def test_retry_matrix(fmt: str, name: str, scenarios: Callable[[str], list[Scenario]],
                            attempts: int, code: str | None, provider: FakeProvider,
                            client: httpx.AsyncClient) -> None:
    provider.enqueue(*scenarios(fmt))
    runner, sid = await runner_for(make_model(fmt, provider, client))
    events = await run_turn(runner, sid)
    assert len(provider.requests) == attempts
    bodies = {r.body for r in provider.requests}
    assert len(bodies) == 1  # the same request body on every attempt
    if code is None:
        assert [e.text for e in events] == ["fine", "fine"]  # one partial, one aggregate
        assert events[-1].error_code is None
    else:
        assert [e.error_code for e in events] == [code]  # nothing from a failed attempt
    if "Retry-After" in name:  # the server saw the retry no sooner than it asked
        first, second = provider.requests
        assert second.received_at - first.received_at >= 0.9


async def test_connection_refused_is_retried_then_unavailable(client: httpx.AsyncClient
                                                              ) -> None:
    async with FakeProvider() as fake:
        url = fake.base_url
    model = OpenAIChatModel("m", base_url=url, http_client=client, settings=FAST)
    with pytest.raises(ProviderUnavailable):
        await responses(model)


async def test_non_retryable_status_raises_model_http_error(provider: FakeProvider,
                                                             client: httpx.AsyncClient) -> None:
    provider.enqueue(err("openai", 401))
    with pytest.raises(ModelHTTPError) as info:
        await responses(make_model("openai", provider, client))
    assert info.value.status_code == 401 and not info.value.retryable


# -- cuts after the first chunk: exactly one attempt, nothing stored ---------------------------

def cut_cases(fmt: str) -> dict[str, list[bytes | Any]]:
    events = render(fmt, ["Hello ", "wörld ", "ägain ", "and more"])
    first = 3 if fmt == "openai" else 5  # events up to and including the second text delta
    terminal = "[DONE]" if fmt == "openai" else "message_stop"
    without_terminal = [e for e in events if terminal.encode() not in e]
    call_events = (render_openai(tool_calls=[{"id": "c1", "name": "charge", "arguments":
                                              '{"amount": 125, "note": "x"}', "fragments": 5}])
                   if fmt == "openai" else
                   render_anthropic(tool_calls=[{"id": "c1", "name": "charge", "arguments":
                                                 '{"amount": 125, "note": "x"}',
                                                 "fragments": 5}]))
    call_cut = [e for e in call_events if b"amount" not in e or b'"{' in e][:first + 1]
    return {
        "reset": [*events[:first], Reset()],
        "fin without terminator": [*events[:first], Close()],
        "missing terminal marker": [e for e in without_terminal
                                    if b'"finish_reason":"' not in e.replace(b" ", b"")
                                    and b"message_delta" not in e],
        "cut inside a utf-8 character": [*cut_inside_utf8(events, first), Close()],
        "cut inside tool-call json": [*call_cut, Close()],
    }


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", ["reset", "fin without terminator", "missing terminal marker",
                                  "cut inside a utf-8 character", "cut inside tool-call json"])
async def test_cut_after_first_chunk(fmt: str, case: str, provider: FakeProvider,
                                     client: httpx.AsyncClient) -> None:
    body = cut_cases(fmt)[case]
    ran: list[int] = []

    def charge(amount: int, note: str) -> str:
        ran.append(amount)
        return "charged"

    provider.enqueue(Scenario(body=body), ok(fmt))
    runner, sid = await runner_for(make_model(fmt, provider, client), [charge])
    events = await run_turn(runner, sid)
    assert len(provider.requests) == 1
    assert events[-1].error_code == "provider_truncated"
    assert all(e.partial for e in events[:-1])
    shown = {"missing terminal marker": "Hello wörld ägain and more",
             "cut inside tool-call json": ""}.get(case, "Hello wörld ")
    # The deltas received before the cut, however the network grouped them.
    assert "".join(e.text for e in events[:-1]) == shown
    assert ran == []
    history = await stored(runner, sid)
    assert [(e.author, e.text, e.error_code) for e in history] == [
        ("user", "go", None), ("bot", "", "provider_truncated")]
    again = await run_turn(runner, sid)
    assert again[-1].text == "fine"


# -- deadlines ---------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", FORMATS)
async def test_stall_after_headers_is_an_idle_timeout(fmt: str, provider: FakeProvider,
                                                     client: httpx.AsyncClient) -> None:
    settings = FAST.model_copy(update={"model_idle_timeout": 0.5})
    provider.enqueue(Scenario(body=[*render(fmt, ["one "])[:2], Stall()]))
    with pytest.raises(ProviderTimeout, match="idle"):
        await responses(make_model(fmt, provider, client, settings))
    record = await provider.wait_closed(0, timeout=5.0)
    assert record.close_kind in ("client_fin", "client_rst")


@pytest.mark.parametrize("fmt", FORMATS)
async def test_trickled_comments_end_at_the_total_deadline(fmt: str, provider: FakeProvider,
                                                          client: httpx.AsyncClient) -> None:
    settings = FAST.model_copy(update={"model_idle_timeout": 0.3, "model_total_timeout": 1.0})
    provider.enqueue(Scenario(body=[Trickle(b": keep-alive\n", every=0.05, forever=True)]))
    with pytest.raises(ProviderTimeout, match="deadline"):
        await responses(make_model(fmt, provider, client, settings))
    record = await provider.wait_closed(0, timeout=5.0)
    assert record.close_kind in ("client_fin", "client_rst")


# -- cancel ------------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", FORMATS)
async def test_closing_the_stream_closes_the_connection(
        fmt: str, provider: FakeProvider, client: httpx.AsyncClient) -> None:
    # How soon the server sees it is benchmark A3 (benchmarks/adapters.py).
    events = render(fmt, ["a ", "b ", "c "])
    provider.enqueue(Scenario(body=[*events[:4], Stall()]))
    model = make_model(fmt, provider, client)
    async with aclosing(model.generate_content(REQUEST, stream=True)) as stream:
        async for response in stream:
            assert response.partial
            break
    record = await provider.wait_closed(0, timeout=5.0)  # the client pool keeps it otherwise
    assert record.close_kind in ("client_fin", "client_rst")


async def test_runner_break_closes_the_provider_connection(provider: FakeProvider,
                                                           client: httpx.AsyncClient) -> None:
    provider.enqueue(Scenario(body=[*render("openai", ["a ", "b "])[:3], Stall()]))
    runner, sid = await runner_for(make_model("openai", provider, client))
    async with aclosing(runner.run_async(user_id="u", session_id=sid, new_message="go",
                                         run_config=RunConfig(
                                             streaming_mode=StreamingMode.SSE))) as stream:
        async for event in stream:
            if event.partial:
                break
    record = await provider.wait_closed(0, timeout=1.0)
    assert record.close_kind in ("client_fin", "client_rst")


# -- a multi-turn tool conversation is a valid history for the provider -----------------------

@pytest.mark.parametrize("fmt", FORMATS)
async def test_tool_turn_history_is_accepted(fmt: str, provider: FakeProvider,
                                             client: httpx.AsyncClient) -> None:
    def lookup_order(order_id: str) -> dict[str, str]:
        """Find an order."""
        return {"status": "shipped"}

    call = {"id": "call_1", "name": "lookup_order", "arguments": '{"order_id": "1042"}',
            "fragments": 4}
    first = (render_openai(tool_calls=[call], finish_reason="tool_calls") if fmt == "openai"
             else render_anthropic(tool_calls=[call], stop_reason="tool_use"))
    provider.enqueue(Scenario(body=first), Scenario(body=render(fmt, ["Shipped."])),
                     Scenario(body=render(fmt, ["Anything else?"])))
    runner, sid = await runner_for(make_model(fmt, provider, client), [lookup_order])
    events = await run_turn(runner, sid)
    assert events[-1].text == "Shipped."
    events = await run_turn(runner, sid)
    assert events[-1].text == "Anything else?"  # a 400 would have been an error event
    body = provider.requests[2].json()
    if fmt == "openai":
        assert [m["role"] for m in body["messages"]] == ["user", "assistant", "tool",
                                                         "assistant", "user"]
        assert body["tools"][0]["function"]["name"] == "lookup_order"
    else:
        assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user",
                                                         "assistant", "user"]
        assert body["messages"][2]["content"][0]["type"] == "tool_result"
        assert body["tools"][0]["input_schema"]["properties"]["order_id"]["type"] == "string"


async def test_provider_rejects_an_invalid_history(provider: FakeProvider,
                                                   client: httpx.AsyncClient) -> None:
    from headwater.types import FunctionCall, Part
    bad = LlmRequest(contents=[Content.from_text("hi"), Content("model", [Part(
        function_call=FunctionCall("dangling", "f", {}))]), Content.from_text("again")])
    provider.enqueue(ok("openai"))
    with pytest.raises(ModelHTTPError) as info:
        [r async for r in make_model("openai", provider, client).generate_content(bad, True)]
    assert info.value.status_code == 400
    assert provider.pending == 1


# -- helpers -----------------------------------------------------------------------------------

async def runner_for(model: BaseLlm, tools: list[Any] | None = None
                     ) -> tuple[Runner, str]:
    runner = Runner(agent=Agent(name="bot", model=model, tools=tools or []), app_name="app")
    session = await runner.session_service.create_session(app_name="app", user_id="u")
    return runner, session.id


async def run_turn(runner: Runner, sid: str) -> list[Event]:
    return [e async for e in runner.run_async(
        user_id="u", session_id=sid, new_message="go",
        run_config=RunConfig(streaming_mode=StreamingMode.SSE))]


async def stored(runner: Runner, sid: str) -> list[Event]:
    session = await runner.session_service.get_session(app_name="app", user_id="u",
                                                       session_id=sid)
    assert session is not None
    return session.events
