"""The gateway's SSE encoder and the testing SSE parser: exact bytes, WHATWG rules, round trip."""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import FrozenInstanceError
from types import MappingProxyType
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headwater import sse
from headwater.gateway import agui, vercel
from headwater.gateway.sse import (
    FRAME_TYPES,
    TERMINAL_TYPES,
    Frame,
    decode_frame,
    encode_frame,
    heartbeat,
    retry_hint,
)
from headwater.gateway.websocket import frame_text
from headwater.testing import SSEMessage, SSEParser, aiter_sse


def parse(*chunks: bytes | str) -> list[SSEMessage]:
    parser = SSEParser()
    messages = [m for chunk in chunks for m in parser.feed(chunk)]
    return messages + parser.flush()


# -- encoder -------------------------------------------------------------------------------


def test_frame_bytes_are_exact() -> None:
    delta = encode_frame(3, "delta", {"author": "shop", "text": "Héllo\n\"x\""})
    assert delta.raw == ('id: 3\nevent: delta\ndata: {"author":"shop","text":"Héllo\\n\\"x\\""}'
                         "\n\n").encode()
    done = encode_frame(7, "done", {"usage": {"input_tokens": 12, "output_tokens": 3}})
    assert done.raw == (b'id: 7\nevent: done\ndata: {"usage":{"input_tokens":12,'
                        b'"output_tokens":3}}\n\n')
    assert (delta.id, delta.type, delta.data) == (3, "delta", {"author": "shop",
                                                               "text": "Héllo\n\"x\""})


def test_line_separators_and_controls_are_escaped() -> None:
    frame = encode_frame(1, "delta", {"author": "a", "text": "a\rb\nc\0d\u2028e\u2029f\x85g"})
    assert frame.raw == (b'id: 1\nevent: delta\ndata: {"author":"a","text":'
                         b'"a\\rb\\nc\\u0000d\\u2028e\\u2029f\\u0085g"}\n\n')


def test_lone_surrogate_is_sent_as_an_escape() -> None:
    # json.loads of provider text can yield one; UTF-8 cannot carry it raw.
    frame = encode_frame(1, "delta", {"author": "é", "text": "x\ud800"})
    assert frame.raw.endswith(b'data: {"author":"\\u00e9","text":"x\\ud800"}\n\n')
    assert json.loads(parse(frame.raw)[0].data) == frame.data


@pytest.mark.parametrize("text", ["plain", "a\u2028b\u2029c\x85d", "é€𝄞\n", "x\ud800"])
def test_every_gateway_encoder_writes_the_one_codecs_bytes(text: str) -> None:
    # The typed frames, AG-UI, Vercel and the WebSocket: the same JSON, the same escapes.
    data = {"author": "a", "text": text}
    frame = encode_frame(2, "delta", data)
    assert frame.raw == sse.encode_event(data, "delta", 2)
    assert agui.encode_event(data) == vercel.chunk(data) == sse.encode_event(data)
    message = frame_text(frame)
    assert message == f'{{"id":2,"type":"delta","data":{sse.encode_json(data)}}}'
    assert json.loads(message) == {"id": 2, "type": "delta", "data": data}
    assert message.splitlines() == [message] and message.encode()  # UTF-8, one line


def test_terminal_types() -> None:
    assert {"error", "done"} == TERMINAL_TYPES and TERMINAL_TYPES <= FRAME_TYPES
    assert encode_frame(1, "error", {"code": "internal"}).terminal
    assert encode_frame(1, "done", {}).terminal
    assert not any(encode_frame(1, t, {}).terminal for t in FRAME_TYPES - TERMINAL_TYPES)


@pytest.mark.parametrize("bad", ["Delta", "ping", "", "message\n", "delta "])
def test_unknown_type_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="unknown frame type"):
        encode_frame(1, bad, {})


def test_bad_ids_and_data_are_refused() -> None:
    with pytest.raises(ValueError, match="start at 1"):
        encode_frame(0, "delta", {})
    with pytest.raises(ValueError):
        encode_frame(1, "delta", {"x": math.nan})  # not JSON: a browser's JSON.parse refuses it
    with pytest.raises(TypeError):
        encode_frame(1, "delta", {"x": object()})
    cyclic: dict[str, Any] = {}
    cyclic["self"] = cyclic
    with pytest.raises((ValueError, RecursionError)):
        encode_frame(1, "delta", cyclic)
    assert encode_frame(2, "delta", {"x": 1}).raw.startswith(b"id: 2\n")  # still works


def test_any_mapping_is_encoded_and_frames_are_frozen() -> None:
    frame = encode_frame(1, "tool_call", MappingProxyType({"names": ["a"]}))
    assert frame.raw == b'id: 1\nevent: tool_call\ndata: {"names":["a"]}\n\n'
    with pytest.raises(FrozenInstanceError):
        frame.id = 2  # type: ignore[misc]
    assert frame == Frame(1, "tool_call", {"names": ["a"]}, frame.raw)


