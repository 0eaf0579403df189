"""OpenAIResponsesModel against FakeProvider: recorded streams, requests, retries, cuts, runs."""

from __future__ import annotations

import base64
import itertools
import json
import tomllib
from contextlib import aclosing
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from headwater import Agent, Event, RunConfig, Runner, StreamingMode
from headwater.errors import (
    InBandError,
    ModelHTTPError,
    ProviderTimeout,
    ProviderUnavailable,
    UserError,
)
from headwater.models import LlmRequest, LlmResponse, OpenAIResponsesModel
from headwater.models.openai_responses import (
    _ResponsesParser,
    from_spec,
    reasoning_signature,
    signature_of,
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
    render_openai_responses,
    split_events,
    split_inside_characters,
)
from headwater.types import Blob, Content, FunctionCall, FunctionResponse, Part, ToolDeclaration

FIXTURES = Path(__file__).parents[1] / "fixtures" / "provider-streams" / "openai-responses"
FAST = Settings(model_backoff_initial=0.01, model_backoff_max=0.02, model_idle_timeout=5,
                model_total_timeout=20)
REQUEST = LlmRequest(contents=[Content.from_text("hello")])
CANARY = "sk-canary-91d0c4e2aa"


def make_model(provider: FakeProvider, client: httpx.AsyncClient | None,
               settings: Settings = FAST, model: str = "gpt-4o-mini",
               **kwargs: Any) -> OpenAIResponsesModel:
    return OpenAIResponsesModel(model, base_url=f"{provider.base_url}/v1", api_key="sk-test",
                                http_client=client, settings=settings, **kwargs)


async def responses(model: OpenAIResponsesModel, request: LlmRequest = REQUEST
                    ) -> list[LlmResponse]:
    return [r async for r in model.generate_content(request, stream=True)]


def ok(text: str = "fine") -> Scenario:
    return Scenario(body=render_openai_responses(text=[text]))


# -- every recorded stream through the adapter --------------------------------------------------

def load(sse: Path) -> tuple[bytes, dict[str, Any]]:
    return sse.read_bytes(), json.loads(sse.with_suffix(".json").read_text())["expected"]


def expected_usage(raw: dict[str, Any] | None) -> Any:
    from headwater.types import Usage
    if raw is None:
        return None
    return Usage(input_tokens=raw["input_tokens"], output_tokens=raw["output_tokens"],
                 total_tokens=raw["total_tokens"],
                 cached_input_tokens=raw["input_tokens_details"]["cached_tokens"],
                 reasoning_tokens=raw["output_tokens_details"]["reasoning_tokens"])


STREAMS = sorted(FIXTURES.glob("*.sse"))


def test_the_fixture_set_covers_what_the_adapter_must_meet() -> None:
    edges = {e for sse in STREAMS for e in json.loads(sse.with_suffix(".json").read_text())[
        "edge_cases"]}
    assert {"plain_text", "reasoning_summary_deltas", "function_call", "parallel_function_calls",
            "response_incomplete", "inband_error_event", "response_failed",
            "usage_reasoning_tokens", "encrypted_content"} <= edges
    for sse in STREAMS:
        source = json.loads(sse.with_suffix(".json").read_text())["source"]
        assert source["repo"] and source["path"] and len(source["read_at_commit"]) == 40


