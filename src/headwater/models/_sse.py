"""A sans-I/O Server-Sent Events decoder (WHATWG HTML "event stream" rules).

Bytes in, events out: :meth:`SSEDecoder.feed` takes any split of the stream
and returns the events completed so far. Only CR, LF and CRLF end a line (so
U+2028, U+2029 and U+0085 inside data survive); a leading BOM is stripped once;
comment lines are ignored; multi-line data is joined with LF. Lines and events
are bounded: past a bound the decoder raises instead of growing.

The decoder works on bytes and leaves ``data`` as UTF-8 bytes: the adapters
hand it straight to a JSON parser, which validates the encoding, so the text is
decoded once. Splitting on the bytes CR and LF is exact in UTF-8 (neither
occurs inside a multi-byte character), so a chunk boundary inside a character
is harmless. Event names and ids are decoded (rare, short).
"""

from __future__ import annotations

from typing import NamedTuple

from ..errors import SSEDecodeError

_BOM = b"\xef\xbb\xbf"
_new = tuple.__new__




class ServerSentEvent(NamedTuple):
    """One dispatched event: its type (``"message"`` by default), data (UTF-8), id, retry.

    A named tuple: one is made per provider chunk, so it has to be cheap.
    """

    event: str
    data: bytes
    id: str | None = None
    retry: int | None = None

    @property
    def text(self) -> str:
        """The data decoded (invalid UTF-8 replaced, as the standard decodes it)."""
        return self.data.decode("utf-8", errors="replace")


class SSEDecoder:
    """Incremental decoder; one per response body.

    Args:
        max_line_chars: longest line accepted (bytes).
        max_event_chars: largest event data accepted (bytes).
    """

    __slots__ = ("_bom_checked", "_data", "_data_len", "_event", "_last_id", "_max_event",
                 "_max_line", "_pending", "_pending_len", "_retry", "_skip_lf")

    def __init__(self, max_line_chars: int = 1 << 20, max_event_chars: int = 8 << 20) -> None:
        self._max_line = max_line_chars
        self._max_event = max_event_chars
        self._bom_checked = False
        self._skip_lf = False
        self._pending: list[bytes] = []
        self._pending_len = 0
        self._data: list[bytes] = []
        self._data_len = 0
        self._event: str | None = None
        self._last_id: str | None = None
        self._retry: int | None = None

    @property
    def has_pending(self) -> bool:
        """Whether an unfinished line or event is buffered (the stream was cut mid-event)."""
        return bool(self._pending or self._data)

    def feed(self, data: bytes) -> list[ServerSentEvent]:
        """Decode more bytes; returns the events they complete.

        Raises:
            SSEDecodeError: a line or an event exceeds its bound.
        """
        if not data:
            return []
        if not self._bom_checked:
            head = b"".join(self._pending) + data if self._pending else data
            self._pending.clear()
            self._pending_len = 0
            if len(head) < 3 and _BOM.startswith(head):
                self._pending.append(head)  # maybe the start of a BOM: wait for more
                self._pending_len = len(head)
                return []
            self._bom_checked = True
            data = head[3:] if head.startswith(_BOM) else head
            if not data:
                return []
        return self._lines(data)

    def flush(self, dispatch_incomplete: bool = False) -> list[ServerSentEvent]:
        """End of stream.

        Args:
            dispatch_incomplete: also dispatch a last event that lacks its closing
                blank line (recorded bodies often do). The standard discards it,
                which is the default; a caller that opts in must treat a
                malformed last event as a truncated stream.
        """
        events: list[ServerSentEvent] = []
        if dispatch_incomplete:
            if self._pending:
                line = b"".join(self._pending)
                if line and line[:1] != b":":
                    self._field(line)
            if self._data:
                events.append(self._dispatch())
        self._pending.clear()
        self._pending_len = 0
        self._data = []
        self._data_len = 0
        return events

    def _lines(self, chunk: bytes) -> list[ServerSentEvent]:
        if self._skip_lf:
            self._skip_lf = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        if b"\r" in chunk:
            # A CR at the very end may be the first half of a CRLF split across feeds.
            self._skip_lf = chunk[-1:] == b"\r"
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        pending = self._pending
        if b"\n" not in chunk:
            # Still inside one line: buffer the piece (no join, so byte-wise feeding is linear).
            if chunk:
                pending.append(chunk)
                self._pending_len += len(chunk)
                if self._pending_len > self._max_line:
                    raise SSEDecodeError(f"event-stream line longer than {self._max_line} bytes")
            return []
        if pending:
            chunk = b"".join(pending) + chunk
            pending.clear()
            self._pending_len = 0
        events: list[ServerSentEvent] = []
        blocks = chunk.split(b"\n\n")  # an event ends at a blank line
        tail = blocks.pop()
        limit = self._max_line
        plain = not self._data and self._event is None
        last_id, retry = self._last_id, self._retry
        for block in blocks:
            if (plain and block.startswith(b"data: ") and b"\n" not in block
                    and len(block) <= limit):
                # The hot path: a one-line data event (tuple.__new__ skips the Python-level
                # __new__ of the named tuple).
                events.append(_new(ServerSentEvent, ("message", block[6:], last_id, retry)))
                continue
            for line in block.split(b"\n"):
                self._line(line, events)
            self._line(b"", events)
            plain = not self._data and self._event is None
            last_id, retry = self._last_id, self._retry
        if b"\n" in tail:
            *complete, tail = tail.split(b"\n")
            for line in complete:
                self._line(line, events)
        if tail:
            pending.append(tail)
            self._pending_len = len(tail)
            if len(tail) > limit:
                raise SSEDecodeError(f"event-stream line longer than {limit} bytes")
        return events

    def _line(self, line: bytes, events: list[ServerSentEvent]) -> None:
        if not line:
            if self._data:
                events.append(self._dispatch())
            else:
                self._event = None
        elif len(line) > self._max_line:
            raise SSEDecodeError(f"event-stream line longer than {self._max_line} bytes")
        elif line[:1] != b":":
            self._field(line)

    def _field(self, line: bytes) -> None:
        name, colon, value = line.partition(b":")
        if colon and value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            self._data.append(value)
            self._data_len += len(value) + 1
            if self._data_len > self._max_event:
                raise SSEDecodeError(f"event larger than {self._max_event} bytes")
        elif name == b"event":
            self._event = value.decode("utf-8", errors="replace")
        elif name == b"id":
            if b"\0" not in value:
                self._last_id = value.decode("utf-8", errors="replace")
        elif name == b"retry" and value.isdigit():
            self._retry = int(value)

    def _dispatch(self) -> ServerSentEvent:
        data = self._data[0] if len(self._data) == 1 else b"\n".join(self._data)
        event = ServerSentEvent(self._event or "message", data, self._last_id, self._retry)
        self._data = []
        self._data_len = 0
        self._event = None
        return event
