"""A run of an agent on a session, from its start to its end: the machinery under ``Runner``.

- ``lifecycle``: :class:`Run`, one run with one state field (:class:`RunState`)
  and the one lifecycle every source of events goes through (a lone agent, a
  tree, a live session): the start, the events, a stop noted, the end.
- ``hold``: :class:`SessionHold`, the run's lease on its session (taken, renewed,
  released).
- ``recorder``: :class:`Recorder`, the one place a run's events are persisted.
- ``stream``: :class:`RunStream`, what the caller iterates, and :class:`RunResult`.

It sits in the runner's layer (docs/architecture.md, "Layers"): it imports the
agents and everything under them, and only :mod:`headwater.runner` and the
layers above import it. Users import ``RunStream`` and ``RunResult`` from
:mod:`headwater.runner`.
"""

from .hold import SessionHold as SessionHold
from .lifecycle import Run as Run
from .lifecycle import RunHost as RunHost
from .lifecycle import RunState as RunState
from .recorder import Recorder as Recorder
from .recorder import SealReason as SealReason
from .stream import RunResult as RunResult
from .stream import RunStream as RunStream

__all__ = ("Recorder", "Run", "RunHost", "RunResult", "RunState", "RunStream", "SealReason",
           "SessionHold")
