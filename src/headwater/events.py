"""The event contract (docs/event-contract.md): the one stream every run yields.

Re-exported from :mod:`headwater.core.events`, where the code lives.
"""

from .core.events import (
    NO_ACTIONS,
    ApprovalDecision,
    ApprovalRequest,
    Event,
    EventActions,
    PartialEvent,
    ToolProgress,
    ToolStreamEvent,
    call_line,
    event_from_json,
    event_to_json,
    new_id,
    partial_event,
    progress_line,
    random_id,
)

__all__ = (
    "NO_ACTIONS",
    "ApprovalDecision",
    "ApprovalRequest",
    "Event",
    "EventActions",
    "PartialEvent",
    "ToolProgress",
    "ToolStreamEvent",
    "call_line",
    "event_from_json",
    "event_to_json",
    "new_id",
    "partial_event",
    "progress_line",
    "random_id",
)
