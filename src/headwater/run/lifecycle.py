"""``Run``: one run from the session's hold to its end, whatever makes its events.

A run is one object with one state field (:class:`RunState`) and one
lifecycle, the same for every source of events — a lone agent, a tree, a live
session (the source is :class:`~headwater.agents.tree.TreeRun`'s ``run()`` or
``live()``; the agents layer only yields events):

1. **Start**: take the session's lease (storing the user's message in the same
   write when nothing needs repair), read the session, repair what a dead run
   left, expire old tickets, answer superseded approvals, store the message.
   A busy or missing session raises here and nothing is held afterwards; a
   store that fails here makes one error event, the run's only one.
2. **Events**: the source's, each non-partial one committed by the run's
   :class:`~headwater.run.recorder.Recorder` before it is yielded. A store
   failure mid-run ends the run with one error event (nothing raises).
3. **Stop**: a reader that closes or cancels the run before its last event
   (``GeneratorExit``, ``CancelledError``) is noted, and recorded at the end.
4. **End** (once, whatever ended the run): close the source (model stream,
   tools), seal the calls left without a result, record a stop, stop renewing
   and release the lease, end the run's span.

All four are one async generator (:meth:`Run.events`). :meth:`RunStream.start
<headwater.run.stream.RunStream.start>` runs the start phase on its own by
stepping that generator once (it pauses right after the start); a generator
that has begun is finalised by the event loop when it is dropped, so a run
started and never read still ends as any other does (no ``__del__``).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import AsyncGenerator, Awaitable
from typing import Protocol, cast

from ..agents.approvals import answered_calls, split_approvals, superseded_event, supersedes
from ..agents.base import BaseAgent
from ..agents.expiry import expired_event
from ..agents.invocation import InvocationContext, RunStats
from ..agents.tree import TreeRun
from ..artifacts import BaseArtifactService
from ..core.clock import Clock
from ..core.errors import SessionError, SessionNotFoundError, UserError, public_message
from ..core.events import Event, EventActions, random_id
from ..core.live_request_queue import LiveRequestQueue
from ..core.run_config import RunConfig
from ..core.settings import Settings
from ..core.telemetry import NO_TRACE, RunTrace, error_type, start_run
from ..core.types import Content
from ..memory.base import BaseMemoryService
from ..sessions.base import BaseSessionService, Session
from ..sessions.ledger import CallLedger
from .hold import LeaseKeeper, SessionHold
from .recorder import Recorder, SealReason

logger = logging.getLogger("headwater.runner")


class RunState(enum.Enum):
    """Where a run is in its lifecycle (:attr:`Run.state`, checked on entry)."""

    NEW = "new"
    """Made: nothing held, no event read."""
    STARTING = "starting"
    """Taking the session, storing the message."""
    RUNNING = "running"
    """The session held: the source's events are read."""
    CLOSED = "closed"
    """Over: the hold left; no more events."""


# The states as module constants: on Python 3.11 reading an enum member off its class
# (``RunState.NEW``) runs Python code, about a thousand instructions each time.
_NEW, _STARTING, _RUNNING, _CLOSED = (RunState.NEW, RunState.STARTING, RunState.RUNNING,
                                      RunState.CLOSED)


class RunHost(Protocol):
    """What a run needs of the runner that made it (:class:`headwater.runner.Runner`)."""

    agent: BaseAgent
    app_name: str
    session_service: BaseSessionService
    settings: Settings
    auto_create_session: bool
    artifact_service: BaseArtifactService | None
    memory_service: BaseMemoryService | None
    clock: Clock
    lease_owner: str
    lease_keeper: LeaseKeeper
    tools_open: bool

    async def open_tools(self) -> None: ...

    def known_ledger(self, user_id: str, session_id: str) -> CallLedger | None: ...

    def ledger_for(self, session: Session) -> CallLedger: ...


_STARTED = cast(Event, object())  # what a run started by RunStream.start() pauses on


