"""Session stores: in memory for tests, SQL (SQLite by default, PostgreSQL) for real use.

``SqlSessionService`` is imported on first access, so ``import headwater``
does not pay for SQLAlchemy until a SQL store is used.
"""

from typing import TYPE_CHECKING, Any

from .base import BaseSessionService as BaseSessionService
from .base import EventPage as EventPage
from .base import Lease as Lease
from .base import Session as Session
from .memory import InMemorySessionService as InMemorySessionService

if TYPE_CHECKING:
    from .sql import SqlSessionService as SqlSessionService

__all__ = (
    "BaseSessionService",
    "EventPage",
    "InMemorySessionService",
    "Lease",
    "Session",
    "SqlSessionService",
)


def __getattr__(name: str) -> Any:
    if name == "SqlSessionService":
        from .sql import SqlSessionService

        return SqlSessionService
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
