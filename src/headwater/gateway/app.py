"""``create_app``: the HTTP gateway over one runner per agent (docs/frame-protocol.md).

Every route takes its user from the bearer token only (:mod:`.auth`); another
user's session or run answers exactly like a missing one. A run's SSE stream is
the answer to ``POST /sessions/{sid}/runs``; its frames come from the run log
(:mod:`.runs`), so a resumable run can be followed again from any frame.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import importlib.util
import logging
import signal
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from types import FrameType
from typing import Annotated, Any, Literal

from fastapi import APIRouter, FastAPI, Header, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from ..agents.base import BaseAgent
from ..core.errors import RunNotFound, SessionError, SessionNotFoundError
from ..core.events import Event
from ..core.settings import Settings, settings_or_default
from ..core.tasks import TaskSet
from ..core.types import Content, FunctionResponse, Part
from ..sessions.base import BaseSessionService, Session
from ..sessions.sql import SqlSessionService
from ..tools.approval import approval_response
from . import agui, inspector, page, vercel, websocket
from .core import (
    NOT_FOUND_RUN,
    NOT_FOUND_SESSION,
    STREAM_RESPONSES,
    CurrentUser,
    Gateway,
    GatewayDep,
    store_error,
)
from .http.auth import Authenticator
from .http.limits import RequestLimits
from .http.logs import redact_uvicorn_logs
from .http.origins import OriginGuard, allowed_origins
from .http.problems import ErrorBody, GatewayHTTPError, install_error_handlers, request_id_of
from .http.tracing import TraceContext
from .runs.registry import RunRegistry
from .runs.runlog import InMemoryRunLog, RunLog

logger = logging.getLogger("headwater.gateway")

_CONTENT = TypeAdapter(Content)


# -- wire models ---------------------------------------------------------------------------------


class SessionCreate(BaseModel):
    """The body of ``POST /sessions``."""

    model_config = ConfigDict(extra="forbid")
    agent: str | None = Field(default=None, description="the agent's name (default: the first)")
    state: dict[str, Any] | None = Field(default=None, description="the session's initial state")


class SessionOut(BaseModel):
    """A session as the gateway shows it."""

    id: str
    agent: str
    created_at: float
    updated_at: float
    state: dict[str, Any]
    active_run: str | None = Field(
        default=None, description="the id of the caller's run going on in this session (an SSE "
                                  "or live run, on any replica), else null")
    title: str | None = Field(
        default=None, description="the session's first message: the text of its first stored "
                                  "event when the user sent it, cut to "
                                  "Settings.session_title_chars (ending in '…'); null before "
                                  "the first message")


class SessionList(BaseModel):
    """A page of the caller's sessions, newest first."""

    items: list[SessionOut]
    next_cursor: str | None = None


class EventList(BaseModel):
    """A page of a session's stored events (never a partial one), oldest first."""

    items: list[dict[str, Any]]
    next_cursor: str | None = None


class ApprovalAnswer(BaseModel):
    """A human's answer to an ``approval_required`` frame."""

    model_config = ConfigDict(extra="forbid")
    call_id: str = Field(min_length=1)
    approved: bool
    reason: str | None = None
    args_sha256: str | None = None


class FunctionResponseIn(BaseModel):
    """The result of a long-running call, completed by the client."""

    model_config = ConfigDict(extra="forbid")
    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    response: dict[str, Any]


class RunRequest(BaseModel):
    """The body of ``POST /sessions/{sid}/runs``: exactly one of ``message``,
    ``approvals`` and ``function_responses``."""

    model_config = ConfigDict(extra="forbid")
    message: str | dict[str, Any] | None = Field(
        default=None, description="text, or a Content JSON object ({role, parts})")
    approvals: list[ApprovalAnswer] | None = None
    function_responses: list[FunctionResponseIn] | None = None
    streaming_mode: Literal["sse", "none"] = "sse"
    resumable: bool = False


