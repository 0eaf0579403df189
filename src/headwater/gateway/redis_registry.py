"""The run registry in Redis (:class:`RedisRunRegistry`): the runs and streams of every replica.

Re-exported from :mod:`headwater.gateway.runs.redis_registry`, where the code lives.
"""

from .runs.redis_registry import RedisRunRegistry

__all__ = ("RedisRunRegistry",)
