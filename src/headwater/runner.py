"""``Runner``: drives an agent (or a tree of agents) on a session and hands the caller
one event stream.

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
from typing import Any, Literal

from .agents.approvals import answered_calls, split_approvals, superseded_event, supersedes
from .agents.base import BaseAgent
from .agents.expiry import expired_event
from .agents.flow import Flow
from .agents.invocation import InvocationContext, RunStats
from .agents.toolsets import close_toolsets
from .agents.tree import TreeRun, lone_agent
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
    public_message,
)
from .events import Event, EventActions, new_id, random_id
from .live_request_queue import LiveRequestQueue
from .run_config import RunConfig, StreamingMode
from .sessions.base import BaseSessionService, Lease, Session
from .sessions.ledger import CallLedger
from .sessions.memory import InMemorySessionService
from .settings import Settings, settings_or_default
from .telemetry import NO_TRACE, RunTrace, error_type, start_run
from .types import Content, Usage, as_content

logger = logging.getLogger("headwater.runner")



SealReason = Literal["cancelled", "interrupted"]
_CLOSING: set[asyncio.Future[None]] = set()  # closes of dropped runs, held until they end


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

    __slots__ = ("_agen", "_run", "invocation_id", "stats")

    def __init__(self, run: _Run) -> None:
        self._run = run
        self._agen = run.events()
        self.invocation_id = run.spec.invocation_id
        self.stats = run.spec.stats

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
        await self._run.start()

    @property
    def usage(self) -> Usage:
        """Token usage summed over the run's model aggregates."""
        return self.stats.usage

    def __aiter__(self) -> AsyncGenerator[Event, None]:
        # ``async for`` steps the run's generator itself (a lone agent's: its flow's,
        # Flow.top): a Python ``__anext__`` here would cost a call from C per event.
        return self._agen

    def __anext__(self) -> Any:  # for stepping by hand: the generator's own awaitable
        return self._agen.__anext__()

    @property
    def seal_reason(self) -> SealReason:
        """The result a stop (``aclose()``, a cancel) gives each call it leaves open.

        ``cancelled`` by default; a server that stops runs as it shuts down sets
        ``interrupted`` before it cancels them.
        """
        return self._run.reason

    @seal_reason.setter
    def seal_reason(self, reason: SealReason) -> None:
        if reason not in ("cancelled", "interrupted"):
            raise UserError(f"seal_reason is 'cancelled' or 'interrupted', not {reason!r}")
        self._run.reason = reason

    async def aclose(self, *, reason: SealReason | None = None) -> None:
        """Stop the run: close the model stream, cancel tools, seal history.

        Args:
            reason: sets :attr:`seal_reason` first.
        """
        if reason is not None:
            self.seal_reason = reason
        await self._agen.aclose()
        await self._run.close()  # started (start()) but never iterated

    async def __aenter__(self) -> RunStream:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        """Close the run (model stream, tools, seal) whatever ended the block."""
        await self.aclose()

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

    async def seal(self, tree: TreeRun, reason: SealReason,
                   reload: Callable[[], Awaitable[Session | None]]) -> None:
        """Give every call left without a result a ``reason`` one; quiet on failure.

        Storing a result and sealing are one conditional write in the store: a
        result that got in first wins, and the seal is recomputed without it.
        """
        for _ in range(2):
            sealed = tree.seal(reason)
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


@dataclass(slots=True)
class _RunSpec:
    """What a run was asked: whose session, in which mode, with what input."""

    user_id: str
    session_id: str
    config: RunConfig
    invocation_id: str
    message: Content | None = None  # run_async: the user's turn
    queue: LiveRequestQueue | None = None  # run_live: the client's input
    stats: RunStats = field(default_factory=RunStats)

    def stop_counts(self) -> bool:
        """Whether a stop now (a close, a cancel) is a stop, recorded as one.

        A run of one message: always (its normal end is its last event). A live
        run: while its input is open; its client closing the queue is its normal
        end, and a close or cancel after that (a client that left) is part of it.
        """
        return self.queue is None or not self.queue.closed


