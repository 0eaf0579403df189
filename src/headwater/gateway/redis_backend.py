"""Redis for a gateway of several replicas: the run log in Redis Streams, and the run registry.

Re-exported from :mod:`headwater.gateway.runs.redis_backend`, where the code lives.
"""

from .runs.redis_backend import RedisHealth, RedisRunLog, RedisRunRegistry, connect, disconnect

__all__ = ("RedisHealth", "RedisRunLog", "RedisRunRegistry", "connect", "disconnect")
