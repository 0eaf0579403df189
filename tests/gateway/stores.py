"""The session store a gateway test serves from, switched by ``HEADWATER_TEST_STORE``.

``new_service()`` answers what the test always used: an ``InMemorySessionService``
(``new_service("sqlite")``: a ``SqlSessionService`` on a fresh SQLite file). With
``HEADWATER_TEST_STORE=postgres`` (scripts/test runs the gateway suite so in CI) each
call answers a ``SqlSessionService`` on a fresh, empty PostgreSQL database instead
(``CREATE DATABASE`` from the template is a few tens of milliseconds), next to
``HEADWATER_TEST_POSTGRES_URL``'s. What each test asserts does not change.

Left on their own store: the browser tests (their store is incidental, and they are
slow: scripts/test's PostgreSQL pass runs ``-m "not slow"``), the tests that start
``headwater serve`` or a served app as a child process on a SQLite file (slow too;
``test_serve_deploy`` and ``test_deployment`` run on PostgreSQL anyway), the logging
test (no session is used) and ``test_settings_per_app`` (it checks each app's own
SQLite file).

The per-test ``Stores`` behind it is set up by the autouse ``stores`` fixture of
``tests/gateway/conftest.py``, which closes every service a test opened and drops its
databases at teardown.
"""

from __future__ import annotations

import asyncio
import os
import threading
import uuid
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from headwater.sessions import BaseSessionService, InMemorySessionService, SqlSessionService

STORE = os.environ.get("HEADWATER_TEST_STORE", "")
"""``""`` (each test's own store) or ``"postgres"`` (a fresh PostgreSQL database each)."""
if STORE not in ("", "postgres"):
    raise RuntimeError(f"HEADWATER_TEST_STORE is {STORE!r}: unset it, or set it to 'postgres'")

ON_POSTGRES = STORE == "postgres"


def postgres_base_url() -> str:
    """``HEADWATER_TEST_POSTGRES_URL``; without it the switch cannot work, so the test fails."""
    url = os.environ.get("HEADWATER_TEST_POSTGRES_URL")
    if not url:
        pytest.fail("HEADWATER_TEST_STORE=postgres needs HEADWATER_TEST_POSTGRES_URL")
    return url


def _admin(statement: str) -> None:
    """Run one statement on the base database, from a thread (the caller may be in a loop)."""
    import asyncpg

    base = make_url(postgres_base_url()).set(drivername="postgresql")
    dsn = base.render_as_string(hide_password=False)
    failure: list[BaseException] = []

    async def run() -> None:
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute(statement)
        finally:
            await conn.close()

    def target() -> None:
        try:
            asyncio.run(run())
        except BaseException as exc:  # re-raised in the caller
            failure.append(exc)

    thread = threading.Thread(target=target, name="test-store-admin")
    thread.start()
    thread.join()
    if failure:
        raise failure[0]


class Stores:
    """The stores one test opened: services to close, databases to drop."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.services: list[BaseSessionService] = []
        self.databases: list[str] = []

    def url(self, kind: str = "sqlite") -> str:
        """A fresh database URL: a new SQLite file, or under the switch a PostgreSQL database."""
        if ON_POSTGRES:
            return self.postgres_url()
        if kind != "sqlite":
            raise ValueError(f"no database URL for a {kind!r} store")
        return f"sqlite+aiosqlite:///{self.tmp_path / f'store-{uuid.uuid4().hex[:8]}.db'}"

    def postgres_url(self) -> str:
        """A fresh, empty PostgreSQL database next to ``HEADWATER_TEST_POSTGRES_URL``'s
        (whatever the switch), dropped after the test."""
        name = f"hw_test_{uuid.uuid4().hex[:16]}"
        _admin(f'CREATE DATABASE "{name}"')
        self.databases.append(name)
        return make_url(postgres_base_url()).set(database=name).render_as_string(
            hide_password=False)

    def service(self, kind: str = "memory") -> BaseSessionService:
        if kind not in ("memory", "sqlite"):
            raise ValueError(f"unknown store {kind!r}: 'memory' or 'sqlite'")
        service: BaseSessionService
        if kind == "memory" and not ON_POSTGRES:
            service = InMemorySessionService()
        else:
            service = SqlSessionService(self.url("sqlite"))
        self.services.append(service)
        return service

    async def close(self) -> None:
        for service in self.services:
            await service.close()
        for name in self.databases:
            await asyncio.to_thread(_admin, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


current: Stores | None = None
"""The running test's stores (set by the autouse fixture)."""


def _stores() -> Stores:
    if current is None:
        raise RuntimeError("new_service() runs inside a gateway test (the stores fixture)")
    return current


def new_service(kind: str = "memory") -> BaseSessionService:
    """A fresh session store of ``kind`` ("memory" or "sqlite"), or PostgreSQL under the switch."""
    return _stores().service(kind)


def new_database_url() -> str:
    """A fresh database URL: a new SQLite file, or under the switch a new PostgreSQL database."""
    return _stores().url()
