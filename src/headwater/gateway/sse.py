"""The gateway's one Server-Sent Events encoder (DESIGN §6).

Every frame a run sends is built here, once: :func:`encode_frame` checks the
type and renders the bytes, and the :class:`Frame` it returns carries both the
data and those bytes, so a frame that is logged, replayed to a resuming client
or sent to several followers is encoded once. A frame on the wire is::

    id: <n>
    event: <type>
    data: <compact JSON on one line>
    <blank line>

The data line never holds a line break: JSON escapes CR, LF and every other
control character, and the encoder also escapes U+2028, U+2029 (JSON-in-JS
safety) and U+0085 (so a client that splits lines with ``str.splitlines()``
still sees one line). Heartbeats are SSE comments and carry no id.

This runs once per streamed chunk, so it is kept lean (about 2–3 µs per delta
frame): the C JSON encoder is built once instead of once per call, substring
tests instead of regular expressions, no validation of ``data`` beyond what
JSON does, and the frame is built without the dataclass ``__init__``.
"""

from __future__ import annotations

import json
import json.encoder
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

FRAME_TYPES: Final[frozenset[str]] = frozenset({
    "delta",
    "reasoning",
    "message",
    "tool_call",
    "tool_progress",
    "tool_result",
    "approval_required",
    "tool_emission",
    "turn_complete",
    "error",
    "done",
})
"""The event types a run's stream may carry (DESIGN §6; ``tool_emission`` and
``turn_complete`` come from live runs only)."""

TERMINAL_TYPES: Final[frozenset[str]] = frozenset({"error", "done"})
"""The types that end a run's stream: exactly one of them, last."""

# allow_nan=False: NaN and Infinity are not JSON, and JSON.parse in a browser refuses them.
_ENCODER: Final = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))
# The fallback for text a UTF-8 encoder refuses (a lone surrogate decoded from provider JSON).
_encode_ascii = json.JSONEncoder(ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode


def _c_encoder() -> Callable[[Any], str]:
    """``_ENCODER.encode`` for mappings, without building a C encoder on every call.

    ``JSONEncoder.encode`` makes a new C encoder per call, which is half its cost
    on a small frame. This one is made once; it keeps no circular-reference
    markers (a shared markers dict would be left dirty by a failed call), so a
    cyclic ``data`` raises ``RecursionError``. Without the C accelerator (another
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


_encode = _c_encoder()
# Line separators JSON leaves raw; CR, LF, NUL and the C0 controls are already escaped.
_UNSAFE: Final = (("\u2028", "\\u2028"), ("\u2029", "\\u2029"), ("\x85", "\\u0085"))
_HEARTBEAT: Final = b": hb\n\n"


def _escape_separators(text: str) -> str:
    for char, escape in _UNSAFE:
        if char in text:
            text = text.replace(char, escape)
    return text


@dataclass(frozen=True, slots=True)
class Frame:
    """One SSE frame of a run: its id, type, data and the bytes that carry them.

    Build frames with :func:`encode_frame`, which guarantees that ``raw`` is the
    encoding of the other fields; a frame is immutable and can be sent any number
    of times. ``data`` is the dict that was encoded, not a copy (another kind of
    mapping is copied into a dict): do not mutate it afterwards.

    Attributes:
        id: the frame's id within its run: decimal on the wire, from 1, contiguous.
        type: one of :data:`FRAME_TYPES`.
        data: the frame's payload (wire JSON, hence ``Any`` values).
        raw: the encoded frame, UTF-8, ending in the blank line that dispatches it.
    """

    id: int
    type: str
    data: Mapping[str, Any]  # wire JSON
    raw: bytes

    @property
    def terminal(self) -> bool:
        """Whether this frame ends its run's stream (``error`` or ``done``)."""
        return self.type in TERMINAL_TYPES


# Filling the slots directly skips the frozen dataclass __init__ (a third of a frame's cost).
_new_frame = object.__new__
_set_id = Frame.__dict__["id"].__set__
_set_type = Frame.__dict__["type"].__set__
_set_data = Frame.__dict__["data"].__set__
_set_raw = Frame.__dict__["raw"].__set__


def encode_frame(id: int, type: str, data: Mapping[str, Any]) -> Frame:
    """Encode one frame: ``id: <id>``, ``event: <type>``, one ``data:`` line of JSON.

    Args:
        id: the frame's id in its run (from 1).
        type: one of :data:`FRAME_TYPES`.
        data: a JSON-serialisable mapping (wire JSON).

    Returns:
        The frame, with its bytes built once.

    Raises:
        ValueError: an unknown type, an id below 1, or NaN/Infinity in ``data``.
        TypeError: ``data`` holds something JSON cannot encode.
    """
    if type not in FRAME_TYPES:
        raise ValueError(f"unknown frame type {type!r}; expected one of {sorted(FRAME_TYPES)}")
    if id < 1:
        raise ValueError(f"frame ids start at 1, got {id}")
    if data.__class__ is not dict:
        data = dict(data)  # JSON encodes dicts only (not a MappingProxyType)
    text = _encode(data)
    if not text.isascii():  # O(1) in CPython: most deltas skip the scans
        text = _escape_separators(text)
    try:
        raw = f"id: {id}\nevent: {type}\ndata: {text}\n\n".encode()
    except UnicodeEncodeError:
        # A lone surrogate cannot be UTF-8; as a JSON \\u escape it survives the round trip.
        raw = f"id: {id}\nevent: {type}\ndata: {_encode_ascii(data)}\n\n".encode()
    frame = _new_frame(Frame)
    _set_id(frame, id)
    _set_type(frame, type)
    _set_data(frame, data)
    _set_raw(frame, raw)
    return frame


def heartbeat() -> bytes:
    """The heartbeat: an SSE comment (``: hb``), which carries no id and dispatches nothing."""
    return _HEARTBEAT


def retry_hint(ms: int) -> bytes:
    """A ``retry:`` field that sets the client's reconnection delay; dispatches no event.

    Args:
        ms: the delay in milliseconds.

    Raises:
        ValueError: ``ms`` is negative.
    """
    if ms < 0:
        raise ValueError(f"a retry delay is a non-negative number of milliseconds, got {ms}")
    return b"retry: %d\n\n" % ms
