"""``Runner``: drives an agent on a session and hands the caller one event stream.

The runner alone persists. The step engine (``headwater.agents.flow``) hands
every non-partial event up to the runner's recorder, which commits it to the
session store and updates the session's call ledger; only then is it yielded
and the engine goes on (persist, then yield) — in every mode. Partial events are yielded
and never stored. Closing the stream (``break``, ``aclose()``, task
cancellation, an exception in the caller's loop) closes the model stream,
cancels running tools and seals history: every call left without a result gets
a synthetic ``cancelled`` result, so the next turn is valid.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import socket
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator
from contextlib import aclosing
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Final, Literal

from .agents.agent import Agent
from .agents.approvals import answered_calls, split_approvals
from .agents.expiry import expired_event
from .agents.flow import Flow
from .agents.invocation import InvocationContext, RunStats
from .agents.live_flow import LiveFlow
from .artifacts import BaseArtifactService
from .clock import SYSTEM_CLOCK, Clock
from .errors import (
    ERROR_MESSAGES,
    CallAlreadyAnsweredError,
    ErrorCode,
    LeaseLostError,
    SessionBusyError,
    SessionError,
    SessionNotFoundError,
    UserError,
)
from .events import Event, EventActions, new_id
from .live_request_queue import LiveRequestQueue
from .run_config import RunConfig, StreamingMode
from .sessions.base import BaseSessionService, Lease, Session
from .sessions.ledger import CallLedger
from .sessions.memory import InMemorySessionService
from .settings import Settings, get_settings
from .types import Content, Usage, as_content

logger = logging.getLogger("headwater.runner")



SealReason = Literal["cancelled", "interrupted"]
_STARTED: Final[Event] = Event(id="started", author="")  # never leaves RunStream.start


class _RunControl:
    """What a :class:`RunStream` asks of its run before and as it ends."""

    __slots__ = ("began", "reason", "wants_start")

    def __init__(self) -> None:
        self.began = False  # the run's generator has been entered
        self.wants_start = False  # yield _STARTED once the session is held and the message stored
        self.reason: SealReason = "cancelled"  # the synthetic result of calls a stop leaves open


class RunStream:
    """The async iterator of one run's events; also its spending so far.

    Iterate it (``async for``) or close it with ``aclose()``; it is an async
    generator in all but name, so ``contextlib.aclosing`` works on it. Prefer
    ``async with runner.run_async(...) as stream:``: leaving the block (a
    ``break``, an exception, a cancel) closes the run at once. A stream that is
    only abandoned is closed when Python finalises it (garbage collection), which
    for an async generator may be much later, or never before the loop ends.

    Attributes:
        invocation_id: the run's id.
        stats: model calls, tool calls and usage totals of the run so far.
    """

    __slots__ = ("_agen", "_control", "invocation_id", "stats")

    def __init__(self, agen: AsyncGenerator[Event, None], invocation_id: str,
                 stats: RunStats, control: _RunControl) -> None:
        self._agen = agen
        self._control = control
        self.invocation_id = invocation_id
        self.stats = stats

    async def start(self) -> None:
        """Take the session and store the message now, before the first event.

        A server calls this to answer a busy or missing session before it
        commits to a response; iterating afterwards goes on from there. Calling
        it after iteration began is an error.

        Raises:
            SessionNotFoundError, SessionBusyError, ApprovalError, UserError:
                as iterating would.
            UserError: the run has already started.
        """
        control = self._control
        if control.wants_start or control.began:
            raise UserError("RunStream.start() must come before the first event, once")
        control.wants_start = True
        marker = await self._agen.__anext__()
        assert marker is _STARTED, "the run yielded an event before it started"

    @property
    def usage(self) -> Usage:
        """Token usage summed over the run's model aggregates."""
        return self.stats.usage

    def __aiter__(self) -> AsyncGenerator[Event, None]:
        # ``async for`` steps the run's generator itself: a Python ``__anext__`` here
        # would cost a call from C per event (more than a generator layer).
        return self._agen

    def __anext__(self) -> Any:  # for stepping by hand: the generator's own awaitable
        return self._agen.__anext__()

    @property
    def seal_reason(self) -> SealReason:
        """The result a stop (``aclose()``, a cancel) gives each call it leaves open.

        ``cancelled`` by default; a server that stops runs as it shuts down sets
        ``interrupted`` before it cancels them.
        """
        return self._control.reason

    @seal_reason.setter
    def seal_reason(self, reason: SealReason) -> None:
        if reason not in ("cancelled", "interrupted"):
            raise UserError(f"seal_reason is 'cancelled' or 'interrupted', not {reason!r}")
        self._control.reason = reason

    async def aclose(self, *, reason: SealReason | None = None) -> None:
        """Stop the run: close the model stream, cancel tools, seal history.

        Args:
            reason: sets :attr:`seal_reason` first.
        """
        if reason is not None:
            self.seal_reason = reason
        await self._agen.aclose()

    async def __aenter__(self) -> RunStream:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        """Close the run (model stream, tools, seal) whatever ended the block."""
        await self._agen.aclose()

    async def athrow(self, exc: BaseException) -> Event:
        """Throw into the run (as for an async generator)."""
        return await self._agen.athrow(exc)

    async def text(self) -> AsyncGenerator[str, None]:
        """The model's answer text as it arrives, each piece once.

        In SSE mode the text deltas; in NONE mode (or for a model call that
        sent no deltas) the aggregate's text. The aggregate never repeats text
        its deltas already gave. Thoughts, tool progress and user content are
        left out. Closing this iterator closes the run.
        """
        streamed = False
        try:
            async for event in self:
                content = event.content
                if content is None or content.role != "model":
                    continue
                text = content.text
                if event.partial:
                    if text:
                        streamed = True
                        yield text
                    continue
                if text and not streamed:
                    yield text
                streamed = False
        finally:
            await self.aclose()


