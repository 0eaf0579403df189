"""GeminiModel against FakeProvider: recorded streams, requests, retries, cuts, cancel, a run."""

from __future__ import annotations

import base64
import itertools
import json
import tomllib
from contextlib import aclosing
from importlib import import_module
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headwater import Agent, Event, RunConfig, Runner, StreamingMode
from headwater.errors import (
    InBandError,
    MalformedChunk,
    ModelHTTPError,
    ProviderTimeout,
    ProviderTruncated,
    ToolCallAssemblyError,
    UserError,
)
from headwater.models import LlmRequest, LlmResponse
from headwater.models.gemini import (
    SKIP_SIGNATURE,
    GeminiModel,
    from_spec,
    google_retry_delay,
    vertex_base_url,
    vertex_from_spec,
)
from headwater.settings import Settings
from headwater.sse import SSEDecoder
from headwater.testing import (
    Close,
    FakeProvider,
    Reset,
    Scenario,
    Stall,
    check_stream_contract,
    render_gemini,
    split_events,
    split_inside_characters,
)
from headwater.types import Blob, Content, FunctionCall, FunctionResponse, Part, ToolDeclaration

ROOT = Path(__file__).parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "provider-streams" / "gemini"
FAST = Settings(model_backoff_initial=0.01, model_backoff_max=0.02, model_idle_timeout=5,
                model_total_timeout=20)
REQUEST = LlmRequest(contents=[Content.from_text("hello")])
STREAM_PATH = "/v1beta/models/{}:streamGenerateContent"


def make_model(provider: FakeProvider, client: httpx.AsyncClient, model: str = "gemini-2.5-flash",
               settings: Settings = FAST) -> GeminiModel:
    return GeminiModel(model, base_url=f"{provider.base_url}/v1beta", api_key="AIza-test-key",
                       http_client=client, settings=settings)


async def responses(model: GeminiModel, request: LlmRequest = REQUEST,
                    stream: bool = True) -> list[LlmResponse]:
    return [r async for r in model.generate_content(request, stream=stream)]


# -- every recorded stream, aggregated exactly -------------------------------------------------

def fixtures() -> list[Any]:
    return [pytest.param(sse, id=sse.stem) for sse in sorted(FIXTURES.glob("*.sse"))]


def load(sse: Path) -> tuple[bytes, dict[str, Any]]:
    return sse.read_bytes(), json.loads(sse.with_suffix(".json").read_text())


CUT_SHORT = {"MAX_TOKENS", "SAFETY", "MALFORMED_FUNCTION_CALL", "RECITATION"}


@pytest.mark.parametrize("sse", fixtures())
@pytest.mark.parametrize("reads", ["utf8-and-crlf-cuts", "one-event-per-read"])
async def test_recorded_stream_through_the_adapter(sse: Path, reads: str, provider: FakeProvider,
                                                   client: httpx.AsyncClient) -> None:
    body, sidecar = load(sse)
    expected = sidecar["expected"]
    assert sidecar["sha256"] and (sidecar.get("source") or "synthesized" in sidecar["provenance"])
    pieces = split_inside_characters(body) if reads != "one-event-per-read" else split_events(body)
    provider.enqueue(Scenario(body=pieces))
    if expected["errors"]:
        final = check_stream_contract(await responses(make_model(provider, client)))
        assert final.error_code == "provider_error"
        assert final.content is not None and final.content.text == expected["text"]
        assert "overloaded" not in (final.error_message or "").lower()  # no provider text
        return
    final = check_stream_contract(await responses(make_model(provider, client)))
    content = final.content
    assert (content.text if content else "") == expected["text"]
    assert (content.thought_text if content else "") == (expected["reasoning"] or "")
    reason = expected["finish_reason"] or expected["block_reason"]
    assert final.finish_reason == reason
    calls = content.function_calls if content else []
    if reason in CUT_SHORT or expected["block_reason"]:
        assert final.error_code == "provider_error"
        assert reason in (final.error_message or "")
        assert calls == []  # nothing of a cut-short turn may run
    else:
        assert final.error_code is None
        assert [(c.name, c.args) for c in calls] == [
            (c["name"], c["arguments"]) for c in expected["tool_calls"]]
        response_id = json.loads(split_events(body)[0].partition(b"data:")[2])["responseId"]
        assert [c.id for c in calls] == [c["id"] or f"gemini-{response_id}-{n}"
                                         for n, c in enumerate(expected["tool_calls"])]
    raw = (expected["usage"] or {}).get("raw")
    if raw is None:
        assert final.usage is None
    else:
        thoughts = raw.get("thoughtsTokenCount", 0)
        assert final.usage is not None
        assert final.usage.input_tokens == raw["promptTokenCount"]
        assert final.usage.output_tokens == raw.get("candidatesTokenCount", 0) + thoughts
        assert final.usage.total_tokens == raw["totalTokenCount"]
        assert final.usage.reasoning_tokens == thoughts
    signatures = [p.thought_signature for p in (content.parts if content else [])
                  if p.thought_signature]
    if final.error_code is None:
        assert [len(s) for s in signatures] == [s["length"] for s in expected["signatures"]]
    assert len(provider.requests) == 1


