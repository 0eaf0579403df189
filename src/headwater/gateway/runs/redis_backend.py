"""Redis for a gateway of several replicas: the run log in Redis Streams, and the run registry.

The pieces: :mod:`.redis_client` (the client and :class:`RedisHealth`),
:mod:`.redis_runlog` (:class:`RedisRunLog`, its frames sent in batches by
:mod:`.redis_writer`) and :mod:`.redis_registry`
(:class:`RedisRunRegistry`); this module names them all and draws the keys they
share. Needs redis-py (``pip install "headwater[redis]"``), imported only when
a client is made. Every key and channel starts with
``Settings.redis_key_prefix`` (``headwater:``):

==============================  =================================================================
``run:<id>:meta``               hash: ``n`` (the last frame id in Redis), ``end`` (1 once the
                                terminal frame is in), ``lazy`` (1 while the frames are only on
                                the replica that runs it), ``owner`` (that replica's log id),
                                ``opener``
``run:<id>:frames``             stream: frame *n* is entry ``n-0``, fields ``t`` (its type) and
                                ``f`` (its SSE bytes); an entry ``n-1`` marks a forgotten run
``run:<id>:info``               hash: ``user``, ``session``, ``agent``, ``replica``, ``status``
``run:<id>:followers``          sorted set: the streams following the run, by expiry
``active:<len>:<user>:<sid>``   the id of the user's run going on in the session
``streams:<len>:<user>``        sorted set: the user's open streams on every replica, by expiry
``starts:<len>:<user>:<n>``     the user's run starts in the *n*-th ``run_rate_window``
``cancel:<replica>``            pub/sub channel: ids of the replica's runs to cancel
``frames:<log id>``             pub/sub channel: ids of the replica's runs a follower elsewhere
                                wants (it sends them to Redis)
==============================  =================================================================

A run's frames and meta expire ``redis_run_ttl`` after its replica last wrote or
renewed them while it runs and ``redis_ended_ttl`` after its terminal frame. Its record, its
session's active key and the stream entries expire ``redis_liveness_ttl``
after their replica last renewed them (it renews every third of that), so a
dead replica's runs and streams age out. One Redis server (not a cluster).

Redis down, refusing or silent past ``redis_timeout``: every call raises
:class:`~headwater.errors.RunStoreUnavailable` (``run_store_unavailable``), and
:class:`RedisHealth` logs one line when the outage starts and one when Redis
answers again. Nothing is retried here (but a failed run's terminal frame, which
the run log's writer writes once Redis takes it) and nothing needs a restart:
each call takes a connection from the pool, which connects again once Redis is
back.
"""

from __future__ import annotations

from .redis_client import RedisHealth, connect, disconnect
from .redis_registry import RedisRunRegistry
from .redis_runlog import RedisRunLog

__all__ = ("RedisHealth", "RedisRunLog", "RedisRunRegistry", "connect", "disconnect")