class RunCancelled(BaseModel):
    """The answer of ``POST /runs/{run_id}/cancel``."""

    id: str
    status: str


class Health(BaseModel):
    """The answer of ``GET /healthz``."""

    status: Literal["ok", "stopping"]


class Ready(BaseModel):
    """The answer of ``GET /readyz`` when the gateway can serve."""

    status: Literal["ready"]


# -- the gateway ---------------------------------------------------------------------------------


def create_app(
    agent_or_agents: BaseAgent | Sequence[BaseAgent],
    session_service: BaseSessionService | None = None,
    auth: Authenticator | None = None,
    settings: Settings | None = None,
    *,
    run_log: RunLog | None = None,
    cors_origins: Sequence[str] | None = None,
) -> FastAPI:
    """The gateway as a FastAPI app.

    Args:
        agent_or_agents: an agent, or several (addressed by name; the first is the default).
        session_service: where sessions live (default: ``SqlSessionService`` on
            ``settings.database_url``, the embedded SQLite file, with ``settings``).
        auth: ``StaticTokenAuth``, ``JWTAuth`` or any async callable
            ``token -> user_id | None``; ``None`` is dev mode (one local user).
        settings: bounds, for everything the app builds (its runners, the
            default store, run log and run registry); default: the process-wide
            settings, from ``HEADWATER_*`` environment variables. With
            ``settings.redis_url`` the app is one replica of several: run frames
            go to Redis Streams and runs are known, counted and cancelled
            across replicas through Redis (needs ``headwater[redis]``).
        run_log: where run frames go (default: Redis Streams with
            ``settings.redis_url``, else in process, bounded by
            ``settings.run_log_max_frames``).
        cors_origins: the origins (``http(s)://host[:port]``) whose pages may call
            the gateway from a browser (default: ``Settings.cors_origins``, none);
            see :mod:`.origins`.

    Returns:
        The app; ``app.state.gateway`` is its :class:`Gateway`.

    Raises:
        UserError: no agent, duplicate agent names, or a listed origin that is
            not ``scheme://host[:port]``.
    """
    settings = settings_or_default(settings)
    origins = allowed_origins(settings.cors_origins if cors_origins is None else cors_origins)
    redact_uvicorn_logs()  # the server's own lines may carry a client's token
    agents = ([agent_or_agents] if isinstance(agent_or_agents, BaseAgent)
              else list(agent_or_agents))
    gateway = _gateway(agents, session_service, auth, settings, run_log)
    app = FastAPI(title="headwater gateway", version="1", lifespan=_lifespan,
                  responses={401: {"model": ErrorBody}, 422: {"model": ErrorBody}})
    app.state.gateway = gateway
    install_error_handlers(app)
    app.add_middleware(OriginGuard, dev_mode=gateway.dev_mode, origins=origins)
    app.add_middleware(RequestLimits, max_body_bytes=settings.max_body_bytes,
                       body_read_timeout=settings.body_read_timeout)
    app.add_middleware(TraceContext)  # outermost: the caller's trace for all of the request
    for router in (meta, sessions, runs, inspector.router, agui.router, page.router,
                   vercel.router, websocket.router):
        app.include_router(router)
    if importlib.util.find_spec("mcp") is not None:  # headwater[mcp]: the agents as MCP tools
        from .mcp import mount

        mount(app, gateway)
    return app