async def test_signatures_stay_on_the_parts_they_came_with(provider: FakeProvider,
                                                           client: httpx.AsyncClient) -> None:
    body, _ = load(FIXTURES / "gm02-gemini3pro-tool-call-signature.sse")
    recorded = json.loads(split_events(body)[0][len(b"data: "):])
    signature = recorded["candidates"][0]["content"]["parts"][0]["thoughtSignature"]
    provider.enqueue(Scenario(body=body))
    final = (await responses(make_model(provider, client)))[-1]
    assert final.content is not None
    [part] = final.content.parts
    assert part.function_call is not None and part.thought_signature == signature
    # A signature on a thought part seals that thought part.
    provider.enqueue(Scenario(body=[
        *render_gemini(thoughts=["a", "b"], signature=None, finish_reason=None, usage=None),
        b'data: {"candidates": [{"content": {"parts": [{"text": "", "thought": true, '
        b'"thoughtSignature": "c2ln"}]}}]}\r\n\r\n',
        *render_gemini(text=["answer"], signature="dGV4dA==")]))
    final = (await responses(make_model(provider, client)))[-1]
    assert final.content is not None
    assert [(p.text, p.thought, p.thought_signature) for p in final.content.parts] == [
        ("ab", True, "c2ln"), ("answer", False, "dGV4dA==")]


# -- the request -------------------------------------------------------------------------------

async def test_request_body_headers_and_path(provider: FakeProvider,
                                             client: httpx.AsyncClient) -> None:
    history = [
        Content.from_text("Weather and a picture?"),
        Content("user", [Part(inline_data=Blob("image/png", b"\x89PNG"))]),
        Content("model", [Part(text="thinking", thought=True, thought_signature="dGg="),
                          Part(text="Let me look."),
                          Part(function_call=FunctionCall("c1", "weather", {"city": "Oslo"})),
                          Part(function_call=FunctionCall("c2", "weather", {"city": "Rome"}))]),
        Content("user", [Part(function_response=FunctionResponse("c1", "weather", {"t": 3}))]),
        Content("user", [Part(function_response=FunctionResponse("c2", "weather", {"t": 20}))]),
    ]
    schema = {"type": "object", "properties": {"city": {"type": "string"}},
              "required": ["city"], "$defs": {}}
    request = LlmRequest(system_instruction="Be brief.", contents=history,
                         tools=[ToolDeclaration("weather", "Get weather.", schema),
                                ToolDeclaration("now", "The time.", {})],
                         config={"temperature": 0.2, "maxOutputTokens": 64,
                                 "thinkingConfig": {"includeThoughts": True},
                                 "safetySettings": [{"category": "HARM_CATEGORY_HARASSMENT",
                                                     "threshold": "BLOCK_NONE"}],
                                 "generationConfig": {"topK": 3}})
    provider.enqueue(Scenario(body=render_gemini(text=["ok"])))
    await responses(make_model(provider, client), request)
    sent = provider.requests[0]
    assert sent.path == STREAM_PATH.format("gemini-2.5-flash") and sent.query == "alt=sse"
    assert sent.headers["x-goog-api-key"] == "AIza-test-key"
    assert "authorization" not in sent.headers
    body = sent.json()
    assert body["systemInstruction"] == {"parts": [{"text": "Be brief."}]}
    assert [c["role"] for c in body["contents"]] == ["user", "model", "user"]
    user, model, answers = body["contents"]
    assert user["parts"] == [{"text": "Weather and a picture?"},
                             {"inlineData": {"mimeType": "image/png",
                                             "data": base64.b64encode(b"\x89PNG").decode()}}]
    assert model["parts"] == [
        {"text": "thinking", "thought": True, "thoughtSignature": "dGg="},
        {"text": "Let me look."},
        {"functionCall": {"id": "c1", "name": "weather", "args": {"city": "Oslo"}},
         "thoughtSignature": SKIP_SIGNATURE},
        {"functionCall": {"id": "c2", "name": "weather", "args": {"city": "Rome"}}}]
    assert answers["parts"] == [
        {"functionResponse": {"id": "c1", "name": "weather", "response": {"t": 3}}},
        {"functionResponse": {"id": "c2", "name": "weather", "response": {"t": 20}}}]
    assert body["tools"] == [{"functionDeclarations": [
        {"name": "weather", "description": "Get weather.", "parametersJsonSchema": schema},
        {"name": "now", "description": "The time."}]}]
    assert body["generationConfig"] == {"temperature": 0.2, "maxOutputTokens": 64,
                                        "thinkingConfig": {"includeThoughts": True}, "topK": 3}
    assert body["safetySettings"][0]["threshold"] == "BLOCK_NONE"
    assert "AIza" not in repr(make_model(provider, client))