def test_decode_frame_reads_back_what_encode_frame_wrote() -> None:
    for frame in (encode_frame(1, "delta", {"author": "a", "text": "line\u2028sep ✓\n"}),
                  encode_frame(42, "done", {"usage": {"input_tokens": 3, "output_tokens": 4}}),
                  encode_frame(7, "message", {"author": "a", "id": "e1", "text": "",
                                              "final": True, "n": [1.5, None]})):
        again = decode_frame(frame.raw)
        assert again == frame and again.raw is frame.raw and again.terminal == frame.terminal
    for bad in (b"", b": hb\n\n", b"event: delta\ndata: {}\n\n",  # no id
                encode_frame(1, "delta", {}).raw * 2):  # two frames
        with pytest.raises(ValueError, match="not one encoded frame"):
            decode_frame(bad)


def test_heartbeat_and_retry_hint() -> None:
    assert heartbeat() == b": hb\n\n"
    assert retry_hint(2500) == b"retry: 2500\n\n"
    assert retry_hint(0) == b"retry: 0\n\n"
    with pytest.raises(ValueError):
        retry_hint(-1)
    # Neither dispatches an event; the hint sets the reconnection time of later events.
    frame = encode_frame(1, "done", {})
    assert parse(heartbeat(), retry_hint(2500), heartbeat(), frame.raw) == [
        SSEMessage("done", "{}", "1", 2500)]


# -- parser: the WHATWG rules --------------------------------------------------------------


@pytest.mark.parametrize("eol", ["\n", "\r", "\r\n"])
def test_every_line_ending_at_every_split(eol: str) -> None:
    body = f"event: a{eol}data: 1{eol}data: 2{eol}{eol}data: 3{eol}{eol}".encode()
    expected = [SSEMessage("a", "1\n2"), SSEMessage("message", "3")]
    for cut in range(len(body) + 1):
        assert parse(body[:cut], body[cut:]) == expected, cut
    assert parse(*[body[i:i + 1] for i in range(len(body))]) == expected


def test_cr_at_chunk_end_then_lf_is_one_line_end() -> None:
    # A CR LF pair split across feeds is one line end; two would dispatch an empty event.
    assert parse(b"data: a\r", b"\ndata: b\r", b"\n\r", b"\n") == [SSEMessage(data="a\nb")]
    assert parse(b"data: a\r", b"\r") == [SSEMessage(data="a")]  # CR CR: a blank line
    assert parse(b"data: a\r", b"", b"\n\n") == [SSEMessage(data="a")]  # an empty feed between


def test_bom_is_stripped_at_the_start_only() -> None:
    assert parse(b"\xef\xbb\xbfdata: a\n\n") == [SSEMessage(data="a")]
    assert parse(b"\xef", b"\xbb", b"\xbfdata: a\n\n") == [SSEMessage(data="a")]
    assert parse("\ufeffdata: a\n\n") == [SSEMessage(data="a")]
    # A second BOM is part of the next line: a field named "\ufeffdata", ignored.
    assert parse(b"\xef\xbb\xbf\xef\xbb\xbfdata: a\n\n") == []
    assert parse(b"data: a\n\n\xef\xbb\xbfdata: b\n\n") == [SSEMessage(data="a")]


def test_comments_and_unknown_fields_are_ignored() -> None:
    body = b": hello\n:\ndata: a\n: inside\nfoo: bar\n\n: hb\n\n"
    assert parse(body) == [SSEMessage(data="a")]


def test_field_and_value_split_at_the_first_colon() -> None:
    assert parse(b"data\n\n") == [SSEMessage(data="")]  # no colon: empty value
    assert parse(b"data:x\n\n") == [SSEMessage(data="x")]  # no space
    assert parse(b"data: x\n\n") == [SSEMessage(data="x")]  # one space dropped
    assert parse(b"data:  x\n\n") == [SSEMessage(data=" x")]  # only one
    assert parse(b"data: a: b:c\n\n") == [SSEMessage(data="a: b:c")]
    assert parse(b"data :x\n\n") == []  # field "data " is unknown
    assert parse(b"event:\tx\ndata\n\n") == [SSEMessage("\tx", "")]  # only a space is dropped


def test_multi_line_data_is_joined_with_lf() -> None:
    assert parse(b"data: a\ndata:\ndata: b\n\n") == [SSEMessage(data="a\n\nb")]
    assert parse(b"data\ndata\n\n") == [SSEMessage(data="\n")]


def test_event_type_resets_and_empty_event_defaults_to_message() -> None:
    body = b"event: x\ndata: 1\n\ndata: 2\n\nevent:\ndata: 3\n\n"
    assert parse(body) == [SSEMessage("x", "1"), SSEMessage("message", "2"),
                           SSEMessage("message", "3")]


def test_event_without_data_is_not_dispatched() -> None:
    assert parse(b"event: x\n\nid: 5\n\ndata: a\n\n") == [SSEMessage("message", "a", "5")]


