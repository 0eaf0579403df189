"""A run's frames on the wire (docs/frame-protocol.md), encoded with :mod:`headwater.sse`.

Every frame a run sends is built here, once: :func:`encode_frame` checks the
type and renders the bytes with :func:`headwater.sse.encode_event`, and the
:class:`Frame` it returns carries both the data and those bytes, so a frame
that is logged, replayed to a resuming client or sent to several followers is
encoded once. A frame on the wire is::

    id: <n>
    event: <type>
    data: <compact JSON on one line>
    <blank line>

The data line never holds a line break, and U+2028, U+2029 and U+0085 are
escaped too (the encoder's rules, :mod:`headwater.sse`). Heartbeats are SSE
comments and carry no id.

This runs once per streamed chunk, so it is kept lean (about 2–3 µs per delta
frame): no validation of ``data`` beyond what JSON does, and the frame is
built without the dataclass ``__init__``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from ...core.sse import SSEDecoder, encode_comment, encode_event, encode_retry

FRAME_TYPES: Final[frozenset[str]] = frozenset({
    "delta",
    "reasoning",
    "message",
    "tool_call",
    "tool_progress",
    "tool_result",
    "approval_required",
    "agent_transfer",
    "agent_error",
    "tool_emission",
    "turn_complete",
    "error",
    "done",
})
"""The event types a run's stream may carry (docs/frame-protocol.md; ``tool_emission`` and
``turn_complete`` come from live runs only)."""

TERMINAL_TYPES: Final[frozenset[str]] = frozenset({"error", "done"})
"""The types that end a run's stream: exactly one of them, last."""

_HEARTBEAT: Final = encode_comment("hb")


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
    raw = encode_event(data, type, id)
    frame = _new_frame(Frame)
    _set_id(frame, id)
    _set_type(frame, type)
    _set_data(frame, data)
    _set_raw(frame, raw)
    return frame


def decode_frame(raw: bytes) -> Frame:
    """The frame whose bytes are ``raw`` (what :func:`encode_frame` made), read back with
    the one SSE decoder (:mod:`headwater.sse`): for a log that keeps only the bytes.

    Raises:
        ValueError: ``raw`` is not one frame with an id, a type and JSON data.
    """
    events = SSEDecoder(max_line_chars=len(raw), max_event_chars=len(raw)).feed(raw)
    event = events[0] if len(events) == 1 else None
    if event is None or not event.id:
        raise ValueError(f"not one encoded frame: {raw[:80]!r}")
    frame = _new_frame(Frame)
    _set_id(frame, int(event.id))
    _set_type(frame, event.event)
    _set_data(frame, json.loads(event.data))
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
    return encode_retry(ms)
