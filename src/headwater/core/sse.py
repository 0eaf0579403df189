"""Server-Sent Events, both ways: the one decoder and the one encoder of the package.

Every event stream headwater reads or writes goes through this module: the
provider adapters decode with :class:`SSEDecoder`, and so do ``headwater chat``
and :mod:`headwater.testing`; the gateway's typed frames, its AG-UI and Vercel
streams are encoded with :func:`encode_event`, and its WebSocket messages carry
the same JSON (:func:`encode_json`). Only the page's JavaScript reader
(``gateway/static/sse.js``, the browser's side) is separate; it is tested
against this encoder's output.

**Decoding** follows the WHATWG HTML "event stream interpretation". Bytes in,
events out: :meth:`SSEDecoder.feed` takes any split of the stream and returns
the events completed so far. Only CR, LF and CRLF end a line (also a CRLF split
across feeds; U+2028, U+2029 and U+0085 inside data survive); a leading BOM is
stripped once per connection; comment lines are ignored; a field name ends at
the first colon and one space after it is dropped; ``data`` lines are joined
with LF; ``event`` sets the type (``"message"`` by default); ``id`` sets the
last event id unless it holds NUL; ``retry`` sets the reconnection time when
its value is ASCII digits; a blank line dispatches the event unless it has no
data; the last event id and the retry persist across events. Lines and events
are bounded: past a bound the decoder raises instead of growing.

The decoder leaves ``data`` as UTF-8 bytes: the adapters hand it straight to a
JSON parser, which validates the encoding, so the text is decoded once
(:attr:`ServerSentEvent.text` decodes it as a browser does, invalid bytes
becoming U+FFFD). Splitting on the bytes CR, LF and ``:`` is exact in UTF-8
(none occurs inside a multi-byte character), so a chunk boundary inside a
character is harmless. Event names and ids are decoded (rare, short).

**Encoding** writes an event as optional ``id:`` and ``event:`` lines and one
``data:`` line of compact JSON, then the blank line that dispatches it::

    id: <id>
    event: <type>
    data: <compact JSON on one line>
    <blank line>

The data line never holds a line break: JSON escapes CR, LF and every other
control character, and the encoder also escapes U+2028, U+2029 (JSON-in-JS
safety) and U+0085 (so a client that splits lines with ``str.splitlines()``
still sees one line). A lone surrogate (which UTF-8 cannot carry; ``json.loads``
of provider text can yield one) makes the whole line ASCII JSON, where it is a
``\\u`` escape.

Both directions run once per streamed chunk, so they are kept lean: the
decoder has a fast path for the one-line ``data:`` event and makes one named
tuple per event; the encoder builds its C JSON encoder once, tests substrings
instead of running regular expressions, and builds the bytes in one f-string.
"""

from __future__ import annotations

import json
import json.encoder
from collections.abc import Callable
from typing import Any, Final, NamedTuple

from .errors import SSEDecodeError

__all__ = (
    "SSEDecoder",
    "ServerSentEvent",
    "encode_comment",
    "encode_event",
    "encode_json",
    "encode_retry",
)

_BOM = b"\xef\xbb\xbf"
_new = tuple.__new__


# -- decoding ------------------------------------------------------------------------------------


