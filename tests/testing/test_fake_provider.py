"""FakeProvider: byte-faithful bodies, misbehaviour on cue, and what it records."""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from headwater.testing import (
    Close,
    FakeProvider,
    Reset,
    Scenario,
    Sleep,
    Stall,
    ToolCallSpec,
    Trickle,
    cut_inside_utf8,
    load_transcript,
    render_anthropic,
    render_openai,
    split_events,
)

STREAMS = Path(__file__).parents[1] / "fixtures" / "provider-streams"
OPENAI = "/v1/chat/completions"
ANTHROPIC = "/v1/messages"
USER = {"role": "user", "content": "Weather in Paris?"}


@pytest.fixture
async def client(provider: FakeProvider) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=provider.base_url, timeout=5.0) as http:
        yield http


async def read_stream(client: httpx.AsyncClient, path: str = OPENAI,
                      payload: Any = None) -> tuple[httpx.Response, bytes]:
    body = {"model": "m", "messages": [USER]} if payload is None else payload
    async with client.stream("POST", path, json=body) as response:
        data = b"".join([chunk async for chunk in response.aiter_raw()])
    return response, data


def sse_events(data: bytes) -> list[Any]:
    """The JSON payloads of the ``data:`` lines, ``[DONE]`` as a string."""
    payloads = []
    for line in data.decode().split("\n"):
        if line.startswith("data: "):
            text = line[len("data: "):]
            payloads.append(text if text == "[DONE]" else json.loads(text))
    return payloads


# -- bodies, byte for byte ------------------------------------------------------------


async def test_rendered_openai_stream_is_served_byte_for_byte(
    provider: FakeProvider, client: httpx.AsyncClient
) -> None:
    events = render_openai(text=["Hel", "lo, wörld"],
                           tool_calls=[{"id": "call_1", "name": "get_weather",
                                        "arguments": '{"city": "Paris"}', "fragments": 3}],
                           finish_reason="tool_calls")
    provider.enqueue(Scenario(body=events))

    response, data = await read_stream(client)

    assert response.status_code == 200
    assert response.headers["content-type"] == "text/event-stream"
    assert response.headers["transfer-encoding"] == "chunked"
    assert data == b"".join(events)


async def test_recorded_transcript_is_served_byte_for_byte(
    provider: FakeProvider, client: httpx.AsyncClient
) -> None:
    transcript = load_transcript(STREAMS / "anthropic-messages" /
                                 "am01-haiku45-plain-text-nonascii.sse")
    provider.enqueue(Scenario(body=transcript),
                     Scenario(body=split_events(transcript), chunked=False))

    _, whole = await read_stream(client, ANTHROPIC)
    response, by_event = await read_stream(client, ANTHROPIC)

    assert whole == by_event == transcript
    assert response.headers["content-length"] == str(len(transcript))


def test_openai_rendering_matches_the_recorded_framing() -> None:
    events = render_openai(text=["I'm"], usage={"prompt_tokens": 14, "completion_tokens": 30})
    recorded = split_events(load_transcript(STREAMS / "openai-chat" /
                                            "oc01-gpt4o-plain-text.sse"))
    payloads = [sse_events(event)[0] for event in events]

    assert [event[:6] for event in events] == [b"data: "] * 5
    assert all(event.endswith(b"}\n\n") for event in events[:-1])
    assert events[-1] == recorded[-1] == b"data: [DONE]\n\n"
    assert payloads[0]["choices"][0]["delta"] == sse_events(recorded[0])[0]["choices"][0]["delta"]
    assert payloads[1]["choices"][0] == sse_events(recorded[1])[0]["choices"][0]
    assert payloads[2]["choices"][0]["finish_reason"] == "stop"
    assert payloads[3]["choices"] == []
    assert payloads[3]["usage"] == {"prompt_tokens": 14, "completion_tokens": 30,
                                    "total_tokens": 44}


