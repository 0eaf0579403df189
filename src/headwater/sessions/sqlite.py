"""The SQLite store behind ``SqlSessionService``: one writer thread per database.

A write never runs statement by statement through the event loop. Each
database gets a dedicated writer thread owning a plain ``sqlite3`` connection
(WAL, ``synchronous`` from the settings, foreign keys on), fed by a bounded
queue. The thread runs every write transaction whole: ``BEGIN IMMEDIATE``, the
work, ``COMMIT``, so the write lock is held for the time SQLite needs and no
longer. Writes queued together commit in one transaction (group commit), each
inside its own ``SAVEPOINT``: one that fails rolls back alone and its caller
alone gets the error. Reads run on a small pool of reader connections in their
own threads (WAL readers never wait for the writer).

The hand-over to the thread and back costs two thread wake-ups, often more than
the transaction itself. So when nothing is queued or unreported, no other
session's writes interleave, no read is under way and the database's lock is
free at once, the caller's thread runs the transaction whole instead
(``Settings.sqlite_inline_writes``): same connection, same steps, same order,
no wait on the event loop (the lock is tried without waiting, and a commit that
syncs to disk never runs there).

A caller's cancellation cannot leave a transaction or lock open: the work is
already the thread's, which finishes it (or rolls it back) whatever the caller
does, and hands the outcome back to the caller's loop.

The writer thread is :mod:`._sqlite_writer`; this module holds the readers,
the schema's preparation and :class:`SqliteStore`, which owns them all.

The schema: when the store opens, Alembic brings the file to the newest
revision (:mod:`.migrations`) on a short-lived SQLAlchemy connection of its
own, under ``BEGIN IMMEDIATE``; the writer and the readers open after it.
"""

from __future__ import annotations

import asyncio
import functools
import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Final, TypeVar

from ..core.errors import SessionError
from ..core.tasks import TaskSet
from . import _sqlcore as core
from ._sqlite_writer import CLOSED, Job, Outcome, SqliteConfig, Writer, connect, store_error

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from .migrations import SchemaRevision

T = TypeVar("T")
_NO_LOCK: Final = ""  # SQLite has no row locks: BEGIN IMMEDIATE already serialises writers

__all__ = ("SqliteConfig", "SqliteStore")


class _Readers:
    """A few reader connections, each used by one thread of a small pool."""

    def __init__(self, config: SqliteConfig, size: int) -> None:
        self.config = config
        self.pool = ThreadPoolExecutor(size, thread_name_prefix="headwater-sqlite-reader")
        self.local = threading.local()
        self.opened: list[sqlite3.Connection] = []
        self.lock = threading.Lock()
        self.checkpointing = False

    def read(self, steps: core.Steps[T]) -> T:
        """Run ``steps`` in one read transaction (a consistent snapshot), in a reader thread."""
        found: sqlite3.Connection | None = getattr(self.local, "conn", None)
        if found is None:
            found = connect(self.config)
            self.local.conn = found
            with self.lock:
                self.opened.append(found)
        conn = found
        try:
            conn.execute("BEGIN")
            try:
                return core.drive(lambda sql, p: conn.execute(sql, p).fetchall(), steps)
            finally:
                if conn.in_transaction:
                    conn.execute("COMMIT")
        except sqlite3.Error as exc:
            raise store_error(exc) from exc

    def start_checkpoint(self) -> None:
        """Ask a reader thread for a WAL checkpoint, unless one is already under way.

        A ``PASSIVE`` checkpoint copies committed pages into the database
        without taking the write lock, so the writer never pays for it (with
        SQLite's automatic checkpoint, an unlucky commit would, fsync included).
        """
        with self.lock:
            if self.checkpointing:
                return
            self.checkpointing = True
        try:
            self.pool.submit(self.read, _checkpoint(self))
        except RuntimeError:  # the pool is shutting down: closing checkpoints anyway
            self.checkpointing = False

    def close(self) -> None:
        self.pool.shutdown(wait=True)
        with self.lock:
            opened, self.opened = self.opened, []
        for conn in opened:
            conn.close()