class _Hold:
    """A run's hold on its session, as an async context manager.

    Entering takes the session's lease (storing the user's message in the same
    write when nothing needs repair), reads the session, and sets up the one
    recorder every write of the run goes through, the agent tree's run, and the heartbeat
    that renews the lease. Leaving seals every call left without a result,
    records a stop, stops the heartbeat and releases the lease — whatever ended
    the run (its last event, an error, a cancel). See docs/architecture.md, "One
    flow, one persistence point" and "One run per session".

    Attributes (valid once entered):
        tree: the run of the agent tree (``headwater.agents.tree``), writing
            through the recorder.
        stored: whether the lease's write stored the message (``None``: unknown).
        failure: the error event to end the run with when reading the session failed.
    """

    __slots__ = ("_first", "_heartbeat", "_lease", "_recorder", "_runner", "_spec", "failure",
                 "reason", "stopped", "stored", "trace", "tree")

    def __init__(self, runner: Runner, spec: _RunSpec) -> None:
        self._runner = runner
        self._spec = spec
        self._first = self._first_event()
        self._lease: Lease | None = None
        self._recorder: _Recorder | None = None
        self._heartbeat: _Heartbeat | None = None
        self.tree: TreeRun | None = None
        self.stored: bool | None = False
        self.failure: Event | None = None
        self.reason: SealReason = "cancelled"
        self.stopped = False  # stopped before its last event: the stop is recorded
        self.trace: RunTrace = NO_TRACE

    @property
    def first(self) -> Event | None:
        """The message event the lease's write may store (see :meth:`_first_event`)."""
        return self._first[0] if self._first is not None else None

    @property
    def recorder(self) -> _Recorder:
        assert self._recorder is not None, "the hold is not entered"
        return self._recorder

    async def __aenter__(self) -> _Hold:
        runner, spec = self._runner, self._spec
        self.trace = start_run(agent=runner.agent.name,
                               session_id=spec.session_id, invocation_id=spec.invocation_id,
                               capture_content=runner.settings.otel_capture_content)
        self._lease, self.stored = await self._take()
        try:
            session = await runner.session_service.get_session(
                app_name=runner.app_name, user_id=spec.user_id, session_id=spec.session_id)
        except SessionNotFoundError:
            await self._release()
            raise
        except SessionError as exc:  # the store failed: one error event, not a raise
            logger.warning("run %s: reading the session failed: %s", spec.invocation_id,
                           type(exc).__name__)
            self.failure = Event(invocation_id=spec.invocation_id, author=runner.agent.name,
                                 error_code=exc.code, error_message=public_message(exc))
            await self._release()
            return self
        except BaseException:
            await self._release()
            raise
        if session is None:
            await self._release()
            raise SessionNotFoundError(
                f"no session {spec.session_id!r} for user {spec.user_id!r}")
        ctx = InvocationContext(
            invocation_id=spec.invocation_id, app_name=runner.app_name, session=session,
            run_config=spec.config, settings=runner.settings, stats=spec.stats,
            artifact_service=runner.artifact_service, clock=runner.clock,
            ledger=runner.ledger_for(session), trace=self.trace)
        self._recorder = _Recorder(runner.session_service, ctx, self._lease)
        self._heartbeat = _Heartbeat(runner.session_service, self._recorder,
                                     runner.settings.session_lease_ttl)
        self.tree = TreeRun(runner.agent, ctx, self._recorder)
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        recorder, tree = self._recorder, self.tree
        if recorder is None or tree is None:
            return  # never held (released on the way in)
        try:
            runner, spec = self._runner, self._spec
            await recorder.seal(tree, self.reason, lambda: runner.session_service.get_session(
                app_name=runner.app_name, user_id=spec.user_id, session_id=spec.session_id))
            if self.stopped and not recorder.released:  # stopped before its last event
                await recorder.record_stop(self.reason, runner.agent.name)
        finally:
            try:
                if self._heartbeat is not None:
                    await self._heartbeat.stop()
            finally:  # a cancel landing in the wait above must not keep the session busy
                tree.end()
                if not recorder.released:
                    await self._release()

    def end_trace(self) -> None:
        """End the run's span: its usage, and the error code of its last event if it has one."""
        if self.trace is NO_TRACE:
            return  # not traced: nothing to end
        error = self.failure.error_code if self.failure is not None else None
        if error is None and self.tree is not None:
            events = self.tree.ctx.session.events
            if events and events[-1].invocation_id == self._spec.invocation_id:
                error = events[-1].error_code
        self.trace.end(self._spec.stats.usage, error)

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
        spec, runner = self._spec, self._runner
        message = spec.message
        if message is None or message.function_responses:
            return None
        ledger = runner.known_ledger(spec.user_id, spec.session_id)
        event = Event(invocation_id=spec.invocation_id, author="user", content=message)
        if ledger is None:
            return event, None
        if ledger.dangling() or ledger.awaiting() or ledger.expired_tickets(
                time.time(), runner.settings.long_running_ttl):
            return None
        return event, ledger.last_event_id

    async def _take(self) -> tuple[Lease, bool | None]:
        """The session's lease for this run (creating the session when allowed).

        With a first event, the lease's write stores it too when the history
        is still the one it follows. Returns the lease and whether that event
        was stored (``None``: unknown, the write with it failed and the lease
        was taken alone; the session read afterwards tells).

        Raises:
            SessionNotFoundError: no such session (and ``auto_create_session`` is off).
            SessionBusyError: another run holds it (after ``Settings.session_lock_timeout``).
            SessionError: the store failed.
        """
        runner, spec, first = self._runner, self._spec, self._first
        service, settings = runner.session_service, runner.settings
        user_id, session_id, run_id = spec.user_id, spec.session_id, spec.invocation_id
        created, unsure = False, False
        while True:
            try:
                if first is None:
                    lease = await service.acquire_lease(
                        app_name=runner.app_name, user_id=user_id, session_id=session_id,
                        owner=runner.lease_owner, run_id=run_id, ttl=settings.session_lease_ttl,
                        wait=settings.session_lock_timeout)
                    return lease, (None if unsure else False)
                return await service.acquire_lease_and_append(
                    app_name=runner.app_name, user_id=user_id, session_id=session_id,
                    owner=runner.lease_owner, run_id=run_id, ttl=settings.session_lease_ttl,
                    wait=settings.session_lock_timeout, event=first[0], after=first[1])
            except asyncio.CancelledError:
                # The write may have taken the lease anyway: give it back, or the session
                # stays busy for a whole TTL (release matches on owner and run id alone).
                self._lease = Lease(runner.app_name, user_id, session_id, runner.lease_owner,
                                    run_id, 0.0)
                await self._release()
                raise
            except SessionNotFoundError:
                if not runner.auto_create_session:
                    raise SessionNotFoundError(
                        f"no session {session_id!r} for user {user_id!r} in app "
                        f"{runner.app_name!r}; create it with runner.create_session() or pass "
                        "auto_create_session=True") from None
                if created:
                    raise SessionNotFoundError(
                        f"session {session_id!r} vanished as it was created") from None
                created = True
                with contextlib.suppress(SessionError):  # another run may create it first
                    await service.create_session(app_name=runner.app_name, user_id=user_id,
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

    async def _release(self) -> None:
        lease = self._lease
        if lease is None:
            return
        try:
            await self._runner.session_service.release_lease(lease)
        except SessionError as exc:  # it expires on its own
            logger.warning("releasing the lease of run %s failed: %s", lease.run_id,
                           type(exc).__name__)


class _Run:
    """One run: a start phase (hold the session, make it whole, store the message), then
    its events, then the hold's end. :meth:`RunStream.start` runs the start phase on its
    own; iterating starts it when nobody did.

    A message to a lone LLM agent (the common case) is one flow's run: its
    events are :meth:`Flow.top`'s, with this object as the flow's
    :class:`~headwater.agents.flow.RunTop`, so the reader steps the flow with no
    layer in between. Any other run (a tree, a live run) is a generator here
    around the tree's events, with the same start, stop and end.
    """

    __slots__ = ("_flow", "_held", "_hold", "_loop", "_source", "phase", "spec", "top")

    def __init__(self, runner: Runner, spec: _RunSpec) -> None:
        self.spec = spec
        self.phase: Literal["new", "starting", "started", "closed"] = "new"
        self._loop: asyncio.AbstractEventLoop | None = None
        self._hold = _Hold(runner, spec)
        self._held = False  # the hold was entered and is not left yet
        # the run is one flow's (Flow.top): its flow, once started
        self.top = spec.queue is None and lone_agent(runner.agent) is not None
        self._flow: Flow | None = None
        self._source: AsyncGenerator[Event, None] | None = None  # any other run's events

    @property
    def reason(self) -> SealReason:
        return self._hold.reason

    @reason.setter
    def reason(self, reason: SealReason) -> None:
        self._hold.reason = reason

    async def start(self) -> None:
        """Hold the session and store the message; the flow is ready to go.

        Raises:
            SessionNotFoundError, SessionBusyError, ApprovalError, UserError:
                nothing is held afterwards.
            UserError: the run has already started.
        """
        if self.phase != "new":
            raise UserError("RunStream.start() must come before the first event, once")
        self.phase = "starting"
        self._loop = asyncio.get_running_loop()
        try:
            hold = await self._hold.__aenter__()
            self._held = True
            if hold.failure is None:
                await self._prepare(hold)
        except BaseException as exc:
            if isinstance(exc, asyncio.CancelledError):
                self._hold.stopped = self.spec.stop_counts()
            self._hold.trace.fail(error_type(exc))
            await self.close()
            raise
        self.phase = "started"

    async def _prepare(self, hold: _Hold) -> None:
        """Repair what a dead run left, answer the approvals a plain message or a live run
        supersedes, store the message, and pick the events' source."""
        tree, recorder, spec = hold.tree, hold.recorder, self.spec
        assert tree is not None
        ctx = tree.ctx
        try:
            repaired = await tree.repair()  # calls of runs whose lease ended without them
            if repaired is not None:
                await recorder.commit(repaired)
            expired = expired_event(ctx, tree.name, time.time())  # as event stamps
            if expired is not None:  # tickets whose result never came
                await recorder.commit(expired)
            first = hold.first
            if first is not None and hold.stored is None:  # the write with it failed
                hold.stored = any(e.id == first.id for e in reversed(ctx.session.events))
            if spec.queue is not None:  # a live run: a new turn, approvals asked before it
                await self._supersede(tree)
            if spec.message is not None and not hold.stored:  # else it went in with the lease
                content, decisions = split_approvals(spec.message)
                ctx.resume = answered_calls(ctx.ledger, content, decisions)
                if supersedes(content, decisions):  # approvals it leaves unanswered
                    await self._supersede(tree)
                await recorder.commit(Event(
                    invocation_id=spec.invocation_id, author="user", content=content,
                    actions=EventActions(approval_decisions=decisions)))
            if self.top:
                self._flow = tree.lone_flow()
            elif spec.queue is None:
                self._source = tree.run()
            else:
                self._source = tree.live(spec.queue)
        except SessionError as exc:  # the store failed: one error event, not a raise
            logger.warning("run %s: the session store failed: %s", spec.invocation_id,
                           type(exc).__name__)
            hold.failure = tree.error_event(exc.code, public_message(exc))

    async def _supersede(self, tree: TreeRun) -> None:
        """Answer every call awaiting approval ``superseded`` (agents/approvals.py)."""
        superseded = superseded_event(tree.ctx, tree.name)
        if superseded is not None:
            await self._hold.recorder.commit(superseded)

    def events(self) -> AsyncGenerator[Event, None]:
        """The run's events; every non-partial one was committed before it is yielded."""
        return Flow.top(self) if self.top else self._events()

    async def _events(self) -> AsyncGenerator[Event, None]:
        """The events of a tree's or a live run, around the tree's (see the class docstring)."""
        if not await self._started():
            return
        try:
            failure = self._hold.failure
            if failure is not None:  # the start failed as an event: the run's only one
                yield failure
                return
            source = self._source
            assert source is not None
            try:
                async for event in source:
                    yield event
            except SessionError as exc:
                yield self.store_failed(exc)  # the store failed mid-run: one error event
        except (GeneratorExit, asyncio.CancelledError):
            self.stopped()
            raise
        finally:
            await self.close()

    # -- the run's side of its events (agents.flow.RunTop) ----------------------------------

    async def begin(self) -> Flow | Event | None:
        """Start the run unless :meth:`RunStream.start` did: the flow to drive, the
        failure event that is the whole run, or ``None`` (no events)."""
        if not await self._started():
            return None
        failure = self._hold.failure
        return failure if failure is not None else self._flow

    async def _started(self) -> bool:
        """Start the run unless it was; whether it has events to give (it was not
        closed, and its start did not fail and raise)."""
        if self.phase == "new":
            await self.start()
        return self.phase == "started"

    def store_failed(self, exc: SessionError) -> Event:
        """The error event that ends a run whose store failed mid-run."""
        hold = self._hold
        logger.warning("run %s: the session store failed: %s", self.spec.invocation_id,
                       type(exc).__name__)
        hold.trace.fail(exc.code)
        assert hold.tree is not None
        return hold.tree.error_event(exc.code, public_message(exc))

    def stopped(self) -> None:
        """The reader closed or cancelled the run before its last event."""
        self._hold.stopped = self.spec.stop_counts()

    async def end(self) -> None:
        await self.close()

    async def close(self) -> None:
        """End the run: close the flow (model stream, tools), then leave the hold
        (seal, record a stop, release). Idempotent."""
        if self.phase == "closed":
            return
        self.phase = "closed"
        try:
            if self._source is not None:
                await self._source.aclose()
        finally:
            try:
                if self._held:
                    self._held = False
                    await self._hold.__aexit__(None, None, None)
            finally:
                self._hold.end_trace()

    def __del__(self) -> None:
        # Started (RunStream.start) but dropped before its first event: Python finalises
        # only async generators that began, so the hold is left here, as they are.
        loop = self._loop
        if self.phase == "started" and loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._close_later)

    def _close_later(self) -> None:
        _CLOSING.add(task := asyncio.ensure_future(self.close()))
        task.add_done_callback(_CLOSING.discard)