async def test_vertex_url_and_a_refreshed_bearer_token(provider: FakeProvider,
                                                       client: httpx.AsyncClient) -> None:
    assert vertex_base_url("proj", "europe-west4") == (
        "https://europe-west4-aiplatform.googleapis.com/v1/projects/proj/locations/"
        "europe-west4/publishers/google")
    assert vertex_base_url("proj", "global").startswith("https://aiplatform.googleapis.com/")
    tokens = iter(["ya29.first", "ya29.second"])
    model = GeminiModel("gemini-2.5-pro",
                        base_url=f"{provider.base_url}/v1/projects/p/locations/us-central1/"
                                 "publishers/google",
                        access_token=lambda: next(tokens), http_client=client, settings=FAST)
    provider.enqueue(Scenario.error(503, format="gemini"), Scenario(body=render_gemini(["hi"])))
    final = (await responses(model))[-1]
    assert final.content == Content("model", [Part(text="hi",
                                                   thought_signature="CiQBjz1rX0fakeSignature==")])
    first, second = provider.requests
    assert first.path == ("/v1/projects/p/locations/us-central1/publishers/google/models/"
                          "gemini-2.5-pro:streamGenerateContent")
    assert [first.headers["authorization"], second.headers["authorization"]] == [
        "Bearer ya29.first", "Bearer ya29.second"]
    assert "x-goog-api-key" not in first.headers


# -- retries only before the first chunk, cuts after it ----------------------------------------

@pytest.mark.parametrize(("scenarios", "attempts", "error"), [
    (lambda: [Scenario.error(429, format="gemini", headers={"retry-after": "0"}),
              Scenario(body=render_gemini(["fine"]))], 2, None),
    (lambda: [Scenario.error(503, format="gemini"), Scenario.error(500, format="gemini"),
              Scenario(body=render_gemini(["fine"]))], 3, None),
    (lambda: [Scenario(body=render_gemini([], error={})), Scenario(body=render_gemini(["fine"]))],
     2, None),
    (lambda: [Scenario.error(400, "API key not valid.", format="gemini")], 1, ModelHTTPError),
    (lambda: [Scenario(body=render_gemini([], error={"code": 400, "status": "INVALID_ARGUMENT"}))],
     1, InBandError),
], ids=["429-then-ok", "503-500-then-ok", "inband-503-before-content", "400", "inband-400"])
async def test_retries_before_the_first_chunk(scenarios: Any, attempts: int, error: Any,
                                              provider: FakeProvider,
                                              client: httpx.AsyncClient) -> None:
    provider.enqueue(*scenarios())
    model = make_model(provider, client)
    if error is None:
        out = await responses(model)
        assert [r.content.text for r in out if r.content] == ["fine", "fine"]
    else:
        with pytest.raises(error) as info:
            await responses(model)
        assert "API key" not in str(info.value)
    assert len(provider.requests) == attempts
    assert len({r.body for r in provider.requests}) == 1