@pytest.mark.parametrize("sse", STREAMS, ids=[s.stem for s in STREAMS])
async def test_recorded_stream_aggregates_exactly(sse: Path, provider: FakeProvider,
                                                  client: httpx.AsyncClient) -> None:
    body, expected = load(sse)
    provider.enqueue(Scenario(body=split_inside_characters(body)))
    model = make_model(provider, client)
    if expected["errors"] and not expected["text"]:  # an error before any content
        with pytest.raises(InBandError) as info:
            await responses(model)
        assert info.value.code == "provider_rejected"  # insufficient_quota: never retried
        assert len(provider.requests) == 1
        assert expected["errors"][0]["error"]["message"] not in str(info.value)
        return
    out = await responses(model)
    final = check_stream_contract(out)
    content = final.content
    assert content is not None
    assert content.text == expected["text"] + (expected["refusal"] or "")
    assert content.thought_text == (expected["reasoning"] or "")
    signed = [reasoning_signature(p.thought_signature) for p in content.parts if p.thought]
    assert [s[0] for s in signed if s] == [i["id"] for i in expected["reasoning_items"]]
    assert [s[1] is not None for s in signed if s] == [
        i["encrypted_content"] for i in expected["reasoning_items"]]
    calls = [(c.id, c.name, c.args) for c in content.function_calls]
    if expected["status"] == "incomplete":
        assert final.error_code == "provider_error"
        assert final.finish_reason == {"max_output_tokens": "length"}[
            expected["incomplete_reason"]]
        assert calls == []
    else:
        assert expected["status"] == "completed"
        assert final.error_code is None
        assert calls == [(c["id"], c["name"], c["arguments"]) for c in expected["tool_calls"]]
        assert final.finish_reason == ("tool_calls" if calls else "stop")
    assert final.usage == expected_usage(expected["usage"])
    assert all(r.partial and r.usage is None for r in out[:-1])
    assert len(provider.requests) == 1


# -- the request --------------------------------------------------------------------------------

PNG = b"\x89PNG\r\n\x1a\nfake"


def history() -> LlmRequest:
    thought = Part(text="Look it up.", thought=True,
                   thought_signature=signature_of("rs_1", "gAAAenc=="))
    foreign = Part(text="Anthropic thinking", thought=True, thought_signature="EqQBCkYIBx==")
    return LlmRequest(
        system_instruction="Be brief.",
        contents=[
            Content("user", [Part(text="Where is order 1042?"),
                             Part(inline_data=Blob("image/png", PNG))]),
            Content("model", [foreign, thought, Part(text="Checking."),
                              Part(function_call=FunctionCall("call_9", "lookup_order",
                                                              {"order_id": "1042"}))]),
            Content("user", [Part(function_response=FunctionResponse(
                "call_9", "lookup_order", {"status": "shipped"}))]),
            Content("model", [Part(text="Shipped.")]),
            Content("user", [Part(text="Thanks")]),
        ],
        tools=[ToolDeclaration(name="lookup_order", description="Find an order.",
                               parameters={"type": "object", "properties": {
                                   "order_id": {"type": "string"}}})],
    )