def test_openai_tool_call_fragments_concatenate_to_the_arguments() -> None:
    arguments = '{"city": "Edinburgh", "country": "UK"}'
    events = render_openai(tool_calls=[{"name": "a", "arguments": arguments, "fragments": 15},
                                       {"id": "call_b", "name": "b", "arguments": {"x": 1}}],
                           finish_reason="tool_calls", usage=None, done=False)
    deltas = [sse_events(event)[0]["choices"][0]["delta"] for event in events]
    calls = [call for delta in deltas for call in delta.get("tool_calls", ())]

    assert calls[0] == {"index": 0, "id": "call_0", "type": "function",
                        "function": {"name": "a", "arguments": ""}}
    first = [c["function"]["arguments"] for c in calls[1:] if c["index"] == 0]
    assert len(first) == 15 and "".join(first) == arguments
    assert calls[16]["id"] == "call_b" and calls[17]["function"]["arguments"] == '{"x": 1}'
    assert sse_events(events[-1])[0]["choices"][0]["finish_reason"] == "tool_calls"


def test_openai_inband_error_ends_the_stream() -> None:
    events = render_openai(reasoning=["We", " need"], error={"message": "boom",
                                                             "type": "invalid_request_error"},
                           reasoning_key="reasoning")

    assert sse_events(events[1])[0]["choices"][0]["delta"] == {"reasoning": "We"}
    assert events[-1] == (b'event: error\ndata: {"error":{"message":"boom",'
                          b'"type":"invalid_request_error"}}\n\n')
    assert len(events) == 4


def test_anthropic_rendering_follows_the_recorded_event_order() -> None:
    call: ToolCallSpec = {"id": "toolu_01NRLabsLyVHZPKxbKvkfSMn", "name": "get_weather",
                          "arguments": '{"location": "Paris"}', "fragments": 4}
    events = render_anthropic(text=["I", "'ll check the current weather in Paris for you."],
                              tool_calls=[call], stop_reason="tool_use",
                              usage={"input_tokens": 377, "output_tokens": 65})
    recorded = split_events(load_transcript(STREAMS / "anthropic-messages" /
                                            "am02-sonnet4-text-then-tool-use.sse"))

    def kinds(stream: list[bytes]) -> list[bytes]:
        return [event.split(b"\n")[0] for event in stream]

    assert kinds(events) == kinds(recorded)
    assert events[2] == recorded[2] == b'event: ping\ndata: {"type": "ping"}\n\n'
    for index in (1, 3, 4, 5, 6, 7, 12):  # all but the id, usage and fragments
        assert events[index] == recorded[index]
    assert events[14] == recorded[14] + b"\n\n"  # the recording lost its last blank line
    start = sse_events(events[0])[0]["message"]
    assert start["usage"]["input_tokens"] == 377
    assert sse_events(events[-2])[0]["usage"] == {"input_tokens": 377, "output_tokens": 65}


def test_anthropic_thinking_block_and_error() -> None:
    events = render_anthropic(thinking=["Let me", " think"], text=["Hi"],
                              error={"message": "Overloaded"})
    payloads = [sse_events(event)[0] for event in events]

    assert payloads[1]["content_block"] == {"type": "thinking", "thinking": "", "signature": ""}
    assert [p["delta"]["type"] for p in payloads if p["type"] == "content_block_delta"] == [
        "thinking_delta", "thinking_delta", "signature_delta", "text_delta"]
    assert events[-1] == (b'event: error\ndata: {"type":"error","error":'
                          b'{"type":"overloaded_error","message":"Overloaded"}}\n\n')
    assert payloads[-2]["type"] == "content_block_delta"  # the error cut the open block


def test_cut_inside_utf8_truncates_the_first_non_ascii_event() -> None:
    events = render_openai(text=["plain", "ünïcode"])
    cut = cut_inside_utf8(events, after_events=1)

    assert cut[:2] == events[:2]
    assert events[2].startswith(cut[2]) and len(cut) == 3
    assert cut[2][-1] >= 0xC0  # ends on the lead byte of "ü"
    with pytest.raises(UnicodeDecodeError):
        cut[2].decode()
    with pytest.raises(ValueError, match="multi-byte"):
        cut_inside_utf8(render_openai(text=["ascii"]), after_events=0)


def test_split_events_keeps_every_byte() -> None:
    body = b"data: a\n\ndata: b\r\n\r\n: comment\n\ndata: tail"
    assert split_events(body) == [b"data: a\n\n", b"data: b\r\n\r\n", b": comment\n\n",
                                  b"data: tail"]


# -- status, headers, queue -----------------------------------------------------------


