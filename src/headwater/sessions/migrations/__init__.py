"""Schema migrations of the SQL session stores, with Alembic.

The revisions under ``versions/`` are the history of :mod:`..schema` (the
one MetaData): the same revisions for SQLite and PostgreSQL. ``0001`` is the
schema of headwater 0.1.0, the last release before migrations; each later
revision is what autogenerate made of a change to the MetaData (SQLite in
batch mode, ``render_as_batch``), and a test checks that a database upgraded
from nothing to head has exactly the MetaData's schema.

A database records its revision in its own version table,
``hw_alembic_version`` (not Alembic's default name, so an application's own
Alembic history can share the database). A database made before migrations
has the tables and no version table: it is stamped at the revision whose
schema it has, then upgraded. An empty database is created by upgrading
from nothing.

Every function takes a synchronous SQLAlchemy ``Connection`` already in the
transaction that holds the store's lock (SQLite: ``BEGIN IMMEDIATE``;
PostgreSQL: the store's advisory lock), so processes starting together
migrate one after another, and a failed upgrade leaves nothing behind
(both engines run DDL in a transaction). The stores call :func:`prepare`
when they first connect; ``headwater db upgrade`` calls :func:`upgrade`.

Imported only when a SQL store starts or a ``headwater db`` command runs:
``import headwater`` does not load Alembic.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from alembic import command
from alembic.config import Config
from alembic.runtime.environment import EnvironmentContext
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util.exc import CommandError
from sqlalchemy import Connection, create_engine, inspect
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from ...core.errors import SessionError
from .. import schema

VERSION_TABLE: Final = "hw_alembic_version"
"""The table holding a database's revision."""

BASELINE: Final = "0001"
"""The schema of headwater 0.1.0, the last release without a version table."""

_HERE: Final = Path(__file__).resolve().parent
_POLL: Final = 0.01  # s between tries of the process's migration lock from an event loop

# One Alembic run at a time in this process: its ``op`` and ``context`` are module-level
# proxies, and it compiles env.py and the revisions as it runs.
_RUNNING = threading.Lock()

# An unversioned database has the schema of the newest revision whose mark it carries:
# (revision, table, column) newest first. The lease holder columns came with 0002 (and
# were added in place, without a version table, by the development versions before it).
_UNVERSIONED_MARKS: Final = (
    ("0002", "hw_leases", "holder_host"),
    (BASELINE, "hw_sessions", None),
)


@dataclass(frozen=True, slots=True)
class SchemaRevision:
    """Where a database's schema stands.

    Attributes:
        current: the revision in its version table; ``None``: no version table.
        head: the newest revision this headwater knows.
        unversioned: the revision the schema of a database without a version
            table matches (made before migrations; :func:`upgrade` stamps it
            there); ``None`` for an empty database or a versioned one.
    """

    current: str | None
    head: str
    unversioned: str | None = None

    @property
    def at_head(self) -> bool:
        return self.current == self.head


@contextmanager
def serialised() -> Iterator[None]:
    """Hold the process's migration lock (from a thread that may block).

    Every call of this module runs under it; take it after the database's own
    lock, never before.
    """
    with _RUNNING:
        yield


@asynccontextmanager
async def serialised_async() -> AsyncIterator[None]:
    """:func:`serialised` from an event loop: tried without blocking the loop.

    A migration on this loop (through ``run_sync``) needs the loop to go on
    while another waits for the lock, so the waiting polls.
    """
    while True:  # a threading lock: no event to wait on
        if _RUNNING.acquire(blocking=False):
            break
        await asyncio.sleep(_POLL)
    try:
        yield
    finally:
        _RUNNING.release()


@functools.cache
def _scripts() -> ScriptDirectory:
    """The revisions shipped with the package (read once per process)."""
    return ScriptDirectory.from_config(_config())


def _config(connection: Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(_HERE))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def head() -> str:
    """The newest revision."""
    found = _scripts().get_current_head()
    assert found is not None  # versions/ holds at least the baseline
    return found


def revision(conn: Connection) -> SchemaRevision:
    """Where the database of ``conn`` stands; reads only."""
    current = _context(conn).get_current_revision()
    unversioned = None if current is not None else _unversioned(conn)
    return SchemaRevision(current, head(), unversioned)


