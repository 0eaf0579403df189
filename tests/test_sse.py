"""headwater.sse: the decoder (WHATWG rules, any split, bounds, linear cost), the encoder, and
the round trip from one to the other."""

from __future__ import annotations

import itertools
import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headwater.errors import SSEDecodeError
from headwater.sse import (
    ServerSentEvent,
    SSEDecoder,
    encode_comment,
    encode_event,
    encode_json,
    encode_retry,
)


def decode(chunks: list[bytes], **kw: int) -> list[ServerSentEvent]:
    decoder = SSEDecoder(**kw)
    events = []
    for chunk in chunks:
        events.extend(decoder.feed(chunk))
    events.extend(decoder.flush())
    return events


def test_fields_comments_and_multiline_data() -> None:
    body = (b"\xef\xbb\xbf: a comment\r\n"
            b"event: update\r\ndata: one\r\ndata:two\r\nid: 7\r\nretry: 1500\r\n\r\n"
            b"data\n\n"
            b"data: x\rdata: y\r\r"
            b"event: ignored-without-data\n\n"
            b"data: unfinished")
    events = decode([body])
    assert events == [
        ServerSentEvent("update", b"one\ntwo", "7", 1500),
        ServerSentEvent("message", b"", "7", 1500),
        ServerSentEvent("message", b"x\ny", "7", 1500),
    ]


def test_bom_is_stripped_once_only() -> None:
    events = decode([b"\xef\xbb", b"\xbfdata: a\n\n\xef\xbb\xbfdata: b\n\n"])
    assert [e.data for e in events] == [b"a"]  # the second BOM makes a field named "\ufeffdata"
    body = b"\xef\xbb\xbfdata: b\n\n"
    assert [e.data for e in decode([body[i:i + 1] for i in range(len(body))])] == [b"b"]


def test_unicode_line_separators_survive() -> None:
    text = "a\u2028b\u2029c\u0085d"
    events = decode([f"data: {text}\n\n".encode()])
    assert events[0].text == text


@settings(max_examples=300, deadline=None)
@given(events=st.lists(st.tuples(st.sampled_from(["", "event: e\n", "id: 1\n"]),
                                 st.lists(st.text(alphabet=st.characters(
                                     blacklist_characters="\r\n", blacklist_categories=["Cs"])),
                                     min_size=1, max_size=3)),
                       max_size=6),
       eol=st.sampled_from(["\n", "\r", "\r\n"]),
       data=st.data())
def test_any_split_decodes_to_the_same_events(events: list[tuple[str, list[str]]], eol: str,
                                              data: st.DataObject) -> None:
    body = "".join(head.replace("\n", eol) + "".join(f"data: {d}{eol}" for d in lines) + eol
                   for head, lines in events).encode()
    whole = decode([body])
    cuts = sorted(data.draw(st.sets(st.integers(0, len(body)), max_size=20)))
    bounds = [0, *cuts, len(body)]
    pieces = [body[a:b] for a, b in itertools.pairwise(bounds)]
    assert decode(pieces) == whole
    assert decode([bytes([b]) for b in body]) == whole
    assert [e.text for e in whole] == ["\n".join(lines) for _, lines in events]


def test_line_over_the_limit_fails_clearly() -> None:
    decoder = SSEDecoder(max_line_chars=1000)
    with pytest.raises(SSEDecodeError, match="longer than 1000 bytes"):
        for _ in range(100):
            decoder.feed(b"data: " + b"x" * 100)


def test_event_over_the_limit_fails_clearly() -> None:
    decoder = SSEDecoder(max_event_chars=1000)
    with pytest.raises(SSEDecodeError, match="larger than 1000 bytes"):
        for _ in range(100):
            decoder.feed(b"data: " + b"x" * 50 + b"\n")


def test_one_byte_at_a_time_decodes_every_event() -> None:
    # How the cost grows with the body fed this way is benchmark A2 (benchmarks/adapters.py).
    body = (b"data: " + b"y" * 200 + b"\n\n") * 64
    decoder = SSEDecoder()
    events = [e for i in range(len(body)) for e in decoder.feed(body[i : i + 1])]
    assert [e.data for e in events] == [b"y" * 200] * 64
    assert decoder.flush() == []


