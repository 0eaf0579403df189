"""``SessionHold``: a run's lease on its session — taken, kept alive, given back.

One run per session (docs/architecture.md, "One run per session"): before a
run reads its session it takes the session's lease (owner, run id, expiry),
storing the user's message in the same write when nothing needs repair. While
the run lives its lease is renewed once it is a third of its lifetime old (by
the runner's :class:`LeaseKeeper`: one timer per event loop, every sixth of the
lifetime, for all of the runner's runs; no task for a run shorter than that,
and no timer of its own); a lost lease is not renewed again and the run's next
write is refused. The run's last write releases the lease in the same write
(:class:`~headwater.run.recorder.Recorder` marks the hold released); otherwise
:meth:`SessionHold.release` gives it back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref

from ..core.errors import LeaseLostError, SessionBusyError, SessionError, SessionNotFoundError
from ..core.events import Event
from ..core.tasks import TaskSet
from ..sessions.base import BaseSessionService, Lease

logger = logging.getLogger("headwater.runner")


class LeaseKeeper:
    """Keeps the leases of one runner's live runs: each is renewed once it is a third of its
    lifetime old, so it never expires while its run lives.

    One timer per event loop fires every sixth of the lifetime while the loop has
    runs holding a lease, and starts the renewals that are due (each a task its
    hold owns); a loop without such runs has no timer. A lease is renewed between
    a third and a half of its lifetime after it was taken or last renewed.

    Args:
        ttl: the leases' lifetime (``Settings.session_lease_ttl``).
    """

    __slots__ = ("_last", "_loops", "ttl")

    def __init__(self, ttl: float) -> None:
        self.ttl = ttl
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Ticker] = (
            weakref.WeakKeyDictionary())
        self._last: _Ticker | None = None  # the ticker of the loop last asked for

    def keep(self, hold: SessionHold) -> _Ticker:
        """Renew ``hold``'s lease while it is held (on the running loop): its ticker."""
        loop = asyncio.get_running_loop()
        ticker = self._last
        if ticker is None or ticker.loop() is not loop:
            ticker = self._loops.get(loop)
            if ticker is None:
                ticker = self._loops[loop] = _Ticker(loop, self.ttl)
            self._last = ticker
        ticker.add(hold)
        return ticker


class _Ticker:
    """The holds of one event loop whose leases are kept, with when each was last renewed.

    It refers to its loop weakly: a loop that is gone takes its ticker with it.
    """

    __slots__ = ("_due_after", "_handle", "_holds", "_interval", "loop", "renewals")

    def __init__(self, loop: asyncio.AbstractEventLoop, ttl: float) -> None:
        self.loop = weakref.ref(loop)
        self._due_after = ttl / 3
        self._interval = ttl / 6
        self._holds: dict[SessionHold, float] = {}  # hold -> loop time of its last renewal
        self._handle: asyncio.TimerHandle | None = None
        self.renewals = TaskSet("lease renewals", logger=logger)
        """The renewals under way (each hold also keeps its own, to stop it on release)."""

    def add(self, hold: SessionHold) -> None:
        loop = self.loop()
        assert loop is not None  # called on the running loop
        self._holds[hold] = loop.time()
        if self._handle is None:
            self._handle = loop.call_later(self._interval, self._tick)

    def renewed(self, hold: SessionHold) -> None:
        loop = self.loop()
        if loop is not None and hold in self._holds:
            self._holds[hold] = loop.time()

    def discard(self, hold: SessionHold) -> None:
        self._holds.pop(hold, None)

    def _tick(self) -> None:
        self._handle = None
        loop = self.loop()
        if not self._holds or loop is None:
            return  # no run holds a lease here: no timer until one does
        due = loop.time() - self._due_after
        for hold, renewed_at in list(self._holds.items()):
            if renewed_at <= due:
                hold.renew()
        self._handle = loop.call_later(self._interval, self._tick)


