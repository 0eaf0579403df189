"""The run log in Redis Streams (:class:`RedisRunLog`), shared by the gateway's replicas.

Re-exported from :mod:`headwater.gateway.runs.redis_runlog`, where the code lives.
"""

from .runs.redis_runlog import RedisRunLog

__all__ = ("RedisRunLog",)
