"""``headwater serve`` configured as a deployment is: flags and environment, no Python glue.

Real ``headwater serve`` child processes on ``deployed_agent:agent``: the store
from ``--db`` (PostgreSQL), ``--workers`` processes, auth from
``HEADWATER_AUTH_TOKENS`` or ``HEADWATER_JWT_*``, and bad values refused in
one line with exit code 2, a secret never shown.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from sqlalchemy.engine import make_url

from headwater.sessions import SqlSessionService
from headwater.testing import FakeProvider, Scenario, render_openai, wait_until

from .deployment import (
    HERE,
    Served,
    free_port,
    launch,
    sent_tool_results,
    serve,
    serve_args,
)
from .stores import Stores
from .test_runlog import drop_keys

pytestmark = pytest.mark.slow

# Seconds a test waits for its --workers to be up: three interpreters and two stores
# opened, on a busy two-core machine.
WORKERS_UP = 60
BOOT = 8  # seconds slow_worker_cli adds to a worker's boot: past uvicorn's own 5 s
SECRET = "a-jwt-secret-of-at-least-32-bytes!!"
TOKEN_B = "dG9rZW4tYg=="  # base64: a token that ends in "="


@pytest.fixture
def env(child_env: dict[str, str], tmp_path: Path, provider: FakeProvider) -> dict[str, str]:
    """The child's environment: no HEADWATER_* from outside, a store in the tmp dir."""
    clean = {k: v for k, v in child_env.items() if not k.startswith("HEADWATER_")}
    return {**clean, "HW_TEST_PROVIDER_URL": provider.base_url,
            "HEADWATER_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'sessions.db'}",
            "HEADWATER_SHUTDOWN_GRACE": "2", "HEADWATER_MODEL_MAX_ATTEMPTS": "1"}


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[list[Served]]:
    """The servers a test starts, stopped after it."""
    children: list[Served] = []
    yield children
    for child in children:
        child.stop()


def workers_of(pid: int) -> set[int]:
    """The worker processes uvicorn's supervisor ``pid`` started (not its resource tracker)."""
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    found = set()
    for child in map(int, text.split()):
        try:
            command = Path(f"/proc/{child}/cmdline").read_bytes()
        except OSError:
            continue
        if b"spawn_main" in command:
            found.add(child)
    return found


