"""Where the gateway's replicas learn of each other's runs (docs/frame-protocol.md).

A run executes on one replica (its :class:`~.runs.RunManager` holds the task);
the :class:`RunRegistry` is what every replica can ask about it: who owns it,
on which session, whether it is still going, how many streams a user has open
across replicas, and how to ask the owning replica to cancel it.

:class:`LocalRunRegistry` (the default) is one process: every run is local, so
it only counts streams. ``RedisRunRegistry`` (:mod:`.redis_registry`) shares
all of it through Redis.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

RunStatus = Literal["running", "done", "error", "cancelled", "interrupted"]
"""A run's state: going on, or how it ended."""


@dataclass(frozen=True, slots=True)
class RunInfo:
    """A run as any replica knows it: its owner, session, agent, replica and status."""

    id: str
    user_id: str
    session_id: str
    agent: str
    replica: str
    status: RunStatus = "running"

    @property
    def ended(self) -> bool:
        """Whether the run's terminal frame has been written."""
        return self.status != "running"


class RunRegistry(Protocol):
    """The runs of every replica, by id; written by each run's own replica.

    ``replica`` names this process among the replicas; the registry never holds
    a run's task (its replica's :class:`~.runs.RunManager` does).
    """

    replica: str

    async def register(self, info: RunInfo) -> None:
        """Record a run that starts on this replica (before its first frame)."""
        ...

    async def ended(self, run_id: str, status: RunStatus) -> None:
        """Record how a run of this replica ended; it stays known until :meth:`forget`."""
        ...

    async def forget(self, run_id: str) -> None:
        """Drop a run of this replica; a no-op for an unknown id."""
        ...

    async def lookup(self, run_id: str) -> RunInfo | None:
        """The run of that id on any replica; ``None`` when none is known."""
        ...

    async def active(self, user_id: str, session_id: str) -> str | None:
        """The id of the user's run going on in that session on any replica, if any."""
        ...

    async def open_streams(self, user_id: str) -> int:
        """The streams the user has open on all replicas."""
        ...

    async def count_run(self, user_id: str, window: float, limit: int) -> tuple[int, float]:
        """Count one more run start of the user in the current ``window`` (fixed windows
        of that many seconds, aligned to the clock); the starts counted in it so far,
        this one included, and the seconds left in it. A backend may stop counting
        past ``limit`` (the answer is then ``limit + 1``); a call it sends again after
        a lost answer counts once."""
        ...

    def stream_opened(self, user_id: str, run_id: str) -> object:
        """Count one more stream of the user following ``run_id``; returns its token.

        Synchronous: a backend that writes elsewhere does so in the background,
        and :meth:`open_streams` of this replica counts it at once.
        """
        ...

    def stream_closed(self, token: object) -> None:
        """Stop counting the stream of ``token`` (idempotent)."""
        ...

    async def followers(self, run_id: str) -> int:
        """Streams following the run on other replicas (this replica counts its own)."""
        ...

    async def request_cancel(self, info: RunInfo) -> bool:
        """Ask the replica running ``info`` to cancel it; whether a replica heard it."""
        ...

    def on_cancel(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(run_id)`` when another replica asks to cancel one of our runs."""
        ...

    async def ping(self) -> None:
        """Return once the registry's store answers (``GET /readyz``).

        Raises:
            RunStoreUnavailable: it does not answer.
        """
        ...

    async def close(self) -> None:
        """Stop listening and release the registry's resources; idempotent."""
        ...


class LocalRunRegistry(RunRegistry):
    """One process: every run is this replica's, so only streams are counted (in memory)."""

    def __init__(self) -> None:
        self.replica = "local"
        self._streams: defaultdict[str, int] = defaultdict(int)
        self._starts: dict[str, tuple[int, int]] = {}  # user -> (window index, starts in it)

    async def register(self, info: RunInfo) -> None:
        return None

    async def ended(self, run_id: str, status: RunStatus) -> None:
        return None

    async def forget(self, run_id: str) -> None:
        return None

    async def lookup(self, run_id: str) -> RunInfo | None:
        return None  # every run is local: the run manager knows it, or nobody does

    async def active(self, user_id: str, session_id: str) -> str | None:
        return None

    async def open_streams(self, user_id: str) -> int:
        return self._streams.get(user_id, 0)

    async def count_run(self, user_id: str, window: float, limit: int) -> tuple[int, float]:
        now = time.time()
        index = math.floor(now / window)
        if len(self._starts) > 10_000:  # old windows' users: drop them all at once
            self._starts = {u: c for u, c in self._starts.items() if c[0] == index}
        last, count = self._starts.get(user_id, (index, 0))
        count = count + 1 if last == index else 1
        self._starts[user_id] = (index, count)
        return count, (index + 1) * window - now

    def stream_opened(self, user_id: str, run_id: str) -> object:
        self._streams[user_id] += 1
        return _Slot(user_id)

    def stream_closed(self, token: object) -> None:
        if not isinstance(token, _Slot) or token.closed:
            return
        token.closed = True
        self._streams[token.user_id] -= 1
        if self._streams[token.user_id] <= 0:
            del self._streams[token.user_id]

    async def followers(self, run_id: str) -> int:
        return 0

    async def request_cancel(self, info: RunInfo) -> bool:
        return False

    def on_cancel(self, callback: Callable[[str], None]) -> None:
        return None  # nobody else can ask

    async def ping(self) -> None:
        return None  # in this process: always there

    async def close(self) -> None:
        return None


class _Slot:
    __slots__ = ("closed", "user_id")

    def __init__(self, user_id: str) -> None:
        self.user_id = user_id
        self.closed = False