async def test_error_scenario_sends_status_headers_and_provider_error_shape(
    provider: FakeProvider, client: httpx.AsyncClient
) -> None:
    provider.enqueue(Scenario.error(429, "slow down", headers={"Retry-After": "2"}),
                     Scenario.error(529, format="anthropic",
                                    headers={"x-should-retry": "true"}))

    openai = await client.post(OPENAI, json={"messages": []})
    anthropic = await client.post(ANTHROPIC, json={"messages": []})

    assert openai.status_code == 429 and openai.headers["retry-after"] == "2"
    assert openai.headers["content-type"] == "application/json"
    assert openai.json() == {"error": {"message": "slow down", "type": "requests",
                                       "param": None, "code": None}}
    assert anthropic.status_code == 529 and anthropic.headers["x-should-retry"] == "true"
    assert anthropic.json() == {"type": "error", "error": {"type": "overloaded_error",
                                                           "message": "Overloaded"}}


async def test_scenarios_are_served_in_order_then_500(
    provider: FakeProvider, client: httpx.AsyncClient
) -> None:
    provider.enqueue(Scenario(body=b"first"), Scenario(status=201, body=[b"sec", b"ond"]))

    first = await client.post(OPENAI, json={"n": 1})
    second = await client.post(OPENAI, json={"n": 2})
    third = await client.post(OPENAI, json={"n": 3})

    assert (first.status_code, first.content) == (200, b"first")
    assert (second.status_code, second.content) == (201, b"second")
    assert third.status_code == 500
    assert "FakeProvider: no scenario queued for request #2" in third.json()["error"]["message"]
    assert provider.pending == 0


async def test_requests_are_recorded_with_json_bodies_on_one_kept_alive_connection(
    provider: FakeProvider, client: httpx.AsyncClient
) -> None:
    provider.enqueue(Scenario(), Scenario())
    before = time.monotonic()

    await client.post(OPENAI + "?beta=1", json={"model": "gpt-4o-mini", "messages": [USER]},
                      headers={"Authorization": "Bearer sk-test"})

    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"model": '
        yield b'"chunked"}'

    await client.post(ANTHROPIC, content=chunks())

    first, second = provider.requests
    assert (first.method, first.path, first.query) == ("POST", OPENAI, "beta=1")
    assert first.headers["authorization"] == "Bearer sk-test"
    assert first.json() == {"model": "gpt-4o-mini", "messages": [USER]}
    assert first.received_at >= before
    assert second.headers["transfer-encoding"] == "chunked"
    assert second.json() == {"model": "chunked"}
    assert len(provider.connections) == 1 and provider.connections[0].requests == 2
    assert first.connection == second.connection == 0


# -- misbehaviour ---------------------------------------------------------------------


async def test_close_mid_body_is_an_incomplete_chunked_read(
    provider: FakeProvider, client: httpx.AsyncClient
) -> None:
    events = render_openai(text=["Hello", " there"])
    provider.enqueue(Scenario(body=[*events[:2], Close()]))
    received = []

    with pytest.raises(httpx.RemoteProtocolError):
        async with client.stream("POST", OPENAI, json={"messages": [USER]}) as response:
            async for chunk in response.aiter_raw():
                received.append(chunk)

    assert b"".join(received) == b"".join(events[:2])
    record = await provider.wait_closed(0)
    assert record.close_kind == "server_fin"


async def test_reset_is_a_read_error_and_recorded_as_server_rst(
    provider: FakeProvider, client: httpx.AsyncClient
) -> None:
    events = render_anthropic(text=["Bonjour"])
    provider.enqueue(Scenario(body=[*events[:3], Sleep(0.05), Reset()]))

    with pytest.raises(httpx.TransportError):
        async with client.stream("POST", ANTHROPIC, json={"messages": [USER]}) as response:
            async for _ in response.aiter_raw():
                pass

    record = await provider.wait_closed(0)
    assert record.close_kind == "server_rst"


async def test_cut_inside_utf8_then_close_delivers_the_partial_character(
    provider: FakeProvider, client: httpx.AsyncClient
) -> None:
    body = cut_inside_utf8(render_openai(text=["Gr", "üße"]), after_events=1)
    provider.enqueue(Scenario(body=[*body, Close()]))
    received = bytearray()

    with pytest.raises(httpx.RemoteProtocolError):
        async with client.stream("POST", OPENAI, json={"messages": [USER]}) as response:
            async for chunk in response.aiter_raw():
                received += chunk

    assert bytes(received) == b"".join(body)