@dataclass(slots=True)
class RunResult:
    """What :meth:`Runner.run_once` returns: a whole run, finished.

    Attributes:
        text: the final response's text (``""`` when the run ended without one).
        final: the last final response event, or ``None``.
        events: every event of the run, partials included, in order.
        usage: token usage summed over the run's model calls.
        session_id: the session the run used (created when none was given).
        invocation_id: the run's id.
        error_code: the error code of the run's last event, if it ended in an error.
    """

    text: str
    final: Event | None
    events: list[Event] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    session_id: str = ""
    invocation_id: str = ""
    error_code: str | None = None


class _Recorder:
    """The one place a run's events are persisted: the session store, then the ledger.

    Every write is fenced by the run's lease: once another run has taken the
    session over, nothing more of this run is stored (``LeaseLostError``).
    """

    __slots__ = ("_ctx", "_service", "lease", "released")

    def __init__(self, service: BaseSessionService, ctx: InvocationContext, lease: Lease) -> None:
        self._service = service
        self._ctx = ctx
        self.lease = lease
        self.released = False

    async def commit(self, event: Event, *, last: bool = False) -> None:
        """Persist one event; the session and its ledger follow once it is committed.

        The ledger follows the session even when the caller is cancelled while
        the store commits (the store updates the session once the write is in).
        The run's last event releases the lease in the same write, unless a
        call would be left without a result (the seal still has to write).
        """
        ctx = self._ctx
        release = last and not event.function_calls and not (
            {c.id for c in ctx.ledger.dangling()} - {r.id for r in event.function_responses})
        try:
            await self._service.append_event(ctx.session, event, lease=self.lease,
                                             release=release)
            self.released = release
        except asyncio.CancelledError:
            # The write goes on: wait for its outcome, so that the seal sees what it stored.
            await self._service.wait_for_writes(ctx.session)
            raise
        finally:
            ctx.ledger.catch_up(ctx.session.events)

    async def record_stop(self, reason: SealReason, author: str) -> None:
        """Store that the run was stopped: an error record (``cancelled``, or
        ``server_shutdown`` when the server stopped it); quiet on failure."""
        code: ErrorCode = "cancelled" if reason == "cancelled" else "server_shutdown"
        ctx = self._ctx
        record = Event(invocation_id=ctx.invocation_id, author=author,
                       error_code=code, error_message=ERROR_MESSAGES[code])
        try:
            await self.commit(record, last=True)
        except SessionError as exc:
            logger.warning("could not record the stop of run %s (%s)", ctx.invocation_id,
                           type(exc).__name__)

    async def seal(self, flow: Flow, reason: SealReason,
                   reload: Callable[[], Awaitable[Session | None]]) -> None:
        """Give every call left without a result a ``reason`` one; quiet on failure.

        Storing a result and sealing are one conditional write in the store: a
        result that got in first wins, and the seal is recomputed without it.
        """
        for _ in range(2):
            sealed = flow.seal(reason)
            if sealed is None:
                return
            try:
                await self.commit(sealed)
                return
            except CallAlreadyAnsweredError:
                fresh = await reload()
                if fresh is None:
                    return
                self._ctx.session.events[:] = fresh.events
                self._ctx.ledger.catch_up(fresh.events)
            except SessionError as exc:  # the next run repairs what could not be sealed
                logger.warning("could not seal the run's calls (%s); the next run will",
                               type(exc).__name__)
                return