async def test_a_429_waits_for_the_retry_delay_in_googles_body(
        provider: FakeProvider, client: httpx.AsyncClient) -> None:
    """Google names the wait in the error's RetryInfo detail, not in a Retry-After header."""
    provider.enqueue(Scenario.error(429, format="gemini", retry_delay="0.4s"),
                     Scenario(body=render_gemini(["fine"])))
    out = await responses(make_model(provider, client))
    assert [r.content.text for r in out if r.content] == ["fine", "fine"]
    first, second = provider.requests
    assert second.received_at - first.received_at >= 0.4


@pytest.mark.parametrize(("body", "delay"), [
    (b'{"error": {"details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", '
     b'"retryDelay": "7s"}]}}', 7.0),
    (b'{"error": {"details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", '
     b'"retryDelay": "0.25s"}]}}', 0.25),
    (b'{"error": {"details": [{"@type": "x", "retryDelay": "7s"}]}}', None),
    (b'{"error": {"details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", '
     b'"retryDelay": 7}]}}', None),
    (b'{"error": {"details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", '
     b'"retryDelay": "-1s"}]}}', None),
    (b'{"error": {"details": "no"}}', None),
    (b"not json", None),
], ids=["7s", "fraction", "other-detail", "number", "negative", "wrong-shape", "not-json"])
def test_the_retry_delay_is_read_only_from_a_well_formed_retry_info(
        body: bytes, delay: float | None) -> None:
    assert google_retry_delay(body) == delay


@pytest.mark.parametrize("end", ["reset", "close", "no-finish"])
async def test_a_cut_after_the_first_chunk_is_final(end: str, provider: FakeProvider,
                                                    client: httpx.AsyncClient) -> None:
    events = render_gemini(text=["Hello ", "wörld ", "again"])
    body: list[Any] = {"reset": [*events[:2], Reset()], "close": [*events[:2], Close()],
                       "no-finish": events[:-1]}[end]
    provider.enqueue(Scenario(body=body), Scenario(body=render_gemini(["fine"])))
    seen: list[LlmResponse] = []
    with pytest.raises(ProviderTruncated):
        async for response in make_model(provider, client).generate_content(REQUEST, True):
            seen.append(response)
    assert all(r.partial for r in seen) and seen
    assert len(provider.requests) == 1


async def test_a_call_whose_streamed_arguments_never_finish_does_not_run(
        provider: FakeProvider, client: httpx.AsyncClient) -> None:
    events = render_gemini(tool_calls=[{"name": "charge", "arguments": {"note": "abcdef"},
                                        "fragments": 3}])
    closing = [e for e in events if b'"functionCall": {}' in e]
    cut = [e for e in events if e not in closing]  # the call never closes, yet STOP arrives
    provider.enqueue(Scenario(body=cut))
    with pytest.raises(ToolCallAssemblyError):
        await responses(make_model(provider, client))


@pytest.mark.parametrize("chunk", [
    b'data: {"candidates": [{"content": {"parts": [{"functionCall": {"partialArgs": []}}]}}]}',
    b'data: {"candidates": [{"content": {"parts": [{"functionCall": {"name": "f", '
    b'"willContinue": true, "partialArgs": [{"jsonPath": "location", "stringValue": "x"}]}}]}}]}',
    b'data: {"candidates": [{"content": {"parts": [{"functionCall": {"name": "f", "partialArgs": '
    b'[{"jsonPath": "$.a", "numberValue": 1}, {"jsonPath": "$.a[0]", "numberValue": 2}]}}]}}]}',
    b'data: {"candidates": [{"content": {"parts": [{"text": 5}]}}]}',
    b'data: {"usageMetadata": {"promptTokenCount": "12"}}',
    b"data: [1, 2]",
], ids=["continues-no-call", "path-not-from-root", "path-crosses-a-number", "text-not-string",
        "count-not-int", "not-an-object"])
