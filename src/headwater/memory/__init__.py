"""Memory of past sessions, as in Google ADK (``google.adk.memory``).

``InMemoryMemoryService`` for tests and one-process demos;
``SqlMemoryService`` (``headwater.sessions.sql_memory``, re-exported here when
first used: it loads SQLAlchemy) in the SQL session store's database. A
runner's ``memory_service`` is what ``ToolContext.search_memory`` and the
``load_memory`` / ``preload_memory`` tools (``headwater.tools.memory``) read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .base import BaseMemoryService as BaseMemoryService
from .base import MemoryEntry as MemoryEntry
from .base import SearchMemoryResponse as SearchMemoryResponse
from .in_memory import InMemoryMemoryService as InMemoryMemoryService

if TYPE_CHECKING:
    from ..sessions.sql_memory import SqlMemoryService as SqlMemoryService

__all__ = (
    "BaseMemoryService",
    "InMemoryMemoryService",
    "MemoryEntry",
    "SearchMemoryResponse",
    "SqlMemoryService",
)


def __getattr__(name: str) -> Any:  # raw: the lazily imported class
    if name == "SqlMemoryService":
        from ..sessions.sql_memory import SqlMemoryService

        return SqlMemoryService
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
