"""The frame log of runs (docs/frame-protocol.md): append once, replay and follow many times.

Re-exported from :mod:`headwater.gateway.runs.runlog`, where the code lives.
"""

from .runs.runlog import InMemoryRunLog, RunLog, check_after

__all__ = ("InMemoryRunLog", "RunLog", "check_after")