def _gateway(agents: Sequence[BaseAgent], session_service: BaseSessionService | None,
             auth: Authenticator | None, settings: Settings, run_log: RunLog | None) -> Gateway:
    """The app's :class:`Gateway` over the stores ``create_app`` was given, or the default
    ones ``settings`` name (with ``redis_url``: the run log and registry in Redis)."""
    owns_service = session_service is None
    service = session_service or SqlSessionService(settings.database_url, settings=settings)
    registry: RunRegistry | None = None
    if settings.redis_url:  # an empty HEADWATER_REDIS_URL is none
        from .runs.redis_backend import (  # needs headwater[redis]
            RedisHealth,
            RedisRunLog,
            RedisRunRegistry,
        )

        health = RedisHealth(settings.redis_url)  # one log line per outage, for both
        registry = RedisRunRegistry(settings.redis_url, settings=settings, health=health)
        if run_log is None:
            run_log = RedisRunLog(settings.redis_url, settings=settings, health=health)
    if run_log is None:
        run_log = InMemoryRunLog(settings=settings)
    return Gateway(agents, service, auth, settings, run_log, owns_service, registry)


@contextlib.asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Store opened, toolsets listed, ``/mcp`` running (headwater[mcp]); then :func:`_serving`."""
    gateway: Gateway = app.state.gateway
    await _open_store(gateway)
    await gateway.open_all_tools()
    mcp = getattr(app.state, "mcp", None)
    async with mcp.running() if mcp is not None else contextlib.nullcontext(), _serving(gateway):
        yield


@contextlib.asynccontextmanager
async def _serving(gateway: Gateway) -> AsyncIterator[None]:
    """A stop signal stops the runs and drains the live sockets before the server stops
    (:class:`_StopSignals`); the collector tuned as the settings say while the app serves;
    at the end every run stopped, the toolsets and the stores closed."""
    settings = gateway.settings
    stop = _StopSignals(gateway)
    stop.install()
    if settings.gc_freeze:
        # What is loaded now (the app, its modules) lives as long as the process: out
        # of the collector's full passes, which otherwise stall the loop for each
        # stream's frames once many streams are open.
        gc.collect()
        gc.freeze()
    thresholds = gc.get_threshold()
    if settings.gc_thresholds is not None:
        gc.set_threshold(*settings.gc_thresholds)
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)  # the process may outlive the app (tests, embedding)
        if settings.gc_freeze:
            gc.unfreeze()
        await stop.restore()
        await gateway.close_runs()
        await gateway.stall_watch.aclose()
        await gateway.close_tools()
        if gateway.owns_service:
            await gateway.service.close()


async def _open_store(gateway: Gateway) -> None:
    """Open the session store before the server says it is up: a SQL store connects and
    brings its schema to head (``database_auto_migrate``) now, not at the first request.
    A failure ends the start (the server exits)."""
    try:
        await gateway.service.ping()
    except Exception as exc:
        why = (str(exc).strip().splitlines() or [""])[0]
        logger.error("the session store failed at start (%s: %s); the server does not start",
                     type(exc).__name__, why)
        if gateway.owns_service:
            await gateway.service.close()
        raise


meta = APIRouter(tags=["meta"])
"""``GET /healthz`` (liveness) and ``GET /readyz`` (readiness)."""

sessions = APIRouter(tags=["sessions"])
"""The caller's sessions: create, list, read, delete, and a session's stored events."""

runs = APIRouter(tags=["runs"])
"""A run: start it on a session (its SSE stream is the answer), follow it again, cancel it."""


@meta.get("/healthz", response_model=Health)
async def healthz(gw: GatewayDep) -> Health:
    """Liveness: the process answers (``stopping`` once a stop signal came); asks no store."""
    return Health(status="stopping" if gw.runs.closing else "ok")


@meta.get("/readyz", response_model=Ready, responses={503: {"model": ErrorBody}})
async def readyz(gw: GatewayDep) -> Ready:
    """Readiness: 200 once the session store (and Redis, when configured) answer; 503
    ``store_unavailable``, ``run_store_unavailable`` or ``server_shutdown`` otherwise."""
    await gw.check_ready()
    return Ready(status="ready")


@sessions.post("/sessions", status_code=201, response_model=SessionOut,
               responses={404: {"model": ErrorBody}})
async def create_session(gw: GatewayDep, user: CurrentUser,
                         body: SessionCreate | None = None) -> SessionOut:
    body = body or SessionCreate()
    agent = gw.require_agent(body.agent or gw.default_agent)
    try:
        session = await gw.service.create_session(app_name=agent, user_id=user, state=body.state)
    except SessionError as exc:
        raise store_error(exc) from None
    except TypeError:
        raise GatewayHTTPError("invalid_request", "state must be a JSON object") from None
    return _session_out(agent, session)


@sessions.get("/sessions", response_model=SessionList)
async def list_sessions(
    gw: GatewayDep,
    user: CurrentUser,
    limit: Annotated[int, Query(ge=1)] = 50,
    cursor: Annotated[str | None, Query(pattern=r"^\d{1,9}$")] = None,
) -> SessionList:
    limit = min(limit, gw.settings.max_page_size)
    found: list[SessionOut] = []
    try:
        for name in gw.runners:
            found += [_session_out(name, s) for s in
                      await gw.service.list_sessions(app_name=name, user_id=user)]
        found.sort(key=lambda s: (s.updated_at, s.created_at), reverse=True)
        start = int(cursor or 0)
        page = found[start:start + limit]
        titles = await asyncio.gather(*(_first_title(gw, user, s) for s in page))
        active = await asyncio.gather(*(gw.runs.active(user, s.id) for s in page))
    except SessionError as exc:
        raise store_error(exc) from None
    for listed, title, run_id in zip(page, titles, active, strict=True):
        listed.title = title
        listed.active_run = run_id
    more = start + limit < len(found)
    return SessionList(items=page, next_cursor=str(start + limit) if more else None)


@sessions.get("/sessions/{session_id}", response_model=SessionOut,
              responses={404: {"model": ErrorBody}})
async def get_session(gw: GatewayDep, user: CurrentUser, session_id: str) -> SessionOut:
    agent, session = await gw.find_session(user, session_id)
    out = _session_out(agent, session, await gw.runs.active(user, session_id))
    out.title = _session_title(session.events[:1], gw.settings.session_title_chars)
    return out


@sessions.delete("/sessions/{session_id}", status_code=204,
                 responses={404: {"model": ErrorBody}, 409: {"model": ErrorBody}})
async def delete_session(gw: GatewayDep, user: CurrentUser, session_id: str) -> Response:
    agent, _ = await gw.find_session(user, session_id)
    if await gw.runs.active(user, session_id) is not None:
        raise GatewayHTTPError("session_busy", "a run is in progress on this session")
    try:
        await gw.service.delete_session(app_name=agent, user_id=user, session_id=session_id)
    except SessionError as exc:
        raise store_error(exc) from None
    return Response(status_code=204)


@sessions.get("/sessions/{session_id}/events", response_model=EventList,
              responses={404: {"model": ErrorBody}})
async def list_events(
    gw: GatewayDep,
    user: CurrentUser,
    session_id: str,
    limit: Annotated[int, Query(ge=1)] = 50,
    cursor: Annotated[str | None, Query(pattern=r"^\d{1,18}$")] = None,
) -> EventList:
    agent, _ = await gw.find_session(user, session_id)
    try:
        page = await gw.service.list_events(
            app_name=agent, user_id=user, session_id=session_id,
            after=int(cursor) if cursor else None, limit=min(limit, gw.settings.max_page_size))
    except SessionNotFoundError:
        raise GatewayHTTPError("not_found", NOT_FOUND_SESSION) from None
    except SessionError as exc:
        raise store_error(exc) from None
    mapper = gw.mappers[agent]
    return EventList(items=[mapper.history_item(e) for e in page.events if not e.partial],
                     next_cursor=str(page.next_cursor) if page.next_cursor else None)


@runs.post("/sessions/{session_id}/runs", response_class=Response, responses=STREAM_RESPONSES)
async def start_run(request: Request, gw: GatewayDep, user: CurrentUser, session_id: str,
                    body: RunRequest) -> Response:
    message = _message_of(body)
    agent, _ = await gw.find_session(user, session_id)
    run = await gw.start_run(user, agent, session_id,
                             gw.message_run(message, streaming=body.streaming_mode == "sse"),
                             request_id_of(request), resumable=body.resumable)
    return gw.stream(run, 0)


@runs.get("/runs/{run_id}/stream", response_class=Response,
          responses={200: {"content": {"text/event-stream": {}}},
                     204: {"description": "the run has ended and nothing is left"},
                     400: {"model": ErrorBody}, 404: {"model": ErrorBody},
                     429: {"model": ErrorBody}})
async def follow_run(
    gw: GatewayDep,
    user: CurrentUser,
    run_id: str,
    last_event_id_header: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
    last_event_id: str | None = None,
) -> Response:
    run = await gw.runs.get(run_id, user)
    if run is None:
        raise GatewayHTTPError("not_found", NOT_FOUND_RUN)
    raw = last_event_id_header if last_event_id_header is not None else last_event_id
    after = _event_id(raw)
    try:
        last = await gw.runs.log.last_id(run.id)
    except RunNotFound:  # its frames are gone (another replica forgot it meanwhile)
        raise GatewayHTTPError("not_found", NOT_FOUND_RUN) from None
    if after > last:  # a frame no client has been sent: not a place to resume from
        raise GatewayHTTPError("invalid_request",
                               "Last-Event-ID is past the run's last frame", status=400)
    if run.ended and after == last:
        return Response(status_code=204)
    if not await gw.runs.has_room(user):
        raise GatewayHTTPError("too_many_streams")
    return gw.stream(run, after)


@runs.post("/runs/{run_id}/cancel", response_model=RunCancelled,
           responses={404: {"model": ErrorBody}})
async def cancel_run(gw: GatewayDep, user: CurrentUser, run_id: str) -> RunCancelled:
    run = await gw.runs.get(run_id, user)
    if run is None:
        raise GatewayHTTPError("not_found", NOT_FOUND_RUN)
    return RunCancelled(id=run.id, status=await gw.runs.cancel(run))


def _message_of(body: RunRequest) -> Content:
    given = [body.message is not None, body.approvals is not None,
             body.function_responses is not None]
    if sum(given) != 1:
        raise GatewayHTTPError("invalid_request",
                               "send exactly one of message, approvals, function_responses")
    if body.approvals is not None:
        if not body.approvals:
            raise GatewayHTTPError("invalid_request", "approvals is empty")
        parts: list[Part] = []
        for answer in body.approvals:
            parts += approval_response(answer.call_id, answer.approved, answer.reason,
                                       args_sha256=answer.args_sha256).parts
        return Content("user", parts)
    if body.function_responses is not None:
        if not body.function_responses:
            raise GatewayHTTPError("invalid_request", "function_responses is empty")
        return Content("user", [Part(function_response=FunctionResponse(
            id=r.id, name=r.name, response=r.response)) for r in body.function_responses])
    if isinstance(body.message, str):
        if not body.message.strip():
            raise GatewayHTTPError("invalid_request", "the message is empty")
        return Content("user", [Part(text=body.message)])
    try:
        content = _CONTENT.validate_python(body.message)
    except ValidationError:
        raise GatewayHTTPError("invalid_request",
                               "message is not text or a Content object") from None
    if content.role != "user" or not content.parts:
        raise GatewayHTTPError("invalid_request", "a message has role 'user' and some parts")
    return content


def _event_id(raw: str | None) -> int:
    if raw is None or raw == "":
        return 0
    if not raw.isascii() or not raw.isdigit() or len(raw) > 18:
        raise GatewayHTTPError("invalid_request", "Last-Event-ID is a frame id (digits)",
                               status=400)
    return int(raw)


def _session_out(agent: str, session: Session, active: str | None = None) -> SessionOut:
    return SessionOut(id=session.id, agent=agent, created_at=session.create_time,
                      updated_at=session.last_update_time, state=session.state,
                      active_run=active)


def _session_title(events: Sequence[Event], chars: int) -> str | None:
    """A session's title: the text of its first stored event (the first of ``events``)
    when the user sent it, each run of whitespace one space, cut to ``chars`` characters
    (the last one "…" when cut); ``None`` for a session with no such event."""
    first = events[0] if events else None
    if first is None or first.author != "user" or first.content is None:
        return None
    text = " ".join(first.content.text.split())
    if not text:
        return None
    return text if len(text) <= chars else text[:chars - 1].rstrip() + "…"


async def _first_title(gw: Gateway, user: str, session: SessionOut) -> str | None:
    """The title of a listed session (one stored event read); ``None`` once it is gone."""
    try:
        page = await gw.service.list_events(app_name=session.agent, user_id=user,
                                            session_id=session.id, limit=1)
    except SessionNotFoundError:  # deleted since it was listed
        return None
    return _session_title(page.events, gw.settings.session_title_chars)


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
"""The signals that stop a served gateway (Ctrl-C, ``kill``): one path for both."""


class _StopSignals:
    """SIGINT and SIGTERM, chained in front of the handlers a server installed (uvicorn's).

    The first stops every run at once (open streams end with ``server_shutdown``)
    and lets every live WebSocket send its last frame and close (within
    ``Settings.shutdown_grace``, :meth:`~.core.Gateway.drain_sockets`); only then
    does the server's handler get the signal (uvicorn stops accepting, waits for
    the streams, and closes what is left: a WebSocket at once, with 1012). So a
    single process, every ``--workers`` worker and the ``--reload`` worker stop
    alike, whichever server object runs them. A second SIGINT while the sockets
    drain hands both signals to the server at once (Ctrl-C twice: uvicorn stops
    waiting, ``headwater serve`` exits); another signal then is the same stop.

    Installed only in the main thread, where a server installs its handlers;
    :meth:`restore` puts them back and cancels a drain under way.
    """

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self.loop = asyncio.get_running_loop()
        self.previous: dict[int, Callable[[int, FrameType | None], Any]] = {}
        self.first: tuple[int, FrameType | None] | None = None
        self.forwarded = False
        self.tasks = TaskSet("stop signals", logger=logger)  # the drain; closed in restore()

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # no server handler to chain to: the lifespan's end still stops runs
        for signum in STOP_SIGNALS:
            previous = signal.getsignal(signum)
            if not callable(previous) or previous is signal.default_int_handler:
                continue  # no server's handler (the lifespan's end still stops runs)
            self.previous[signum] = previous
            signal.signal(signum, self.handle)

    async def restore(self) -> None:
        for signum, previous in self.previous.items():
            if signal.getsignal(signum) == self.handle:
                signal.signal(signum, previous)
        await self.tasks.aclose()  # a drain under way

    def handle(self, signum: int, frame: FrameType | None) -> None:
        """The signal handler (between two bytecodes of the main thread, which runs the loop)."""
        if self.forwarded:
            self.previous[signum](signum, frame)
        elif self.first is None:
            self.first = (signum, frame)
            self.loop.call_soon_threadsafe(self._stop)
        elif signum == signal.SIGINT:  # Ctrl-C again: no more waiting for the sockets
            self._forward()
            self.previous[signum](signum, frame)

    def _stop(self) -> None:
        self.gateway.begin_shutdown()
        if not self.forwarded and not self.tasks.closed:
            self.tasks.spawn(self._drain(), name="drain live sockets")

    async def _drain(self) -> None:
        await self.gateway.drain_sockets(self.gateway.settings.shutdown_grace)
        self._forward()

    def _forward(self) -> None:
        """Hand the first signal to the server's handler (once)."""
        if self.forwarded or self.first is None:
            return
        self.forwarded = True
        signum, frame = self.first
        self.previous[signum](signum, frame)
