"""Adapters under hostile or unlucky providers: Retry-After, wrong-shaped JSON, secrets, reuse."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from headwater import Agent, Event, RunConfig, Runner, StreamingMode
from headwater.errors import ModelHTTPError
from headwater.models import BaseLlm, LlmRequest
from headwater.models._http import PooledTransport, backoff_delay, redact
from headwater.models.anthropic import AnthropicModel
from headwater.models.openai import OpenAIChatModel
from headwater.settings import Settings
from headwater.testing import FakeProvider, Scenario, render_anthropic, render_openai
from headwater.types import Content

FAST = Settings(model_backoff_initial=0.01, model_backoff_max=0.02, model_idle_timeout=5,
                model_total_timeout=20)
FORMATS = ["openai", "anthropic"]
REQUEST = LlmRequest(contents=[Content.from_text("hello")])


def make_model(fmt: str, base_url: str, client: httpx.AsyncClient | None,
               settings: Settings = FAST, api_key: str = "sk-test"
               ) -> OpenAIChatModel | AnthropicModel:
    if fmt == "openai":
        return OpenAIChatModel("gpt-4o-mini", base_url=f"{base_url}/v1", api_key=api_key,
                               http_client=client, settings=settings)
    return AnthropicModel("claude-test", base_url=base_url, api_key=api_key,
                          http_client=client, settings=settings)


def render(fmt: str, text: list[str], **kw: Any) -> list[bytes]:
    return render_openai(text=text, **kw) if fmt == "openai" else render_anthropic(text=text, **kw)


async def runner_for(model: BaseLlm) -> tuple[Runner, str]:
    runner = Runner(agent=Agent(name="bot", model=model), app_name="app")
    session = await runner.session_service.create_session(app_name="app", user_id="u")
    return runner, session.id


async def run_turn(runner: Runner, sid: str) -> list[Event]:
    async with runner.run_async(user_id="u", session_id=sid, new_message="go",
                                run_config=RunConfig(streaming_mode=StreamingMode.SSE)
                                ) as stream:
        return [e async for e in stream]


async def stored(runner: Runner, sid: str) -> list[Event]:
    session = await runner.session_service.get_session(app_name="app", user_id="u",
                                                       session_id=sid)
    assert session is not None
    return session.events


# -- Retry-After and backoff --------------------------------------------------------------------

@pytest.mark.parametrize("fmt", FORMATS)
async def test_retry_after_beyond_the_cap_ends_the_call_with_the_delay(
        fmt: str, provider: FakeProvider, client: httpx.AsyncClient) -> None:
    provider.enqueue(Scenario.error(429, "slow down", headers={"retry-after": "3600"},
                                    format=fmt))
    model = make_model(fmt, provider.base_url, client)
    with pytest.raises(ModelHTTPError) as info:
        async for _ in model.generate_content(REQUEST, stream=True):
            pass
    assert info.value.retryable and info.value.retry_after == 3600
    assert info.value.code == "provider_unavailable"
    assert len(provider.requests) == 1  # not clamped to the cap and retried
    provider.enqueue(Scenario.error(429, "slow down", headers={"retry-after": "3600"},
                                    format=fmt))
    runner, sid = await runner_for(model)
    (event,) = await run_turn(runner, sid)
    assert event.error_code == "provider_unavailable"
    assert "Retry after 3600 s" in (event.error_message or "")  # the delay reaches the caller
    assert (await stored(runner, sid))[-1].id == event.id


async def test_retry_after_within_the_cap_is_retried(provider: FakeProvider,
                                                     client: httpx.AsyncClient) -> None:
    provider.enqueue(Scenario.error(503, headers={"retry-after-ms": "10"}),
                     Scenario(body=render("openai", ["fine"])))
    runner, sid = await runner_for(make_model("openai", provider.base_url, client))
    events = await run_turn(runner, sid)
    assert events[-1].text == "fine" and len(provider.requests) == 2


def test_backoff_is_drawn_from_the_top_quarter_of_its_ceiling() -> None:
    settings = Settings(model_backoff_initial=0.5, model_backoff_max=8.0)
    for attempt, ceiling in [(1, 0.5), (2, 1.0), (3, 2.0), (5, 8.0), (9, 8.0)]:
        delays = [backoff_delay(attempt, settings) for _ in range(500)]
        assert all(0.75 * ceiling <= d <= ceiling for d in delays)
        assert max(delays) - min(delays) > 0.1 * ceiling  # still jittered


# -- the provider's words never leave (except to DEBUG, redacted) ---------------------------

CANARY = "sk-canary-7f3a9c2e1b"


def canary_scenarios(fmt: str) -> list[tuple[str, list[Scenario]]]:
    echo = f"Incorrect API key provided: {CANARY}. Authorization: Bearer {CANARY}"
    in_band = {"type": "invalid_request_error", "message": echo}
    return [
        ("401 body", [Scenario.error(401, echo, format=fmt)]),
        ("500 body x3", [Scenario.error(500, echo, format=fmt)] * 3),
        ("in-band before content", [Scenario(body=render(
            fmt, [], error=in_band,
            **({"done": False} if fmt == "openai" else {"message_stop": False})))]),
        ("in-band after content", [Scenario(body=render(
            fmt, ["partial answer"], error=in_band,
            **({"done": False} if fmt == "openai" else {"message_stop": False})))]),
    ]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", range(4), ids=["401", "500x3", "inband-before", "inband-after"])
async def test_a_canary_in_a_provider_error_never_reaches_events_store_or_info_logs(
        fmt: str, case: int, provider: FakeProvider, client: httpx.AsyncClient,
        caplog: pytest.LogCaptureFixture) -> None:
    _, scenarios = canary_scenarios(fmt)[case]
    provider.enqueue(*scenarios)
    caplog.set_level("DEBUG")
    runner, sid = await runner_for(make_model(fmt, provider.base_url, client, api_key=CANARY))
    events = await run_turn(runner, sid)
    history = await stored(runner, sid)
    error = events[-1]
    assert error.error_code is not None and error.error_message
    assert error in history or any(e.id == error.id for e in history)  # stored like any event
    for event in [*events, *history]:
        assert CANARY not in repr(event)
    for record in caplog.records:
        text = record.getMessage() + (record.exc_text or "")
        assert CANARY not in text, (record.levelname, text)
    debug = [r.getMessage() for r in caplog.records if r.levelname == "DEBUG"
             and r.name == "headwater.models"]
    assert any("[redacted]" in line for line in debug)  # the body went to DEBUG, redacted


# -- a failed call says where and why in the log ------------------------------------------------

async def test_an_unreachable_provider_is_logged_with_its_host_and_cause(
        caplog: pytest.LogCaptureFixture) -> None:
    import socket

    with socket.socket() as probe:  # a port nobody listens on: connection refused
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    model = make_model("openai", f"http://127.0.0.1:{port}", None,
                       FAST.model_copy(update={"model_max_attempts": 2}), api_key=CANARY)
    caplog.set_level("WARNING", logger="headwater.models")
    async with model:
        runner, sid = await runner_for(model)
        (event,) = await run_turn(runner, sid)
    assert event.error_code == "provider_unavailable"
    [line] = [r.getMessage() for r in caplog.records if r.name == "headwater.models"]
    assert line.startswith(f"openai: the call to 127.0.0.1:{port} failed (provider_unavailable) "
                           "after 2 attempts: ")
    assert "; cause: ConnectError" in line and CANARY not in line


@pytest.mark.parametrize("fmt", FORMATS)
async def test_an_http_error_is_logged_with_its_host_and_status_never_its_body(
        fmt: str, provider: FakeProvider, client: httpx.AsyncClient,
        caplog: pytest.LogCaptureFixture) -> None:
    provider.enqueue(*canary_scenarios(fmt)[0][1])  # 401, the key echoed in the body
    caplog.set_level("WARNING", logger="headwater.models")
    runner, sid = await runner_for(make_model(fmt, provider.base_url, client, api_key=CANARY))
    await run_turn(runner, sid)
    [line] = [r.getMessage() for r in caplog.records if r.name == "headwater.models"]
    host = provider.base_url.removeprefix("http://")
    assert f"the call to {host} failed (" in line and "HTTP 401" in line
    assert CANARY not in line and "Incorrect API key" not in line


# -- connections are reused ---------------------------------------------------------------------

@pytest.mark.parametrize("fmt", FORMATS)
async def test_twenty_sequential_model_calls_use_one_connection(fmt: str,
                                                                provider: FakeProvider) -> None:
    for n in range(20):
        provider.enqueue(Scenario(body=render(fmt, [f"answer {n}"]), check_history=False))
    async with make_model(fmt, provider.base_url, None) as model:  # the model's own client
        runner, sid = await runner_for(model)
        for n in range(20):
            events = await run_turn(runner, sid)
            assert events[-1].text == f"answer {n}"
    assert len(provider.requests) == 20
    assert len(provider.connections) == 1


@pytest.mark.parametrize("fmt", FORMATS)
async def test_a_stream_closed_early_still_closes_its_connection(
        fmt: str, provider: FakeProvider) -> None:
    provider.enqueue(Scenario(body=render(fmt, ["one ", "two ", "three"]), check_history=False),
                     Scenario(body=render(fmt, ["again"]), check_history=False))
    async with make_model(fmt, provider.base_url, None) as model:
        runner, sid = await runner_for(model)
        async with runner.run_async(user_id="u", session_id=sid, new_message="go",
                                    run_config=RunConfig(streaming_mode=StreamingMode.SSE)
                                    ) as stream:
            async for event in stream:
                if event.partial:
                    break
        record = await provider.wait_closed(0, timeout=5)
        assert record.close_kind == "client_fin"
        assert (await run_turn(runner, sid))[-1].text == "again"
    assert len(provider.connections) == 2


@pytest.mark.parametrize("text", [
    "Incorrect API key provided: sk-proj-abc123XYZ_9. See the docs.",
    "api_key=hunter2-secret",
    '{"x-api-key": "hunter2-secret"}',
    "Authorization: Bearer hunter2-secret",
    "token: hunter2-secret",
])
def test_redact_removes_credential_shaped_strings(text: str) -> None:
    cleaned = redact(text)
    assert "hunter2" not in cleaned and "abc123" not in cleaned and "[redacted]" in cleaned
    assert redact("tokens used: 5; the api key is wrong") == "tokens used: 5; the api key is wrong"


async def test_the_default_transport_fills_one_pool_then_spreads() -> None:
    transport = PooledTransport(pools=3, max_connections=96)
    seen: list[int] = []

    def mock(index: int) -> httpx.MockTransport:
        async def body() -> AsyncIterator[bytes]:
            yield b"ok"

        def answer(request: httpx.Request) -> httpx.Response:
            seen.append(index)
            return httpx.Response(200, content=body())  # streamed, as a provider's is
        return httpx.MockTransport(answer)

    transport._pools = [mock(i) for i in range(3)]  # type: ignore[assignment]
    async with httpx.AsyncClient(transport=transport) as client:
        for _ in range(5):  # one after another: always the first pool (its connection reused)
            assert (await client.get("http://x/")).status_code == 200
        assert seen == [0] * 5
        seen.clear()
        held = [await client.send(client.build_request("GET", "http://x/"), stream=True)
                for _ in range(40)]  # open bodies hold their pool's slots
        assert seen == [0] * 16 + [1] * 16 + [2] * 8
        for response in held:
            await response.aclose()
        seen.clear()
        await client.get("http://x/")
        assert seen == [0]  # every slot came back
