"""Bounds on every HTTP request before the app sees it: an id, a body size and deadline, a log.

Re-exported from :mod:`headwater.gateway.http.limits`, where the code lives.
"""

from .http.limits import RequestLimits, lone_surrogate

__all__ = ("RequestLimits", "lone_surrogate")
