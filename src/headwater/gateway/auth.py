"""Who is calling: bearer tokens to user ids.

Re-exported from :mod:`headwater.gateway.http.auth`, where the code lives.
"""

from .http.auth import (
    DEV_USER,
    Authenticator,
    JWTAuth,
    StaticTokenAuth,
    auth_from_settings,
    bearer_token,
    is_loopback,
    user_dependency,
    user_of,
)

__all__ = (
    "DEV_USER",
    "Authenticator",
    "JWTAuth",
    "StaticTokenAuth",
    "auth_from_settings",
    "bearer_token",
    "is_loopback",
    "user_dependency",
    "user_of",
)