async def test_a_chunk_of_the_wrong_shape_fails_clearly(chunk: bytes, provider: FakeProvider,
                                                        client: httpx.AsyncClient) -> None:
    provider.enqueue(Scenario(body=[chunk + b"\r\n\r\n", *render_gemini(["x"])]))
    with pytest.raises(MalformedChunk) as info:
        await responses(make_model(provider, client))
    assert info.value.code == "provider_bad_response"


# -- deadlines and cancel ----------------------------------------------------------------------

async def test_a_stall_is_an_idle_timeout_and_closes_the_connection(
        provider: FakeProvider, client: httpx.AsyncClient) -> None:
    settings = FAST.model_copy(update={"model_idle_timeout": 0.4})
    provider.enqueue(Scenario(body=[*render_gemini(["one "])[:1], Stall()]))
    with pytest.raises(ProviderTimeout, match="idle"):
        await responses(make_model(provider, client, settings=settings))
    record = await provider.wait_closed(0, timeout=5.0)
    assert record.close_kind in ("client_fin", "client_rst")


async def test_closing_the_stream_closes_the_response(provider: FakeProvider,
                                                      client: httpx.AsyncClient) -> None:
    provider.enqueue(Scenario(body=[*render_gemini(["a ", "b "])[:2], Stall()]))
    model = make_model(provider, client)
    async with aclosing(model.generate_content(REQUEST, stream=True)) as stream:
        async for response in stream:
            assert response.partial
            break
    record = await provider.wait_closed(0, timeout=5.0)
    assert record.close_kind in ("client_fin", "client_rst")


# -- in-band errors are error finals -----------------------------------------------------------

@pytest.mark.parametrize(("kwargs", "reason", "text"), [
    ({"text": ["Once upon"], "finish_reason": "MAX_TOKENS"}, "MAX_TOKENS", "Once upon"),
    ({"text": ["Sure: "], "finish_reason": "RECITATION"}, "RECITATION", "Sure: "),
    ({"finish_reason": "SAFETY"}, "SAFETY", ""),
    ({"tool_calls": [{"name": "f"}], "finish_reason": "MALFORMED_FUNCTION_CALL"},
     "MALFORMED_FUNCTION_CALL", ""),
    ({"text": ["x"], "finish_reason": "SOMETHING_NEW"}, "SOMETHING_NEW", "x"),
    ({"block_reason": "PROHIBITED_CONTENT"}, "PROHIBITED_CONTENT", ""),
])
async def test_in_band_stops_are_error_finals(kwargs: dict[str, Any], reason: str, text: str,
                                              provider: FakeProvider,
                                              client: httpx.AsyncClient) -> None:
    provider.enqueue(Scenario(body=render_gemini(**kwargs)))
    final = check_stream_contract(await responses(make_model(provider, client)))
    assert (final.finish_reason, final.error_code) == (reason, "provider_error")
    assert final.error_message is not None and final.error_message.startswith("gemini: ")
    assert (final.content.text if final.content else "") == text
    assert not (final.content and final.content.function_calls)
    assert len(provider.requests) == 1


async def test_usage_is_the_last_cumulative_count_once(provider: FakeProvider,
                                                       client: httpx.AsyncClient) -> None:
    events = render_gemini(text=["a", "b"], usage={"promptTokenCount": 7,
                                                   "candidatesTokenCount": 2,
                                                   "cachedContentTokenCount": 4,
                                                   "thoughtsTokenCount": 3})
    provider.enqueue(Scenario(body=events))
    out = await responses(make_model(provider, client))
    assert all(r.usage is None for r in out[:-1])
    usage = out[-1].usage
    assert usage is not None
    assert (usage.input_tokens, usage.output_tokens, usage.total_tokens,
            usage.cached_input_tokens, usage.reasoning_tokens) == (7, 5, 12, 4, 3)


# -- decoder + parser: any split, CRLF or LF framing -------------------------------------------

