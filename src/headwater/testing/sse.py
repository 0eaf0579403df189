"""A Server-Sent Events parser for tests: the WHATWG HTML "event stream interpretation".

Users test their own front ends and gateways with it: feed it the bytes a
server sent, in whatever pieces they arrived, and it returns the events a
browser's ``EventSource`` would dispatch, with the same rules:

- the stream is UTF-8, decoded incrementally (a chunk may end inside a
  character; invalid bytes become U+FFFD), and one leading BOM is dropped;
- only CR, LF and CRLF end a line, also when a CRLF is split across chunks
  (U+2028, U+2029 and U+0085 are ordinary characters);
- a line starting with ``:`` is a comment; otherwise the field name ends at the
  first colon and one space after it is dropped (a line without a colon is a
  field with an empty value);
- ``data`` lines accumulate, joined with LF; ``event`` sets the type; ``id``
  sets the last event id unless its value contains NUL; ``retry`` sets the
  reconnection time when its value is ASCII digits only; other fields are
  ignored;
- a blank line dispatches the event, unless it has no ``data`` field at all;
  the last event id and the reconnection time persist across events;
- at the end of the stream an event without its blank line is discarded.

It reads with the package's one decoder, :class:`headwater.sse.SSEDecoder`
(the one the provider adapters and ``headwater chat`` use), and gives the events
as text. It is sans-I/O (:meth:`SSEParser.feed`); :func:`aiter_sse` drives it
from an async byte iterator such as httpx's ``response.aiter_bytes()``.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass

from ..core.sse import ServerSentEvent, SSEDecoder


@dataclass
class SSEMessage:
    """One dispatched event.

    Attributes:
        event: the event type (``"message"`` when the event set none).
        data: the data lines joined with LF (no trailing LF).
        id: the last event id at dispatch: set by this event or an earlier one,
            ``""`` if none was ever set (what ``MessageEvent.lastEventId`` holds).
        retry: the reconnection time in milliseconds at dispatch (the last valid
            ``retry`` field so far), or ``None`` if none was sent.
    """

    event: str = "message"
    data: str = ""
    id: str = ""
    retry: int | None = None


class SSEParser:
    """An incremental event-stream parser; one per stream.

    Feed it bytes (or text already decoded) in any split; it keeps the state
    between feeds: a partial line (and in it a partial UTF-8 sequence), a CR
    that may be the first half of a CRLF, the event being built, the last event
    id. Lines and events are bounded as the decoder's are.

    Args:
        max_line_chars: longest line accepted (bytes).
        max_event_chars: largest event data accepted (bytes).
    """

    def __init__(self, max_line_chars: int = 1 << 20, max_event_chars: int = 8 << 20) -> None:
        self._decoder = SSEDecoder(max_line_chars, max_event_chars)
        self._tail = b""  # the last bytes fed (up to 3): an unfinished UTF-8 sequence?

    @property
    def last_event_id(self) -> str:
        """The last event id so far (``""`` if none): what a client resumes with."""
        return self._decoder.last_event_id or ""

    @property
    def retry(self) -> int | None:
        """The reconnection time in milliseconds the stream asked for, or ``None``."""
        return self._decoder.retry

    @property
    def has_pending(self) -> bool:
        """Whether an unfinished line or event is buffered (a cut stream leaves one)."""
        return self._decoder.has_pending

    def feed(self, chunk: bytes | str) -> list[SSEMessage]:
        """Parse the next piece of the stream.

        Args:
            chunk: raw bytes (decoded as UTF-8 here), or text. Text must not be
                fed while a UTF-8 sequence from a bytes chunk is unfinished.

        Returns:
            The events this piece completed, in order (often none).

        Raises:
            ValueError: text was fed in the middle of a UTF-8 sequence.
            headwater.errors.SSEDecodeError: a line or an event exceeds its bound.
        """
        if isinstance(chunk, str):
            if _unfinished_utf8(self._tail):
                raise ValueError("text fed in the middle of a UTF-8 sequence; feed bytes")
            data = chunk.encode("utf-8", "surrogatepass")
        else:
            data = chunk
        if data:
            self._tail = (self._tail + data[-3:])[-3:]
        return [_message(event) for event in self._decoder.feed(data)]

    def flush(self) -> list[SSEMessage]:
        """End the stream: drop what is unfinished, as the standard does.

        An event whose closing blank line never came is not dispatched; neither
        is an unfinished last line. The parser can be fed again afterwards as a
        new connection (the last event id and retry persist, as in a reconnecting
        ``EventSource``).

        Returns:
            Always an empty list (kept so a caller can treat every stream end alike).
        """
        self._decoder.flush()
        self._tail = b""
        return []


def _message(event: ServerSentEvent) -> SSEMessage:
    return SSEMessage(event.event, event.text, event.id or "", event.retry)


def _unfinished_utf8(tail: bytes) -> bool:
    """Whether ``tail`` (the last bytes of a stream) ends inside a UTF-8 sequence."""
    for back in range(1, len(tail) + 1):
        byte = tail[-back]
        if byte < 0x80:  # ASCII: nothing open
            return False
        if byte >= 0xC0:  # a lead byte: does the sequence it opens still lack bytes?
            return back < (2 if byte < 0xE0 else 3 if byte < 0xF0 else 4)
    return False  # continuation bytes only: complete (or invalid, already replaced)


async def aiter_sse(byte_iterator: AsyncIterable[bytes | str]) -> AsyncIterator[SSEMessage]:
    """The events of an event stream read from an async iterator of chunks.

    Typical use, with httpx::

        async with client.stream("POST", url, json=body) as response:
            async for message in aiter_sse(response.aiter_bytes()):
                ...

    The iterator is consumed to its end; an event left without its blank line
    at the end is discarded (as a browser does). Closing this generator early
    does not close ``byte_iterator``: its owner (the ``async with``) does.

    Args:
        byte_iterator: the stream's body, in chunks of any size.

    Yields:
        Each dispatched event, as soon as its blank line arrives.
    """
    parser = SSEParser()
    async for chunk in byte_iterator:
        for message in parser.feed(chunk):
            yield message
    parser.flush()