class Runner:
    """Runs an agent, or a tree of agents, on sessions of one app.

    Use it as ``async with Runner(...) as runner`` (or call :meth:`aclose`) to
    release the session store's connections at the end.

    Args:
        agent: the root agent: an :class:`~headwater.Agent` (with or without
            sub-agents) or a workflow agent (docs/multi-agent.md).
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
        agent: BaseAgent,
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
        self.settings = settings_or_default(settings)
        self.session_service = session_service or InMemorySessionService(settings=self.settings)
        self.auto_create_session = auto_create_session
        self.lease_owner = f"{socket.gethostname()}:{os.getpid()}:{new_id('runner')}"
        """Who holds the leases of this runner's runs (host, pid, a runner id)."""
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
        return RunStream(_Run(self, _RunSpec(user_id, session_id, config, random_id("inv"),
                                             message=message)))

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
        return RunStream(_Run(self, _RunSpec(user_id, session_id, config, random_id("inv"),
                                             queue=live_request_queue)))

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

    def known_ledger(self, user_id: str, session_id: str) -> CallLedger | None:
        """The ledger this runner keeps of a session, if it still has one (no read)."""
        return self._ledgers.get((user_id, session_id))

    def ledger_for(self, session: Session) -> CallLedger:
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
        """Release the session store's connections and close the agents' toolsets (their
        MCP servers stop; the runner may not be used afterwards)."""
        self._ledgers.clear()
        await close_toolsets(self.agent)
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