async def test_stall_then_client_close_is_recorded_as_client_fin(
    provider: FakeProvider, client: httpx.AsyncClient
) -> None:
    provider.enqueue(Scenario(body=[b": hello\n\n", Stall()]))

    async with client.stream("POST", OPENAI, json={"messages": [USER]}) as response:
        async for chunk in response.aiter_raw():
            assert chunk == b": hello\n\n"
            break
    # How soon is benchmark A3's httpx_close_seen_ms (benchmarks/adapters.py).

    record = await provider.wait_closed(0, timeout=5.0)
    assert record.close_kind == "client_fin"


async def test_trickle_forever_is_ended_by_the_client(
    provider: FakeProvider, client: httpx.AsyncClient
) -> None:
    provider.enqueue(Scenario(body=[Trickle(b": keep-alive\n\n", every=0.001, forever=True)]))
    received = bytearray()

    async with client.stream("POST", OPENAI, json={"messages": [USER]}) as response:
        async for chunk in response.aiter_raw():
            received += chunk
            if len(received) >= 40:
                break

    assert bytes(received).startswith(b": keep-alive\n\n: keep-alive\n\n")
    record = await provider.wait_closed(0)
    assert record.close_kind in ("client_fin", "client_rst")


async def test_sleep_delays_the_next_write(
    provider: FakeProvider, client: httpx.AsyncClient
) -> None:
    provider.enqueue(Scenario(body=[b"a", Sleep(0.2), b"b"]))
    arrivals = []

    async with client.stream("POST", OPENAI, json={"messages": [USER]}) as response:
        async for chunk in response.aiter_raw():
            arrivals.append((chunk, time.monotonic()))

    assert [chunk for chunk, _ in arrivals] == [b"a", b"b"]
    assert arrivals[1][1] - arrivals[0][1] >= 0.15


async def test_each_body_write_is_timed_before_the_client_sees_it(
    provider: FakeProvider, client: httpx.AsyncClient
) -> None:
    provider.enqueue(Scenario(body=[b"a", Sleep(0.2), b"b", Trickle(b"xy", every=0)]))
    arrivals = []

    async with client.stream("POST", OPENAI, json={"messages": [USER]}) as response:
        async for chunk in response.aiter_raw():
            arrivals.append((chunk, time.monotonic()))

    sent_at = provider.requests[0].sent_at
    assert len(sent_at) == 2  # the bytes elements only, not the trickle's pieces
    assert provider.requests[0].received_at <= sent_at[0] <= arrivals[0][1]
    assert sent_at[1] - sent_at[0] >= 0.2
    assert sent_at[1] <= arrivals[1][1]


async def test_unsized_body_ends_with_a_server_close(
    provider: FakeProvider, client: httpx.AsyncClient
) -> None:
    provider.enqueue(Scenario(body=[b"data: 1\n\n", Sleep(0.01), b"data: 2\n\n"],
                              chunked=False))

    response, data = await read_stream(client)

    assert data == b"data: 1\n\ndata: 2\n\n"
    assert "content-length" not in response.headers
    assert (await provider.wait_closed(0)).close_kind == "server_fin"


async def test_three_concurrent_streams(provider: FakeProvider) -> None:
    provider.enqueue(*[Scenario(body=[b"data: x\n\n", Sleep(0.2), b"data: y\n\n"])] * 3)

    async with httpx.AsyncClient(base_url=provider.base_url) as http:
        results = await asyncio.gather(*(read_stream(http) for _ in range(3)))

    assert [data for _, data in results] == [b"data: x\n\ndata: y\n\n"] * 3
    assert provider.max_concurrent == 3
    assert len(provider.connections) == 3