class _Heartbeat:
    """Renews a run's lease every third of its lifetime while the run lives.

    A timer between renewals (no task for a run shorter than that); a lost
    lease is not renewed again, and the run's next write is refused.
    """

    __slots__ = ("_handle", "_recorder", "_service", "_stopped", "_task", "_ttl")

    def __init__(self, service: BaseSessionService, recorder: _Recorder, ttl: float) -> None:
        self._service = service
        self._recorder = recorder
        self._ttl = ttl
        self._stopped = False
        self._task: asyncio.Task[None] | None = None
        self._handle = asyncio.get_running_loop().call_later(ttl / 3, self._due)

    def _due(self) -> None:
        self._task = asyncio.ensure_future(self._renew())

    async def _renew(self) -> None:
        recorder = self._recorder
        try:
            recorder.lease = await self._service.renew_lease(recorder.lease, self._ttl)
        except LeaseLostError:
            logger.warning("run %s lost its session lease; its writes are refused",
                           recorder.lease.run_id)
            return
        except SessionError as exc:
            logger.warning("renewing the lease of run %s failed: %s", recorder.lease.run_id,
                           type(exc).__name__)
        if not self._stopped:
            self._handle = asyncio.get_running_loop().call_later(self._ttl / 3, self._due)

    async def stop(self) -> None:
        """No more renewals; waits for one under way."""
        self._stopped = True
        self._handle.cancel()
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait([task])