class SessionHold:
    """One run's lease on one session.

    Args:
        service: the session store.
        keeper: the runner's lease keeper (renewals; its ``ttl`` is the lease's lifetime).
        app_name, user_id, session_id: the session.
        owner: who holds the lease (the runner's ``lease_owner``).
        run_id: the run (its invocation id).

    Attributes:
        lease: the lease once taken (renewals replace it), else ``None``.
        released: the lease was given back (by the run's last write, or
            :meth:`release`); nothing of the run may be written any more.
    """

    __slots__ = ("_app_name", "_keeper", "_owner", "_renewal", "_service", "_session_id",
                 "_ticker", "_ttl", "_user_id", "lease", "released", "run_id")

    def __init__(self, service: BaseSessionService, keeper: LeaseKeeper, app_name: str,
                 user_id: str, session_id: str, owner: str, run_id: str) -> None:
        self._service = service
        self._keeper = keeper
        self._app_name = app_name
        self._user_id = user_id
        self._session_id = session_id
        self._owner = owner
        self.run_id = run_id
        self._ttl = keeper.ttl
        self._ticker: _Ticker | None = None
        self._renewal: asyncio.Task[None] | None = None
        self.lease: Lease | None = None
        self.released = False

    async def take(self, first: tuple[Event, str | None] | None, *, wait: float,
                   create: bool) -> bool | None:
        """Take the lease (creating the session when ``create``); then keep it alive.

        With ``first`` (the message event and the event it follows), the
        lease's write stores the message too when the history is still the one
        it follows.

        Returns:
            Whether ``first`` was stored; ``None`` when unknown (the write with
            it failed and the lease was taken alone: the session read tells).

        Raises:
            SessionNotFoundError: no such session (and ``create`` is off).
            SessionBusyError: another run holds it (after ``wait`` seconds).
            SessionError: the store failed. Nothing is held after a raise.
        """
        created, unsure = False, False
        while True:
            try:
                stored = await self._acquire(first, wait)
                self._ticker = self._keeper.keep(self)
                return None if unsure else stored
            except asyncio.CancelledError:
                # The write may have taken the lease anyway: give it back, or the session
                # stays busy for a whole TTL (release matches on owner and run id alone).
                self.lease = Lease(self._app_name, self._user_id, self._session_id,
                                   self._owner, self.run_id, 0.0)
                await self.release()
                raise
            except SessionNotFoundError:
                if not create or created:
                    raise self._not_found(created) from None
                created = True
                with contextlib.suppress(SessionError):  # another run may create it first
                    await self._service.create_session(
                        app_name=self._app_name, user_id=self._user_id,
                        session_id=self._session_id)
            except SessionBusyError:
                raise
            except SessionError as exc:
                if first is None:
                    raise
                # Take the lease alone (a store that is down fails again, and raises);
                # the message then follows as its own write, as it would have.
                logger.warning("run %s: storing the message with the lease failed (%s)",
                               self.run_id, type(exc).__name__)
                first, unsure = None, True

    async def _acquire(self, first: tuple[Event, str | None] | None, wait: float) -> bool:
        """The lease, with ``first`` in the same write when given; whether it was stored."""
        service = self._service
        if first is None:
            self.lease = await service.acquire_lease(
                app_name=self._app_name, user_id=self._user_id, session_id=self._session_id,
                owner=self._owner, run_id=self.run_id, ttl=self._ttl, wait=wait)
            return False
        self.lease, stored = await service.acquire_lease_and_append(
            app_name=self._app_name, user_id=self._user_id, session_id=self._session_id,
            owner=self._owner, run_id=self.run_id, ttl=self._ttl, wait=wait,
            event=first[0], after=first[1])
        return stored

    def _not_found(self, created: bool) -> SessionNotFoundError:
        if created:
            return SessionNotFoundError(f"session {self._session_id!r} vanished as it was created")
        return SessionNotFoundError(
            f"no session {self._session_id!r} for user {self._user_id!r} in app "
            f"{self._app_name!r}; create it with runner.create_session() or pass "
            "auto_create_session=True")

    def renew(self) -> None:
        """Renew the lease now, in a task of the keeper's (unless one is under way); the hold
        stops it when it is released."""
        ticker = self._ticker
        assert ticker is not None
        if self._renewal is None or self._renewal.done():
            self._renewal = ticker.renewals.spawn(self._renew(),
                                                  name=f"renew the lease of run {self.run_id}")

    async def _renew(self) -> None:
        lease, ticker = self.lease, self._ticker
        assert lease is not None and ticker is not None
        try:
            self.lease = await self._service.renew_lease(lease, self._ttl)
        except LeaseLostError:
            logger.warning("run %s lost its session lease; its writes are refused", self.run_id)
            ticker.discard(self)  # not renewed again
            return
        except SessionError as exc:  # tried again at the next tick
            logger.warning("renewing the lease of run %s failed: %s", self.run_id,
                           type(exc).__name__)
            return
        ticker.renewed(self)

    async def release(self) -> None:
        """Stop renewing (waiting for a renewal under way) and give the lease back, unless the
        run's last write did. Quiet on a store failure: the lease then expires on its own.
        Idempotent."""
        released, self.released = self.released, True
        if self._ticker is not None:
            self._ticker.discard(self)
        renewal, self._renewal = self._renewal, None
        try:
            if renewal is not None and not renewal.done():
                renewal.cancel()
                await asyncio.wait([renewal])
        finally:  # a cancel landing in the wait above must not keep the session busy
            lease = self.lease
            if lease is not None and not released:
                try:
                    await self._service.release_lease(lease)
                except SessionError as exc:  # it expires on its own
                    logger.warning("releasing the lease of run %s failed: %s", self.run_id,
                                   type(exc).__name__)