async def run_where(client: httpx.AsyncClient, provider: FakeProvider, sid: str,
                    token: str) -> int:
    """One run whose model calls ``where``: the pid of the worker that ran it."""
    call = f"call_{len(provider.requests)}"
    provider.enqueue(Scenario(body=render_openai(
                         tool_calls=[{"name": "where", "id": call, "arguments": {}}],
                         finish_reason="tool_calls")),
                     Scenario(body=render_openai(text=["ok"])))
    before = len(provider.requests)
    response = await client.post(f"/sessions/{sid}/runs", json={"message": "where?"},
                                 headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200, response.text
    assert "event: done" in response.text, response.text
    result = sent_tool_results(provider, before + 1)[-1]  # this run's, after the earlier ones
    return int(result["result"])


def started_workers(output: str) -> int:
    """How many workers have finished their startup (uvicorn says so once for each)."""
    return output.count("Application startup complete.")


@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.timeout(WORKERS_UP * 3)
async def test_an_agent_on_postgresql_in_two_workers_with_tokens_from_the_environment(
        env: dict[str, str], served: list[Served], provider: FakeProvider, postgres_url: str,
        redis_url: str, tmp_path: Path) -> None:
    prefix = f"hwtest:{uuid.uuid4().hex}:"
    env = {**env, "HEADWATER_AUTH_TOKENS": f"token-a=alice, {TOKEN_B}=bob",
           "HEADWATER_REDIS_KEY_PREFIX": prefix}
    # Auth from the environment: not dev mode, so any address without --insecure-dev.
    server = await serve("--db", postgres_url, "--redis-url", redis_url, "--workers", "2",
                         "--log-level", "info",
                         env=env, log=tmp_path / "serve.log", host="0.0.0.0")
    served.append(server)
    await wait_until(lambda: started_workers(server.output()) == 2, timeout=WORKERS_UP,
                     interval=0.1, message="two workers up")
    workers = workers_of(server.process.pid)
    assert len(workers) == 2, server.output()

    async with httpx.AsyncClient(base_url=server.base_url, timeout=20) as client:
        assert (await client.get("/sessions")).status_code == 401
        wrong = await client.get("/sessions", headers={"Authorization": "Bearer token-c"})
        assert wrong.status_code == 401
        for token in ("token-a", TOKEN_B):
            ok = await client.get("/sessions", headers={"Authorization": f"Bearer {token}"})
            assert ok.status_code == 200, ok.text
        made = await client.post("/sessions", json={}, headers={"Authorization": "Bearer token-a"})
        assert made.status_code == 201, made.text
        sid = made.json()["id"]

    # Runs over fresh connections land on either worker; both serve.
    seen: set[int] = set()
    for _ in range(40):
        async with httpx.AsyncClient(base_url=server.base_url, timeout=20) as client:
            seen.add(await run_where(client, provider, sid, "token-a"))
        if len(seen) == 2:
            break
    assert seen == workers

    # The runs are in PostgreSQL, under the user the token stands for.
    store = SqlSessionService(postgres_url)
    try:
        session = await store.get_session(app_name="bot", user_id="alice", session_id=sid)
    finally:
        await store.close()
    assert session is not None
    assert sum(e.author == "user" for e in session.events) >= 2
    server.stop()
    await drop_keys(redis_url, prefix)
    log = server.output()
    assert "token-a" not in log and TOKEN_B not in log  # secrets are never logged


@pytest.mark.redis
@pytest.mark.timeout(WORKERS_UP * 3)
async def test_workers_slow_to_boot_are_not_killed_while_they_start(
        env: dict[str, str], served: list[Served], redis_url: str, tmp_path: Path) -> None:
    """A worker answers its supervisor's health checks only once it has booted: two that boot
    slower than uvicorn's own 5 s (as on a busy host) both come up, neither killed, within
    worker_healthcheck_timeout; with the setting below their boot they are killed."""
    prefix = f"hwtest:{uuid.uuid4().hex}:"
    env = {**env, "HW_TEST_WORKER_BOOT": str(BOOT), "HEADWATER_REDIS_KEY_PREFIX": prefix}
    args = ("--redis-url", redis_url, "--workers", "2", "--log-level", "info")
    server = await serve(*args, env=env, log=tmp_path / "serve.log", cli="slow_worker_cli",
                         within=BOOT + WORKERS_UP)
    served.append(server)
    await wait_until(lambda: started_workers(server.output()) == 2, timeout=WORKERS_UP,
                     interval=0.1, message="two workers up")
    assert "died" not in server.output(), server.output()
    assert len(workers_of(server.process.pid)) == 2, server.output()
    server.stop()

    short = Served(launch(serve_args(*args, port=free_port(), cli="slow_worker_cli"),
                          {**env, "HEADWATER_WORKER_HEALTHCHECK_TIMEOUT": "2"},
                          tmp_path / "short.log"), 0, tmp_path / "short.log")
    served.append(short)
    await wait_until(lambda: "died" in short.output(), timeout=WORKERS_UP, interval=0.1,
                     message="a worker killed while booting")
    short.stop()
    await drop_keys(redis_url, prefix)


async def test_an_agent_with_jwt_auth_from_the_environment(
        env: dict[str, str], served: list[Served], tmp_path: Path) -> None:
    key_file = tmp_path / "jwt.key"
    key_file.write_text(SECRET)
    env = {**env, "HEADWATER_JWT_KEY_FILE": str(key_file), "HEADWATER_JWT_ALGORITHMS": "HS256",
           "HEADWATER_JWT_AUDIENCE": "gateway", "HEADWATER_JWT_ISSUER": "https://id.example"}
    server = await serve(env=env, log=tmp_path / "serve.log")
    served.append(server)

    def token(**claims: object) -> str:
        base = {"sub": "carol", "aud": "gateway", "iss": "https://id.example",
                "exp": int(time.time()) + 600}
        return jwt.encode({**base, **claims}, SECRET, algorithm="HS256")

    async with httpx.AsyncClient(base_url=server.base_url, timeout=20) as client:
        assert (await client.get("/sessions")).status_code == 401
        for bad in (token(aud="other"), token(iss="https://else.example"),
                    jwt.encode({"sub": "carol", "aud": "gateway", "iss": "https://id.example",
                                "exp": int(time.time()) + 600}, "x" * 40, algorithm="HS256")):
            refused = await client.get("/sessions", headers={"Authorization": f"Bearer {bad}"})
            assert refused.status_code == 401, refused.text
        good = {"Authorization": f"Bearer {token()}"}
        made = await client.post("/sessions", json={}, headers=good)
        assert made.status_code == 201, made.text
        listed = await client.get("/sessions", headers=good)
        assert [s["id"] for s in listed.json()["items"]] == [made.json()["id"]]
        other = {"Authorization": f"Bearer {token(sub='dave')}"}
        assert (await client.get("/sessions", headers=other)).json()["items"] == []
    assert SECRET not in server.output()


async def test_reload_serves_through_the_workers_protocol(
        env: dict[str, str], served: list[Served], tmp_path: Path) -> None:
    """--reload's worker, like --workers', is a spawned process: the app and the bounded
    protocol reach it by import string, with the auth of the environment."""
    env = {**env, "HEADWATER_AUTH_TOKENS": "token-a=alice"}
    server = await serve("--reload", env=env, log=tmp_path / "serve.log")
    served.append(server)
    async with httpx.AsyncClient(base_url=server.base_url, timeout=20) as client:
        assert (await client.get("/sessions")).status_code == 401
        ok = await client.get("/sessions", headers={"Authorization": "Bearer token-a"})
        assert ok.status_code == 200, ok.text


def started_lines(output: str) -> list[str]:
    """What ``headwater serve`` said at start: its ``headwater.gateway`` lines before
    uvicorn's, without the level, time and logger."""
    marker = " headwater.gateway: "
    lines = []
    for line in output.splitlines():
        if marker not in line:
            break
        lines.append(line.split(marker, 1)[1])
    return lines


async def schema_of(url: str) -> Any:
    store = SqlSessionService(url)
    try:
        return await store.schema_revision()
    finally:
        await store.close()


@pytest.mark.postgres
@pytest.mark.redis
async def test_a_fresh_postgresql_database_is_migrated_before_the_workers_are_up(
        env: dict[str, str], served: list[Served], postgres_url: str, redis_url: str,
        stores: Stores, tmp_path: Path) -> None:
    """``serve --db`` on an empty database: its tables are there (at head) by the time the
    server answers, before any request touched the store; the start says, once, what is
    served (the database's password masked)."""
    url = make_url(stores.postgres_url()).set(password="hunter2")  # trust auth: ignored
    db = url.render_as_string(hide_password=False)
    prefix = f"hwtest:{uuid.uuid4().hex}:"
    assert (await schema_of(db)).current is None
    env = {**env, "HEADWATER_AUTH_TOKENS": f"token-a=alice, {TOKEN_B}=bob",
           "HEADWATER_REDIS_KEY_PREFIX": prefix}
    server = await serve("--db", db, "--redis-url", redis_url, "--workers", "2",
                         "--log-level", "info", env=env, log=tmp_path / "serve.log")
    served.append(server)
    assert (await schema_of(db)).at_head  # /healthz answered: nothing else was asked
    async with httpx.AsyncClient(base_url=server.base_url, timeout=20) as client:
        ready = await client.get("/readyz")
    assert ready.status_code == 200 and ready.json() == {"status": "ready"}, ready.text
    server.stop()
    await drop_keys(redis_url, prefix)
    assert started_lines(server.output()) == [
        "agents: bot (default)", "auth: 2 static bearer tokens",
        f"database: {url.render_as_string(hide_password=True)}",
        f"redis: {redis_url}", "workers: 2"]
    assert "hunter2" not in server.output() and "token-a" not in server.output()


async def test_a_fresh_sqlite_file_is_migrated_before_the_server_is_up(
        env: dict[str, str], served: list[Served], tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'fresh' / 'sessions.db'}"
    server = await serve("--db", db, "--log-level", "info", env=env, log=tmp_path / "serve.log")
    served.append(server)
    assert (await schema_of(db)).at_head
    server.stop()
    assert started_lines(server.output()) == [
        "agents: bot (default)",
        "auth: none, dev mode: whoever reaches it is the one local user (loopback only)",
        f"database: {db.replace('sqlite:', 'sqlite+aiosqlite:', 1)}",  # as the store names it
        "redis: none (runs live in this process)", "workers: 1"]


def test_a_store_that_cannot_be_brought_to_head_ends_serve_in_one_line(
        env: dict[str, str], tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'fresh.db'}"
    line = one_line(hw_serve("--db", db, "--port", "0",
                             env={**env, "HEADWATER_DATABASE_AUTO_MIGRATE": "false"}))
    assert line == (f"headwater serve: cannot use the session store {db}: the session database "
                    "has no session tables, and database_auto_migrate is off: run "
                    "`headwater db upgrade`")


# -- bad values: one line, exit code 2, no secret --------------------------------------------------


def hw_serve(*args: str, env: dict[str, str], target: str = "deployed_agent:agent",
             ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "headwater.cli", "serve", target, *args],
                          cwd=HERE, env=env, capture_output=True, text=True, timeout=60,
                          check=False)


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.mark.parametrize(("args", "variables", "expected"), [
    (["--db", "not a url"], {}, "--db is not a database URL"),
    (["--db", "mysql://u:hunter2@127.0.0.1/db"], {}, "unsupported database 'mysql'"),
    (["--db", "postgresql+asyncpg://u:hunter2@127.0.0.1:1/db"], {},
     "cannot use the session store postgresql+asyncpg://u:***@127.0.0.1:1/db"),
    (["--redis-url", "http://127.0.0.1:6379"], {}, "is not a Redis URL"),
    (["--redis-url", "redis://:hunter2@127.0.0.1:1/0"], {},
     "cannot use Redis at redis://:***@127.0.0.1:1/0 (Error 111 connecting"),
    (["--redis-url", "redis://127.0.0.1:1/99"], {}, "cannot use Redis at redis://127.0.0.1:1/99"),
    (["--workers", "2", "--reload"], {}, "--reload runs one worker"),
    (["--workers", "2"], {}, "--workers 2 needs --redis-url"),
    ([], {"HEADWATER_AUTH_TOKENS": "hunter2"}, "HEADWATER_AUTH_TOKENS is neither"),
    ([], {"HEADWATER_AUTH_TOKENS": "=alice"}, "entry 1 is not token=user"),
    ([], {"HEADWATER_AUTH_TOKENS": "hunter2=a hunter2=b"}, "entry 2 repeats a token"),
    ([], {"HEADWATER_AUTH_TOKENS": "t=a", "HEADWATER_JWT_KEY": "hunter2" * 6},
     "not both"),
    ([], {"HEADWATER_JWT_KEY": "hunter2" * 6}, "needs HEADWATER_JWT_ALGORITHMS"),
    ([], {"HEADWATER_JWT_ALGORITHMS": "HS256"}, "no HEADWATER_JWT_KEY"),
    ([], {"HEADWATER_JWT_KEY": "hunter2" * 6, "HEADWATER_JWT_ALGORITHMS": "none"},
     'refuses the "none" algorithm'),
    ([], {"HEADWATER_JWT_KEY": "hunter2", "HEADWATER_JWT_ALGORITHMS": "HS256"},
     "HEADWATER_JWT_*: JWTAuth:"),
    ([], {"HEADWATER_JWT_KEY_FILE": "/nonexistent/key.pem",
          "HEADWATER_JWT_ALGORITHMS": "RS256"}, "cannot read /nonexistent/key.pem"),
    ([], {"HEADWATER_JWT_LEEWAY": "soon"}, "HEADWATER_JWT_LEEWAY"),
])
def test_bad_values_are_one_line_and_show_no_secret(
        args: list[str], variables: dict[str, str], expected: str,
        env: dict[str, str]) -> None:
    line = one_line(hw_serve(*args, "--port", "0", env={**env, **variables}))
    assert line.startswith("headwater serve: ") and expected in line, line
    assert "hunter2" not in line


def test_auth_from_the_environment_is_for_agents_not_an_app(env: dict[str, str]) -> None:
    line = one_line(hw_serve("--port", "0", env={**env, "HEADWATER_AUTH_TOKENS": "t=a"},
                             target="served_app:app"))
    assert "served_app:app is an app, which has its own auth" in line


@pytest.mark.parametrize("workers", ["0", "two"])
def test_a_bad_number_of_workers_is_a_usage_error(workers: str, env: dict[str, str]) -> None:
    result = hw_serve("--workers", workers, env=env)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert "argument --workers:" in result.stderr.strip().splitlines()[-1]
