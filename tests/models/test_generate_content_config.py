"""``GenerateContentConfig`` (genai's names) on every adapter's real request, over loopback.

Each HTTP adapter sends one call to FakeProvider and the request body it wrote is
read back; the live adapters' setup messages are read from FakeLiveProvider.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import httpx
import pytest
from pydantic import BaseModel

from headwater import Agent, Runner, types
from headwater.models import LlmRequest
from headwater.models.anthropic import AnthropicModel
from headwater.models.gemini import GeminiModel
from headwater.models.gemini_live import GeminiLiveModel
from headwater.models.generation import (
    ANTHROPIC,
    CHAT_COMPLETIONS,
    ConfigMapping,
    anthropic_budget,
    effort,
)
from headwater.models.openai import OpenAIChatModel
from headwater.models.openai_realtime import OpenAIRealtimeModel
from headwater.models.openai_responses import OpenAIResponsesModel
from headwater.sessions import InMemorySessionService
from headwater.settings import Settings
from headwater.testing import (
    FakeLiveProvider,
    FakeProvider,
    Scenario,
    ScriptedModel,
    render_anthropic,
    render_gemini,
    render_openai,
    render_openai_responses,
    wait_until,
)
from headwater.types import Content

FAST = Settings(model_backoff_initial=0.01, model_backoff_max=0.02, model_idle_timeout=5,
                model_total_timeout=20, anthropic_max_tokens=4096)

CONFIG = types.GenerateContentConfig(
    temperature=0.2, top_p=0.9, top_k=40, max_output_tokens=512, stop_sequences=["END"],
    seed=7, presence_penalty=0.1, frequency_penalty=0.3, candidate_count=1,
    safety_settings=[types.SafetySetting(
        category=types.HarmCategory.HARM_CATEGORY_DANGEROUS_CONTENT,
        threshold=types.HarmBlockThreshold.BLOCK_ONLY_HIGH)],
    thinking_config=types.ThinkingConfig(include_thoughts=True, thinking_budget=2048),
    labels={"team": "docs"},
)


def request(config: types.GenerateContentConfig | None = CONFIG,
            raw: dict[str, Any] | None = None) -> LlmRequest:
    return LlmRequest(contents=[Content.from_text("hello")], generate_content_config=config,
                      config=dict(raw or {}))


async def body_of(adapter: str, provider: FakeProvider, client: httpx.AsyncClient,
                  req: LlmRequest, model: str = "") -> dict[str, Any]:  # raw wire JSON
    """The JSON body ``adapter`` sends for ``req``."""
    root = f"{provider.base_url}/v1"
    kw: dict[str, Any] = {"api_key": "k", "http_client": client, "settings": FAST}
    built: Any
    if adapter == "chat":
        provider.enqueue(Scenario(body=render_openai(text=["hi"])))
        built = OpenAIChatModel(model or "gpt-4o", base_url=root, **kw)
    elif adapter == "responses":
        provider.enqueue(Scenario(body=render_openai_responses(text=["hi"])))
        built = OpenAIResponsesModel(model or "gpt-4o", base_url=root, **kw)
    elif adapter == "anthropic":
        provider.enqueue(Scenario(body=render_anthropic(text=["hi"])))
        built = AnthropicModel(model or "claude-test", base_url=provider.base_url, **kw)
    else:
        provider.enqueue(Scenario(body=render_gemini(text=["hi"])))
        built = GeminiModel(model or "gemini-2.5-flash", base_url=root, **kw)
    [r async for r in built.generate_content(req, stream=True)]
    body: dict[str, Any] = provider.requests[-1].json()
    return body


async def test_chat_completions_takes_its_fields(provider: FakeProvider,
                                                 client: httpx.AsyncClient) -> None:
    body = await body_of("chat", provider, client, request())
    assert {k: body[k] for k in ("temperature", "top_p", "max_tokens", "stop", "seed",
                                 "presence_penalty", "frequency_penalty", "n",
                                 "reasoning_effort")} == {
        "temperature": 0.2, "top_p": 0.9, "max_tokens": 512, "stop": ["END"], "seed": 7,
        "presence_penalty": 0.1, "frequency_penalty": 0.3, "n": 1, "reasoning_effort": "medium"}
    for dropped in ("top_k", "safety_settings", "safetySettings", "labels", "thinking_config"):
        assert dropped not in body
    # OpenAI's reasoning models take the newer name of the limit.
    body = await body_of("chat", provider, client, request(), model="o3-mini")
    assert body["max_completion_tokens"] == 512 and "max_tokens" not in body


async def test_responses_takes_its_fields(provider: FakeProvider,
                                          client: httpx.AsyncClient) -> None:
    body = await body_of("responses", provider, client, request())
    assert body["temperature"] == 0.2 and body["top_p"] == 0.9
    assert body["max_output_tokens"] == 512
    assert body["reasoning"] == {"effort": "medium", "summary": "auto"}
    for dropped in ("stop", "seed", "top_k", "n", "safetySettings", "labels"):
        assert dropped not in body


async def test_anthropic_takes_its_fields(provider: FakeProvider,
                                          client: httpx.AsyncClient) -> None:
    body = await body_of("anthropic", provider, client, request())
    assert {k: body[k] for k in ("temperature", "top_p", "top_k", "max_tokens",
                                 "stop_sequences", "thinking")} == {
        "temperature": 0.2, "top_p": 0.9, "top_k": 40, "max_tokens": 512,
        "stop_sequences": ["END"], "thinking": {"type": "enabled", "budget_tokens": 2048}}
    assert isinstance(body["top_k"], int)
    for dropped in ("seed", "presence_penalty", "safetySettings", "labels"):
        assert dropped not in body


async def test_anthropic_thinking_without_a_limit_keeps_the_answers_room(
        provider: FakeProvider, client: httpx.AsyncClient) -> None:
    thinking = types.GenerateContentConfig(
        thinking_config=types.ThinkingConfig(thinking_budget=8000))
    body = await body_of("anthropic", provider, client, request(thinking))
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 8000}
    assert body["max_tokens"] == 8000 + 4096  # the budget must stay below max_tokens
    off = types.GenerateContentConfig(thinking_config=types.ThinkingConfig(thinking_budget=0))
    body = await body_of("anthropic", provider, client, request(off))
    assert body["thinking"] == {"type": "disabled"} and body["max_tokens"] == 4096


async def test_gemini_takes_every_field_in_its_place(provider: FakeProvider,
                                                     client: httpx.AsyncClient) -> None:
    body = await body_of("gemini", provider, client, request())
    assert body["generationConfig"] == {
        "temperature": 0.2, "topP": 0.9, "topK": 40.0, "candidateCount": 1,
        "maxOutputTokens": 512, "stopSequences": ["END"], "presencePenalty": 0.1,
        "frequencyPenalty": 0.3, "seed": 7,
        "thinkingConfig": {"includeThoughts": True, "thinkingBudget": 2048}}
    assert body["safetySettings"] == [{"category": "HARM_CATEGORY_DANGEROUS_CONTENT",
                                       "threshold": "BLOCK_ONLY_HIGH"}]
    assert body["labels"] == {"team": "docs"}


@pytest.mark.parametrize("adapter", ["chat", "responses", "anthropic", "gemini"])
async def test_generate_config_wins_over_the_mapped_fields(
        adapter: str, provider: FakeProvider, client: httpx.AsyncClient) -> None:
    raw = {"temperature": 0.9} if adapter != "gemini" else {"generationConfig": {
        "temperature": 0.9}}
    body = await body_of(adapter, provider, client, request(raw=raw))
    sent = body["generationConfig"] if adapter == "gemini" else body
    assert sent["temperature"] == 0.9


@pytest.mark.parametrize("adapter", ["chat", "responses", "anthropic", "gemini"])
async def test_without_a_config_the_body_is_unchanged(
        adapter: str, provider: FakeProvider, client: httpx.AsyncClient) -> None:
    body = await body_of(adapter, provider, client, request(None))
    assert not {"temperature", "generationConfig", "thinking", "reasoning",
                "reasoning_effort"} & set(body)


@pytest.mark.parametrize(("mime", "schema", "chat", "responses", "gemini"), [
    ("application/json", None, {"response_format": {"type": "json_object"}},
     {"text": {"format": {"type": "json_object"}}}, {"responseMimeType": "application/json"}),
    (None, {"type": "object"}, {"response_format": {"type": "json_schema", "json_schema": {
        "name": "response", "schema": {"type": "object"}}}},
     {"text": {"format": {"type": "json_schema", "name": "response",
                          "schema": {"type": "object"}}}},
     {"responseJsonSchema": {"type": "object"}}),
])
async def test_json_output(mime: str | None, schema: Any, chat: dict[str, Any],
                           responses: dict[str, Any], gemini: dict[str, Any],
                           provider: FakeProvider, client: httpx.AsyncClient) -> None:
    config = types.GenerateContentConfig(response_mime_type=mime, response_json_schema=schema)
    for adapter, expected in (("chat", chat), ("responses", responses)):
        body = await body_of(adapter, provider, client, request(config))
        assert {k: body[k] for k in expected} == expected
    body = await body_of("gemini", provider, client, request(config))
    assert body["generationConfig"] == gemini


def test_a_pydantic_response_schema_is_described_as_json_schema() -> None:
    class Answer(BaseModel):
        city: str

    fields = CHAT_COMPLETIONS.fields(types.GenerateContentConfig(response_schema=Answer))
    schema = fields["response_format"]["json_schema"]["schema"]
    assert schema["properties"] == {"city": {"title": "City", "type": "string"}}


@pytest.mark.parametrize(("thinking", "expected"), [
    ({"thinking_budget": 0}, "minimal"), ({"thinking_budget": 1}, "low"),
    ({"thinking_budget": 1024}, "low"), ({"thinking_budget": 1025}, "medium"),
    ({"thinking_budget": 8192}, "medium"), ({"thinking_budget": 8193}, "high"),
    ({"thinking_budget": -1}, None), ({}, None), ({"thinking_level": "HIGH"}, "high"),
    ({"thinking_level": "low", "thinking_budget": 9000}, "low"),
])
def test_a_thinking_budget_becomes_an_openai_effort(thinking: dict[str, Any],
                                                    expected: str | None) -> None:
    assert effort(types.ThinkingConfig(**thinking)) == expected


@pytest.mark.parametrize(("thinking", "expected"), [
    ({"thinking_budget": 0}, 0), ({"thinking_budget": 100}, 1024),
    ({"thinking_budget": 5000}, 5000), ({"thinking_budget": -1}, None), ({}, None),
    ({"thinking_level": "MEDIUM"}, 8192), ({"thinking_level": "HIGH"}, 24576),
])
def test_a_thinking_setting_becomes_an_anthropic_budget(thinking: dict[str, Any],
                                                        expected: int | None) -> None:
    assert anthropic_budget(types.ThinkingConfig(**thinking)) == expected


def test_a_dropped_field_is_logged_once_per_field(caplog: pytest.LogCaptureFixture) -> None:
    mapping = ConfigMapping("Example", {"temperature": "temperature"})
    config = types.GenerateContentConfig(temperature=0.5, seed=1, top_k=3)
    with caplog.at_level(logging.DEBUG, logger="headwater.models.generation"):
        assert mapping.fields(config) == {"temperature": 0.5}
        assert mapping.fields(config) == {"temperature": 0.5}
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["generate_content_config.top_k has no Example equivalent: not sent",
                     "generate_content_config.seed has no Example equivalent: not sent"]
    assert all(r.levelno == logging.DEBUG for r in caplog.records)


def test_anthropic_notes_what_it_cannot_send(caplog: pytest.LogCaptureFixture) -> None:
    config = types.GenerateContentConfig(
        seed=3, thinking_config=types.ThinkingConfig(include_thoughts=True, thinking_budget=-1))
    with caplog.at_level(logging.DEBUG, logger="headwater.models.generation"):
        for _ in range(2):
            assert ANTHROPIC.fields(config) == {}
    said = [r.getMessage() for r in caplog.records]
    for name in ("seed", "thinking_config.include_thoughts",
                 "thinking_config.thinking_budget=-1"):
        assert said.count(f"generate_content_config.{name} has no Anthropic Messages "
                          "equivalent: not sent") <= 1
    assert len(said) == len(set(said))


# -- the live adapters ----------------------------------------------------------------------------

async def _first_message(model: Any, fake: FakeLiveProvider, req: LlmRequest) -> dict[str, Any]:
    conn = model.connect(req)

    async def read() -> None:
        async for _ in conn.receive():
            pass

    reader = asyncio.create_task(read())
    await wait_until(lambda: len(fake.sessions) == 1 and len(fake.sessions[0].received) > 0)
    await conn.close()
    await reader
    message: dict[str, Any] = fake.sessions[0].received[0]
    return message


async def test_gemini_live_setup_takes_the_generation_fields() -> None:
    async with FakeLiveProvider() as fake:
        model = GeminiLiveModel("gemini-live-test", base_url=fake.gemini_base_url,
                                api_key="test-key")
        setup = (await _first_message(model, fake, request()))["setup"]
    assert setup["generationConfig"] == {
        "responseModalities": ["TEXT"], "temperature": 0.2, "topP": 0.9, "topK": 40.0,
        "candidateCount": 1, "maxOutputTokens": 512, "presencePenalty": 0.1,
        "frequencyPenalty": 0.3, "seed": 7,
        "thinkingConfig": {"includeThoughts": True, "thinkingBudget": 2048}}
    assert "safetySettings" not in setup


async def test_openai_realtime_session_takes_the_output_limit() -> None:
    async with FakeLiveProvider() as fake:
        model = OpenAIRealtimeModel("gpt-realtime-test", base_url=fake.openai_base_url,
                                    api_key="test-key")
        session = (await _first_message(model, fake, request()))["session"]
    assert session["max_output_tokens"] == 512
    assert not {"temperature", "top_p", "seed", "reasoning_effort"} & set(session)


# -- from the agent to the request ----------------------------------------------------------------

async def test_the_agents_config_reaches_each_request() -> None:
    model = ScriptedModel().reply("one").reply("two")
    agent = Agent(name="a", model=model, generate_content_config={"temperature": 0.1},
                  generate_config={"user": "x"})
    runner = Runner(agent=agent, app_name="app", session_service=InMemorySessionService())
    session = await runner.create_session(user_id="u")
    for text in ("hi", "again"):
        async with runner.run_async(user_id="u", session_id=session.id,
                                    new_message=text) as events:
            [e async for e in events]
    assert [r.generate_content_config for r in model.requests] == [
        types.GenerateContentConfig(temperature=0.1)] * 2
    assert all(r.config == {"user": "x"} for r in model.requests)


async def test_an_emulated_live_session_sends_the_config_with_every_turn() -> None:
    model = ScriptedModel().reply("one").reply("two")
    conn = model.connect(request())
    seen: list[Any] = []

    async def read() -> None:
        async for response in conn.receive():
            seen.append(response)

    reader = asyncio.create_task(read())
    try:
        for n, text in enumerate(("hi", "again"), start=1):
            await conn.send_content(Content.from_text(text))
            await wait_until(lambda n=n: sum(1 for r in seen if not r.partial) == n)
    finally:
        await conn.close()
        await reader
    assert [r.generate_content_config for r in model.requests] == [CONFIG, CONFIG]