class ServerSentEvent(NamedTuple):
    """One dispatched event: its type (``"message"`` by default), data (UTF-8), id, retry.

    A named tuple: one is made per provider chunk, so it has to be cheap.

    Attributes:
        event: the event type; ``"message"`` when the event set none (or an empty one).
        data: the data lines joined with LF (no trailing LF), as UTF-8 bytes.
        id: the last event id at dispatch, set by this event or an earlier one;
            ``None`` if the stream never sent one.
        retry: the reconnection time in milliseconds at dispatch (the last valid
            ``retry`` field so far), or ``None``.
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
    """Incremental decoder; one per stream (it holds no resource: drop it when done).

    It keeps what a split stream needs between feeds: an unfinished line, a CR
    that may be the first half of a CRLF, the event being built, the last event
    id and the retry. :meth:`flush` ends a connection; the decoder may then be
    fed the next one (the last event id and the retry persist, as in a
    reconnecting ``EventSource``).

    Args:
        max_line_chars: longest line accepted (bytes); the provider adapters pass
            ``Settings.sse_max_line_chars``.
        max_event_chars: largest event data accepted (bytes);
            ``Settings.sse_max_event_chars``.
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
        return bool(self._pending or self._data) or self._event is not None

    @property
    def last_event_id(self) -> str | None:
        """The last event id so far (``None`` if none was sent): what a client resumes with."""
        return self._last_id

    @property
    def retry(self) -> int | None:
        """The reconnection time in milliseconds the stream asked for, or ``None``."""
        return self._retry

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
        """End of stream: drop what is unfinished, as the standard does.

        An event whose closing blank line never came is not dispatched, and
        neither is an unfinished last line. Afterwards the decoder reads a new
        connection (a BOM may open it again); the last event id and the retry
        persist.

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
        self._event = None
        self._skip_lf = False
        self._bom_checked = False
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


# -- encoding ------------------------------------------------------------------------------------

# allow_nan=False: NaN and Infinity are not JSON, and JSON.parse in a browser refuses them.
_ENCODER: Final = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))
# The fallback for text a UTF-8 encoder refuses (a lone surrogate decoded from provider JSON).
_encode_ascii: Final = json.JSONEncoder(ensure_ascii=True, allow_nan=False,
                                        separators=(",", ":")).encode


def _c_encoder() -> Callable[[Any], str]:
    """``_ENCODER.encode``, without building a C encoder on every call.

    ``JSONEncoder.encode`` makes a new C encoder per call, which is half its cost
    on a small event. This one is made once; it keeps no circular-reference
    markers (a shared markers dict would be left dirty by a failed call), so a
    cyclic value raises ``RecursionError``. Without the C accelerator (another
    interpreter) it is the plain ``encode``.
    """
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return _ENCODER.encode
    iterencode = make(None, _ENCODER.default, json.encoder.encode_basestring, None, ":", ",",
                      False, False, False)
    join = "".join

    def encode(data: Any) -> str:  # wire JSON
        return join(iterencode(data, 0))

    return encode


_encode: Final = _c_encoder()
# Line separators JSON leaves raw; CR, LF, NUL and the C0 controls are already escaped.
_UNSAFE: Final = (("\u2028", "\\u2028"), ("\u2029", "\\u2029"), ("\x85", "\\u0085"))


def _escape_separators(text: str) -> str:
    for char, escape in _UNSAFE:
        if char in text:
            text = text.replace(char, escape)
    return text


def _check_field(name: str, value: str) -> None:
    if "\n" in value or "\r" in value or (name == "id" and "\0" in value):
        raise ValueError(f"an SSE {name} cannot hold a line break{' or NUL' * (name == 'id')}: "
                         f"{value!r}")


def encode_json(data: Any) -> str:  # wire JSON in
    """``data`` as compact JSON on one line, escaped exactly as a ``data:`` line carries it.

    What the gateway's WebSocket sends for a frame: the same text as the SSE
    data line, so both transports escape alike. The text always encodes as
    UTF-8 (a lone surrogate makes it ASCII JSON).

    Args:
        data: a JSON value built from dicts, lists, strings, numbers, booleans
            and ``None`` (another kind of mapping must be made a dict first).

    Raises:
        ValueError: NaN or Infinity in ``data``.
        TypeError: ``data`` holds something JSON cannot encode.
        RecursionError: ``data`` contains itself.
    """
    text = _encode(data)
    if text.isascii():  # O(1) in CPython
        return text
    text = _escape_separators(text)
    try:
        text.encode()
    except UnicodeEncodeError:
        return _encode_ascii(data)
    return text


def encode_event(data: Any, event: str | None = None, id: int | str | None = None) -> bytes:
    """One event: ``id:`` and ``event:`` lines when given, one ``data:`` line of JSON, a blank line.

    Args:
        data: the event's data, a JSON value (see :func:`encode_json`).
        event: the event type; ``None`` leaves it out (the client sees ``"message"``).
        id: the event id (an int is written in decimal); ``None`` leaves it out.

    Returns:
        The event's bytes (UTF-8), ending in the blank line that dispatches it.

    Raises:
        ValueError: NaN or Infinity in ``data``; an ``event`` or ``id`` holding
            a line break (or an ``id`` holding NUL).
        TypeError: ``data`` holds something JSON cannot encode.
        RecursionError: ``data`` contains itself.
    """
    text = _encode(data)
    if not text.isascii():  # O(1) in CPython: most deltas skip the scans
        text = _escape_separators(text)
    if event is None:
        if id is None:
            line = f"data: {text}\n\n"
        else:
            if id.__class__ is not int:
                _check_field("id", str(id))
            line = f"id: {id}\ndata: {text}\n\n"
    else:
        if not event.isprintable():  # a line break (one test, inline: this runs per event)
            _check_field("event", event)
        if id.__class__ is int:  # the gateway's frames
            line = f"id: {id}\nevent: {event}\ndata: {text}\n\n"
        elif id is None:
            line = f"event: {event}\ndata: {text}\n\n"
        else:
            _check_field("id", str(id))
            line = f"id: {id}\nevent: {event}\ndata: {text}\n\n"
    try:
        return line.encode()
    except UnicodeEncodeError:
        # A lone surrogate cannot be UTF-8; as a JSON \u escape it survives the round trip.
        head = line[:len(line) - len(text) - 2]
        return f"{head}{_encode_ascii(data)}\n\n".encode()


def encode_comment(text: str = "") -> bytes:
    """A comment line (``: <text>``) and a blank line: dispatches nothing (a heartbeat).

    Raises:
        ValueError: ``text`` holds a line break.
    """
    _check_field("comment", text)
    return f": {text}\n\n".encode() if text else b":\n\n"


def encode_retry(ms: int) -> bytes:
    """A ``retry:`` field that sets the client's reconnection delay; dispatches no event.

    Args:
        ms: the delay in milliseconds.

    Raises:
        ValueError: ``ms`` is negative.
    """
    if ms < 0:
        raise ValueError(f"a retry delay is a non-negative number of milliseconds, got {ms}")
    return b"retry: %d\n\n" % ms