async def test_request_body_and_headers(provider: FakeProvider,
                                        client: httpx.AsyncClient) -> None:
    provider.enqueue(ok())
    model = make_model(provider, client, model="gpt-5-mini")
    await responses(model, history())
    request = provider.requests[0]
    assert request.path == "/v1/responses"
    assert request.headers["authorization"] == "Bearer sk-test"
    body = request.json()
    assert body["model"] == "gpt-5-mini"
    assert (body["stream"], body["store"]) == (True, False)
    assert body["include"] == ["reasoning.encrypted_content"]
    assert body["instructions"] == "Be brief."
    assert body["tools"] == [{"type": "function", "name": "lookup_order",
                              "description": "Find an order.", "strict": False,
                              "parameters": {"type": "object", "properties": {
                                  "order_id": {"type": "string"}}}}]
    url = "data:image/png;base64," + base64.b64encode(PNG).decode()
    assert body["input"] == [
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "Where is order 1042?"},
            {"type": "input_image", "image_url": url, "detail": "auto"}]},
        {"type": "reasoning", "id": "rs_1", "encrypted_content": "gAAAenc==",
         "summary": [{"type": "summary_text", "text": "Look it up."}]},
        {"type": "message", "role": "assistant",
         "content": [{"type": "output_text", "text": "Checking."}]},
        {"type": "function_call", "call_id": "call_9", "name": "lookup_order",
         "arguments": '{"order_id": "1042"}'},
        {"type": "function_call_output", "call_id": "call_9", "output": '{"status": "shipped"}'},
        {"type": "message", "role": "assistant",
         "content": [{"type": "output_text", "text": "Shipped."}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Thanks"}]},
    ]
    assert "sk-" not in repr(model)


@pytest.mark.parametrize(("name", "kwargs", "include"), [
    ("gpt-4o", {}, None),  # not a reasoning model: it would reject the include
    ("o4-mini", {}, ["reasoning.encrypted_content"]),
    ("gpt-4o", {"encrypted_reasoning": True}, ["reasoning.encrypted_content"]),
    ("gpt-5", {"store": True}, None),
])
async def test_store_and_include(name: str, kwargs: dict[str, Any], include: list[str] | None,
                                 provider: FakeProvider, client: httpx.AsyncClient) -> None:
    provider.enqueue(ok())
    await responses(make_model(provider, client, model=name, **kwargs))
    body = provider.requests[0].json()
    assert body.get("include") == include
    assert body["store"] is kwargs.get("store", False)


async def test_config_goes_into_the_body(provider: FakeProvider,
                                         client: httpx.AsyncClient) -> None:
    provider.enqueue(ok())
    request = LlmRequest(contents=[Content.from_text("hi")],
                         config={"reasoning": {"effort": "low", "summary": "auto"},
                                 "max_output_tokens": 64})
    await responses(make_model(provider, client), request)
    body = provider.requests[0].json()
    assert body["reasoning"] == {"effort": "low", "summary": "auto"}
    assert body["max_output_tokens"] == 64


async def test_a_reasoning_item_without_encrypted_content_is_not_sent_when_store_is_off(
        provider: FakeProvider, client: httpx.AsyncClient) -> None:
    unsent = Part(text="t", thought=True, thought_signature=signature_of("rs_2", None))
    request = LlmRequest(contents=[Content.from_text("a"), Content("model", [unsent, Part(
        text="b")]), Content.from_text("c")])
    provider.enqueue(ok(), ok())
    await responses(make_model(provider, client), request)
    assert [i.get("type") for i in provider.requests[0].json()["input"]] == ["message"] * 3
    await responses(make_model(provider, client, store=True), request)
    assert provider.requests[1].json()["input"][1] == {
        "type": "reasoning", "id": "rs_2", "summary": [{"type": "summary_text", "text": "t"}]}


def test_a_blob_the_api_cannot_take_is_a_user_error() -> None:
    model = OpenAIResponsesModel("gpt-4o", api_key="k")
    request = LlmRequest(contents=[Content("user", [Part(inline_data=Blob("audio/wav", b"x"))])])
    with pytest.raises(UserError, match="images and PDFs"):
        model.build_body(request)
    pdf = LlmRequest(contents=[Content("user", [Part(inline_data=Blob("application/pdf",
                                                                       b"%PDF"))])])
    block = model.build_body(pdf)["input"][0]["content"][0]
    assert block["type"] == "input_file"
    assert block["file_data"].startswith("data:application/pdf;base64,")


# -- FakeProvider speaks the Responses API's 400s ------------------------------------------------

@pytest.mark.parametrize(("items", "message"), [
    ([{"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"}],
     "No tool output found for function call call_1."),
    ([{"type": "function_call_output", "call_id": "call_2", "output": "{}"}],
     "No tool call found for function call output with call_id call_2."),
    ([{"type": "reasoning", "id": "rs_9", "summary": []}], "Item with id 'rs_9' not found."),
])
async def test_fake_provider_rejects_what_the_api_rejects(
        items: list[dict[str, Any]], message: str, provider: FakeProvider,
        client: httpx.AsyncClient) -> None:
    provider.enqueue(ok())
    answer = await client.post(f"{provider.base_url}/v1/responses",
                               json={"model": "m", "store": False, "input": items})
    assert answer.status_code == 400
    assert answer.json()["error"]["message"].startswith(message)
    assert answer.json()["error"]["param"] == "input"
    assert provider.pending == 1  # no scenario consumed


# -- retries only before the first chunk --------------------------------------------------------

RETRIES: list[tuple[str, list[Scenario], int, str | None]] = [
    ("429 then ok", [Scenario.error(429, "slow down"), ok()], 2, None),
    ("503 503 ok", [Scenario.error(503), Scenario.error(503), ok()], 3, None),
    ("500 x3", [Scenario.error(500)] * 3, 3, "provider_unavailable"),
    ("400", [Scenario.error(400)], 1, "provider_rejected"),
    ("in-band server_error before content, ok", [
        Scenario(body=render_openai_responses(error={"code": "server_error"})), ok()], 2, None),
    ("failed before content (server_error), ok", [
        Scenario(body=render_openai_responses(status="failed")), ok()], 2, None),
    ("in-band insufficient_quota", [Scenario(body=render_openai_responses(
        error={"code": "insufficient_quota", "message": "quota"}))], 1, "provider_rejected"),
    ("connection reset before content, ok", [
        Scenario(body=[*render_openai_responses(text=["x"])[:2], Reset()]), ok()], 2, None),
]


@pytest.mark.parametrize(("name", "scenarios", "attempts", "code"), RETRIES,
                         ids=[r[0] for r in RETRIES])
async def test_retries(name: str, scenarios: list[Scenario], attempts: int, code: str | None,
                       provider: FakeProvider, client: httpx.AsyncClient) -> None:
    provider.enqueue(*scenarios)
    runner, sid = await runner_for(make_model(provider, client))
    events = await run_turn(runner, sid)
    assert len(provider.requests) == attempts
    assert len({r.body for r in provider.requests}) == 1  # the same bytes every attempt
    if code is None:
        assert [e.text for e in events] == ["fine", "fine"]  # nothing of a failed attempt
    else:
        assert [e.error_code for e in events] == [code]


async def test_connection_refused_is_retried_then_unavailable(client: httpx.AsyncClient) -> None:
    async with FakeProvider() as fake:
        url = fake.base_url
    model = OpenAIResponsesModel("m", base_url=url, http_client=client, settings=FAST)
    with pytest.raises(ProviderUnavailable):
        await responses(model)


async def test_a_non_retryable_status_raises_model_http_error(provider: FakeProvider,
                                                               client: httpx.AsyncClient) -> None:
    provider.enqueue(Scenario.error(401))
    with pytest.raises(ModelHTTPError) as info:
        await responses(make_model(provider, client))
    assert info.value.status_code == 401 and not info.value.retryable


# -- after the first chunk a failure is final ---------------------------------------------------

def text_events() -> list[bytes]:
    return render_openai_responses(text=["Hello ", "wörld ", "again"])


FIRST = 5  # created, in_progress, item added, part added, first delta


@pytest.mark.parametrize("cut", ["reset", "close", "no terminal event"])
async def test_a_cut_after_the_first_chunk_is_truncated_and_not_retried(
        cut: str, provider: FakeProvider, client: httpx.AsyncClient) -> None:
    events = text_events()
    body = {"reset": [*events[:FIRST], Reset()], "close": [*events[:FIRST], Close()],
            "no terminal event": events[:-1]}[cut]
    provider.enqueue(Scenario(body=body), ok())
    runner, sid = await runner_for(make_model(provider, client))
    out = await run_turn(runner, sid)
    assert len(provider.requests) == 1
    assert out[-1].error_code == "provider_truncated"
    shown = "Hello wörld again" if cut == "no terminal event" else "Hello "
    assert "".join(e.text for e in out[:-1]) == shown


IN_BAND_AFTER_CONTENT: list[tuple[str, list[bytes], str | None]] = [
    ("error event", render_openai_responses(text=["partial"], error={"code": "server_error"}),
     None),
    ("response.failed", render_openai_responses(text=["partial"], status="failed"), None),
    ("max_output_tokens", render_openai_responses(text=["partial"], status="incomplete"),
     "length"),
    ("content_filter", render_openai_responses(text=["partial"], status="incomplete",
                                               incomplete_reason="content_filter"),
     "content_filter"),
]


@pytest.mark.parametrize(("name", "body", "finish"), IN_BAND_AFTER_CONTENT,
                         ids=[c[0] for c in IN_BAND_AFTER_CONTENT])
async def test_in_band_errors_after_content_are_error_finals(
        name: str, body: list[bytes], finish: str | None, provider: FakeProvider,
        client: httpx.AsyncClient) -> None:
    provider.enqueue(Scenario(body=body))
    final = check_stream_contract(await responses(make_model(provider, client)))
    assert final.error_code == "provider_error"
    assert final.finish_reason == finish
    assert final.content is not None and final.content.text == "partial"
    assert len(provider.requests) == 1


async def test_calls_of_an_incomplete_response_never_run(provider: FakeProvider,
                                                         client: httpx.AsyncClient) -> None:
    call = {"id": "c1", "name": "charge", "arguments": '{"amount": 1', "fragments": 3}
    provider.enqueue(Scenario(body=render_openai_responses(tool_calls=[call],
                                                           status="incomplete")))
    final = check_stream_contract(await responses(make_model(provider, client)))
    assert final.error_code == "provider_error" and final.finish_reason == "length"
    assert final.content is None or final.content.function_calls == []


async def test_malformed_arguments_fail_the_turn_loudly(provider: FakeProvider,
                                                        client: httpx.AsyncClient) -> None:
    ran: list[int] = []

    def charge(amount: int) -> str:
        ran.append(amount)
        return "charged"

    call = {"id": "c1", "name": "charge", "arguments": '{"amount": 12', "fragments": 4}
    provider.enqueue(Scenario(body=render_openai_responses(tool_calls=[call])))
    runner, sid = await runner_for(make_model(provider, client), [charge])
    events = await run_turn(runner, sid)
    assert events[-1].error_code == "tool_call_incomplete"
    assert ran == []


async def test_arguments_for_a_call_never_opened_are_a_bad_response(
        provider: FakeProvider, client: httpx.AsyncClient) -> None:
    events = render_openai_responses(text=["x"])
    stray = (b'event: response.function_call_arguments.delta\ndata: {"type":'
             b'"response.function_call_arguments.delta","item_id":"fc_nope","output_index":7,'
             b'"delta":"{}"}\n\n')
    provider.enqueue(Scenario(body=[*events[:-1], stray, events[-1]]))
    runner, sid = await runner_for(make_model(provider, client))
    out = await run_turn(runner, sid)
    assert out[-1].error_code == "provider_bad_response"


async def test_unknown_events_are_ignored(provider: FakeProvider,
                                          client: httpx.AsyncClient) -> None:
    events = render_openai_responses(text=["a", "b"], reasoning=["r"])
    extra = [b'event: response.output_text.annotation.added\ndata: {"type":"response.output_text'
             b'.annotation.added","annotation":{"type":"url_citation"}}\n\n',
             b'event: keepalive\ndata: {"type":"keepalive"}\n\n',
             b'data: {"type":"response.web_search_call.searching","output_index":3}\n\n',
             b": comment\n\n"]
    provider.enqueue(Scenario(body=[*events[:-1], *extra, events[-1]]),
                     Scenario(body=events))
    with_extra = check_stream_contract(await responses(make_model(provider, client)))
    plain = check_stream_contract(await responses(make_model(provider, client)))
    assert with_extra == plain
    assert plain.content is not None and plain.content.text == "ab"


async def test_refusal_is_answer_text(provider: FakeProvider, client: httpx.AsyncClient) -> None:
    provider.enqueue(Scenario(body=render_openai_responses(refusal=["I can't ", "help."])))
    final = check_stream_contract(await responses(make_model(provider, client)))
    assert final.content is not None and final.content.text == "I can't help."
    assert final.error_code is None and final.finish_reason == "stop"


async def test_provider_words_never_reach_events_or_exceptions(
        provider: FakeProvider, client: httpx.AsyncClient) -> None:
    said = f"Incorrect API key provided: {CANARY}"
    provider.enqueue(Scenario(body=render_openai_responses(
        text=["partial"], error={"code": "server_error", "message": said})))
    runner, sid = await runner_for(make_model(provider, client))
    events = await run_turn(runner, sid)
    assert events[-1].error_code == "provider_error"
    assert all(CANARY not in repr(e) for e in events)
    provider.enqueue(Scenario(body=render_openai_responses(
        error={"code": "invalid_api_key", "message": said})))
    with pytest.raises(InBandError) as info:
        await responses(make_model(provider, client))
    assert CANARY not in str(info.value)


# -- deadlines and cancel -----------------------------------------------------------------------

async def test_stall_after_headers_is_an_idle_timeout(provider: FakeProvider,
                                                      client: httpx.AsyncClient) -> None:
    settings = FAST.model_copy(update={"model_idle_timeout": 0.5})
    provider.enqueue(Scenario(body=[*text_events()[:2], Stall()]))
    with pytest.raises(ProviderTimeout, match="idle"):
        await responses(make_model(provider, client, settings))
    record = await provider.wait_closed(0, timeout=5.0)
    assert record.close_kind in ("client_fin", "client_rst")


async def test_a_slow_stream_ends_at_the_total_deadline(provider: FakeProvider,
                                                        client: httpx.AsyncClient) -> None:
    from headwater.testing import Trickle
    settings = FAST.model_copy(update={"model_idle_timeout": 0.3, "model_total_timeout": 1.0})
    provider.enqueue(Scenario(body=[Trickle(b": keep-alive\n", every=0.05, forever=True)]))
    with pytest.raises(ProviderTimeout, match="deadline"):
        await responses(make_model(provider, client, settings))
    record = await provider.wait_closed(0, timeout=5.0)
    assert record.close_kind in ("client_fin", "client_rst")


async def test_closing_the_stream_closes_the_connection(provider: FakeProvider,
                                                        client: httpx.AsyncClient) -> None:
    provider.enqueue(Scenario(body=[*text_events()[:FIRST], Stall()]))
    model = make_model(provider, client)
    async with aclosing(model.generate_content(REQUEST, stream=True)) as stream:
        async for response in stream:
            assert response.partial and response.content is not None
            assert response.content.text == "Hello "
            break
    record = await provider.wait_closed(0, timeout=5.0)
    assert record.close_kind in ("client_fin", "client_rst")


async def test_one_partial_per_network_read(provider: FakeProvider,
                                            client: httpx.AsyncClient) -> None:
    events = render_openai_responses(text=["a", "b", "c", "d"])
    provider.enqueue(Scenario(body=[b"".join(events[:6]), b"".join(events[6:])]))
    out = await responses(make_model(provider, client))
    assert [r.content.text for r in out if r.partial and r.content] == ["ab", "cd"]


# -- a full agent run in the Responses format ---------------------------------------------------

async def test_agent_run_with_a_tool_round_trip(provider: FakeProvider,
                                                client: httpx.AsyncClient) -> None:
    looked: list[str] = []

    def lookup_order(order_id: str) -> dict[str, str]:
        """Find an order."""
        looked.append(order_id)
        return {"status": "shipped"}

    first = render_openai_responses(
        reasoning=["The user ", "wants an order."], text=["Let me check."],
        tool_calls=[{"id": "call_1", "name": "lookup_order", "arguments": '{"order_id": "1042"}',
                     "fragments": 4}])
    provider.enqueue(Scenario(body=first), Scenario(body=render_openai_responses(
        text=["It has ", "shipped."])), Scenario(body=render_openai_responses(text=["Bye."])))
    runner, sid = await runner_for(make_model(provider, client, model="gpt-5-mini"),
                                   [lookup_order])
    events = await run_turn(runner, sid)
    assert looked == ["1042"]
    assert events[-1].text == "It has shipped." and events[-1].error_code is None
    assert [f.name for e in events if not e.partial for f in e.function_calls] == [
        "lookup_order"]
    again = await run_turn(runner, sid)  # FakeProvider answers 400 to a broken history
    assert again[-1].text == "Bye."
    items = provider.requests[1].json()["input"]
    assert [(i["type"], i.get("role")) for i in items] == [
        ("message", "user"), ("reasoning", None), ("message", "assistant"),
        ("function_call", None), ("function_call_output", None)]
    assert items[1] == {"type": "reasoning", "id": "rs_fake0000",
                        "encrypted_content": "gAAAAABfakeEncryptedReasoning==",
                        "summary": [{"type": "summary_text", "text": "The user wants an order."}]}
    assert items[3]["call_id"] == items[4]["call_id"] == "call_1"
    assert json.loads(items[4]["output"]) == {"status": "shipped"}
    assert [i["type"] for i in provider.requests[2].json()["input"]][-2:] == ["message",
                                                                              "message"]


# -- model strings ------------------------------------------------------------------------------

def test_the_entry_point_names_from_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    entry = pyproject["project"]["entry-points"]["headwater.models"]["openai-responses"]
    assert entry == "headwater.models.openai_responses:from_spec"
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(UserError, match="OPENAI_API_KEY"):
        from_spec("gpt-5-mini")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    model = from_spec("gpt-5-mini")
    assert isinstance(model, OpenAIResponsesModel) and model.model == "gpt-5-mini"
    assert model.url == "http://127.0.0.1:9/v1/responses"
    assert model.live_emulation and model.store is False


# -- the decoder and parser, sans I/O, for any split and line ending -----------------------------

def parse(pieces: list[bytes]) -> tuple[list[LlmResponse], LlmResponse]:
    decoder, parser = SSEDecoder(), _ResponsesParser()
    partials: list[LlmResponse] = []
    for piece in pieces:
        for event in decoder.feed(piece):
            parser.feed(event)
        partials += parser.agg.take_partials()
    for event in decoder.flush(dispatch_incomplete=True):
        parser.feed(event)
    partials += parser.agg.take_partials()
    assert parser.complete
    return partials, parser.finish()


FUZZED = [s for s in STREAMS if s.stat().st_size < 30_000 and "error" not in s.stem]
RENDERED = b"".join(render_openai_responses(
    text=["Grüße ", "aus ", "Zürich 🏔"], reasoning=["Den", "ken…"],
    tool_calls=[{"name": "f", "arguments": {"ä": "ß"}, "fragments": 5},
                {"name": "g", "fragments": 2}]))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(index=st.integers(0, len(FUZZED)), eol=st.sampled_from(["\n", "\r\n"]), data=st.data())
def test_any_split_with_lf_or_crlf_aggregates_the_same(index: int, eol: str,
                                                       data: st.DataObject) -> None:
    body = FUZZED[index].read_bytes() if index < len(FUZZED) else RENDERED
    body = body.replace(b"\r\n", b"\n").replace(b"\n", eol.encode())
    partials, whole = parse([body])
    cuts = sorted(data.draw(st.sets(st.integers(0, len(body)), max_size=25)))
    pieces = [body[a:b] for a, b in itertools.pairwise([0, *cuts, len(body)])]
    split_partials, split = parse(pieces)
    assert split == whole
    check_stream_contract([*split_partials, split])
    text = "".join(p.content.text for p in split_partials if p.content)
    assert text == "".join(p.content.text for p in partials if p.content)


# -- valid JSON of the wrong shape fails the call as a bad response, never a TypeError -----------

WRONG = st.sampled_from([None, 1, 2.5, True, "x", [], [1], {}, {"a": 1}])


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, inner in value.items():
            found += paths(inner, (*prefix, key))
    elif isinstance(value, list):
        for n, inner in enumerate(value):
            found += paths(inner, (*prefix, n))
    return found


@settings(max_examples=200, deadline=None)
@given(data=st.data(), wrong=WRONG)
def test_wrong_shapes_raise_model_errors_only(data: st.DataObject, wrong: Any) -> None:
    from headwater.errors import ModelError
    events = [json.loads(e.split(b"data: ", 1)[1]) for e in split_events(RENDERED)]
    n = data.draw(st.integers(0, len(events) - 1))
    path = data.draw(st.sampled_from(paths(events[n])))
    target = events[n]
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = wrong
    body = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
    try:
        parse([body])
    except ModelError:
        pass  # MalformedChunk, InBandError, ToolCallAssemblyError: the call fails cleanly
    except AssertionError:
        pass  # parse() found no terminal event: the adapter reports a truncated stream


# -- helpers ------------------------------------------------------------------------------------

async def runner_for(model: OpenAIResponsesModel, tools: list[Any] | None = None
                     ) -> tuple[Runner, str]:
    runner = Runner(agent=Agent(name="bot", model=model, tools=tools or []), app_name="app")
    session = await runner.session_service.create_session(app_name="app", user_id="u")
    return runner, session.id


async def run_turn(runner: Runner, sid: str) -> list[Event]:
    return [e async for e in runner.run_async(
        user_id="u", session_id=sid, new_message="go",
        run_config=RunConfig(streaming_mode=StreamingMode.SSE))]


async def test_an_unknown_incomplete_reason_is_not_shown_as_provider_text(
        provider: FakeProvider, client: httpx.AsyncClient) -> None:
    said = "Quota of org org-42 (jane@example.com) exceeded, see console"
    provider.enqueue(Scenario(body=render_openai_responses(
        text=["partial"], status="incomplete", incomplete_reason=said)))
    final = check_stream_contract(await responses(make_model(provider, client)))
    assert final.error_code == "provider_error"
    assert "jane@example.com" not in (final.error_message or "")
    assert final.content is not None and final.content.text == "partial"
