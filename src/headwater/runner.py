"""``Runner``: drives an agent on a session and hands the caller one event stream.

Persist, then yield: every non-partial event is committed to the session store
before the caller sees it. Partial events are yielded and never stored.
Closing the stream (``break``, ``aclose()``, task cancellation) closes the model
stream, cancels running tools and seals history: every call left without a
result gets a synthetic ``cancelled`` result, so the next turn is valid.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterator
from contextlib import aclosing
from types import TracebackType
from typing import Any

from .agents.agent import Agent
from .agents.approvals import answered_calls, split_approvals
from .agents.invocation import InvocationContext, RunStats
from .artifacts import BaseArtifactService
from .clock import SYSTEM_CLOCK, Clock
from .errors import SessionBusyError, SessionNotFoundError, UserError
from .events import Event, EventActions, new_id
from .live_request_queue import LiveRequestQueue
from .run_config import RunConfig, StreamingMode
from .sessions.base import BaseSessionService, Session
from .sessions.memory import InMemorySessionService
from .settings import Settings, get_settings
from .types import Content, FunctionCall, FunctionResponse, Part, Usage, as_content

_SEAL_MESSAGES = {
    "cancelled": "The call was cancelled before it returned a result.",
    "interrupted": "The call was interrupted (the process stopped) before it returned a result.",
}


class RunStream:
    """The async iterator of one run's events; also its spending so far.

    Iterate it (``async for``) or close it with ``aclose()``; it is an async
    generator in all but name, so ``contextlib.aclosing`` works on it.

    Attributes:
        invocation_id: the run's id.
        stats: model calls, tool calls and usage totals of the run so far.
    """

    __slots__ = ("_agen", "invocation_id", "stats")

    def __init__(self, agen: AsyncGenerator[Event, None], invocation_id: str,
                 stats: RunStats) -> None:
        self._agen = agen
        self.invocation_id = invocation_id
        self.stats = stats

    @property
    def usage(self) -> Usage:
        """Token usage summed over the run's model aggregates."""
        return self.stats.usage

    def __aiter__(self) -> RunStream:
        return self

    def __anext__(self) -> Any:  # the generator's own awaitable: no extra frame per event
        return self._agen.__anext__()

    async def aclose(self) -> None:
        """Stop the run: close the model stream, cancel tools, seal history."""
        await self._agen.aclose()

    async def athrow(self, exc: BaseException) -> Event:
        """Throw into the run (as for an async generator)."""
        return await self._agen.athrow(exc)


