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

It is sans-I/O (:meth:`SSEParser.feed`); :func:`aiter_sse` drives it from an
async byte iterator such as httpx's ``response.aiter_bytes()``.
"""

from __future__ import annotations

import codecs
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass


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
    between feeds: a partial UTF-8 sequence, a partial line, a CR that may be
    the first half of a CRLF, the event being built, the last event id.
    """

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._started = False  # the first character (a possible BOM) has been seen
        self._skip_lf = False  # the last chunk ended in CR: an LF opening the next one is its pair
        self._line: list[str] = []  # pieces of an unfinished line (never hold CR or LF)
        self._data: list[str] = []
        self._event = ""
        self._last_id = ""
        self._retry: int | None = None

    @property
    def last_event_id(self) -> str:
        """The last event id so far (``""`` if none): what a client resumes with."""
        return self._last_id

    @property
    def retry(self) -> int | None:
        """The reconnection time in milliseconds the stream asked for, or ``None``."""
        return self._retry

    @property
    def has_pending(self) -> bool:
        """Whether an unfinished line or event is buffered (a cut stream leaves one)."""
        return bool(self._line or self._data or self._event or self._decoder.getstate()[0])

    def feed(self, chunk: bytes | str) -> list[SSEMessage]:
        """Parse the next piece of the stream.

        Args:
            chunk: raw bytes (decoded as UTF-8 here), or text. Text must not be
                fed while a UTF-8 sequence from a bytes chunk is unfinished.

        Returns:
            The events this piece completed, in order (often none).

        Raises:
            ValueError: text was fed in the middle of a UTF-8 sequence.
        """
        if isinstance(chunk, str):
            if self._decoder.getstate()[0]:
                raise ValueError("text fed in the middle of a UTF-8 sequence; feed bytes")
            text = chunk
        else:
            text = self._decoder.decode(chunk)
        return self._text(text)

    def flush(self) -> list[SSEMessage]:
        """End the stream: drop what is unfinished, as the standard does.

        An event whose closing blank line never came is not dispatched; neither
        is an unfinished last line. The parser can be fed again afterwards as a
        new connection (the last event id and retry persist, as in a reconnecting
        ``EventSource``).

        Returns:
            Always an empty list (kept so a caller can treat every stream end alike).
        """
        self._decoder.reset()
        self._started = False
        self._skip_lf = False
        self._line.clear()
        self._data = []
        self._event = ""
        return []

    def _text(self, text: str) -> list[SSEMessage]:
        if not text:
            return []
        if not self._started:
            self._started = True
            if text[0] == "\ufeff":
                text = text[1:]
        if self._skip_lf:
            self._skip_lf = False
            if text[:1] == "\n":
                text = text[1:]
        if "\r" in text:
            self._skip_lf = text[-1] == "\r"
            text = text.replace("\r\n", "\n").replace("\r", "\n")
        if "\n" not in text:
            if text:
                self._line.append(text)  # no join per piece: byte-wise feeding stays linear
            return []
        if self._line:
            self._line.append(text)
            text = "".join(self._line)
            self._line.clear()
        *lines, tail = text.split("\n")
        if tail:
            self._line.append(tail)
        messages: list[SSEMessage] = []
        for line in lines:
            self._process(line, messages)
        return messages

    def _process(self, line: str, messages: list[SSEMessage]) -> None:
        if not line:
            self._dispatch(messages)
            return
        if line[0] == ":":
            return
        name, colon, value = line.partition(":")
        if colon and value[:1] == " ":
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id":
            if "\0" not in value:
                self._last_id = value
        elif name == "retry" and value.isascii() and value.isdigit():
            self._retry = int(value)

    def _dispatch(self, messages: list[SSEMessage]) -> None:
        data, event = self._data, self._event
        self._data, self._event = [], ""
        if data:
            messages.append(SSEMessage(event or "message", "\n".join(data), self._last_id,
                                       self._retry))


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
