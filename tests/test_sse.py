"""The sans-I/O SSE decoder: WHATWG line rules, any split, bounds, linear cost."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headwater.errors import SSEDecodeError
from headwater.sse import ServerSentEvent, SSEDecoder


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