class Runner:
    """Runs an agent on sessions of one app.

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
        self._locks: weakref.WeakValueDictionary[tuple[str, str], asyncio.Lock] = (
            weakref.WeakValueDictionary())
        self._sync_loop: asyncio.AbstractEventLoop | None = None

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

        Raises (when iterated):
            SessionNotFoundError: the session does not exist for this user.
            SessionBusyError: another run of this runner holds the session
                for longer than ``Settings.session_lock_timeout``.
            UserError: ``run_config`` asks for BIDI (use ``run_live``).
        """
        config = run_config or RunConfig()
        if config.streaming_mode is StreamingMode.BIDI:
            raise UserError("StreamingMode.BIDI runs go through Runner.run_live, not run_async")
        invocation_id = new_id("inv")
        stats = RunStats()
        message = as_content(new_message)

        async def begin(ctx: InvocationContext) -> AsyncGenerator[Event, None]:
            content, decisions = split_approvals(message)
            ctx.resume = answered_calls(ctx.session, content, decisions)
            await self.session_service.append_event(ctx.session, Event(
                invocation_id=invocation_id, author="user", content=content,
                actions=EventActions(approval_decisions=decisions)))
            return self.agent.run_async(ctx)

        agen = self._session_run(user_id, session_id, config, invocation_id, stats, begin,
                                 persist=True)
        return RunStream(agen, invocation_id, stats)

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
        stats = RunStats()
        async def begin(ctx: InvocationContext) -> AsyncGenerator[Event, None]:
            return self.agent.run_live(ctx, live_request_queue)  # it persists as it goes

        agen = self._session_run(user_id, session_id, config, invocation_id, stats, begin,
                                 persist=False)
        return RunStream(agen, invocation_id, stats)

    async def _session_run(
        self, user_id: str, session_id: str, config: RunConfig, invocation_id: str,
        stats: RunStats, begin: Callable[[InvocationContext], Awaitable[AsyncGenerator[Event,
                                                                                      None]]],
        *, persist: bool,
    ) -> AsyncGenerator[Event, None]:
        """One run holding its session: recover after a crash, run, seal on the way out.

        With ``persist``, non-partial events are committed here before they are
        yielded; otherwise the flow ``begin`` starts has committed them.
        """
        async with self._hold(user_id, session_id):
            session = await self._session(user_id, session_id)
            ctx = self._context(session, config, invocation_id, stats)
            await self._seal(session, invocation_id, "interrupted", ctx)
            events = await begin(ctx)
            service = self.session_service
            try:
                async for event in events:
                    if persist and not event.partial:
                        await service.append_event(session, event)
                    yield event
            finally:
                await events.aclose()
                await self._seal(session, invocation_id, "cancelled")

    def _context(self, session: Session, config: RunConfig, invocation_id: str,
                 stats: RunStats) -> InvocationContext:
        return InvocationContext(
            invocation_id=invocation_id, app_name=self.app_name, session=session,
            run_config=config, settings=self.settings, stats=stats,
            artifact_service=self.artifact_service, clock=self.clock,
            session_service=self.session_service)

    @contextlib.asynccontextmanager
    async def _hold(self, user_id: str, session_id: str) -> AsyncIterator[None]:
        """Exclusive use of a session by one run of this runner."""
        lock = self._lock(user_id, session_id)
        try:
            async with asyncio.timeout(self.settings.session_lock_timeout):
                await lock.acquire()
        except TimeoutError:
            raise SessionBusyError(f"session {session_id!r} has a run in progress") from None
        try:
            yield
        finally:
            lock.release()

    def _lock(self, user_id: str, session_id: str) -> asyncio.Lock:
        key = (user_id, session_id)
        lock = self._locks.get(key)
        if lock is None:
            lock = asyncio.Lock()
            self._locks[key] = lock
        return lock

    async def _session(self, user_id: str, session_id: str) -> Session:
        service = self.session_service
        session = await service.get_session(app_name=self.app_name, user_id=user_id,
                                            session_id=session_id)
        if session is not None:
            return session
        if self.auto_create_session:
            return await service.create_session(app_name=self.app_name, user_id=user_id,
                                                session_id=session_id)
        raise SessionNotFoundError(
            f"no session {session_id!r} for user {user_id!r} in app {self.app_name!r}; "
            "create it with session_service.create_session() or pass auto_create_session=True"
        )

    async def _seal(self, session: Session, invocation_id: str, reason: str,
                    ctx: InvocationContext | None = None) -> None:
        """Give every call still without a result one, so history stays valid.

        With ``ctx`` (a run starting after a crash), calls to tools marked
        ``idempotent`` run again and give their real result; every other call
        gets a synthetic ``reason`` result and is never re-run.
        """
        dangling = unanswered_calls(session)
        if not dangling:
            return
        tools = {t.name: t for t in self.agent.tools}
        again = [c for c in dangling if ctx is not None and c.name in tools
                 and tools[c.name].options.idempotent
                 and not tools[c.name].options.requires_approval]
        results: dict[str, FunctionResponse] = {}
        if ctx is not None and again:
            async with aclosing(self.agent._executor.run(ctx, again)) as items:
                async for item in items:
                    if not isinstance(item, Event):  # progress of a re-run is not shown
                        results.update((o.call.id, FunctionResponse(o.call.id, o.call.name,
                                                                    o.response or {}))
                                       for o in item)
        message = _SEAL_MESSAGES[reason]
        parts = [Part(function_response=results.get(call.id) or FunctionResponse(
            id=call.id, name=call.name, response={"error": message, "code": reason}))
            for call in dangling]
        await self.session_service.append_event(session, Event(
            invocation_id=invocation_id, author=self.agent.name,
            content=Content("user", parts), interrupted=len(results) < len(dangling)))

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


def unanswered_calls(session: Session) -> list[FunctionCall]:
    """Calls in history without a response, except long-running ones still pending.

    Returns:
        The calls, in the order they were made.
    """
    calls: dict[str, FunctionCall] = {}
    pending: set[str] = set()
    for event in session.events:
        pending.update(event.long_running_tool_ids)
        content = event.content
        if content is None:
            continue
        for part in content.parts:
            if part.function_call is not None:
                calls[part.function_call.id] = part.function_call
            elif part.function_response is not None:
                calls.pop(part.function_response.id, None)
    return [call for call_id, call in calls.items() if call_id not in pending]
