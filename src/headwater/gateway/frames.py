"""Events to typed frames: the one home of what the browser may see.

Re-exported from :mod:`headwater.gateway.wire.frames`, where the code lives.
"""

from .wire.frames import (
    RETRYABLE,
    FrameMapper,
    FramePayload,
    above,
    done_frame,
    error_frame,
    outer_call_id,
    result_size,
    result_status,
    speaker_key,
)

__all__ = (
    "RETRYABLE",
    "FrameMapper",
    "FramePayload",
    "above",
    "done_frame",
    "error_frame",
    "outer_call_id",
    "result_size",
    "result_status",
    "speaker_key",
)
