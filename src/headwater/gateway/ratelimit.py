"""A per-user request rate limit: one token bucket per user, across the whole app.

Re-exported from :mod:`headwater.gateway.http.ratelimit`, where the code lives.
"""

from .http.ratelimit import UserRateLimit

__all__ = ("UserRateLimit",)
