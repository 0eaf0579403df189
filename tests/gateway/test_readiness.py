"""``GET /readyz`` and the store opened at start: a gateway is ready once its stores answer.

``/healthz`` is liveness (the process answers; no store is asked); ``/readyz`` answers
200 only when the session store and, with ``redis_url``, Redis answer, else 503 with
the error envelope. Neither is authenticated or rate limited. The lifespan opens the
session store before the server says it is up, so a fresh database is migrated then.
Real stores: a SQLite file, PostgreSQL and Redis on loopback (ports nothing listens on
for the unreachable ones).
"""

from __future__ import annotations

import logging
import socket
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from headwater import Agent
from headwater.gateway import StaticTokenAuth, create_app
from headwater.gateway.core import Gateway
from headwater.sessions import BaseSessionService, SqlSessionService
from headwater.settings import Settings
from headwater.testing import ScriptedModel

from .conftest import Serve


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def gateway_app(service: BaseSessionService | None = None, **settings: Any) -> Any:
    bounds = {"ready_timeout": 5.0, **settings}
    agent = Agent(name="bot", model=ScriptedModel().reply("hi"))
    return create_app(agent, session_service=service, auth=StaticTokenAuth({"t": "alice"}),
                      settings=Settings(**bounds))


async def get(serve: Serve, app: Any, path: str, **config: Any) -> httpx.Response:
    async with httpx.AsyncClient(base_url=await serve(app, **config), timeout=30) as client:
        return await client.get(path)


def assert_unavailable(response: httpx.Response, code: str) -> None:
    assert response.status_code == 503, response.text
    assert response.json()["error"]["code"] == code, response.text
    assert response.headers["retry-after"]
    assert response.json()["error"]["request_id"] == response.headers["x-request-id"]


async def test_ready_when_the_store_answers_without_a_token_and_past_the_rate_limit(
        tmp_path: Path, serve: Serve) -> None:
    app = gateway_app(SqlSessionService(f"sqlite:///{tmp_path / 's.db'}"),
                      rate_limit_burst=1, rate_limit_per_minute=1)
    async with httpx.AsyncClient(base_url=await serve(app), timeout=30) as client:
        answers = [await client.get("/readyz") for _ in range(3)]
        assert (await client.get("/sessions")).status_code == 401  # the rest needs a token
    for answer in answers:
        assert answer.status_code == 200, answer.text
        assert answer.json() == {"status": "ready"}


async def test_a_store_that_does_not_answer_is_503_store_unavailable_logged_once(
        serve: Serve, caplog: pytest.LogCaptureFixture) -> None:
    pytest.importorskip("asyncpg")
    store = SqlSessionService(f"postgresql+asyncpg://postgres:hunter2@127.0.0.1:"
                              f"{closed_port()}/nothing")
    app = gateway_app(store)
    with caplog.at_level(logging.WARNING, logger="headwater.gateway"):
        async with httpx.AsyncClient(base_url=await serve(app), timeout=30) as client:
            first, second = await client.get("/readyz"), await client.get("/readyz")
            health = await client.get("/healthz")
    assert_unavailable(first, "store_unavailable")
    assert_unavailable(second, "store_unavailable")
    assert health.status_code == 200 and health.json() == {"status": "ok"}  # alive
    lines = [r.getMessage() for r in caplog.records if "does not answer" in r.getMessage()]
    assert len(lines) == 1, lines
    assert "hunter2" not in caplog.text and "hunter2" not in first.text
    await store.close()


async def test_an_unreachable_redis_is_503_run_store_unavailable(tmp_path: Path,
                                                                 serve: Serve) -> None:
    pytest.importorskip("redis")
    app = gateway_app(SqlSessionService(f"sqlite:///{tmp_path / 's.db'}"),
                      redis_url=f"redis://127.0.0.1:{closed_port()}/0", redis_timeout=2.0)
    # The lifespan closes the run registry's connections when the server stops.
    assert_unavailable(await get(serve, app, "/readyz", lifespan="on"), "run_store_unavailable")


@pytest.mark.redis
async def test_ready_with_redis_when_it_answers(tmp_path: Path, serve: Serve,
                                                redis_url: str) -> None:
    app = gateway_app(SqlSessionService(f"sqlite:///{tmp_path / 's.db'}"), redis_url=redis_url)
    answer = await get(serve, app, "/readyz", lifespan="on")
    assert answer.status_code == 200 and answer.json() == {"status": "ready"}, answer.text


async def test_a_stopping_gateway_is_not_ready_but_alive(tmp_path: Path, serve: Serve) -> None:
    app = gateway_app(SqlSessionService(f"sqlite:///{tmp_path / 's.db'}"))
    async with httpx.AsyncClient(base_url=await serve(app), timeout=30) as client:
        assert (await client.get("/readyz")).status_code == 200
        gateway: Gateway = app.state.gateway
        gateway.begin_shutdown()  # what SIGTERM does first
        ready, health = await client.get("/readyz"), await client.get("/healthz")
    assert_unavailable(ready, "server_shutdown")
    assert health.status_code == 200 and health.json() == {"status": "stopping"}


# -- the store opened at start ---------------------------------------------------------------


async def revision_of(url: str) -> Any:
    store = SqlSessionService(url)
    try:
        return await store.schema_revision()
    finally:
        await store.close()


async def test_the_lifespan_migrates_a_fresh_sqlite_file_before_the_server_is_up(
        tmp_path: Path, serve: Serve) -> None:
    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    await serve(gateway_app(SqlSessionService(url)), lifespan="on")  # no request sent
    assert (await revision_of(url)).at_head


@pytest.mark.postgres
async def test_the_lifespan_migrates_a_fresh_postgresql_database_before_the_server_is_up(
        serve: Serve, postgres_url: str, stores: Any) -> None:
    url = stores.postgres_url()
    before = await revision_of(url)
    assert before.current is None and before.unversioned is None  # empty
    await serve(gateway_app(SqlSessionService(url)), lifespan="on")
    assert (await revision_of(url)).at_head


async def test_a_store_that_cannot_be_brought_to_head_ends_the_start(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    app = gateway_app(database_auto_migrate=False, database_url=url)  # its own store
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, lifespan="on",
                                           log_level="critical"))
    with caplog.at_level(logging.ERROR, logger="headwater.gateway"), \
            pytest.raises(SystemExit) as exited:
        await server.serve()
    assert exited.value.code == 3  # uvicorn's startup failure
    assert not server.started
    assert "the session store failed at start (SessionError: the session database has no " \
           "session tables, and database_auto_migrate is off" in caplog.text, caplog.text
