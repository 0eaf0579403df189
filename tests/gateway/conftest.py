"""Gateway test fixtures: ``serve(app)`` runs an ASGI app under uvicorn on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, NoReturn, Protocol

import httpx
import pytest
import uvicorn
from starlette.types import ASGIApp

from . import stores as test_stores


@pytest.fixture(autouse=True)
async def stores(tmp_path: Path) -> AsyncIterator[test_stores.Stores]:
    """The stores ``stores.new_service()`` opens in this test; closed (and dropped) after it."""
    opened = test_stores.Stores(tmp_path)
    test_stores.current = opened
    try:
        yield opened
    finally:
        test_stores.current = None
        await opened.close()


class Serve(Protocol):
    """Start ``app`` on 127.0.0.1 (a free port) and answer its base URL."""

    def __call__(self, app: ASGIApp, **config: Any) -> Awaitable[str]: ...


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    """Run apps under a real uvicorn server on 127.0.0.1; each is stopped after the test.

    ``base_url = await serve(app)``; keyword arguments go to ``uvicorn.Config``
    (``log_level="warning"`` and ``lifespan="off"`` unless given).
    """
    running: list[tuple[uvicorn.Server, asyncio.Task[None]]] = []

    async def start(app: ASGIApp, **config: Any) -> str:
        options = {"log_level": "warning", "lifespan": "off", **config}
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, **options))
        task = asyncio.create_task(server.serve())
        running.append((server, task))
        while not server.started:
            if task.done():
                task.result()  # raises what stopped it
                raise RuntimeError("uvicorn exited before it started")
            await asyncio.sleep(0.005)
        port = server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    yield start
    for server, _ in running:
        server.should_exit = True
    for server, task in running:
        try:
            await asyncio.wait_for(asyncio.shield(task), 5)
        except TimeoutError:
            server.force_exit = True  # a connection that will not close
            with contextlib.suppress(asyncio.CancelledError):
                await task


MCP_TEST_SERVER = str(Path(__file__).resolve().parents[1] / "tools" / "mcp_server.py")
"""The SDK-built MCP server the MCP tests talk to (``python <it> stdio``)."""

JS = Path(__file__).resolve().parents[1] / "js"
"""The pinned npm clients (tests/js/package-lock.json), installed by the test command."""


def unavailable(reason: str) -> NoReturn:
    """A test's tool is missing: fail in CI (``CI`` set), which must run it; skip elsewhere."""
    if os.environ.get("CI", "").lower() not in ("", "0", "false"):
        pytest.fail(f"CI runs this test: {reason}")
    pytest.skip(reason)


def require_node(package: str | None = None) -> str:
    """The ``node`` executable (with the npm ``package`` installed, if named)."""
    path = shutil.which("node")
    if path is None:
        unavailable("node is not on PATH")
    if package is not None and not (JS / "node_modules" / package).is_dir():
        unavailable("tests/js/node_modules is missing: run `npm ci --prefix tests/js`")
    return path


ClientFor = Callable[[ASGIApp], Awaitable[httpx.AsyncClient]]


@pytest.fixture
async def client_for(serve: Serve) -> AsyncIterator[ClientFor]:
    """``client = await client_for(app)``: the app under uvicorn and an httpx client on it."""
    clients: list[httpx.AsyncClient] = []

    async def make(app: ASGIApp) -> httpx.AsyncClient:
        client = httpx.AsyncClient(base_url=await serve(app), timeout=10)
        clients.append(client)
        return client

    yield make
    for client in clients:
        await client.aclose()