class Runner:
    """Runs an agent on sessions of one app.

    Use it as ``async with Runner(...) as runner`` (or call :meth:`aclose`) to
    release the session store's connections at the end.

    Args:
        agent: the root agent.
        app_name: the application's name; sessions are scoped by it.
        session_service: where sessions live (default: in memory).
        settings: bounds (default: from ``HEADWATER_*`` environment variables).
        auto_create_session: create a missing session instead of raising.
        artifact_service: where ``content_and_artifact`` tools store artifacts.
        clock: the clock tools and live streams see (``VirtualClock`` in tests).
    """

    def __init__(
        self,
        *,
        agent: Agent,
        app_name: str,
        session_service: BaseSessionService | None = None,
        settings: Settings | None = None,
        auto_create_session: bool = False,
        artifact_service: BaseArtifactService | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.agent = agent
        self.artifact_service = artifact_service
        self.clock = clock
        self.app_name = app_name
        self.session_service = session_service or InMemorySessionService()
        self.settings = settings or get_settings()
        self.auto_create_session = auto_create_session
        self._owner = f"{socket.gethostname()}:{os.getpid()}:{new_id('runner')}"
        self._ledgers: collections.OrderedDict[tuple[str, str], CallLedger] = (
            collections.OrderedDict())
        self._sync_loop: asyncio.AbstractEventLoop | None = None

    async def create_session(self, *, user_id: str, state: dict[str, Any] | None = None,
                             session_id: str | None = None) -> Session:
        """Create a session of this runner's app (a fresh id unless one is given).

        Raises:
            SessionError: ``session_id`` is already taken.
        """
        return await self.session_service.create_session(
            app_name=self.app_name, user_id=user_id, state=state, session_id=session_id)

    def run_async(
        self,
        *,
        user_id: str,
        session_id: str,
        new_message: str | Content,
        run_config: RunConfig | None = None,
    ) -> RunStream:
        """Start a run: the user's message, then the agent until it is done.

        Returns:
            A :class:`RunStream` of events; partial events only in SSE mode.

        Raises:
            UserError: at once, for an empty message or a ``run_config`` asking
                for BIDI (use ``run_live``).

        Raises (when iterated):
            SessionNotFoundError: the session does not exist for this user.
            SessionBusyError: another run (of any runner or process) holds the
                session, still after ``Settings.session_lock_timeout`` (0: at once).
            ApprovalError, UserError: the message answers no pending call.
        """
        config = run_config or RunConfig()
        if config.streaming_mode is StreamingMode.BIDI:
            raise UserError("StreamingMode.BIDI runs go through Runner.run_live, not run_async")
        message = as_content(new_message)
        if not message.parts or all(p.text is not None and not p.text.strip()
                                    for p in message.parts):
            raise UserError("the message is empty: send some text or content parts")
        invocation_id = new_id("inv")
        stats, control = RunStats(), _RunControl()
        agen = self._run(user_id, session_id, config, invocation_id, stats, control, message,
                         None)
        return RunStream(agen, invocation_id, stats, control)

    def run_live(
        self,
        *,
        user_id: str,
        session_id: str,
        live_request_queue: LiveRequestQueue,
        run_config: RunConfig | None = None,
    ) -> RunStream:
        """Start a live (BIDI) run fed by ``live_request_queue``.

        The run lasts until the queue is closed or the stream is closed; each
        non-partial event is persisted before it is yielded. Model turns carry
        ``turn_complete``; an answer cut short by new user content is stored
        and yielded with ``interrupted`` set.

        Raises (when iterated):
            SessionNotFoundError, SessionBusyError: as for :meth:`run_async`.
            NotImplementedError: the model has no live connection.
        """
        config = run_config or RunConfig(streaming_mode=StreamingMode.BIDI)
        if config.streaming_mode is not StreamingMode.BIDI:
            config = config.model_copy(update={"streaming_mode": StreamingMode.BIDI})
        invocation_id = new_id("inv")
        stats, control = RunStats(), _RunControl()
        agen = self._run(user_id, session_id, config, invocation_id, stats, control, None,
                         live_request_queue)
        return RunStream(agen, invocation_id, stats, control)

    async def run_once(self, *, user_id: str, new_message: str | Content,
                       session_id: str | None = None,
                       run_config: RunConfig | None = None) -> RunResult:
        """Run to the end and return the answer, the events and the usage.

        Args:
            session_id: the session to continue; a new one is created when ``None``.

        Raises:
            as :meth:`run_async`.
        """
        if session_id is None:
            session_id = (await self.create_session(user_id=user_id)).id
        stream = self.run_async(user_id=user_id, session_id=session_id,
                                new_message=new_message, run_config=run_config)
        events: list[Event] = []
        async with aclosing(stream):
            async for event in stream:
                events.append(event)
        final = next((e for e in reversed(events) if not e.partial and e.author != "user"
                      and e.is_final_response()), None)
        last = events[-1] if events else None
        return RunResult(text=final.text if final is not None else "", final=final,
                         events=events, usage=stream.usage, session_id=session_id,
                         invocation_id=stream.invocation_id,
                         error_code=last.error_code if last is not None else None)

    async def _run(
        self, user_id: str, session_id: str, config: RunConfig, invocation_id: str,
        stats: RunStats, control: _RunControl, message: Content | None,
        queue: LiveRequestQueue | None,
    ) -> AsyncGenerator[Event, None]:
        """One run holding its session: repair after a crash, run, seal on the way out.

        Every non-partial event is committed by the run's recorder (and the
        ledger updated) before it is yielded and before the flow that made it
        goes on.
        """
        control.began = True
        service = self.session_service
        first = self._first_event(user_id, session_id, invocation_id, message)
        lease, stored = await self._take(user_id, session_id, invocation_id, first)
        heartbeat: _Heartbeat | None = None
        recorder: _Recorder | None = None
        try:
            try:
                session = await service.get_session(app_name=self.app_name, user_id=user_id,
                                                    session_id=session_id)
            except SessionNotFoundError:
                raise
            except SessionError as exc:  # the store failed: one error event, not a raise
                logger.warning("run %s: reading the session failed: %s", invocation_id,
                               type(exc).__name__)
                if control.wants_start:
                    yield _STARTED
                yield Event(invocation_id=invocation_id, author=self.agent.name,
                            error_code=exc.code,
                            error_message="the session store failed; the run stopped")
                return
            if session is None:
                raise SessionNotFoundError(f"no session {session_id!r} for user {user_id!r}")
            ctx = InvocationContext(
                invocation_id=invocation_id, app_name=self.app_name, session=session,
                run_config=config, settings=self.settings, stats=stats,
                artifact_service=self.artifact_service, clock=self.clock,
                ledger=self._ledger(session))
            recorder = _Recorder(service, ctx, lease)
            heartbeat = _Heartbeat(service, recorder, self.settings.session_lease_ttl)
            flow = Flow(self.agent, ctx, recorder)
            events: AsyncGenerator[Event, None] | None = None
            stopped = False
            try:
                repaired = await flow.repair()  # calls of runs whose lease ended without them
                if repaired is not None:
                    await recorder.commit(repaired)
                expired = expired_event(ctx, self.agent.name, time.time())  # as event stamps
                if expired is not None:  # tickets whose result never came
                    await recorder.commit(expired)
                if first is not None and stored is None:  # the write with it failed
                    stored = any(e.id == first[0].id for e in reversed(session.events))
                if stored:
                    events = flow.run()  # the message went in with the lease
                elif message is not None:
                    content, decisions = split_approvals(message)
                    ctx.resume = answered_calls(ctx.ledger, content, decisions)
                    await recorder.commit(Event(
                        invocation_id=invocation_id, author="user", content=content,
                        actions=EventActions(approval_decisions=decisions)))
                    events = flow.run()
                else:
                    assert queue is not None
                    events = LiveFlow(flow, queue).events()
                if control.wants_start:
                    yield _STARTED
                async for event in events:
                    yield event
            except SessionError as exc:  # the store failed mid-run: one error event, not a raise
                logger.warning("run %s: the session store failed: %s", invocation_id,
                               type(exc).__name__)
                yield flow.error_event(exc.code, "the session store failed; the run stopped")
            except (GeneratorExit, asyncio.CancelledError):
                stopped = message is not None  # a live run ends by being closed
                raise
            finally:
                if events is not None:
                    await events.aclose()
                await recorder.seal(flow, control.reason, lambda: service.get_session(
                    app_name=self.app_name, user_id=user_id, session_id=session_id))
                if stopped and not recorder.released:  # stopped before its last event
                    await recorder.record_stop(control.reason, self.agent.name)
        finally:
            try:
                if heartbeat is not None:
                    await heartbeat.stop()
            finally:  # a cancel landing in the wait above must not keep the session busy
                if recorder is None or not recorder.released:
                    await self._release(lease)

    def _first_event(self, user_id: str, session_id: str, invocation_id: str,
                     message: Content | None) -> tuple[Event, str | None] | None:
        """The user's message as an event the lease's write may store, and the event it follows.

        Only a plain message (approval answers and function responses are
        checked against the session first), and only while this runner's
        ledger of the session shows nothing to repair: no dangling call, no
        expired ticket. The store appends it only if the session's last event
        is still the ledger's last (a session without a ledger here: only if it
        has no events), so the ledger's verdict is about the stored history.
        """
        if message is None or message.function_responses:
            return None
        ledger = self._ledgers.get((user_id, session_id))
        if ledger is None:
            return Event(invocation_id=invocation_id, author="user", content=message), None
        if ledger.dangling() or ledger.expired_tickets(time.time(),
                                                       self.settings.long_running_ttl):
            return None
        return (Event(invocation_id=invocation_id, author="user", content=message),
                ledger.last_event_id)

    async def _take(self, user_id: str, session_id: str, run_id: str,
                    first: tuple[Event, str | None] | None) -> tuple[Lease, bool | None]:
        """The session's lease for this run (creating the session when allowed).

        With ``first``, the lease's write stores that event too when the
        history is still the one it follows. Returns the lease and whether
        ``first`` was stored (``None``: unknown, the write with it failed and
        the lease was taken alone; the session read afterwards tells).

        Raises:
            SessionNotFoundError: no such session (and ``auto_create_session`` is off).
            SessionBusyError: another run holds it (after ``Settings.session_lock_timeout``).
            SessionError: the store failed.
        """
        service, settings = self.session_service, self.settings
        created, unsure = False, False
        while True:
            try:
                if first is None:
                    lease = await service.acquire_lease(
                        app_name=self.app_name, user_id=user_id, session_id=session_id,
                        owner=self._owner, run_id=run_id, ttl=settings.session_lease_ttl,
                        wait=settings.session_lock_timeout)
                    return lease, (None if unsure else False)
                return await service.acquire_lease_and_append(
                    app_name=self.app_name, user_id=user_id, session_id=session_id,
                    owner=self._owner, run_id=run_id, ttl=settings.session_lease_ttl,
                    wait=settings.session_lock_timeout, event=first[0], after=first[1])
            except asyncio.CancelledError:
                # The write may have taken the lease anyway: give it back, or the session
                # stays busy for a whole TTL (release matches on owner and run id alone).
                await self._release(Lease(self.app_name, user_id, session_id, self._owner,
                                          run_id, 0.0))
                raise
            except SessionNotFoundError:
                if not self.auto_create_session:
                    raise SessionNotFoundError(
                        f"no session {session_id!r} for user {user_id!r} in app "
                        f"{self.app_name!r}; create it with runner.create_session() or pass "
                        "auto_create_session=True") from None
                if created:
                    raise SessionNotFoundError(
                        f"session {session_id!r} vanished as it was created") from None
                created = True
                with contextlib.suppress(SessionError):  # another run may create it first
                    await service.create_session(app_name=self.app_name, user_id=user_id,
                                                 session_id=session_id)
            except SessionBusyError:
                raise
            except SessionError as exc:
                if first is None:
                    raise
                # Take the lease alone (a store that is down fails again, and raises);
                # the message then follows as its own write, as it would have.
                logger.warning("run %s: storing the message with the lease failed (%s)",
                               run_id, type(exc).__name__)
                first, unsure = None, True

    async def _release(self, lease: Lease) -> None:
        try:
            await self.session_service.release_lease(lease)
        except SessionError as exc:  # it expires on its own
            logger.warning("releasing the lease of run %s failed: %s", lease.run_id,
                           type(exc).__name__)

    def _ledger(self, session: Session) -> CallLedger:
        """The session's ledger: kept from the last run when history still follows it."""
        key = (session.user_id, session.id)
        ledger = self._ledgers.pop(key, None)
        if ledger is None:
            ledger = CallLedger.of(session.events)
        else:
            ledger.catch_up(session.events)
        self._ledgers[key] = ledger
        if len(self._ledgers) > self.settings.session_cache_size:
            self._ledgers.popitem(last=False)
        return ledger

    async def aclose(self) -> None:
        """Release the session store's connections (the runner may not be used afterwards)."""
        self._ledgers.clear()
        await self.session_service.close()

    async def __aenter__(self) -> Runner:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()

    # -- sync convenience -------------------------------------------------------------------

    def run(
        self,
        *,
        user_id: str,
        session_id: str,
        new_message: str | Content,
        run_config: RunConfig | None = None,
    ) -> Iterator[Event]:
        """Synchronous :meth:`run_async` for scripts.

        Drives a private event loop owned by this runner; call :meth:`close`
        (or use the runner as a context manager) when done.

        Raises:
            UserError: called from inside a running event loop.
        """
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise UserError("Runner.run() cannot be used inside an event loop; use run_async")
        if self._sync_loop is None:
            self._sync_loop = asyncio.new_event_loop()
        loop = self._sync_loop
        stream = self.run_async(user_id=user_id, session_id=session_id, new_message=new_message,
                                run_config=run_config)
        try:
            while True:
                try:
                    event = loop.run_until_complete(stream.__anext__())
                except StopAsyncIteration:
                    return
                yield event
        finally:
            loop.run_until_complete(stream.aclose())

    def close(self) -> None:
        """Close the private loop of :meth:`run` (and the session store's connections)."""
        loop, self._sync_loop = self._sync_loop, None
        if loop is not None:
            loop.run_until_complete(self.session_service.close())
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