# -- the decoder: WHATWG cases ---------------------------------------------------------------


def test_last_event_id_and_retry_persist_and_are_readable() -> None:
    decoder = SSEDecoder()
    assert (decoder.last_event_id, decoder.retry) == (None, None)
    events = decoder.feed(b"id: 1\nretry: 250\ndata: a\n\ndata: b\n\nid\ndata: c\n\n")
    assert [(e.data, e.id, e.retry) for e in events] == [(b"a", "1", 250), (b"b", "1", 250),
                                                         (b"c", "", 250)]
    assert (decoder.last_event_id, decoder.retry) == ("", 250)


def test_ids_with_nul_and_retries_that_are_not_ascii_digits_are_ignored() -> None:
    body = ("id: 7\nretry: 10\n\nid: 8\0x\nretry: 1.5\nretry: \u0663\nretry: -1\n"
            "data: a\n\n").encode()
    assert decode([body]) == [ServerSentEvent("message", b"a", "7", 10)]


def test_field_names_and_the_one_optional_space() -> None:
    body = (b"data\n\n"  # no colon: the field with an empty value
            b"data:x\n\n" b"data:  x\n\n" b"data: a: b\n\n"
            b"data :x\n\n"  # a field named "data ", unknown: no data, no event
            b"event:\tx\ndata\n\n" b"event:\ndata: y\n\n")
    assert [(e.event, e.data) for e in decode([body])] == [
        ("message", b""), ("message", b"x"), ("message", b" x"), ("message", b"a: b"),
        ("\tx", b""), ("message", b"y")]


def test_an_event_type_without_data_is_dropped_at_the_blank_line() -> None:
    assert decode([b"event: x\n\ndata: a\n\n"]) == [ServerSentEvent("message", b"a")]


def test_cr_lf_split_across_feeds_is_one_line_end() -> None:
    assert [e.data for e in decode([b"data: a\r", b"\ndata: b\r", b"\n\r", b"\n"])] == [
        b"a\nb"]
    assert [e.data for e in decode([b"data: a\r", b"\r"])] == [b"a"]  # CR CR: a blank line
    assert [e.data for e in decode([b"data: a\r", b"", b"\n\n"])] == [b"a"]


def test_has_pending_sees_a_line_data_or_an_event_type() -> None:
    decoder = SSEDecoder()
    for piece in (b"\xef", b"data: a", b"data: a\n", b"event: x\n"):
        assert decoder.feed(piece) == [] and decoder.has_pending, piece
        decoder.flush()
        assert not decoder.has_pending


def test_flush_ends_a_connection_and_the_decoder_reads_the_next() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"id: 4\nretry: 9\n\nevent: x\ndata: cut\r") == []
    assert decoder.flush() == []  # the standard drops the event without its blank line
    # A new connection: its BOM is stripped, a leading LF is not the old CR's pair.
    events = decoder.feed(b"\xef\xbb\xbf\ndata: b\n\n")
    assert events == [ServerSentEvent("message", b"b", "4", 9)]


def test_flush_may_dispatch_the_last_event_of_a_recorded_body() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\ndata: b") == []
    assert decoder.flush(dispatch_incomplete=True) == [ServerSentEvent("message", b"a\nb")]


def test_text_replaces_invalid_utf8_as_a_browser_does() -> None:
    assert [e.text for e in decode([b"data: a\xffb\xe2\x82", b"\n\n"])] == ["a\ufffdb\ufffd"]
    assert [e.text for e in decode([b"data: \xe2\x82", b"\xac\n\n"])] == ["\u20ac"]


# -- the encoder -----------------------------------------------------------------------------


def test_event_bytes_are_exact_in_each_form() -> None:
    data = {"text": 'Héllo\n"x"', "n": [1, None, True]}
    line = 'data: {"text":"Héllo\\n\\"x\\"","n":[1,null,true]}\n\n'
    assert encode_event(data) == line.encode()
    assert encode_event(data, "delta") == f"event: delta\n{line}".encode()
    assert encode_event(data, "delta", 3) == f"id: 3\nevent: delta\n{line}".encode()
    assert encode_event(data, id="r-1") == f"id: r-1\n{line}".encode()
    assert encode_event("[DONE]") == b'data: "[DONE]"\n\n'  # any JSON value


