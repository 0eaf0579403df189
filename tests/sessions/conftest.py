"""Session store fixtures: every behaviour test runs against each store.

``store`` is parametrized over the in-memory store, SQLite in a fresh file,
and PostgreSQL in a fresh database (when ``HEADWATER_TEST_POSTGRES_URL`` is
set; the ``postgres_url`` fixture of ``tests/conftest.py`` skips locally and
fails in CI otherwise). A test narrows the stores with
``@pytest.mark.parametrize("store", [...], indirect=True)``. Every service a
test opens is closed at teardown: an unclosed sqlite3 connection is a
ResourceWarning, which fails the test.

With ``HEADWATER_TEST_STORE=postgres`` (scripts/test's PostgreSQL run of this suite
and the gateway suite) only the tests on the PostgreSQL store are collected here:
the in-memory and SQLite cases, and the tests that are about SQLite by nature (its
writer thread, inline writes, WAL, the file's schema and integrity: parametrized
to ``["sqlite"]`` or building their own SQLite file), ran in the ordinary run.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from headwater.sessions import BaseSessionService, InMemorySessionService, SqlSessionService


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("HEADWATER_TEST_STORE") != "postgres":
        return
    here = Path(__file__).parent
    keep: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        callspec = getattr(item, "callspec", None)
        on_postgres = callspec is not None and callspec.params.get("store") == "postgres"
        in_suite = here in item.path.parents
        (dropped if in_suite and not on_postgres else keep).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


@dataclass
class Store:
    """One store under test: ``service`` is open; ``reopen()`` gives a second instance.

    For SQL stores ``reopen()`` is a new ``SqlSessionService`` on the same
    database (what a restarted or second process sees); the in-memory store
    has nothing to reopen and returns its one service.
    """

    kind: str  # "memory" | "sqlite" | "postgres"
    url: str | None
    service: BaseSessionService
    opened: list[BaseSessionService] = field(default_factory=list)

    def reopen(self, **kwargs: Any) -> BaseSessionService:
        if self.url is None:
            return self.service
        service = SqlSessionService(self.url, **kwargs)
        self.opened.append(service)
        return service

    async def close(self) -> None:
        for service in [self.service, *self.opened]:
            await service.close()


@asynccontextmanager
async def fresh_postgres_database(base_url: str) -> AsyncIterator[str]:
    """A new, empty database next to ``base_url``'s, dropped afterwards; yields its URL."""
    base = make_url(base_url)
    name = f"hw_test_{uuid.uuid4().hex[:16]}"
    admin = create_async_engine(base, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    try:
        async with admin.connect() as conn:
            await conn.execute(text(f'CREATE DATABASE "{name}"'))
        try:
            yield base.set(database=name).render_as_string(hide_password=False)
        finally:
            async with admin.connect() as conn:
                await conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        await admin.dispose()


@asynccontextmanager
async def open_store(kind: str, request: pytest.FixtureRequest, tmp_path: Path
                     ) -> AsyncIterator[Store]:
    if kind == "memory":
        store = Store(kind, None, InMemorySessionService())
        try:
            yield store
        finally:
            await store.close()
    elif kind == "sqlite":
        url = f"sqlite+aiosqlite:///{tmp_path / 'sessions.db'}"
        store = Store(kind, url, SqlSessionService(url))
        try:
            yield store
        finally:
            await store.close()
    elif kind == "postgres":
        async with fresh_postgres_database(request.getfixturevalue("postgres_url")) as url:
            store = Store(kind, url, SqlSessionService(url))
            try:
                yield store
            finally:
                await store.close()
    else:
        raise AssertionError(kind)


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """Each session store in turn, open and empty."""
    async with open_store(request.param, request, tmp_path) as opened:
        yield opened


@pytest.fixture
def service(store: Store) -> BaseSessionService:
    """The open service of ``store``."""
    return store.service
