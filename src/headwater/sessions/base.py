"""The session store interface (docs/architecture.md).

A session holds its events (non-partial only, in commit order) and its state.
An event's ``actions.state_delta`` is applied atomically with the event.

Three guarantees hold on every store:

- **One run at a time**: a :class:`Lease` holds a session for one run across
  runner instances, processes and replicas; writes fenced by it commit only
  while it holds.
- **Exactly one result per call**: an event's function responses are final
  results, except those whose call id the same event lists in
  ``long_running_tool_ids`` (a ticket); the store refuses a second final
  result for a call (:class:`~headwater.errors.CallAlreadyAnsweredError`).
- **A cancelled caller sees what was committed**: an ``append_event`` whose
  caller is cancelled still commits or rolls back whole, and the ``Session``
  object it was given is updated if it committed.
"""

from __future__ import annotations

import asyncio
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from ..core.errors import PartialEventError, SessionBusyError
from ..core.events import Event
from ..core.settings import Settings
from ..core.state import TEMP_PREFIX
from ..core.tasks import TaskSet


@dataclass(slots=True)
class Session:
    """A conversation: its id, owner, state and persisted events.

    ``events`` is a snapshot taken by ``get_session`` and extended by
    ``append_event`` on the same object; it never holds a partial event.
    """

    id: str
    app_name: str
    user_id: str
    state: dict[str, Any] = field(default_factory=dict)  # raw JSON values
    events: list[Event] = field(default_factory=list)
    last_update_time: float = field(default_factory=time.time)
    create_time: float = 0.0  # when the session was created (0.0 where a store does not say)


@dataclass(frozen=True, slots=True)
class Lease:
    """One run's hold on a session, from :meth:`BaseSessionService.acquire_lease`.

    See docs/architecture.md ("One run per session").

    Attributes:
        owner: who holds it (a process and runner id).
        run_id: the run holding it.
        expires_at: ``time.time()`` seconds after which another run may take it
            over unless it is renewed.
        took_over: the run id of an expired lease this one replaced, or of one
            whose holding process had died: that run ended without releasing
            (a crash, or a hang), so repair may be due.
    """

    app_name: str
    user_id: str
    session_id: str
    owner: str
    run_id: str
    expires_at: float
    took_over: str | None = None


@dataclass(slots=True)
class EventPage:
    """One page of a session's events and the cursor of the next page (``None`` at the end)."""

    events: list[Event]
    next_cursor: int | None