def test_last_event_id_persists_and_nul_ids_are_ignored() -> None:
    body = b"id: 1\ndata: a\n\ndata: b\n\nid: 2\0x\ndata: c\n\nid\ndata: d\n\n"
    assert [(m.data, m.id) for m in parse(body)] == [("a", "1"), ("b", "1"), ("c", "1"),
                                                     ("d", "")]
    parser = SSEParser()
    parser.feed(b"id: 9\n\n")
    assert parser.last_event_id == "9"


@pytest.mark.parametrize(("value", "expected"),
                         [("100", 100), ("0", 0), ("", None), ("1.5", None), ("  10", None),
                          ("10ms", None), ("-1", None), ("\u0663", None)])  # ٣: not ASCII
def test_retry_takes_ascii_digits_only(value: str, expected: int | None) -> None:
    parser = SSEParser()
    messages = parser.feed(f"retry:{value}\ndata: a\n\n")
    assert messages[0].retry == expected == parser.retry


def test_no_dispatch_without_a_blank_line_at_the_end() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: a\n\ndata: b\n") == [SSEMessage(data="a")]
    assert parser.has_pending
    assert parser.flush() == []
    assert not parser.has_pending
    assert parse(b"data: a") == []


def test_invalid_utf8_becomes_replacement_characters() -> None:
    assert parse(b"data: a\xffb\n\n") == [SSEMessage(data="a\ufffdb")]
    parser = SSEParser()
    assert parser.feed(b"data: \xe2\x82") == []  # an unfinished euro sign
    assert parser.has_pending
    with pytest.raises(ValueError, match="UTF-8"):
        parser.feed("x")
    assert parser.feed(b"\xac\n\n") == [SSEMessage(data="€")]


def test_unicode_line_separators_are_not_line_ends() -> None:
    text = "a\u2028b\u2029c\x85d\x0be\x0cf\x1cg"
    assert parse(f"data: {text}\n\n".encode()) == [SSEMessage(data=text)]


async def test_aiter_sse_reads_an_httpx_body() -> None:
    body = b"retry: 10\n\nid: 1\nevent: delta\ndata: {}\n\n: hb\n\ndata: cut"

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})

    async with (httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client,
                client.stream("GET", "http://gateway.test/runs/r/stream") as response):
        messages = [m async for m in aiter_sse(response.aiter_bytes())]
    assert messages == [SSEMessage("delta", "{}", "1", 10)]


async def test_aiter_sse_across_tiny_chunks() -> None:
    raw = b"".join(encode_frame(i, "delta", {"author": "a", "text": "é€𝄞"}).raw
                   for i in (1, 2))

    async def chunks() -> Any:
        for i in range(len(raw)):
            yield raw[i:i + 1]

    messages = [m async for m in aiter_sse(chunks())]
    assert [(m.id, json.loads(m.data)["text"]) for m in messages] == [("1", "é€𝄞"),
                                                                       ("2", "é€𝄞")]


# -- round trip: encoder -> random chunking -> parser --------------------------------------

# All of Unicode but surrogates, with the characters that break naive framing made common.
_TRICKY = "\r\n\0\u2028\u2029\x85\ufeff\x0b\x0c\x1c\x1d\x1e:\\\"é€𝄞"
_texts = st.text(st.one_of(st.characters(), st.sampled_from(_TRICKY)))


@st.composite
def _chunkings(draw: st.DrawFn, raw: bytes) -> list[bytes]:
    cuts = sorted(draw(st.lists(st.integers(0, len(raw)), max_size=20)))
    bounds = [0, *cuts, len(raw)]
    return [raw[a:b] for a, b in itertools.pairwise(bounds)]


@pytest.mark.timeout(240)  # 300 examples: half a minute of hypothesis on a busy machine
@settings(max_examples=300, deadline=None)
@given(deltas=st.lists(st.tuples(_texts, _texts), max_size=8), data=st.data())
def test_frames_survive_any_chunking(deltas: list[tuple[str, str]], data: st.DataObject) -> None:
    frames = [encode_frame(i, "delta", {"author": author, "text": text})
              for i, (author, text) in enumerate(deltas, start=1)]
    frames.append(encode_frame(len(frames) + 1, "done", {"usage": {}}))
    for frame in frames:
        lines = frame.raw.split(b"\n")
        assert lines[3:] == [b"", b""] and lines[0] == b"id: %d" % frame.id
        data_line = lines[2].decode()
        assert b"\r" not in frame.raw
        assert data_line.splitlines() == [data_line]  # no separator of any kind inside
        assert data_line.startswith("data: ")
    chunks = data.draw(_chunkings(b"".join(f.raw for f in frames)))
    messages = parse(*chunks)
    got = [(m.id, m.event, json.loads(m.data)) for m in messages]
    assert got == [(str(f.id), f.type, f.data) for f in frames]


@settings(max_examples=100, deadline=None)
@given(text=_texts, data=st.data())
def test_parser_agrees_with_itself_on_any_split(text: str, data: st.DataObject) -> None:
    # Arbitrary (not only well-formed) input: every split gives the one-piece result.
    raw = text.encode("utf-8", "surrogatepass")  # a lone surrogate: bytes that are not UTF-8
    assert parse(*data.draw(_chunkings(raw))) == parse(raw)