def _checkpoint(readers: _Readers) -> core.Steps[None]:
    try:
        yield "COMMIT", {}  # a checkpoint cannot run inside the read transaction
        yield "PRAGMA wal_checkpoint(PASSIVE)", {}
        yield "BEGIN", {}
    finally:
        readers.checkpointing = False


def _on_schema(config: SqliteConfig, work: Callable[[Connection], T], lock: bool) -> T:
    """Run ``work`` (Alembic's) in one transaction of a short-lived SQLAlchemy connection.

    The store's own connections are plain ``sqlite3``; Alembic needs SQLAlchemy, so
    the schema gets a connection of its own (pysqlite, no pool), closed at once.
    ``lock``: ``BEGIN IMMEDIATE``, so processes opening the file together migrate it
    one after another (the others wait up to the busy timeout), else a read
    transaction. Foreign keys stay off on it, as batch migrations need.
    """
    from sqlalchemy import create_engine
    from sqlalchemy.exc import DBAPIError
    from sqlalchemy.pool import NullPool

    from . import migrations

    def connect() -> sqlite3.Connection:
        conn = sqlite3.connect(config.database, uri=config.uri, isolation_level=None,
                               timeout=config.busy_timeout_ms / 1000, check_same_thread=False)
        if config.trace is not None:
            conn.set_trace_callback(config.trace)
        return conn

    engine = create_engine("sqlite://", creator=connect, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql("BEGIN IMMEDIATE" if lock else "BEGIN")
            with migrations.serialised():
                result = work(conn)
            conn.commit()
            return result
    except DBAPIError as exc:
        raise store_error(exc.orig or exc) from exc
    except sqlite3.Error as exc:
        raise store_error(exc) from exc
    finally:
        engine.dispose()


def _prepare(config: SqliteConfig) -> None:
    """Bring the file to the schema's head (or check it is there: ``database_auto_migrate``)."""
    from . import migrations

    auto = config.settings.database_auto_migrate
    _on_schema(config, functools.partial(migrations.prepare, auto_migrate=auto), lock=auto)


class _Open:
    """One open generation of the store: the writer thread and the reader pool."""

    def __init__(self, config: SqliteConfig) -> None:
        settings = config.settings
        _prepare(config)
        conn = connect(config)
        self.readers = _Readers(config, settings.sqlite_readers)
        every = settings.sqlite_checkpoint_every
        if every:
            conn.execute("PRAGMA wal_autocheckpoint=0")  # the readers checkpoint instead
        self.writer = Writer(conn, config, self.readers.start_checkpoint)
        self.queue_timeout = settings.sqlite_queue_timeout
        self.writer.start()

    def close(self) -> None:
        """Let the writer finish what is queued, then close every connection.

        A write offered once closing began (from another loop, or one that
        waited for room in a full queue) fails at once with ``SessionError``: it
        was never run. An inline write under way finishes before the
        connection closes.
        """
        self.writer.stop()
        self.writer.join()
        self.readers.close()
        stranded: list[Outcome] = []
        while True:
            try:
                job = self.writer.queue.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                stranded.append((job, None, SessionError(CLOSED)))
        self.writer.deliver(stranded)


class SqliteStore:
    """Sessions in one SQLite file: writes on the writer thread, reads on the reader pool.

    Threads and connections start on first use and end in :meth:`close`; a call
    after ``close`` starts them again. Nothing here belongs to an event loop:
    the store may be used from several loops, one after another or at once.
    """

    lock: Final = _NO_LOCK

    def __init__(self, config: SqliteConfig) -> None:
        self._config = config
        self._open: _Open | None = None
        self._open_lock = threading.Lock()
        # Writes waiting for room in the queue, or for the store to open: close() waits.
        self._submitting = TaskSet("SQLite submissions")
        self._reading = 0  # reads under way: others wait on the store, writes queue up
        self._counting = threading.Lock()  # ``_reading`` changes on several loops' threads

    def _opened(self) -> _Open:
        with self._open_lock:
            if self._open is None:
                self._open = _Open(self._config)
            return self._open

    async def _ready(self) -> _Open:
        opened = self._open
        if opened is not None:
            return opened
        return await asyncio.to_thread(self._opened)  # opening creates tables: not on the loop

    def submit(self, steps: core.Steps[T], opened: _Open,
               on_commit: Callable[[T], None] | None = None,
               key: core.Key | None = None) -> asyncio.Future[T]:
        """Queue a write; the future resolves on this loop once it committed or rolled back.

        Cancelling the future stops only the waiting: the thread still runs the
        write, and ``on_commit`` (if given) is called on this loop if it commits.
        When the writer is idle the write may run at once on this thread
        (``Settings.sqlite_inline_writes``); the future is then already done.
        ``key``: the session written, if any.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        job = Job(steps, loop, future, on_commit)
        writer = opened.writer
        if writer.inline and not self._reading and writer.run_now(job, key):
            return future
        if not writer.offer(job):
            self._submitting.spawn(self._submit_when_room(job, opened), name="submit a write")
        return future

    async def _submit_when_room(self, job: Job, opened: _Open) -> None:
        deadline = time.monotonic() + opened.queue_timeout
        while True:
            await asyncio.sleep(0.001)
            if opened.writer.offer(job):
                return
            if time.monotonic() >= deadline:
                job.steps.close()
                if not job.future.done():
                    job.future.set_exception(SessionError(
                        "session store overloaded: the SQLite write queue stayed full for "
                        f"{opened.queue_timeout} s (setting sqlite_queue_timeout)"))
                return

    def start_write(self, steps: core.Steps[T], order: core.Key | None = None,
                    on_commit: Callable[[T], None] | None = None) -> asyncio.Future[T]:
        """Queue a write at once (opening the store first if need be); see :meth:`submit`.

        The one writer thread commits in queue order and reports commits in
        that order: ``order`` needs nothing more here.
        """
        opened = self._open
        if opened is not None:
            return self.submit(steps, opened, on_commit, order)
        # The caller awaits it through the shield and gets its failure.
        task = self._submitting.spawn(self._submit_when_open(steps, on_commit, order),
                                      name="open and submit a write", expected=Exception)
        return asyncio.shield(task)

    async def _submit_when_open(self, steps: core.Steps[T],
                                on_commit: Callable[[T], None] | None,
                                key: core.Key | None) -> T:
        return await self.submit(steps, await self._ready(), on_commit, key)

    async def write(self, steps: core.Steps[T]) -> T:
        """Run a write on the writer thread and wait for it.

        A cancelled caller stops waiting; the write still commits or rolls back whole.
        """
        return await self.submit(steps, await self._ready())

    async def read(self, steps: core.Steps[T]) -> T:
        """Run a read transaction on a reader thread and wait for it."""
        opened = await self._ready()
        loop = asyncio.get_running_loop()
        with self._counting:
            self._reading += 1
        try:
            return await loop.run_in_executor(opened.readers.pool, opened.readers.read, steps)
        finally:
            with self._counting:
                self._reading -= 1

    async def upgrade_schema(self) -> SchemaRevision:
        """Bring the file to head (on a connection of its own); where it stood before."""
        from . import migrations

        return await asyncio.to_thread(_on_schema, self._config, migrations.upgrade, True)

    async def schema_revision(self) -> SchemaRevision:
        """Where the file's schema stands (read only)."""
        from . import migrations

        return await asyncio.to_thread(_on_schema, self._config, migrations.revision, False)

    async def close(self) -> None:
        """End the writer thread (after the writes already queued) and close every connection.

        Once every connection is closed, SQLite checkpoints the WAL and removes
        the ``-wal`` and ``-shm`` files.
        """
        await self._submitting.wait()  # the writes on their way into the queue go in first
        with self._open_lock:
            opened, self._open = self._open, None
        if opened is not None:
            await asyncio.to_thread(opened.close)
