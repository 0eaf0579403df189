"""An app served on a loopback port from a background thread (``headwater chat``'s server).

The server is uvicorn, as under ``headwater serve``, on its own event loop in a
daemon thread, so the thread that started it stays free: a terminal client can
block on ``input()`` while the server streams runs to it over real HTTP, the
same code path as a remote gateway.
"""

from __future__ import annotations

import asyncio
import math
import socket
import threading
import time
from types import TracebackType
from typing import Any

import uvicorn

from ..core.errors import UserError
from ..core.settings import Settings, settings_or_default
from .http.connections import http_protocol
from .http.logs import log_config

START_TIMEOUT = 30.0
"""Seconds :meth:`BackgroundServer.start` waits for the app's startup."""


class BackgroundServer:
    """Serve ``app`` on ``host:port`` (``port=0``: a free one) until :meth:`stop`.

    Use it as a context manager, or call :meth:`start` and :meth:`stop`::

        with BackgroundServer(app) as server:
            httpx.get(server.url + "healthz")

    Args:
        app: an ASGI app (its lifespan runs at start and at stop).
        host: the address to bind (default loopback).
        port: the port; 0 picks a free one (see :attr:`url`).
        log_level: uvicorn's log level (default ``"warning"``: quiet in a terminal).
        settings: ``shutdown_grace`` (the process-wide settings when omitted).
    """

    def __init__(self, app: Any, *, host: str = "127.0.0.1", port: int = 0,
                 log_level: str = "warning", settings: Settings | None = None) -> None:
        settings = settings_or_default(settings)
        self._grace = settings.shutdown_grace
        grace = max(1, math.ceil(self._grace))
        config = uvicorn.Config(app, host=host, port=port, log_level=log_level,
                                log_config=log_config(log_level), access_log=False,
                                timeout_graceful_shutdown=grace, http=http_protocol(settings))
        self._server = uvicorn.Server(config)
        self._host = host
        self._port = port
        self._socket: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._failure: BaseException | None = None

    @property
    def url(self) -> str:
        """The base URL, ending in ``/`` (known once started)."""
        if self._socket is None:
            raise RuntimeError("the server is not started")
        port = self._socket.getsockname()[1]
        return f"http://{self._host}:{port}/"

    def start(self, timeout: float = START_TIMEOUT) -> str:
        """Bind, start the thread and wait for the app's startup; returns :attr:`url`.

        Raises:
            UserError: the address cannot be bound, or the app did not start.
        """
        sock = socket.socket(socket.AF_INET6 if ":" in self._host else socket.AF_INET)
        try:
            sock.bind((self._host, self._port))
        except OSError as exc:
            sock.close()
            raise UserError(f"cannot listen on {self._host}:{self._port} "
                            f"({exc.strerror or exc})") from None
        self._socket = sock
        self._thread = threading.Thread(target=self._run, name="headwater-server", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                why = f": {self._failure}" if self._failure else ""
                raise UserError(f"the server on {self._host} did not start{why}")
            time.sleep(0.01)
        return self.url

    def _run(self) -> None:
        assert self._socket is not None
        try:
            asyncio.run(self._server.serve(sockets=[self._socket]))
        except BaseException as exc:  # reported by start(); the thread ends either way
            self._failure = exc

    def stop(self, timeout: float | None = None) -> None:
        """Stop serving (open streams get ``shutdown_grace``) and join the thread."""
        self._server.should_exit = True
        if self._thread is not None:
            grace = self._grace + 5 if timeout is None else timeout
            self._thread.join(grace)
            if self._thread.is_alive():
                self._server.force_exit = True
                self._thread.join(5)
            self._thread = None
        if self._socket is not None:
            self._socket.close()

    def __enter__(self) -> BackgroundServer:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
