"""The gateway's shared core: runners by agent, the run manager, auth, and how runs start.

Every wire format (the typed frames, AG-UI, the Vercel UI message stream, the
live WebSocket) starts and follows runs through :class:`Gateway`, so sessions,
auth, limits, persistence and cancellation are the same for all of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any

from fastapi import Depends
from fastapi.requests import HTTPConnection, Request

from ..agents.agent import Agent
from ..agents.base import BaseAgent
from ..agents.live_flow import STOP_STREAMING
from ..agents.toolsets import close_toolsets, open_toolsets
from ..agents.transfer import TRANSFER_TO_AGENT
from ..core.errors import (
    HeadwaterError,
    McpUnavailableError,
    RunStoreUnavailable,
    SessionError,
    UserError,
    code_of,
)
from ..core.run_config import RunConfig, StreamingMode
from ..core.settings import Settings
from ..core.telemetry import recording
from ..core.types import Content
from ..runner import Runner, RunStream
from ..sessions.base import BaseSessionService, Session
from .http.auth import Authenticator, user_of
from .http.problems import ErrorBody, GatewayHTTPError, too_large
from .http.ratelimit import UserRateLimit
from .http.responses import Render, SSEResponse, StallWatch, render_frame
from .runs.manager import Run, RunManager
from .runs.redis_registry import RedisRunRegistry
from .runs.registry import RunInfo, RunRegistry
from .runs.runlog import RunLog
from .runs.traces import TraceStore, trace_store
from .wire.frames import FrameMapper

logger = logging.getLogger("headwater.gateway")

NOT_FOUND_SESSION = "session not found"
NOT_FOUND_RUN = "run not found"

STREAM_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"content": {"text/event-stream": {}}, "description": "the run's frames"},
    400: {"model": ErrorBody}, 404: {"model": ErrorBody}, 409: {"model": ErrorBody},
    413: {"model": ErrorBody}, 429: {"model": ErrorBody}, 503: {"model": ErrorBody},
}
"""The OpenAPI responses of every route that answers with a run's stream."""

StreamFactory = Callable[[Runner, str, str], RunStream]
"""How a run's stream is made: from the agent's runner, the user and the session."""