class Run:
    """One run: its request, its state, and the parts it owns once started.

    Args:
        host: the runner.
        user_id, session_id: the session the run takes.
        config: the run's settings (mode, budgets).
        message: ``run_async``: the user's turn.
        queue: ``run_live``: the client's input.

    Attributes:
        state: where the run is (:class:`RunState`).
        invocation_id: the run's id.
        stats: what the run has spent so far.
        reason: the result a stop gives each call it leaves open.
    """

    __slots__ = ("_failure", "_first", "_hold", "_host", "_recorder", "_source", "_stopped",
                 "_stored", "_trace", "_tree", "config", "invocation_id", "message", "queue",
                 "reason", "session_id", "state", "stats", "user_id")

    def __init__(self, host: RunHost, *, user_id: str, session_id: str, config: RunConfig,
                 message: Content | None = None,
                 queue: LiveRequestQueue | None = None) -> None:
        self._host = host
        self.user_id = user_id
        self.session_id = session_id
        self.config = config
        self.message = message
        self.queue = queue
        self.invocation_id = random_id("inv")
        self.stats = RunStats()
        self.state = _NEW
        self.reason: SealReason = "cancelled"
        self._stopped = False  # stopped before its last event: the stop is recorded
        self._trace: RunTrace = NO_TRACE
        self._first: tuple[Event, str | None] | None = None
        self._stored: bool | None = False
        self._failure: Event | None = None  # the start failed as an event: the run's only one
        self._hold: SessionHold | None = None
        self._recorder: Recorder | None = None
        self._tree: TreeRun | None = None
        self._source: AsyncGenerator[Event, None] | None = None

    # -- the one lifecycle ------------------------------------------------------------------

    def events(self, *, announce: bool = False) -> AsyncGenerator[Event, None]:
        """The run's events: its start, the source's events, its end (module docstring).

        Every non-partial event was committed before it is yielded. With
        ``announce``, the generator pauses once right after the start phase
        (:meth:`RunStream.start <headwater.run.stream.RunStream.start>`).

        Raises (when iterated):
            SessionNotFoundError, SessionBusyError, ApprovalError, UserError:
                the start failed; nothing is held afterwards.
            UserError: the run's events are already being read.
        """
        return self._events(announce)

    async def _events(self, announce: bool) -> AsyncGenerator[Event, None]:
        if self.state is not _NEW:
            if self.state is _CLOSED:
                return
            raise UserError("this run's events are already being read")
        await self._start()
        try:
            if announce:
                yield _STARTED  # closed here, before its first event: no stop to record
            try:
                try:
                    failure = self._failure
                    if failure is not None:
                        yield failure
                        return
                    source = self._source
                    assert source is not None
                    async for event in source:  # the per-event path: nothing else here
                        yield event
                except SessionError as exc:
                    yield self._store_failed(exc)
            except (GeneratorExit, asyncio.CancelledError):
                self._stopped = self._stop_counts()
                raise
        finally:
            await self.close()

    async def close(self) -> None:
        """End the run: close the source (model stream, tools), then leave the session (seal,
        record a stop, release) and end the span. Idempotent; a run never started only
        closes."""
        if self.state is _CLOSED:
            return
        self.state = _CLOSED
        try:
            if self._source is not None:
                await self._source.aclose()
        finally:
            try:
                await self._leave()
            finally:
                self._end_trace()

    def _stop_counts(self) -> bool:
        """Whether a stop now (a close, a cancel) is a stop, recorded as one.

        A run of one message: always (its normal end is its last event). A live
        run: while its input is open; its client closing the queue is its normal
        end, and a close or cancel after that (a client that left) is part of it.
        """
        return self.queue is None or not self.queue.closed

    # -- start ------------------------------------------------------------------------------

    async def _start(self) -> None:
        """Hold the session and store the message; the source is ready to read.

        Raises:
            SessionNotFoundError, SessionBusyError, ApprovalError, UserError:
                the run is closed and nothing is held afterwards.
        """
        self.state = _STARTING
        host = self._host
        self._trace = start_run(agent=host.agent.name, session_id=self.session_id,
                                invocation_id=self.invocation_id,
                                capture_content=host.settings.otel_capture_content)
        try:
            if not host.tools_open:  # the tree's toolsets are listed before its first run
                await host.open_tools()
            tree = await self._open()
            if tree is not None:
                await self._prepare(tree)
        except BaseException as exc:
            if isinstance(exc, asyncio.CancelledError):  # a stop, as one mid-run is
                self._stopped = self._stop_counts()
            self._trace.fail(error_type(exc))
            await self.close()
            raise
        self.state = _RUNNING

    async def _open(self) -> TreeRun | None:
        """Take the lease, read the session, and make the run's recorder and tree run.

        ``None`` when reading the session failed: the run's one event is then
        the failure (the lease is released already).
        """
        host = self._host
        service, settings = host.session_service, host.settings
        self._hold = hold = SessionHold(service, host.lease_keeper, host.app_name, self.user_id,
                                        self.session_id, host.lease_owner, self.invocation_id)
        self._first = self._first_event()
        self._stored = await hold.take(self._first, wait=settings.session_lock_timeout,
                                       create=host.auto_create_session)
        try:
            session = await self._read()
        except SessionNotFoundError:
            raise
        except SessionError as exc:  # the store failed: one error event, not a raise
            logger.warning("run %s: reading the session failed: %s", self.invocation_id,
                           type(exc).__name__)
            self._failure = Event(invocation_id=self.invocation_id, author=host.agent.name,
                                  error_code=exc.code, error_message=public_message(exc))
            await hold.release()
            return None
        if session is None:
            raise SessionNotFoundError(
                f"no session {self.session_id!r} for user {self.user_id!r}")
        ctx = InvocationContext(
            invocation_id=self.invocation_id, app_name=host.app_name, session=session,
            run_config=self.config, settings=settings, stats=self.stats,
            artifact_service=host.artifact_service, clock=host.clock,
            ledger=host.ledger_for(session), trace=self._trace, session_service=service,
            memory_service=host.memory_service, user_content=self.message)
        self._recorder = recorder = Recorder(service, ctx, hold)
        self._tree = tree = TreeRun(host.agent, ctx, recorder)
        return tree

    def _read(self) -> Awaitable[Session | None]:
        """The session as the store holds it (``None``: there is none)."""
        host = self._host
        return host.session_service.get_session(
            app_name=host.app_name, user_id=self.user_id, session_id=self.session_id)

    async def _prepare(self, tree: TreeRun) -> None:
        """Repair what a dead run left, answer the approvals a plain message or a live run
        supersedes, store the message, and pick the events' source."""
        recorder, ctx = self._recorder, tree.ctx
        assert recorder is not None
        try:
            stored = self._stored
            if not stored:  # stored with the lease: the ledger saw nothing to repair
                await self._repair(tree, recorder)
            first = self._first
            if first is not None and stored is None:  # the write with it failed
                stored = any(e.id == first[0].id for e in reversed(ctx.session.events))
            if self.queue is not None:  # a live run: a new turn, approvals asked before it
                await self._supersede(tree, recorder)
            if self.message is not None and not stored:  # else it went in with the lease
                message = await recorder.blobs_as_artifacts(self.message)
                content, decisions = split_approvals(message)
                ctx.resume = answered_calls(ctx.ledger, content, decisions)
                if supersedes(content, decisions):  # approvals it leaves unanswered
                    await self._supersede(tree, recorder)
                await recorder.commit(Event(
                    invocation_id=self.invocation_id, author="user", content=content,
                    actions=EventActions(approval_decisions=decisions)))
            self._source = tree.run() if self.queue is None else tree.live(self.queue)
        except SessionError as exc:  # the store failed: one error event, not a raise
            logger.warning("run %s: the session store failed: %s", self.invocation_id,
                           type(exc).__name__)
            self._failure = tree.error_event(exc.code, public_message(exc))

    @staticmethod
    async def _repair(tree: TreeRun, recorder: Recorder) -> None:
        """Calls of runs whose lease ended without them, and tickets whose result never came."""
        repaired = await tree.repair()
        if repaired is not None:
            await recorder.commit(repaired)
        expired = expired_event(tree.ctx, tree.name, time.time())  # as event stamps
        if expired is not None:
            await recorder.commit(expired)

    @staticmethod
    async def _supersede(tree: TreeRun, recorder: Recorder) -> None:
        """Answer every call awaiting approval ``superseded`` (agents/approvals.py)."""
        superseded = superseded_event(tree.ctx, tree.name)
        if superseded is not None:
            await recorder.commit(superseded)

    def _first_event(self) -> tuple[Event, str | None] | None:
        """The user's message as an event the lease's write may store, and the event it follows.

        Only a plain message (approval answers and function responses are
        checked against the session first), and only while the runner's
        ledger of the session shows nothing to repair: no dangling call, no
        expired ticket, no call awaiting approval (the message supersedes it:
        its result is stored first). The store appends it only if the session's last event
        is still the ledger's last (a session without a ledger here: only if it
        has no events), so the ledger's verdict is about the stored history.
        """
        message, host = self.message, self._host
        if message is None or message.function_responses or (
                self.config.save_input_blobs_as_artifacts and host.artifact_service is not None
                and any(p.inline_data is not None for p in message.parts)):
            return None  # blobs become artifacts once the session is read
        ledger = host.known_ledger(self.user_id, self.session_id)
        event = Event(invocation_id=self.invocation_id, author="user", content=message)
        if ledger is None:
            return event, None
        if ledger.dangling() or ledger.awaiting() or ledger.expired_tickets(
                time.time(), host.settings.long_running_ttl):
            return None
        return event, ledger.last_event_id

    # -- events and end ---------------------------------------------------------------------

    def _store_failed(self, exc: SessionError) -> Event:
        """The error event that ends a run whose store failed mid-run."""
        logger.warning("run %s: the session store failed: %s", self.invocation_id,
                       type(exc).__name__)
        self._trace.fail(exc.code)
        assert self._tree is not None
        return self._tree.error_event(exc.code, public_message(exc))

    async def _leave(self) -> None:
        """Seal every call left without a result, record a stop, release the lease."""
        hold, recorder, tree = self._hold, self._recorder, self._tree
        if hold is None:
            return  # never started
        try:
            # A last write that released the lease left no call open (Recorder.commit) and
            # came after every stop: nothing to seal, nothing to record.
            if recorder is not None and tree is not None and not hold.released:
                await recorder.seal(tree, self.reason, self._read)
                if self._stopped:  # stopped before its last event
                    await recorder.record_stop(self.reason, self._host.agent.name)
        finally:
            try:
                await hold.release()
            finally:
                if tree is not None:
                    tree.end()

    def _end_trace(self) -> None:
        """End the run's span: its usage, and the error code of its last event if it has one."""
        trace = self._trace
        if trace is NO_TRACE:
            return  # not traced: nothing to end
        error = self._failure.error_code if self._failure is not None else None
        if error is None and self._tree is not None:
            events = self._tree.ctx.session.events
            if events and events[-1].invocation_id == self.invocation_id:
                error = events[-1].error_code
        trace.end(self.stats.usage, error)