def aggregate(pieces: list[bytes]) -> tuple[Any, ...]:
    from headwater.models.gemini import GeminiModel as Model
    parser = Model("m", base_url="http://127.0.0.1:9").new_parser()
    decoder = SSEDecoder()
    partials: list[str] = []
    for piece in pieces:
        for event in decoder.feed(piece):
            parser.feed(event)
        partials += [p.content.parts[0].text or "" for p in parser.agg.take_partials()
                     if p.content]
    for event in decoder.flush(dispatch_incomplete=True):
        parser.feed(event)
    final = parser.finish()
    content = final.content
    parts = [(p.text, p.thought, p.thought_signature,
              p.function_call and (p.function_call.id, p.function_call.name,
                                   p.function_call.args)) for p in content.parts] if content else []
    return "".join(partials), parts, final.finish_reason, final.usage, final.error_code


text_pieces = st.lists(st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=8),
                       max_size=4)


@settings(max_examples=150, deadline=None)
@given(text=text_pieces, thoughts=text_pieces,
       args=st.dictionaries(st.text(alphabet="abcxyz", min_size=1, max_size=3),
                            st.one_of(st.text(max_size=6), st.integers(), st.booleans(),
                                      st.none(), st.lists(st.integers(), max_size=2)),
                            max_size=3),
       fragments=st.integers(1, 4), eol=st.sampled_from(["\r\n", "\n"]), data=st.data())
def test_any_split_of_a_gemini_body_aggregates_the_same(
        text: list[str], thoughts: list[str], args: dict[str, Any], fragments: int, eol: str,
        data: st.DataObject) -> None:
    body = b"".join(render_gemini(text=text, thoughts=thoughts, eol=eol,
                                  tool_calls=[{"name": "f", "arguments": args,
                                               "fragments": fragments}, {"name": "g"}]))
    whole = aggregate([body])
    cuts = sorted(data.draw(st.sets(st.integers(0, len(body)), max_size=25)))
    pieces = [body[a:b] for a, b in itertools.pairwise([0, *cuts, len(body)])]
    assert aggregate(pieces)[1:] == whole[1:]
    assert whole[0] == "".join(thoughts) + "".join(text)  # the partials carry every delta
    _, parts, reason, _, error = whole
    assert reason == "STOP" and error is None
    calls = [p[3] for p in parts if p[3]]
    assert calls == [("gemini-hwFakeResponse0001-0", "f", args),
                     ("gemini-hwFakeResponse0001-1", "g", {})]
    assert "".join(p[0] or "" for p in parts if p[1]) == "".join(thoughts)
    assert "".join(p[0] or "" for p in parts if not p[1] and not p[3]) == "".join(text)


# -- a whole agent run with a tool round trip --------------------------------------------------

async def test_agent_run_with_a_tool_round_trip(provider: FakeProvider,
                                                client: httpx.AsyncClient) -> None:
    ran: list[str] = []

    def lookup_order(order_id: str) -> dict[str, str]:
        """Find an order."""
        ran.append(order_id)
        return {"status": "shipped"}

    signature = "EpwICpkIAXLI2nx=="
    provider.enqueue(
        Scenario(body=render_gemini(thoughts=["Need the order. "], signature=signature,
                                    tool_calls=[{"name": "lookup_order",
                                                 "arguments": {"order_id": "1042"},
                                                 "fragments": 2}])),
        Scenario(body=render_gemini(text=["It has ", "shipped."], response_id="second")),
    )
    model = make_model(provider, client, model="gemini-3-pro-preview")  # signatures enforced
    runner = Runner(agent=Agent(name="bot", model=model, tools=[lookup_order]), app_name="app")
    session = await runner.session_service.create_session(app_name="app", user_id="u")
    events: list[Event] = [e async for e in runner.run_async(
        user_id="u", session_id=session.id, new_message="Where is order 1042?",
        run_config=RunConfig(streaming_mode=StreamingMode.SSE))]
    assert ran == ["1042"]
    assert events[-1].text == "It has shipped." and events[-1].error_code is None
    assert "".join(e.text for e in events if e.partial).endswith("It has shipped.")
    second = provider.requests[1].json()
    assert [c["role"] for c in second["contents"]] == ["user", "model", "user"]
    call_part = next(p for p in second["contents"][1]["parts"] if "functionCall" in p)
    assert call_part["thoughtSignature"] == signature  # sent back on its own part
    assert call_part["functionCall"] == {"id": "gemini-hwFakeResponse0001-0",
                                         "name": "lookup_order", "args": {"order_id": "1042"}}
    [answer] = second["contents"][2]["parts"]
    assert answer["functionResponse"]["id"] == "gemini-hwFakeResponse0001-0"
    assert answer["functionResponse"]["response"] == {"status": "shipped"}
    assert second["tools"][0]["functionDeclarations"][0]["name"] == "lookup_order"