class Gateway:
    """What the routes share: runners by agent, the run manager, auth and settings."""

    def __init__(self, agents: Sequence[BaseAgent], service: BaseSessionService,
                 auth: Authenticator | None, settings: Settings, log: RunLog,
                 owns_service: bool, registry: RunRegistry | None = None) -> None:
        names = [agent.name for agent in agents]
        if not agents:
            raise UserError("create_app needs at least one agent")
        if len(set(names)) != len(names):
            raise UserError(f"agent names must be unique, got {names}")
        self.runners = {agent.name: Runner(agent=agent, app_name=agent.name,
                                           session_service=service, settings=settings)
                        for agent in agents}
        self.mappers = {agent.name: FrameMapper(exposes_of(agent)) for agent in agents}
        self.live_mappers = {agent.name: FrameMapper(exposes_of(agent, live=True), live=True)
                             for agent in agents}
        self.default_agent = names[0]
        self.service = service
        self.auth = auth
        self.settings = settings
        self.runs = RunManager(log, settings, registry)
        self.traces: TraceStore = trace_store(  # the run inspector's, docs/inspector.md
            settings, dev_mode=auth is None,
            health=registry.health if isinstance(registry, RedisRunRegistry) else None)
        self.stall_watch = StallWatch(settings.send_timeout)
        self.rate_limit = UserRateLimit(settings.rate_limit_per_minute,
                                        settings.rate_limit_burst)
        self.sockets = 0  # live WebSockets following a run (``drain_sockets`` waits for 0)
        self._no_sockets = asyncio.Event()
        self._no_sockets.set()
        self.owns_service = owns_service
        self.store_down = False  # GET /readyz found the store silent (logged once per outage)
        self.tools_down: set[str] = set()  # agents whose MCP servers failed (logged once)

    @property
    def dev_mode(self) -> bool:
        """No authenticator: one local user; serve only on loopback."""
        return self.auth is None

    async def user(self, request: Request) -> str:
        """The caller, from the bearer token only (401 otherwise), within its rate limit
        (429 ``rate_limited`` past it)."""
        user = await user_of(self.auth, request.headers.get("authorization"))
        request.scope.setdefault("state", {})["user"] = user
        self.take_request(user)
        return user

    def take_request(self, user: str) -> None:
        """Count one request of ``user`` against ``Settings.rate_limit_per_minute``.

        Raises:
            GatewayHTTPError: ``rate_limited`` (429, with ``Retry-After``).
        """
        self.require_rate(self.rate_limit.take(user), "too many requests; try again later")

    def check_message(self, message: Content) -> None:
        """Refuse a user message with more than ``Settings.max_message_chars`` characters of
        text, before anything of it is stored or sent to a model.

        Raises:
            GatewayHTTPError: ``payload_too_large`` (413).
        """
        limit = self.settings.max_message_chars
        chars = 0
        for part in message.parts:
            if part.text is not None:
                chars += len(part.text)
        if chars > limit:
            raise too_large("The message", limit, "characters")

    def socket_opened(self) -> None:
        """A live WebSocket follows a run: a stop signal waits for its close."""
        self.sockets += 1
        self._no_sockets.clear()

    def socket_closed(self) -> None:
        """That WebSocket has sent its last frame and closed."""
        self.sockets -= 1
        if self.sockets <= 0:
            self._no_sockets.set()

    async def drain_sockets(self, grace: float) -> None:
        """Wait (up to ``grace`` seconds) until every live WebSocket has sent its last frame
        and closed; the app's stop signal handler calls it before the server gets the
        signal (and closes the connections left itself)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(grace):
                await self._no_sockets.wait()

    async def find_session(self, user_id: str, session_id: str) -> tuple[str, Session]:
        """The user's session and its agent; 404 for a missing one or another user's."""
        for name in self.runners:
            try:
                session = await self.service.get_session(app_name=name, user_id=user_id,
                                                         session_id=session_id)
            except SessionError as exc:
                raise store_error(exc) from None
            if session is not None:
                return name, session
        raise GatewayHTTPError("not_found", NOT_FOUND_SESSION)

    def require_agent(self, agent: str) -> str:
        """``agent`` when the app serves it; 404 ``not_found`` otherwise."""
        if agent not in self.runners:
            raise GatewayHTTPError("not_found", f"no agent named {agent!r}")
        return agent

    async def open_session(self, user_id: str, agent: str, session_id: str) -> Session:
        """The user's session ``session_id`` of ``agent``, created when the user has none
        (formats whose client names the conversation: AG-UI's thread, useChat's chat id).

        Raises:
            GatewayHTTPError: ``not_found`` (404) when the id is the user's session of
                another agent; ``store_unavailable`` (503) when the store fails.
        """
        try:
            found_agent, session = await self.find_session(user_id, session_id)
        except GatewayHTTPError as exc:
            if exc.code != "not_found":
                raise
        else:
            if found_agent != agent:
                raise GatewayHTTPError("not_found", NOT_FOUND_SESSION)
            return session
        try:
            return await self.service.create_session(app_name=agent, user_id=user_id,
                                                     session_id=session_id)
        except SessionError as exc:  # taken by a concurrent first request: use that one
            try:
                return (await self.find_session(user_id, session_id))[1]
            except GatewayHTTPError:
                raise store_error(exc) from None

    def message_run(self, message: Content, *, streaming: bool = True) -> StreamFactory:
        """The stream factory of a run answering ``message`` (``Runner.run_async``): the
        SSE, AG-UI and Vercel routes start their runs with it.

        Raises:
            GatewayHTTPError: ``payload_too_large`` (413, past ``max_message_chars``), now.
        """
        self.check_message(message)
        config = RunConfig(streaming_mode=StreamingMode.SSE if streaming else StreamingMode.NONE)

        def run_async(runner: Runner, user_id: str, session_id: str) -> RunStream:
            return runner.run_async(user_id=user_id, session_id=session_id,
                                    new_message=message, run_config=config)
        return run_async

    async def start_run(self, user_id: str, agent: str, session_id: str,
                        stream_of: StreamFactory, request_id: str, *,
                        resumable: bool = False, live: bool = False) -> Run:
        """Start a run of ``agent`` on the user's session; every format starts runs here.

        Args:
            stream_of: the run's stream from the agent's runner, the user and the
                session (:meth:`message_run`'s, or ``Runner.run_live`` for a live run).
            live: frames mapped the way a live run's are.

        Returns:
            The run the :class:`RunManager` drives (its frames go to the run log).

        Raises:
            GatewayHTTPError: ``server_shutdown`` (503), ``rate_limited`` (429),
                ``too_many_streams`` (429), ``not_found`` (404), ``session_busy`` (409),
                ``invalid_request`` (400, a message the session cannot take) or
                ``store_unavailable`` (503) — before any frame.
        """
        if self.runs.closing:
            raise GatewayHTTPError("server_shutdown")
        self.require_rate(await self.runs.over_rate(user_id))
        if not await self.runs.has_room(user_id):
            raise GatewayHTTPError("too_many_streams")
        await self.open_tools(agent)
        record = self.traces.new_record()  # the run inspector's, docs/inspector.md
        try:
            stream = stream_of(self.runners[agent], user_id, session_id)
            if record is None:
                await stream.start()
            else:
                with recording(record):
                    await stream.start()
        except (SessionError, UserError) as exc:
            raise request_error(exc) from None
        mapper = (self.live_mappers if live else self.mappers)[agent]
        run = await self.runs.start(stream, user_id=user_id, session_id=session_id,
                                    agent=agent, resumable=resumable, request_id=request_id,
                                    mapper=mapper)
        if record is not None and record.claimed:
            self.traces.keep(run.id, user_id, session_id, record)
        return run

    async def open_tools(self, agent: str) -> None:
        """List the toolsets of ``agent``'s tree (at once when listed): a run never waits for a
        listing, nor starts without its tools.

        Raises:
            GatewayHTTPError: ``mcp_unavailable`` (503) when an MCP server cannot be started
                or reached (logged once per outage, naming it).
            UserError: a toolset's tool clashes with another tool of its agent.
        """
        try:
            await open_toolsets(self.runners[agent].agent)
        except McpUnavailableError as exc:
            if agent not in self.tools_down:
                self.tools_down.add(agent)
                logger.warning("agent %s: %s; its runs answer 503 mcp_unavailable until it "
                               "can be reached", agent, exc)
            raise GatewayHTTPError("mcp_unavailable") from None
        if agent in self.tools_down:
            self.tools_down.discard(agent)
            logger.info("agent %s: its MCP servers answer again", agent)

    async def open_all_tools(self) -> None:
        """List every agent's toolsets (the app's start): an MCP server that cannot be started
        or reached is logged once and tried again before each run of its agent.

        Raises:
            UserError: a toolset's tool clashes with another (the start ends; what was
                opened is closed, and the store when the gateway owns it).
        """
        try:
            for agent in self.runners:
                with contextlib.suppress(GatewayHTTPError):  # mcp_unavailable: logged
                    await self.open_tools(agent)
        except BaseException:
            await self.close_tools()
            if self.owns_service:
                await self.service.close()
            raise

    async def close_tools(self) -> None:
        """Close every agent's toolsets (their MCP servers stop): the app's shutdown."""
        for runner in self.runners.values():
            await close_toolsets(runner.agent)

    @staticmethod
    def require_rate(wait: float | None,
                     message: str = "too many runs started; try again later") -> None:
        """429 ``rate_limited`` with ``Retry-After`` when the user's runs are over the rate
        (``wait``: :meth:`RunManager.over_rate`'s answer) or its requests
        (:meth:`take_request`)."""
        if wait is not None:
            raise GatewayHTTPError("rate_limited", message,
                                   headers={"Retry-After": str(max(1, math.ceil(wait)))})

    def stream(self, run: Run | RunInfo, after: int, render: Render = render_frame,
               headers: Mapping[str, str] | None = None, prologue: bytes = b"") -> SSEResponse:
        """The response following ``run`` (this replica's or another's) from frame ``after``,
        in the format ``render`` writes.

        Args:
            render: a frame's bytes in the response's format (the typed SSE
                frame by default; AG-UI and Vercel encoders translate).
            headers: the format's own headers (besides the SSE ones and ``X-Run-Id``).
            prologue: bytes sent before the first frame.
        """
        frames, on_end = self.runs.follow(run, after)
        settings = self.settings
        return SSEResponse(frames, headers={"x-run-id": run.id, **(headers or {})},
                           heartbeat_interval=settings.heartbeat_interval,
                           send_timeout=settings.send_timeout, on_end=on_end, render=render,
                           prologue=prologue, watch=self.stall_watch)

    async def close_runs(self) -> None:
        """Stop every run, then close the run inspector's trace store (the app's stop)."""
        try:
            await self.runs.aclose()
        finally:
            await self.traces.aclose()

    def begin_shutdown(self) -> None:
        """Stop every run now (SIGTERM): streams end with ``server_shutdown``."""
        self.runs.begin_shutdown()

    async def check_ready(self) -> None:
        """Return once this gateway can serve (``GET /readyz``): it is not stopping, and the
        session store and the run registry (Redis, with ``redis_url``) each answer within
        ``Settings.ready_timeout``.

        Raises:
            GatewayHTTPError: 503 ``server_shutdown``, ``store_unavailable`` (logged once
                per outage) or ``run_store_unavailable`` (logged by the registry).
        """
        if self.runs.closing:
            raise GatewayHTTPError("server_shutdown")
        within = self.settings.ready_timeout
        try:
            async with asyncio.timeout(within):
                await self.service.ping()
        except Exception as exc:  # a driver's error, a refused connection, the timeout
            if not self.store_down:
                self.store_down = True
                logger.warning("the session store does not answer (%s); GET /readyz answers "
                               "503 store_unavailable until it does", type(exc).__name__)
            raise GatewayHTTPError("store_unavailable") from None
        if self.store_down:
            self.store_down = False
            logger.info("the session store answers again")
        try:
            async with asyncio.timeout(within):
                await self.runs.registry.ping()
        except (RunStoreUnavailable, TimeoutError):
            raise GatewayHTTPError("run_store_unavailable") from None


def gateway_of(connection: HTTPConnection) -> Gateway:
    """The :class:`Gateway` of the app serving ``connection`` (a request or a WebSocket)."""
    gateway: Gateway = connection.app.state.gateway
    return gateway


async def current_user(request: Request) -> str:
    """The caller of a route (``Depends(current_user)``): from the bearer token only (401
    ``unauthorized`` otherwise), within its request rate (429 ``rate_limited``)."""
    return await gateway_of(request).user(request)


GatewayDep = Annotated[Gateway, Depends(gateway_of)]
"""A route's parameter: the app's :class:`Gateway`."""

CurrentUser = Annotated[str, Depends(current_user)]
"""A route's parameter: the caller (:func:`current_user`)."""


