"""Which browser pages may call the gateway: CORS for the listed origins, Host and Origin checks.

Re-exported from :mod:`headwater.gateway.http.origins`, where the code lives.
"""

from .http.origins import (
    ALLOW_METHODS,
    EXPOSE_HEADERS,
    PREFLIGHT_MAX_AGE,
    OriginGuard,
    allowed_origins,
)

__all__ = ("ALLOW_METHODS", "EXPOSE_HEADERS", "PREFLIGHT_MAX_AGE", "OriginGuard", "allowed_origins")
