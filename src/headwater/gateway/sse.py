"""A run's frames on the wire (docs/frame-protocol.md), encoded with :mod:`headwater.sse`.

Re-exported from :mod:`headwater.gateway.wire.sse`, where the code lives.
"""

from .wire.sse import (
    FRAME_TYPES,
    TERMINAL_TYPES,
    Frame,
    decode_frame,
    encode_frame,
    heartbeat,
    retry_hint,
)

__all__ = (
    "FRAME_TYPES",
    "TERMINAL_TYPES",
    "Frame",
    "decode_frame",
    "encode_frame",
    "heartbeat",
    "retry_hint",
)
