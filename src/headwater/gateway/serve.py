"""``headwater serve module:attr``: an app, an agent or a list of agents under uvicorn.

Ctrl-C (SIGINT) and SIGTERM stop the server the same way: the gateway's
lifespan chains its shutdown in front of uvicorn's handler, so every open
stream ends with ``error`` ``server_shutdown`` and the process exits once they
have (within ``Settings.shutdown_grace``). A second Ctrl-C while it stops
exits the process at once.

Live WebSockets get their terminal frame before their close: the gateway's
handler waits (within the grace) for its sockets to close themselves
(:meth:`~.core.Gateway.drain_sockets`) before it hands the signal to the
server, which then closes the connections left. That handler is the app's
(:mod:`.app`), so the workers of ``--workers`` and ``--reload`` (uvicorn's own
server in each) drain alike. After SIGTERM the process exits 0 (a graceful
stop); after Ctrl-C, 130, as a shell reports it.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import logging
import logging.config
import math
import os
import signal
import sys
from collections.abc import Sequence
from types import FrameType
from typing import Any
from urllib.parse import urlsplit

import uvicorn

from ..agents.agent import Agent
from ..agents.base import BaseAgent
from ..core.errors import UserError
from ..core.settings import get_settings
from ..models.registry import get_model
from ..sessions.base import BaseSessionService
from ..sessions.memory import InMemorySessionService
from ..sessions.sql import SqlSessionService
from .app import create_app
from .core import Gateway
from .http.auth import JWTAuth, StaticTokenAuth, auth_from_settings, is_loopback
from .http.connections import http_protocol
from .http.logs import log_config

logger = logging.getLogger("headwater.gateway")

TARGET_ENV = "HEADWATER_SERVE_TARGET"
"""Where ``--reload`` and ``--workers`` pass the target to the workers they start."""

MODEL_ENV = "HEADWATER_SERVE_MODEL"
"""Where ``--reload`` and ``--workers`` pass ``--model`` to the workers they start."""

INTERRUPTED = 128 + signal.SIGINT
"""The exit code of a process stopped at once by a second Ctrl-C (130, as a shell's)."""


def load_target(spec: str, model: str | None = None) -> Any:
    """The ASGI app named by ``module:attr`` (an agent or a list of agents becomes a gateway).

    The attribute may also be a factory, as uvicorn's ``--factory`` takes: a plain
    function called with no arguments (once per process that serves it) whose
    result is any of those.

    An agent target's gateway authenticates as the ``HEADWATER_AUTH_TOKENS`` /
    ``HEADWATER_JWT_*`` settings say (:func:`~.auth.auth_from_settings`); without
    them it is in dev mode. An app keeps its own auth.

    Args:
        spec: ``module:attr``.
        model: a model string (``"openai:gpt-4o-mini"``) every served agent runs on
            instead of its own; only for an Agent or a list of agents.

    Raises:
        UserError: the spec is malformed, the module or attribute is missing, the
            attribute (or what its factory returns) is neither an ASGI app nor
            agents, a factory needs arguments or is async, ``model`` or auth
            settings are given for an app, ``model`` cannot be resolved, or the
            auth settings are bad.
    """
    target = _attribute(spec)
    if _is_factory(target):
        return _served(_built(target, spec), f"{spec}()", model)
    return _served(target, spec, model)


def _attribute(spec: str) -> Any:
    """The object ``module:attr`` names (the module imported from the working directory)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise UserError(f"expected module:attr, got {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            raise UserError(f"no module named {module_name!r}") from None
        raise
    target: Any = module
    for name in attr.split("."):
        if not hasattr(target, name):
            raise UserError(f"module {module_name!r} has no attribute {attr!r}")
        target = getattr(target, name)
    return target


def _is_factory(target: Any) -> bool:
    """A plain function or method, but not an ASGI app written as one
    (``async def app(scope, receive, send)``)."""
    if not (inspect.isfunction(target) or inspect.ismethod(target)):
        return False
    return not (inspect.iscoroutinefunction(target) and _binds(target, 3))


def _binds(function: Any, count: int) -> bool:
    """Whether ``function`` can be called with ``count`` positional arguments."""
    try:
        inspect.signature(function).bind(*range(count))
    except TypeError:
        return False
    return True


def _built(factory: Any, spec: str) -> Any:
    """What the factory ``spec`` returns, called with no arguments.

    Raises:
        UserError: it needs arguments, or is an ``async def``.
    """
    if inspect.iscoroutinefunction(factory):
        raise UserError(f"{spec} is an async function: a factory is a plain function "
                        "returning an app, an Agent or a list of agents")
    if not _binds(factory, 0):
        needed = [p.name for p in inspect.signature(factory).parameters.values()
                  if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        raise UserError(f"{spec} is a function that needs arguments ({', '.join(needed)}): "
                        "a factory is called with none")
    return factory()


def _served(target: Any, spec: str, model: str | None) -> Any:
    """The app for ``target``: a gateway over an agent or a list of agents, or the app
    itself (see :func:`load_target`)."""
    agents: list[BaseAgent] | None = None
    if isinstance(target, BaseAgent):
        agents = [target]
    elif isinstance(target, Sequence) and not isinstance(target, str) and target and all(
            isinstance(a, BaseAgent) for a in target):
        agents = list(target)
    auth = auth_from_settings(get_settings())
    if agents is not None:
        served = _on_model(agents, model, spec)
        return create_app(served[0] if isinstance(target, BaseAgent) else served, auth=auth)
    if callable(target) and not _is_factory(target):
        if model is not None:
            raise UserError(f"--model applies to an Agent or a list of agents; {spec} is an "
                            "app, whose agents choose their own models")
        if auth is not None:
            raise UserError(f"HEADWATER_AUTH_TOKENS and HEADWATER_JWT_* apply to an Agent or "
                            f"a list of agents; {spec} is an app, which has its own auth "
                            "(unset them, or serve the agents)")
        return target
    what = ("a function" if callable(target) else "None" if target is None
            else type(target).__name__)
    raise UserError(f"{spec} is {what}: expected an ASGI app, an agent (an Agent or a "
                    "workflow agent) or a list of agents (or a function returning one)")


def _on_model(agents: list[BaseAgent], model: str | None, spec: str) -> list[BaseAgent]:
    """``agents``, each set to run on ``model`` (resolved once) when one is given.

    Raises:
        UserError: a model for a workflow agent (its sub-agents choose their own models).
    """
    if model is not None:
        resolved = get_model(model)
        for agent in agents:
            if not isinstance(agent, Agent):
                raise UserError(f"--model applies to an Agent; {agent.name!r} of {spec} is a "
                                f"{type(agent).__name__}, whose sub-agents choose their own "
                                "models")
            agent.model = resolved
    return agents


WORKER_PROTOCOL = "headwater.gateway.serve:worker_http_protocol"
"""uvicorn's ``http=`` for the workers ``--reload`` and ``--workers`` start. A protocol
class made for settings (:func:`~.connections.http_protocol`) does not cross to a spawned
process; this import string does, and resolves there to the bounded protocol with that
worker's settings (the environment's)."""


def __getattr__(name: str) -> Any:
    """``worker_http_protocol``: see :data:`WORKER_PROTOCOL`."""
    if name == "worker_http_protocol":
        return http_protocol(get_settings())
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def app_from_env() -> Any:
    """The app of ``$HEADWATER_SERVE_TARGET`` (the factory ``--reload`` and ``--workers``
    workers call)."""
    return load_target(os.environ[TARGET_ENV], os.environ.get(MODEL_ENV))


def check_bind(app: Any, host: str, insecure_dev: bool) -> None:
    """Refuse to serve a dev-mode gateway (no auth) on a non-loopback address.

    Raises:
        UserError: dev mode, a non-loopback host and no ``insecure_dev``.
    """
    state = getattr(app, "state", None)
    gateway = getattr(state, "gateway", None)
    if (isinstance(gateway, Gateway) and gateway.dev_mode and not is_loopback(host)
            and not insecure_dev):
        raise UserError(
            f"refusing to serve without auth on {host}: anyone who can reach it acts as the "
            "one local user. Set HEADWATER_AUTH_TOKENS or HEADWATER_JWT_* (an app: "
            "create_app(auth=…)), bind 127.0.0.1, or add --insecure-dev")


def serve(spec: str, *, host: str = "127.0.0.1", port: int = 8000, reload: bool = False,
          insecure_dev: bool = False, log_level: str = "info", model: str | None = None,
          workers: int = 1) -> None:
    """Run ``spec`` under uvicorn until it is stopped (SIGINT, SIGTERM).

    Args:
        workers: worker processes; past 1, uvicorn's supervisor starts that many
            (sharing the listening socket, each loading ``spec`` through
            :func:`app_from_env`, a dead one replaced) and the settings each
            reads are the environment's.

    Raises:
        UserError: as :func:`load_target` and :func:`check_bind`; ``workers``
            below 1, or with ``reload``.
    """
    if workers < 1:
        raise UserError(f"--workers is at least 1, not {workers}")
    if workers > 1 and reload:
        raise UserError("--reload runs one worker: drop --workers or --reload")
    app = load_target(spec, model)
    check_bind(app, host, insecure_dev)
    settings = get_settings()
    grace = max(1, math.ceil(settings.shutdown_grace))
    options: dict[str, Any] = {"host": host, "port": port, "log_level": log_level,
                               "timeout_graceful_shutdown": grace,
                               "timeout_worker_healthcheck":
                                   math.ceil(settings.worker_healthcheck_timeout),
                               "log_config": log_config(log_level), "access_log": False,
                               "http": http_protocol(settings)}
    logging.config.dictConfig(options["log_config"])  # as uvicorn will: the lines below too
    for line in started_lines(app, spec, host=host, workers=workers, reload=reload):
        logger.info("%s", line)
    if reload or workers > 1:
        _run_workers(spec, model, options, workers=workers, reload=reload)
        return
    server = _Server(uvicorn.Config(app, **options))
    try:
        server.run()
    except KeyboardInterrupt:
        if not server.interrupted:
            raise  # Ctrl-C before the server listened: the caller's to handle
    if server.interrupted or server.terminated:
        # Once stopped, the process ends here: it waits for no thread a stopped sync tool
        # left busy.
        _exit(INTERRUPTED if server.interrupted else 0)
    if not server.started:
        raise SystemExit(3)  # uvicorn logged why (its STARTUP_FAILURE code, as uvicorn.run)


def _run_workers(spec: str, model: str | None, options: dict[str, Any], *, workers: int,
                 reload: bool) -> None:
    """uvicorn's supervisor (``--workers``) or reloader (``--reload``) over processes that
    each load ``spec`` through :func:`app_from_env`, until stopped."""
    os.environ[TARGET_ENV] = spec
    if model is not None:
        os.environ[MODEL_ENV] = model
    if reload:
        options["reload"] = True
    else:
        options["workers"] = workers
    # The config crosses to spawned workers by pickle: the protocol by its import string.
    options["http"] = WORKER_PROTOCOL
    uvicorn.run("headwater.gateway.serve:app_from_env", factory=True, **options)


def started_lines(app: Any, spec: str, *, host: str, workers: int = 1,
                  reload: bool = False) -> list[str]:
    """What ``headwater serve`` says at start (once, however many workers), one line each:
    the agents, auth, the database, Redis and the workers. No secret: passwords in URLs
    are ``***``, tokens and keys are never shown."""
    gateway = getattr(getattr(app, "state", None), "gateway", None)
    processes = ("reload: on (one worker, restarted when a file changes)" if reload
                 else f"workers: {workers}")
    if not isinstance(gateway, Gateway):
        return [f"app: {spec} (not a headwater gateway: its agents, auth and stores are "
                "its own)", processes]
    names = list(gateway.runners)
    agents = ", ".join(f"{name} (default)" if name == gateway.default_agent else name
                       for name in names)
    redis = gateway.settings.redis_url
    return [f"agents: {agents}", f"auth: {_auth_line(gateway.auth, host)}",
            f"database: {_store_line(gateway.service)}",
            f"redis: {without_password(redis) if redis else 'none (runs live in this process)'}",
            processes]


def _auth_line(auth: Any, host: str) -> str:
    if auth is None:
        where = "loopback only" if is_loopback(host) else f"on {host} by --insecure-dev"
        return f"none, dev mode: whoever reaches it is the one local user ({where})"
    if isinstance(auth, StaticTokenAuth):
        return f"{len(auth)} static bearer token{'s' if len(auth) != 1 else ''}"
    if isinstance(auth, JWTAuth):
        return f"JSON Web Tokens, {auth!r}"
    return f"the app's own ({getattr(auth, '__qualname__', type(auth).__qualname__)})"


def _store_line(service: BaseSessionService) -> str:
    if isinstance(service, SqlSessionService):
        return service.url
    if isinstance(service, InMemorySessionService):
        return "in memory (sessions end with the process)"
    return type(service).__qualname__


def without_password(url: str) -> str:
    """``url`` with its password (if any) shown as ``***``."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return parts._replace(netloc=netloc).geturl()


class _Server(uvicorn.Server):
    """uvicorn's server, whose Ctrl-C ends the process like SIGTERM does.

    The first SIGINT or SIGTERM goes to the gateway's chained handler (its
    open streams end with ``server_shutdown``, its live WebSockets send their
    last frame and close), then here: uvicorn stops accepting and waits for the
    streams to close. A second Ctrl-C while it waits exits at once.
    """

    interrupted = False
    terminated = False

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if sig == signal.SIGINT:
            if self.should_exit:
                _exit(INTERRUPTED)  # no more waiting: not for a stream, not for a tool
            self.interrupted = True
        super().handle_exit(sig, frame)
        if sig == signal.SIGTERM:
            # uvicorn re-raises a captured signal once it has stopped, which for SIGTERM
            # kills the process (-15) after a graceful stop: :func:`serve` exits 0 instead.
            self.terminated = True
            self._captured_signals = [s for s in self._captured_signals if s != sig]


def _exit(code: int) -> None:
    """End the process now (what was written is flushed; no thread is waited for)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)
