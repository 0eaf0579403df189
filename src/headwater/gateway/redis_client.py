"""The Redis client of the gateway's Redis pieces, and the one place that tells an outage.

Re-exported from :mod:`headwater.gateway.runs.redis_client`, where the code lives.
"""

from .runs.redis_client import RedisHealth, connect, disconnect, ms

__all__ = ("RedisHealth", "connect", "disconnect", "ms")
