"""Where the gateway's replicas learn of each other's runs (docs/frame-protocol.md).

Re-exported from :mod:`headwater.gateway.runs.registry`, where the code lives.
"""

from .runs.registry import LocalRunRegistry, RunInfo, RunRegistry, RunStatus

__all__ = ("LocalRunRegistry", "RunInfo", "RunRegistry", "RunStatus")
