"""A sans-I/O Server-Sent Events decoder (WHATWG HTML "event stream" rules).

Bytes in, events out: :meth:`SSEDecoder.feed` takes any split of the stream
and returns the events completed so far. Only CR, LF and CRLF end a line (so
U+2028, U+2029 and U+0085 inside data survive); a leading BOM is stripped once;
comment lines are ignored; multi-line data is joined with LF. Lines and events
are bounded: past a bound the decoder raises instead of growing.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass

from ..errors import ModelError

_EOL = re.compile(r"[\r\n]")


class SSEDecodeError(ModelError):
    """The event stream broke a bound (a line or an event too long)."""


@dataclass(slots=True)
class ServerSentEvent:
    """One dispatched event: its type (``"message"`` by default), data, last id, retry."""

    event: str
    data: str
    id: str | None = None
    retry: int | None = None


class SSEDecoder:
    """Incremental decoder; one per response body.

    Args:
        max_line_chars: longest line accepted (characters).
        max_event_chars: largest event data accepted (characters).
    """

    __slots__ = ("_bom_checked", "_data", "_data_len", "_decoder", "_event", "_last_id",
                 "_max_event", "_max_line", "_pending", "_pending_len", "_retry", "_skip_lf")

    def __init__(self, max_line_chars: int = 1 << 20, max_event_chars: int = 8 << 20) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._max_line = max_line_chars
        self._max_event = max_event_chars
        self._bom_checked = False
        self._skip_lf = False
        self._pending: list[str] = []
        self._pending_len = 0
        self._data: list[str] = []
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
        text = self._decoder.decode(data)
        if not text:
            return []
        if not self._bom_checked:
            self._bom_checked = True
            if text[0] == "\ufeff":
                text = text[1:]
        return self._lines(text)

    def flush(self, dispatch_incomplete: bool = False) -> list[ServerSentEvent]:
        """End of stream.

        Args:
            dispatch_incomplete: also dispatch a last event that lacks its closing
                blank line (recorded bodies often do). The standard discards it,
                which is the default; a caller that opts in must treat a
                malformed last event as a truncated stream.
        """
        tail = self._decoder.decode(b"", final=True)
        events = self._lines(tail) if tail else []
        if dispatch_incomplete:
            if self._pending:
                line = "".join(self._pending)
                if line:
                    self._field(line)
            if self._data:
                events.append(self._dispatch())
        self._pending.clear()
        self._pending_len = 0
        self._data = []
        self._data_len = 0
        return events

    def _lines(self, text: str) -> list[ServerSentEvent]:
        events: list[ServerSentEvent] = []
        pos, n = 0, len(text)
        if self._skip_lf:
            self._skip_lf = False
            if text[0] == "\n":
                pos = 1
        search = _EOL.search
        while pos < n:
            match = search(text, pos)
            if match is None:
                self._pending.append(text[pos:])
                self._pending_len += n - pos
                if self._pending_len > self._max_line:
                    raise SSEDecodeError(
                        f"event-stream line longer than {self._max_line} characters")
                break
            end = match.start()
            line = text[pos:end]
            if self._pending:
                self._pending.append(line)
                line = "".join(self._pending)
                self._pending.clear()
                self._pending_len = 0
                if len(line) > self._max_line:
                    raise SSEDecodeError(
                        f"event-stream line longer than {self._max_line} characters")
            if text[end] == "\r":
                if end + 1 < n:
                    if text[end + 1] == "\n":
                        end += 1
                else:
                    self._skip_lf = True
            pos = end + 1
            if line:
                self._field(line)
            elif self._data:
                events.append(self._dispatch())
            else:
                self._event = None
        return events

    def _field(self, line: str) -> None:
        colon = line.find(":")
        if colon == 0:
            return  # a comment
        if colon < 0:
            name, value = line, ""
        else:
            name, value = line[:colon], line[colon + 1 :]
            if value[:1] == " ":
                value = value[1:]
        if name == "data":
            self._data.append(value)
            self._data_len += len(value) + 1
            if self._data_len > self._max_event:
                raise SSEDecodeError(f"event larger than {self._max_event} characters")
        elif name == "event":
            self._event = value
        elif name == "id":
            if "\0" not in value:
                self._last_id = value
        elif name == "retry" and value.isascii() and value.isdigit():
            self._retry = int(value)

    def _dispatch(self) -> ServerSentEvent:
        data = self._data[0] if len(self._data) == 1 else "\n".join(self._data)
        event = ServerSentEvent(self._event or "message", data, self._last_id, self._retry)
        self._data = []
        self._data_len = 0
        self._event = None
        return event
