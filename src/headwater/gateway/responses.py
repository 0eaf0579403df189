"""The SSE response: frames out, heartbeats while idle, and disposal when the client goes.

Re-exported from :mod:`headwater.gateway.http.responses`, where the code lives.
"""

from .http.responses import SSE_HEADERS, Render, SSEResponse, StallWatch, render_frame

__all__ = ("SSE_HEADERS", "Render", "SSEResponse", "StallWatch", "render_frame")
