"""``SessionHold``: a run's lease on its session — taken, kept alive, given back.

One run per session (docs/architecture.md, "One run per session"): before a
run reads its session it takes the session's lease (owner, run id, expiry),
storing the user's message in the same write when nothing needs repair. While
the run lives the hold renews the lease every third of its lifetime (a timer
between renewals, no task for a run shorter than that); a lost lease is not
renewed again and the run's next write is refused. The run's last write
releases the lease in the same write (:class:`~headwater.run.recorder.Recorder`
marks the hold released); otherwise :meth:`SessionHold.release` gives it back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from ..errors import LeaseLostError, SessionBusyError, SessionError, SessionNotFoundError
from ..events import Event
from ..sessions.base import BaseSessionService, Lease

logger = logging.getLogger("headwater.runner")


class SessionHold:
    """One run's lease on one session.

    Args:
        service: the session store.
        app_name, user_id, session_id: the session.
        owner: who holds the lease (the runner's ``lease_owner``).
        run_id: the run (its invocation id).
        ttl: the lease's lifetime (``Settings.session_lease_ttl``).

    Attributes:
        lease: the lease once taken (renewals replace it), else ``None``.
        released: the lease was given back (by the run's last write, or
            :meth:`release`); nothing of the run may be written any more.
    """

    __slots__ = ("_app_name", "_handle", "_owner", "_renewal", "_service", "_session_id",
                 "_ttl", "_user_id", "lease", "released", "run_id")

    def __init__(self, service: BaseSessionService, app_name: str, user_id: str,
                 session_id: str, owner: str, run_id: str, ttl: float) -> None:
        self._service = service
        self._app_name = app_name
        self._user_id = user_id
        self._session_id = session_id
        self._owner = owner
        self.run_id = run_id
        self._ttl = ttl
        self._handle: asyncio.TimerHandle | None = None
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
                self._handle = asyncio.get_running_loop().call_later(self._ttl / 3, self._due)
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

    def _due(self) -> None:
        self._handle = None
        self._renewal = asyncio.ensure_future(self._renew())

    async def _renew(self) -> None:
        lease = self.lease
        assert lease is not None
        try:
            self.lease = await self._service.renew_lease(lease, self._ttl)
        except LeaseLostError:
            logger.warning("run %s lost its session lease; its writes are refused", self.run_id)
            return
        except SessionError as exc:
            logger.warning("renewing the lease of run %s failed: %s", self.run_id,
                           type(exc).__name__)
        if not self.released:
            self._handle = asyncio.get_running_loop().call_later(self._ttl / 3, self._due)

    async def release(self) -> None:
        """Stop renewing (waiting for a renewal under way) and give the lease back, unless the
        run's last write did. Quiet on a store failure: the lease then expires on its own.
        Idempotent."""
        released, self.released = self.released, True
        handle, self._handle = self._handle, None
        if handle is not None:
            handle.cancel()
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
