"""``LiveRequestQueue``: what a client pushes into a live (BIDI) run.

Re-exported from :mod:`headwater.core.live_request_queue`, where the code lives.
"""

from .core.live_request_queue import LiveRequest, LiveRequestQueue, OverflowPolicy

__all__ = ("LiveRequest", "LiveRequestQueue", "OverflowPolicy")
