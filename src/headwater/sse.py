"""Server-Sent Events, both ways: the one decoder and the one encoder of the package.

Re-exported from :mod:`headwater.core.sse`, where the code lives.
"""

from .core.sse import (
    ServerSentEvent,
    SSEDecoder,
    encode_comment,
    encode_event,
    encode_json,
    encode_retry,
)

__all__ = (
    "SSEDecoder",
    "ServerSentEvent",
    "encode_comment",
    "encode_event",
    "encode_json",
    "encode_retry",
)
