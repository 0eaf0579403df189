"""Runs in flight and their frames, in one process or across replicas.

It owns the run manager (``manager``: ``RunManager`` starts each run's task,
buffers its frames, forgets an ended run, cancels one), the run log
(``runlog``: a run's frames for resuming, ``InMemoryRunLog``), the run registry
(``registry``: runs as every replica sees them, ``LocalRunRegistry``) and their
Redis versions (``redis_backend``; ``redis_client``, ``redis_runlog``,
``redis_registry``). It may import the bottom layer, the runner's public names,
``gateway.wire`` and itself — nothing of ``gateway.http`` or the surfaces at
the gateway's root, and no web framework.

This package's own names are those of ``manager`` (``headwater.gateway.runs``
was that module): library code imports ``headwater.gateway.runs.manager``.
"""

from .manager import Run, RunManager, StopReason

__all__ = ("Run", "RunManager", "StopReason")