def request_error(exc: HeadwaterError) -> GatewayHTTPError:
    """The HTTP answer to an error that refuses a request before any frame.

    The code is :func:`~headwater.errors.code_of`'s (``phase="request"``): a
    missing session is ``not_found``, a busy one ``session_busy``, a store
    failure ``store_unavailable`` (logged, by type only), a caller's mistake
    (:class:`~headwater.errors.UserError`) ``invalid_request`` (400) with its
    message, which says what to do.
    """
    code = code_of(exc, phase="request")
    if code == "not_found":
        return GatewayHTTPError("not_found", NOT_FOUND_SESSION)
    if code == "invalid_request":
        return GatewayHTTPError("invalid_request", str(exc), status=400)
    if code == "store_unavailable":
        logger.warning("the session store failed: %s", type(exc).__name__)
    elif code == "internal":
        logger.error("refused a request: %s", type(exc).__name__, exc_info=exc)
    return GatewayHTTPError(code)


def store_error(exc: SessionError) -> GatewayHTTPError:
    """:func:`request_error` for a session store's error (``store_unavailable``, …)."""
    return request_error(exc)


def exposes_of(agent: BaseAgent, *, live: bool = False) -> Callable[[str], bool]:
    """Which tools' arguments and results may leave raw: those with ``expose_result`` (of
    any LLM agent of the tree), the built-in ``stop_streaming`` (a tool's name and a
    call id in, a sentence out), so a page can tell which stream the model stopped, and
    the built-in ``transfer_to_agent`` (an agent's name in, ``null`` or why not out), so
    a page can say who the conversation went to. In a ``live`` run ``stop_streaming`` is
    always the built-in one, whether or not the agent declares a tool of that name; a
    tree where an agent declares its own ``transfer_to_agent`` keeps that name's
    payloads summarised."""
    agents = [a for a in agent.walk() if isinstance(a, Agent)]
    # The tools known without listing (an MCP server is not started for this; its tools
    # never expose their results).
    tools = [{t.name: t for t in a.known_tools} for a in agents]
    exposed = frozenset(name for by_name in tools for name, tool in by_name.items()
                        if tool.options.expose_result)
    if live or not any(STOP_STREAMING in by_name for by_name in tools):
        exposed |= {STOP_STREAMING}
    if not any(TRANSFER_TO_AGENT in by_name for by_name in tools):
        exposed |= {TRANSFER_TO_AGENT}
    return exposed.__contains__