def upgrade(conn: Connection) -> SchemaRevision:
    """Bring the database to head: stamp an unversioned one, then run what is missing.

    Idempotent: at head, nothing runs. Returns where it stood before.

    Raises:
        SessionError: the database is at a revision this headwater does not
            know (a newer version migrated it), or a revision failed (the
            transaction is then rolled back by the caller).
    """
    before = revision(conn)
    if before.at_head:
        return before
    _known(before)
    try:
        if before.current is None and before.unversioned is not None:
            command.stamp(_config(conn), before.unversioned)
        command.upgrade(_config(conn), "head")
    except CommandError as exc:
        raise SessionError(f"session database migration failed: {exc}") from exc
    return before


def check(conn: Connection) -> None:
    """Raise unless the database is at head (for a store that does not migrate itself).

    Raises:
        SessionError: the database is empty, made before migrations, behind
            head, or at a revision this headwater does not know; the message
            says to run ``headwater db upgrade``.
    """
    found = revision(conn)
    if found.at_head:
        return
    _known(found)
    if found.current is None and found.unversioned is None:
        where = "has no session tables"
    elif found.current is None:
        where = "was made before schema migrations"
    else:
        where = f"is at revision {found.current}, not {found.head}"
    raise SessionError(f"the session database {where}, and database_auto_migrate is off: "
                       "run `headwater db upgrade`")


def prepare(conn: Connection, auto_migrate: bool) -> None:
    """What a store does on first connecting: :func:`upgrade`, or :func:`check` when off."""
    if auto_migrate:
        upgrade(conn)
    else:
        check(conn)


def _known(found: SchemaRevision) -> None:
    if found.current is not None and found.current not in _revisions():
        raise SessionError(
            f"the session database is at revision {found.current!r}, which this headwater "
            f"does not know (its newest is {found.head}): a newer headwater migrated it")


@functools.cache
def _revisions() -> frozenset[str]:
    return frozenset(script.revision for script in _scripts().walk_revisions())


def _context(conn: Connection) -> MigrationContext:
    return MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})


def _unversioned(conn: Connection) -> str | None:
    inspector = inspect(conn)
    for rev, table, column in _UNVERSIONED_MARKS:
        if not inspector.has_table(table):
            continue
        if column is None or column in {c["name"] for c in inspector.get_columns(table)}:
            return rev
    return None


def configure(context: EnvironmentContext, connection: Connection) -> None:
    """The one configuration of Alembic's context, for the stores and for ``alembic``."""
    context.configure(connection=connection, target_metadata=schema.metadata,
                      version_table=VERSION_TABLE, render_as_batch=True)


def run_env(context: EnvironmentContext) -> None:
    """What ``env.py`` runs: on the caller's connection, or (``alembic`` command) the URL's.

    Developers run ``alembic -c src/headwater/sessions/migrations/alembic.ini
    revision --autogenerate`` against a database at head to write the next
    revision from the MetaData; ``sqlalchemy.url`` (or ``-x url=…``) names it.
    """
    connection: Connection | None = context.config.attributes.get("connection")
    if connection is not None:
        configure(context, connection)
        context.run_migrations()  # inside the caller's transaction
        return
    url = context.get_x_argument(as_dictionary=True).get("url") or context.config.get_main_option(
        "sqlalchemy.url")
    if url is None:
        raise CommandError("no database: set sqlalchemy.url or pass -x url=…")
    if context.is_offline_mode():
        context.configure(url=url, target_metadata=schema.metadata, version_table=VERSION_TABLE,
                          render_as_batch=True, literal_binds=True)
        with context.begin_transaction():
            context.run_migrations()
        return
    if make_url(url).get_dialect().is_async:
        asyncio.run(_run_async(context, url))
        return
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.begin() as conn:
            _run_on(context, conn)
    finally:
        engine.dispose()


def _run_on(context: EnvironmentContext, conn: Connection) -> None:
    configure(context, conn)
    with context.begin_transaction():
        context.run_migrations()


async def _run_async(context: EnvironmentContext, url: str) -> None:
    engine = create_async_engine(url, poolclass=NullPool)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(lambda sync: _run_on(context, sync))
    finally:
        await engine.dispose()

