"""The caller's trace, made current for each request: a run it starts is a child of its span.

Re-exported from :mod:`headwater.gateway.http.tracing`, where the code lives.
"""

from .http.tracing import TraceContext

__all__ = ("TraceContext",)
