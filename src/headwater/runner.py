"""``Runner``: drives an agent (or a tree of agents) on a session and hands the caller
one event stream.

The runner alone persists. The step engine (``headwater.agents``) hands
every non-partial event up to the run's recorder (``headwater.run.recorder``),
which commits it to the session store and updates the session's call ledger;
only then is it yielded and the engine goes on (persist, then yield) — in every
mode. Partial events are yielded and never stored. Closing the stream
(``break``, ``aclose()``, task cancellation, an exception in the caller's loop)
closes the model stream, cancels running tools and seals history: every call
left without a result gets a synthetic ``cancelled`` result, so the next turn is
valid. One run's lifecycle is :class:`headwater.run.Run`'s.
"""

from __future__ import annotations

import asyncio
import collections
import os
import socket
from collections.abc import Iterator
from contextlib import aclosing
from types import TracebackType
from typing import Any

from .agents.agent import check_models
from .agents.base import BaseAgent
from .agents.toolsets import close_toolsets, open_toolsets, toolsets_of
from .artifacts import BaseArtifactService, InMemoryArtifactService
from .core.clock import SYSTEM_CLOCK, Clock
from .core.errors import UserError
from .core.events import Event, new_id
from .core.live_request_queue import LiveRequestQueue
from .core.run_config import RunConfig, StreamingMode
from .core.settings import Settings, settings_or_default
from .core.types import Content, as_content
from .memory import BaseMemoryService, InMemoryMemoryService
from .run.hold import LeaseKeeper
from .run.lifecycle import Run
from .run.recorder import SealReason as SealReason
from .run.stream import RunResult as RunResult
from .run.stream import RunStream as RunStream
from .sessions.base import BaseSessionService, Session
from .sessions.ledger import CallLedger
from .sessions.memory import InMemorySessionService

__all__ = ("InMemoryRunner", "RunResult", "RunStream", "Runner", "SealReason")


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
        artifact_service: where tools and callbacks save, load and list artifacts
            (``save_artifact``…), and ``content_and_artifact`` tools store theirs.
        memory_service: what ``ToolContext.search_memory`` (``load_memory``,
            ``preload_memory``) reads.
        clock: the clock tools and live streams see (``VirtualClock`` in tests).

    Raises:
        UserError: an LLM agent of the tree has no model, and none above it has one.
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
        memory_service: BaseMemoryService | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        check_models(agent)
        self.agent = agent
        self.artifact_service = artifact_service
        self.memory_service = memory_service
        self.clock = clock
        self.app_name = app_name
        self.settings = settings_or_default(settings)
        self.session_service = session_service or InMemorySessionService(settings=self.settings)
        self.auto_create_session = auto_create_session
        self.lease_owner = f"{socket.gethostname()}:{os.getpid()}:{new_id('runner')}"
        """Who holds the leases of this runner's runs (host, pid, a runner id)."""
        self.lease_keeper = LeaseKeeper(self.settings.session_lease_ttl)
        """Renews the leases of this runner's live runs (``headwater.run.hold``)."""
        self._ledgers: collections.OrderedDict[tuple[str, str], CallLedger] = (
            collections.OrderedDict())
        self._sync_loop: asyncio.AbstractEventLoop | None = None
        self.tools_open = not toolsets_of(agent)
        """Whether the tree's toolsets are open (listed); a run opens them first otherwise."""

    async def open_tools(self) -> None:
        """Open (list) every toolset the tree's runs may use, before a run needs one
        (``headwater.agents.toolsets.open_toolsets``); a run calls it until it succeeds.

        Raises:
            McpUnavailableError: a toolset's server could not be started or reached.
            UserError: a toolset's tool has the name of another tool of its agent.
        """
        await open_toolsets(self.agent)
        self.tools_open = True

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
        return RunStream(Run(self, user_id=user_id, session_id=session_id, config=config,
                             message=message))

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
        return RunStream(Run(self, user_id=user_id, session_id=session_id, config=config,
                             queue=live_request_queue))

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
        self.tools_open = not toolsets_of(self.agent)
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



class InMemoryRunner(Runner):
    """A :class:`Runner` on in-memory services (sessions, artifacts, memory), as ADK's.

    For tests, samples and one-process demos: everything is lost when the process
    ends. ``runner.session_service``, ``runner.artifact_service`` and
    ``runner.memory_service`` are the services it made.

    Args:
        agent: the root agent.
        app_name: the application's name (default ``"InMemoryRunner"``, ADK's).
        settings, auto_create_session, clock: as :class:`Runner`'s.
    """

    def __init__(self, agent: BaseAgent, *, app_name: str = "InMemoryRunner",
                 settings: Settings | None = None, auto_create_session: bool = False,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        settings = settings_or_default(settings)
        super().__init__(agent=agent, app_name=app_name,
                         session_service=InMemorySessionService(settings=settings),
                         settings=settings, auto_create_session=auto_create_session,
                         artifact_service=InMemoryArtifactService(),
                         memory_service=InMemoryMemoryService(), clock=clock)