class BaseSessionService(ABC):
    """Stores sessions and their events.

    Every method is safe to call concurrently from one event loop. Methods that
    take ``app_name``/``user_id``/``session_id`` treat a session of another
    user exactly like a missing one.

    Attributes:
        lease_poll_interval: the first pause between attempts of
            ``acquire_lease(wait=…)``; a store sets it from the settings it is
            given (``Settings.lease_poll_interval``), else the setting's default.
    """

    lease_poll_interval: float = Settings.model_fields["lease_poll_interval"].default

    @abstractmethod
    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> Session:
        """Create a session (a fresh id unless one is given).

        Raises:
            SessionError: ``session_id`` is already taken.
        """

    @abstractmethod
    async def get_session(
        self, *, app_name: str, user_id: str, session_id: str
    ) -> Session | None:
        """The session with all its events, or ``None``."""

    @abstractmethod
    async def list_sessions(self, *, app_name: str, user_id: str) -> list[Session]:
        """The user's sessions, most recently updated first, without their events."""

    @abstractmethod
    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        """Delete a session and its events; deleting a missing one is a no-op."""

    @abstractmethod
    async def list_events(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        after: int | None = None,
        limit: int = 100,
    ) -> EventPage:
        """A page of events in commit order, starting after cursor ``after``.

        Raises:
            SessionNotFoundError: no such session for this user.
        """

    async def append_event(
        self, session: Session, event: Event, *, lease: Lease | None = None,
        release: bool = False,
    ) -> Event:
        """Persist a non-partial event and apply its state delta atomically.

        The event is added to ``session.events`` and the delta to
        ``session.state`` only once the store has committed them, and then
        always: if the caller is cancelled while the write is under way, the
        write still commits or rolls back whole (it never leaves a transaction
        or lock open), and ``session`` is updated on the event loop when it
        commits. So after a cancel, ``session`` still matches the store.

        An event whose function responses are final results (call ids not in
        its own ``long_running_tool_ids``) commits only if none of those calls
        has a final result stored yet: the first result wins.

        Args:
            lease: fence the write: it commits only if this lease still holds
                the session (same owner and run id; past its expiry too, as long
                as no other run took it over).
            release: with ``lease``, release it in the same transaction (the
                run's last write: one commit fewer).

        Raises:
            PartialEventError: the event is partial; partials are never stored.
            SessionNotFoundError: the session no longer exists.
            LeaseLostError: ``lease`` no longer holds the session; nothing stored.
            CallAlreadyAnsweredError: a call already has its final result;
                nothing stored.
            SessionError: the store failed (code ``store_unavailable``).
        """
        if event.partial:
            raise PartialEventError(
                "partial events are for the screen only and are never persisted "
                f"(event {event.id} by {event.author!r})"
            )
        delta = persistent_delta(event)

        def committed() -> None:
            session.events.append(event)
            if delta:
                session.state.update(delta)
            session.last_update_time = event.timestamp

        pending = self._start_append(session, event, delta, lease if release else None, lease,
                                     committed)
        if isinstance(pending, asyncio.Future) and not pending.done():
            _track(self, session, pending)
            await asyncio.shield(pending)  # a cancelled caller stops waiting, nothing more
        else:
            await pending
        return event

    async def wait_for_writes(self, session: Session) -> None:
        """Wait until every write started on ``session`` has committed or rolled back.

        For a caller cancelled while its ``append_event`` was under way: once
        this returns, ``session`` shows everything of it that was stored.
        """
        pending = _in_flight.get((id(self), id(session)))
        if pending:
            await asyncio.wait(list(pending))

    def _start_append(
        self, session: Session, event: Event, delta: dict[str, Any], release: Lease | None,
        lease: Lease | None, on_commit: Callable[[], None],
    ) -> Awaitable[object]:
        """Start committing ``event`` and ``delta``; await the result to wait for the outcome.

        The contract every store keeps: the write goes on whatever happens to
        the awaitable (cancelling it only stops the waiting), and ``on_commit``
        is called on the event loop as soon as the write has committed, before
        the awaitable completes, whether or not anyone still waits.

        The default runs :meth:`_append` as a task of the store's own (which
        :meth:`close` waits for), and releases ``release`` once it committed.
        """
        writes = self._writes
        # The caller awaits it through a shield and gets its failure.
        task = writes.spawn(self._append(session, event, delta, lease), name="append an event",
                            expected=Exception)

        def done(finished: asyncio.Future[None]) -> None:
            if finished.cancelled() or finished.exception() is not None:
                return
            on_commit()
            if release is not None and not writes.closed:
                writes.spawn(self.release_lease(release), name="release a lease")

        task.add_done_callback(done)  # registered before the shield's, so it runs first
        return asyncio.shield(task)

    @cached_property
    def _writes(self) -> TaskSet:
        """The writes of the default :meth:`_start_append` that are under way."""
        return TaskSet(f"{type(self).__name__} writes")

    @abstractmethod
    async def _append(
        self, session: Session, event: Event, delta: dict[str, Any], lease: Lease | None
    ) -> None:
        """Commit ``event`` and ``delta`` in one transaction (fenced by ``lease``)."""

    async def acquire_lease(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        owner: str,
        run_id: str,
        ttl: float,
        wait: float = 0.0,
    ) -> Lease:
        """Take the session for one run until ``time.time() + ttl`` (renew to keep it).

        Taking it is one atomic write: of two runs asking at once, one wins.
        A lease past its expiry may be taken over; the new lease then names the
        old run in ``took_over``. A SQL store records the process taking the
        lease and takes a lease over before its expiry when that process has
        provably ended on this host (docs/architecture.md, "One run per
        session"). Asking again with the same owner and run id extends the lease.

        Args:
            ttl: seconds the lease lasts unless renewed.
            wait: seconds to keep trying while another run holds the session
                (polling every ``lease_poll_interval``, doubling, at most 0.5 s,
                and never past the holder's expiry).

        A caller cancelled while the write is under way may still have taken
        the lease: release it with a ``Lease`` of the same owner and run id
        (release and renew match on those alone), or let it expire.

        Raises:
            SessionNotFoundError: no such session for this user.
            SessionBusyError: another unexpired lease holds it (after ``wait``).
            SessionError: the store failed.
            ValueError: ``ttl`` is not positive.
        """
        lease, _ = await self._acquire(app_name, user_id, session_id, owner, run_id, ttl, wait,
                                       None)
        return lease

    async def acquire_lease_and_append(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        owner: str,
        run_id: str,
        ttl: float,
        event: Event,
        after: str | None,
        wait: float = 0.0,
    ) -> tuple[Lease, bool]:
        """:meth:`acquire_lease`, and in the same write ``event`` if the history ends at ``after``.

        For a run's first event when it needs no decision made after reading
        the session (a plain user message, nothing to repair): one write
        instead of two. ``event`` is stored, fenced by the new lease, only if
        the session's last stored event has the id ``after`` (``None``: the
        session has no events), i.e. only if the history is the one the caller
        judged; otherwise the lease alone is taken and the caller appends as
        usual. The event commits whole with the lease or not at all; no
        ``Session`` object is updated (the run's ``get_session`` shows it).

        A caller cancelled while the write is under way may have taken the
        lease and stored the event (both whole, or neither): release as for
        :meth:`acquire_lease`. A store that cannot do both in one write takes
        the lease alone (the default).

        Args:
            event: a non-partial event carrying no function responses (a result
                must be checked against the session first).
            after: the id of the last event the caller knows of.

        Returns:
            The lease, and whether ``event`` was stored with it.

        Raises:
            SessionNotFoundError, SessionBusyError, SessionError, ValueError:
                as :meth:`acquire_lease`; ``ValueError`` also for an event with
                function responses.
            PartialEventError: the event is partial.
        """
        if event.partial:
            raise PartialEventError(f"partial events are never persisted (event {event.id})")
        if event.function_responses:
            raise ValueError("an event with function responses is checked against the session "
                             "first: append it with append_event")
        return await self._acquire(app_name, user_id, session_id, owner, run_id, ttl, wait,
                                   (event, persistent_delta(event), after))

    async def _acquire(
        self, app_name: str, user_id: str, session_id: str, owner: str, run_id: str,
        ttl: float, wait: float, first: tuple[Event, dict[str, Any], str | None] | None,
    ) -> tuple[Lease, bool]:
        """Attempt until the lease is taken or ``wait`` has passed (see :meth:`acquire_lease`)."""
        if ttl <= 0:
            raise ValueError(f"ttl must be positive, not {ttl}")
        deadline = time.monotonic() + max(wait, 0.0)
        interval = self.lease_poll_interval
        while True:
            if first is None:
                taken: Lease | float = await self._try_acquire_lease(
                    app_name, user_id, session_id, owner, run_id, ttl)
                stored = False
            else:
                taken, stored = await self._try_acquire_lease_and_append(
                    app_name, user_id, session_id, owner, run_id, ttl, *first)
            if isinstance(taken, Lease):
                return taken, stored
            left = deadline - time.monotonic()
            if left <= 0:
                raise SessionBusyError(f"session {session_id!r} has a run in progress")
            until_expiry = max(taken - time.time(), 0.001)
            await asyncio.sleep(min(interval, left, until_expiry))
            interval = min(interval * 2, 0.5)

    async def _try_acquire_lease_and_append(
        self, app_name: str, user_id: str, session_id: str, owner: str, run_id: str, ttl: float,
        event: Event, delta: dict[str, Any], after: str | None,
    ) -> tuple[Lease | float, bool]:
        """One atomic attempt of :meth:`acquire_lease_and_append`; whether ``event`` was stored.

        The default takes the lease alone and stores nothing.
        """
        taken = await self._try_acquire_lease(app_name, user_id, session_id, owner, run_id, ttl)
        return taken, False

    @abstractmethod
    async def _try_acquire_lease(
        self, app_name: str, user_id: str, session_id: str, owner: str, run_id: str, ttl: float
    ) -> Lease | float:
        """One atomic attempt: the new lease, or the holder's ``expires_at`` if it is busy.

        Raises:
            SessionNotFoundError: no such session for this user.
        """

    @abstractmethod
    async def renew_lease(self, lease: Lease, ttl: float) -> Lease:
        """Extend ``lease`` to ``time.time() + ttl``; works past expiry if nobody took it over.

        Raises:
            LeaseLostError: another run took the session over, or the lease was
                released (or the session deleted).
            SessionError: the store failed.
        """

    @abstractmethod
    async def release_lease(self, lease: Lease) -> None:
        """Give the session up; a no-op if ``lease`` no longer holds it (idempotent).

        Raises:
            SessionError: the store failed.
        """

    async def ping(self) -> None:  # noqa: B027 - optional hook, nothing to open by default
        """Return once the store can serve; a store that opens on first use opens now.

        The gateway calls it at start, so the store connects (a SQL store brings
        its schema to head) before the server says it is up, and for ``GET
        /readyz``. The default does nothing (a store in memory is always ready).

        Raises:
            SessionError: the store does not answer (or its schema is not at head).
        """

    async def close(self) -> None:
        """Release connections; the service may not be used afterwards.

        The default waits for the writes of the default :meth:`_start_append`
        under way (a store that overrides it releases its own).
        """
        if "_writes" in self.__dict__:
            await self._writes.wait()