def test_separators_and_controls_are_escaped_on_one_line() -> None:
    raw = encode_event({"t": "a\rb\nc\0d\u2028e\u2029f\x85g"})
    assert raw == b'data: {"t":"a\\rb\\nc\\u0000d\\u2028e\\u2029f\\u0085g"}\n\n'
    assert encode_json({"t": "\u2028\x85é"}) == '{"t":"\\u2028\\u0085é"}'


def test_a_lone_surrogate_makes_the_line_ascii_json() -> None:
    data = {"author": "é", "text": "x\ud800"}
    assert encode_event(data, "delta", 1) == (
        b'id: 1\nevent: delta\ndata: {"author":"\\u00e9","text":"x\\ud800"}\n\n')
    assert encode_json(data) == '{"author":"\\u00e9","text":"x\\ud800"}'
    assert json.loads(decode([encode_event(data)])[0].data) == data


def test_what_is_not_json_or_would_break_the_framing_is_refused() -> None:
    with pytest.raises(ValueError):
        encode_event({"x": math.inf})
    with pytest.raises(ValueError):
        encode_json({"x": math.nan})
    with pytest.raises(TypeError):
        encode_event({"x": object()})
    for event, id in (("a\nb", None), ("a\rb", None), (None, "1\n2"), (None, "1\x002"),
                      ("ok", "a\rb")):
        with pytest.raises(ValueError, match="line break"):
            encode_event({}, event, id)
    with pytest.raises(ValueError, match="line break"):
        encode_comment("a\nb")
    with pytest.raises(ValueError, match="non-negative"):
        encode_retry(-1)


def test_comments_and_retry_dispatch_nothing() -> None:
    assert encode_comment("hb") == b": hb\n\n" and encode_comment() == b":\n\n"
    assert encode_retry(2500) == b"retry: 2500\n\n"
    body = encode_comment("hb") + encode_retry(2500) + encode_event({}, "done", 1)
    assert decode([body]) == [ServerSentEvent("done", b"{}", "1", 2500)]


# -- the round trip: encoder -> any chunking -> decoder ------------------------------------

# All of Unicode but surrogates, with the characters that break naive framing made common.
_TRICKY = "\r\n\0\u2028\u2029\x85\ufeff\x0b\x0c\x1c\x1d\x1e:\\\"é€𝄞 "
_texts = st.text(st.one_of(st.characters(blacklist_categories=["Cs"]), st.sampled_from(_TRICKY)))
_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | _texts,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_texts, inner, max_size=4),
    max_leaves=12)
_names = st.text(st.characters(blacklist_categories=["Cs", "Cc", "Zl", "Zp"]), min_size=1)
_events = st.tuples(_json_values, st.none() | _names,
                    st.none() | st.integers(0, 2**63) | st.text(st.characters(
                        blacklist_categories=["Cs"], blacklist_characters="\r\n\0")))


@pytest.mark.timeout(240)  # 300 examples: half a minute of hypothesis on a busy machine
@settings(max_examples=300, deadline=None)
@given(events=st.lists(_events, min_size=1, max_size=8), surrogate=st.booleans(),
       data=st.data())
def test_encoded_events_decode_to_themselves_at_any_split(
        events: list[tuple[Any, str | None, int | str | None]], surrogate: bool,
        data: st.DataObject) -> None:
    if surrogate:  # a lone surrogate, as json.loads of provider text can yield
        events.append(({"text": "x\udc80y"}, "delta", None))
    body = b"".join(encode_event(value, event, id) for value, event, id in events)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(body)), max_size=20)))
    bounds = [0, *cuts, len(body)]
    decoded = decode([body[a:b] for a, b in itertools.pairwise(bounds)])
    expected_ids, last = [], None
    for _, _, id in events:
        last = str(id) if id is not None else last
        expected_ids.append(last)
    assert [(json.loads(e.data), e.event, e.id) for e in decoded] == [
        (value, event or "message", id) for (value, event, _), id in zip(events, expected_ids,
                                                                         strict=True)]
    for value, event, id in events:  # one data line, and no separator of any kind inside it
        line = encode_event(value, event, id).decode().split("\n")[-3]
        assert line.startswith("data: ") and line.splitlines() == [line]
        assert encode_json(value) == line[6:]
