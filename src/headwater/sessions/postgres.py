"""The PostgreSQL store behind ``SqlSessionService``, on SQLAlchemy async Core and asyncpg.

For several gateway replicas on one database. The operations are the steps of
:mod:`._sqlcore`, each driven inside one transaction; every write locks the
session's row first, so writes of one session from any replica serialise.
The first connection of an engine brings the database to the schema's newest
revision (:mod:`.migrations`) under an advisory lock, so replicas starting
together migrate once.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, TypeVar

from sqlalchemy import Connection, TextClause, text
from sqlalchemy import event as sa_event
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from ..core.errors import SessionError
from ..core.tasks import TaskSet
from . import _sqlcore as core

if TYPE_CHECKING:
    from .migrations import SchemaRevision

T = TypeVar("T")
_SCHEMA_LOCK: Final = "SELECT pg_advisory_xact_lock(114862246425459)"  # for migrations

_statements: dict[str, TextClause] = {}


def _statement(sql: str) -> TextClause:
    found = _statements.get(sql)
    if found is None:
        found = _statements[sql] = text(sql)
    return found


class PostgresStore:
    """Sessions in PostgreSQL; see the module docstring.

    The engine (a connection pool) is created on first use and belongs to the
    event loop that used it; used from another loop, the store disposes it and
    opens a new one. Close it on the loop that used it: connections of a loop
    that has stopped cannot be closed cleanly.
    """

    lock: Final = " FOR UPDATE"

    def __init__(self, url: URL, trace: Callable[[str], None] | None = None,
                 auto_migrate: bool = True) -> None:
        self._url = url
        self._trace = trace
        self._auto_migrate = auto_migrate
        self._engine: AsyncEngine | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._schema_lock = asyncio.Lock()
        self._schema_ready = False
        self._writes = TaskSet("PostgreSQL writes")  # close() waits for them
        self._order: dict[core.Key, tuple[asyncio.Lock, list[int]]] = {}

    def start_write(self, steps: core.Steps[T], order: core.Key | None = None,
                    on_commit: Callable[[T], None] | None = None) -> asyncio.Future[T]:
        """Start a write as a task of its own; see :class:`~._sqlcore.Store`.

        Writes with the same ``order`` key run one after another, in the order
        they started (they would wait for the session's row lock anyway), so
        ``on_commit`` calls follow the commit order.
        """
        # The caller awaits it through the shield and gets its failure.
        task = self._writes.spawn(self._write_in_order(steps, order, on_commit),
                                  name="write", expected=Exception)
        return asyncio.shield(task)

    async def _write_in_order(self, steps: core.Steps[T], order: core.Key | None,
                              on_commit: Callable[[T], None] | None) -> T:
        if order is None:
            result = await self.write(steps)
        else:
            entry = self._order.get(order)
            if entry is None:
                entry = self._order[order] = (asyncio.Lock(), [0])
            lock, users = entry
            users[0] += 1
            try:
                async with lock:
                    result = await self.write(steps)
                    if on_commit is not None:
                        on_commit(result)
                    return result
            finally:
                users[0] -= 1
                if not users[0]:
                    del self._order[order]
        if on_commit is not None:
            on_commit(result)
        return result

    async def write(self, steps: core.Steps[T]) -> T:
        return await self._run(steps)

    async def read(self, steps: core.Steps[T]) -> T:
        return await self._run(steps)

    async def _run(self, steps: core.Steps[T]) -> T:
        """Drive ``steps`` in one transaction; a raise in them rolls it back."""
        engine = await self._ready_engine()
        try:
            async with engine.connect() as conn, conn.begin():
                return await _drive(conn, steps)
        except IntegrityError as exc:
            raise SessionError(f"the database refused the write (already stored?): {exc.orig}"
                               ) from exc
        except DBAPIError as exc:
            # The driver's message, without SQL or parameters.
            raise SessionError(f"session store failed: {exc.orig}") from exc

    async def close(self) -> None:
        """Wait for writes under way, then dispose the engine; a later call opens a new one."""
        await self._writes.wait()
        engine, loop = self._engine, self._loop
        self._engine, self._loop, self._schema_ready = None, None, False
        if engine is not None:
            await _dispose(engine, loop)

    async def upgrade_schema(self) -> SchemaRevision:
        """Bring the database to head, under the schema lock; where it stood before."""
        from . import migrations

        return await self._on_schema(await self._loop_engine(), migrations.upgrade)

    async def schema_revision(self) -> SchemaRevision:
        """Where the database's schema stands (read only)."""
        from . import migrations

        return await self._on_schema(await self._loop_engine(), migrations.revision,
                                     lock=False)

    async def _loop_engine(self) -> AsyncEngine:
        """The engine for the running loop (one of another loop is disposed)."""
        loop = asyncio.get_running_loop()
        if self._engine is not None and self._loop is not loop:
            engine, old_loop = self._engine, self._loop
            self._engine, self._loop = None, None
            await _dispose(engine, old_loop)
        if self._engine is None:
            self._engine = create_async_engine(self._url, pool_pre_ping=True)
            if self._trace is not None:
                trace = self._trace
                sa_event.listen(self._engine.sync_engine, "before_cursor_execute",
                                lambda _c, _cur, sql, *_a: trace(sql))
            self._loop = loop
            self._schema_lock = asyncio.Lock()
            self._schema_ready = False
        return self._engine

    async def _ready_engine(self) -> AsyncEngine:
        """The engine for the running loop, the schema at head (migrated once per engine)."""
        engine = await self._loop_engine()
        if not self._schema_ready:
            async with self._schema_lock:
                if not self._schema_ready:
                    from . import migrations

                    await self._on_schema(engine, functools.partial(
                        migrations.prepare, auto_migrate=self._auto_migrate))
                    self._schema_ready = True
        return engine

    async def _on_schema(self, engine: AsyncEngine, work: Callable[[Connection], T],
                         lock: bool = True) -> T:
        """Run ``work`` (Alembic's) in one transaction, under the advisory lock if ``lock``.

        Replicas starting together wait for each other's migration; a failure
        rolls the whole upgrade back (PostgreSQL's DDL is transactional).
        """
        from . import migrations

        try:
            async with engine.connect() as conn, conn.begin():
                if lock:
                    await conn.execute(_statement(_SCHEMA_LOCK))
                async with migrations.serialised_async():
                    return await conn.run_sync(work)
        except DBAPIError as exc:
            raise SessionError(f"session store failed: {exc.orig}") from exc


async def _drive(conn: AsyncConnection, steps: core.Steps[T]) -> T:
    try:
        sql, params = next(steps)
        while True:
            result = await conn.execute(_statement(sql), params)
            rows: list[core.Row] = ([tuple(r) for r in result.all()] if result.returns_rows
                                    else [])
            sql, params = steps.send(rows)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


async def _dispose(engine: AsyncEngine, loop: asyncio.AbstractEventLoop | None) -> None:
    """Close an engine's connections, on the loop that opened them if it still runs."""
    if loop is None or loop is asyncio.get_running_loop():
        await engine.dispose()
    elif loop.is_running():
        # That loop runs in another thread: its connections can only close there.
        await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(engine.dispose(), loop))
    else:
        # Sockets of a stopped loop cannot be closed from this one: drop the pool.
        await engine.dispose(close=False)