# Writes under way, by (service, session object): what wait_for_writes waits for.
_in_flight: dict[tuple[int, int], set[asyncio.Future[Any]]] = {}


def _track(service: BaseSessionService, session: Session, write: asyncio.Future[Any]) -> None:
    key = (id(service), id(session))
    writes = _in_flight.setdefault(key, set())
    writes.add(write)

    def done(_: asyncio.Future[Any]) -> None:
        writes.discard(write)
        if not writes and _in_flight.get(key) is writes:
            del _in_flight[key]

    write.add_done_callback(done)


def final_call_ids(event: Event) -> list[str]:
    """The call ids whose final result ``event`` carries (long-running tickets excluded)."""
    content = event.content
    if content is None:
        return []
    pending = event.long_running_tool_ids
    ids: list[str] = []
    for part in content.parts:
        response = part.function_response
        if response is not None and response.id not in pending and response.id not in ids:
            ids.append(response.id)
    return ids


def persistent_delta(event: Event) -> dict[str, Any]:
    """Drop ``temp:`` keys from the event's state delta (in place) and return what is stored.

    Temporary state lives for one run: it reaches neither the stored state nor
    the stored event.
    """
    delta = event.actions.state_delta
    if delta and any(k.startswith(TEMP_PREFIX) for k in delta):
        delta = {k: v for k, v in delta.items() if not k.startswith(TEMP_PREFIX)}
        event.actions.state_delta = delta
    return delta