async def test_raw_client_reset_is_recorded_as_client_rst(provider: FakeProvider) -> None:
    provider.enqueue(Scenario(body=[b"x", Stall()]))
    host, port = provider.base_url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(b"POST /other HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
    await reader.readuntil(b"\r\n\r\n")
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()

    record = await provider.wait_closed(0)
    assert record.close_kind == "client_rst"


async def test_wait_closed_times_out_on_an_open_connection(provider: FakeProvider) -> None:
    provider.enqueue(Scenario())
    async with httpx.AsyncClient(base_url=provider.base_url) as http:
        await http.post(OPENAI, json={})
        with pytest.raises(TimeoutError, match="connection #0 not closed"):
            await provider.wait_closed(0, timeout=0.05)
    assert (await provider.wait_closed(0)).close_kind == "client_fin"


async def test_exit_closes_a_stalled_connection() -> None:
    async with httpx.AsyncClient(timeout=5.0) as http:
        async with FakeProvider() as fake:
            fake.enqueue(Scenario(body=[b"x", Stall()]))
            request = http.build_request("POST", fake.base_url + "/anything")
            response = await http.send(request, stream=True)

        assert fake.connections[0].close_kind == "server_fin"
        with pytest.raises(httpx.RemoteProtocolError):
            await response.aread()
        await response.aclose()


# -- history validation ---------------------------------------------------------------

OPENAI_CALL = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "call_1", "type": "function", "function": {"name": "w", "arguments": "{}"}}]}
ANTHROPIC_CALL = {"role": "assistant", "content": [
    {"type": "text", "text": "Checking."},
    {"type": "tool_use", "id": "toolu_1", "name": "w", "input": {}}]}


@pytest.mark.parametrize(("messages", "fragment"), [
    ([USER, OPENAI_CALL, USER], "did not have response messages: call_1"),
    ([USER, OPENAI_CALL], "did not have response messages: call_1"),
    ([USER, {"role": "tool", "tool_call_id": "call_9", "content": "x"}],
     "must be a response to a preceeding message with 'tool_calls'"),
])
async def test_invalid_openai_history_is_a_400_and_takes_no_scenario(
    provider: FakeProvider, client: httpx.AsyncClient, messages: list[Any], fragment: str
) -> None:
    provider.enqueue(Scenario(body=b"unused"))

    response = await client.post(OPENAI, json={"model": "m", "messages": messages})

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["code"] is None
    assert fragment in error["message"]
    assert provider.pending == 1


@pytest.mark.parametrize(("messages", "fragment"), [
    ([USER, ANTHROPIC_CALL, USER],
     "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: "
     "toolu_1."),
    ([USER, ANTHROPIC_CALL, {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_2", "content": "x"}]}],
     "messages.1: `tool_use` ids were found without"),
    ([USER, {"role": "assistant", "content": "ok"}, {"role": "user", "content": [
        {"type": "text", "text": "hi"},
        {"type": "tool_result", "tool_use_id": "toolu_2", "content": "x"}]}],
     "messages.2.content.1: unexpected `tool_use_id` found in `tool_result` blocks: toolu_2"),
])
async def test_invalid_anthropic_history_is_a_400_and_takes_no_scenario(
    provider: FakeProvider, client: httpx.AsyncClient, messages: list[Any], fragment: str
) -> None:
    provider.enqueue(Scenario(body=b"unused"))

    response = await client.post(ANTHROPIC, json={"model": "m", "messages": messages})

    assert response.status_code == 400
    assert response.json()["type"] == "error"
    assert response.json()["error"]["type"] == "invalid_request_error"
    assert fragment in response.json()["error"]["message"]
    assert provider.pending == 1


async def test_valid_histories_and_unchecked_scenarios_pass(
    provider: FakeProvider, client: httpx.AsyncClient
) -> None:
    openai = [USER, OPENAI_CALL, {"role": "tool", "tool_call_id": "call_1", "content": "sun"},
              {"role": "assistant", "content": "Sunny."}, USER]
    anthropic = [USER, ANTHROPIC_CALL, {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sun"}]}]
    provider.enqueue(Scenario(body=b"1"), Scenario(body=b"2"),
                     Scenario(body=b"3", check_history=False))

    assert (await client.post(OPENAI, json={"messages": openai})).content == b"1"
    assert (await client.post(ANTHROPIC, json={"messages": anthropic})).content == b"2"
    unchecked = await client.post(OPENAI, json={"messages": [USER, OPENAI_CALL]})
    assert unchecked.content == b"3"


async def test_a_body_that_is_not_json_is_a_400(
    provider: FakeProvider, client: httpx.AsyncClient
) -> None:
    provider.enqueue(Scenario())

    response = await client.post(ANTHROPIC, content=b"{not json")

    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"
    assert provider.pending == 1