async def test_fake_provider_rejects_a_gemini_history_as_the_api_does(
        provider: FakeProvider, client: httpx.AsyncClient) -> None:
    unanswered = LlmRequest(contents=[
        Content.from_text("hi"),
        Content("model", [Part(function_call=FunctionCall("c", "f", {}), thought_signature="s")]),
        Content.from_text("again")])
    unsigned = LlmRequest(contents=[
        Content.from_text("hi"),
        Content("model", [Part(function_call=FunctionCall("c", "f", {}))]),
        Content("user", [Part(function_response=FunctionResponse("c", "f", {}))])])
    provider.enqueue(Scenario(body=render_gemini(["ok"])))
    for request in (unanswered,):
        with pytest.raises(ModelHTTPError) as info:
            await responses(make_model(provider, client), request)
        assert info.value.status_code == 400 and not info.value.retryable
    # Our own requests sign the first call (the dummy signature Google documents) and pass.
    out = await responses(make_model(provider, client, model="gemini-3-flash"), unsigned)
    assert out[-1].content is not None and out[-1].content.text == "ok"
    error = json.loads(Scenario.error(429, format="gemini").body)  # type: ignore[arg-type]
    assert error == {"error": {"code": 429, "message": "Too Many Requests",
                               "status": "RESOURCE_EXHAUSTED"}}


# -- model strings -----------------------------------------------------------------------------

def test_model_strings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("GOOGLE_API_KEY", "GEMINI_API_KEY", "GEMINI_BASE_URL", "GOOGLE_GEMINI_BASE_URL",
                 "GOOGLE_CLOUD_ACCESS_TOKEN", "GOOGLE_CLOUD_PROJECT", "GOOGLE_CLOUD_LOCATION"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(UserError, match="GEMINI_API_KEY"):
        from_spec("gemini-2.5-flash")
    monkeypatch.setenv("GEMINI_API_KEY", "AIza-env")
    model = from_spec("gemini-2.5-flash")
    assert model.url == ("https://generativelanguage.googleapis.com/v1beta/models/"
                         "gemini-2.5-flash:streamGenerateContent?alt=sse")
    assert model.auth_headers() == {"x-goog-api-key": "AIza-env"}
    monkeypatch.setenv("GOOGLE_API_KEY", "AIza-google")
    assert from_spec("m").auth_headers() == {"x-goog-api-key": "AIza-google"}
    with pytest.raises(UserError, match="GOOGLE_CLOUD_ACCESS_TOKEN"):
        vertex_from_spec("gemini-2.5-pro@proj/us-central1")
    monkeypatch.setenv("GOOGLE_CLOUD_ACCESS_TOKEN", "ya29.env")
    vertex = vertex_from_spec("gemini-2.5-pro@proj/us-central1")
    assert vertex.url == ("https://us-central1-aiplatform.googleapis.com/v1/projects/proj/"
                          "locations/us-central1/publishers/google/models/gemini-2.5-pro"
                          ":streamGenerateContent?alt=sse")
    assert vertex.auth_headers() == {"authorization": "Bearer ya29.env"}
    with pytest.raises(UserError, match="GOOGLE_CLOUD_PROJECT"):
        vertex_from_spec("gemini-2.5-pro")
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "envproj")
    assert "/projects/envproj/locations/global/" in vertex_from_spec("gemini-2.5-pro").url
    with pytest.raises(UserError, match="vertex:<model>@<project>/<location>"):
        vertex_from_spec("a@b")


def test_gemini_and_vertex_are_entry_points() -> None:
    points = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"][
        "headwater.models"]
    for prefix, factory in (("gemini", from_spec), ("vertex", vertex_from_spec)):
        module, _, attr = points[prefix].partition(":")
        assert getattr(import_module(module), attr) is factory
    assert GeminiModel.live_emulation is True
