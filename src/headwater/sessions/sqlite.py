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

The schema: when the store opens, Alembic brings the file to the newest
revision (:mod:`.migrations`) on a short-lived SQLAlchemy connection of its
own, under ``BEGIN IMMEDIATE``; the writer and the readers open after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, TypeVar

from ..errors import HeadwaterError, SessionError
from ..settings import Settings
from ..tasks import TaskSet
from . import _sqlcore as core

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from .migrations import SchemaRevision

T = TypeVar("T")
Trace = Callable[[str], None]
_STOP: Final = None  # the writer's queue sentinel
_CLOSED: Final = "session store closed before the write could run"
_NO_LOCK: Final = ""  # SQLite has no row locks: BEGIN IMMEDIATE already serialises writers
_CROWD_WINDOW: Final = 0.01  # s: a switch of session this soon is interleaving
_CROWD_SPAN: Final = 16  # writes the moving share of switches averages over (about)
_CROWDED: Final = 0.5  # a share of switches above this: queue writes, group commit pays


@dataclass(frozen=True, slots=True)
class SqliteConfig:
    """How to open one database's connections."""

    database: str  # a path, or a ``file:`` URI
    uri: bool
    synchronous: str
    busy_timeout_ms: int
    settings: Settings  # the queue, batch, reader and checkpoint bounds
    trace: Trace | None = None


class _Job:
    """One write: its steps, and the future on the caller's loop that gets the outcome."""

    __slots__ = ("future", "loop", "on_commit", "steps")

    def __init__(self, steps: core.Steps[Any], loop: asyncio.AbstractEventLoop,
                 future: asyncio.Future[Any], on_commit: Callable[[Any], None] | None) -> None:
        self.steps = steps
        self.loop = loop
        self.future = future
        self.on_commit = on_commit


_Outcome = tuple[_Job, Any, BaseException | None]


def _connect(config: SqliteConfig) -> sqlite3.Connection:
    # check_same_thread=False: connections are opened and closed by the store,
    # but only ever used by the one thread they belong to.
    conn = sqlite3.connect(config.database, uri=config.uri, isolation_level=None,
                           timeout=config.busy_timeout_ms / 1000, check_same_thread=False)
    conn.execute(f"PRAGMA busy_timeout={config.busy_timeout_ms}")
    _to_wal(conn, config.busy_timeout_ms / 1000)
    for pragma in (f"PRAGMA synchronous={config.synchronous}", "PRAGMA foreign_keys=ON"):
        conn.execute(pragma)
    if config.trace is not None:
        conn.set_trace_callback(config.trace)
    return conn


def _to_wal(conn: sqlite3.Connection, within: float) -> None:
    """Switch the file to WAL, waiting up to ``within`` seconds for the lock it takes.

    SQLite answers "database is locked" at once, without its busy handler, when
    the switch could deadlock with a connection that holds the write lock (a
    process migrating the same new file): waiting here is what the busy timeout
    promises.
    """
    deadline = time.monotonic() + within
    pause = 0.002
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
        time.sleep(pause)  # on a store thread (opening, or a reader), never on the loop
        pause = min(pause * 2, 0.05)


def _store_error(exc: BaseException) -> BaseException:
    """What the caller sees: headwater errors as they are, driver errors as ``SessionError``."""
    if isinstance(exc, HeadwaterError) or not isinstance(exc, sqlite3.Error):
        return exc
    if isinstance(exc, sqlite3.IntegrityError):
        return SessionError(f"the database refused the write (already stored?): {exc}")
    # The driver's message (e.g. "database is locked"), never SQL or parameters.
    return SessionError(f"session store failed: {exc}")


class _Writer(threading.Thread):
    """The one thread that writes one database; see the module docstring."""

    def __init__(self, conn: sqlite3.Connection, config: SqliteConfig,
                 checkpoint: Callable[[], None]) -> None:
        super().__init__(name="headwater-sqlite-writer", daemon=True)
        settings = config.settings
        self.conn = conn
        # A C queue (no Python-level condition variable): a write's hand-over is on the
        # path of every stored event. The bound is kept by ``offer``.
        self.queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self.queue_size = settings.sqlite_write_queue_size
        self.batch_size = settings.sqlite_write_batch_size
        self.checkpoint = checkpoint
        self.checkpoint_every = settings.sqlite_checkpoint_every
        self.since_checkpoint = 0
        self.busy_timeout_ms = config.busy_timeout_ms
        # Inline writes: never with a commit that syncs to disk (the loop would wait for it),
        # nor with SQLite's own checkpoints (checkpoint_every 0), which sync inside a commit.
        self.inline = (settings.sqlite_inline_writes and config.synchronous in ("OFF", "NORMAL")
                       and self.checkpoint_every > 0)
        self.using = threading.Lock()  # held while a transaction runs on ``conn``
        self.counting = threading.Lock()
        self.outstanding = 0  # writes queued and not yet reported to their caller
        self.closed = False  # set once, by ``stop``: no write is queued after it
        self.last_key: core.Key | None = None  # the session last written, and when
        self.last_write = 0.0
        self.interleaved = 0.0  # moving share of recent writes that switched sessions

    def run(self) -> None:
        try:
            stop = False
            while not stop:
                job = self.queue.get()
                if job is None:
                    break
                batch = [job]
                while len(batch) < self.batch_size:
                    try:
                        job = self.queue.get_nowait()
                    except queue.Empty:
                        break
                    if job is None:
                        stop = True
                        break
                    batch.append(job)
                with self.using:
                    outcomes = self._commit(batch)
                    self._maybe_checkpoint(len(batch))
                self.deliver(outcomes)
        finally:
            with self.using:  # an inline write in progress ends first
                self.conn.close()

    def offer(self, job: _Job) -> bool:
        """Queue ``job`` unless ``queue_size`` writes already wait; ``False`` when full.

        Once the store is closing, ``job`` fails at once with ``SessionError``
        (and counts as taken): it would never run.
        """
        if self.queue.qsize() >= self.queue_size:
            return False
        with self.counting:
            if self.closed:
                job.steps.close()
                if not job.future.done():
                    job.future.set_exception(SessionError(_CLOSED))
                return True
            self.outstanding += 1
            self.queue.put_nowait(job)
        return True

    def stop(self) -> None:
        """Take no more writes; the thread ends after those already queued."""
        with self.counting:
            self.closed = True
            self.queue.put_nowait(_STOP)

    def crowded(self, key: core.Key | None) -> bool:
        """Note a write for session ``key``; whether several sessions are writing at once.

        Writes that switch from one session to another within
        ``_CROWD_WINDOW`` of each other are interleaved runs; when most recent
        writes are such switches, writes go through the queue, where the
        thread commits them together (and SQLite's work runs beside the
        caller's loop). One session's run after another's is not a crowd.
        """
        if key is None:
            return self.interleaved > _CROWDED
        now = time.monotonic()
        with self.counting:
            switched = key != self.last_key and now - self.last_write < _CROWD_WINDOW
            self.interleaved += ((1.0 if switched else 0.0) - self.interleaved) / _CROWD_SPAN
            self.last_key, self.last_write = key, now
            return self.interleaved > _CROWDED

    def run_now(self, job: _Job, key: core.Key | None) -> bool:
        """Run ``job`` whole on the calling thread, if that keeps every rule of the queue.

        Only when few sessions are writing (see :meth:`crowded`), no write is
        queued or unreported (so writes still commit and report in the order
        they were made), the connection is free, and the database's write lock
        is free at once (another process's write is waited for by the thread,
        never by the caller's loop). Saves the two thread hand-overs a queued
        write costs. ``False``: nothing was run.
        """
        if (self.crowded(key) or self.outstanding
                or not self.using.acquire(blocking=False)):
            return False
        try:
            if self.outstanding or self.closed:
                return False
            conn = self.conn
            conn.execute("PRAGMA busy_timeout=0")
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error:
                return False  # busy: the writer thread waits for the lock instead
            finally:
                conn.execute(f"PRAGMA busy_timeout={self.busy_timeout_ms}")
            outcomes = self._commit([job], begun=True)
            self._maybe_checkpoint(1)
        finally:
            self.using.release()
        _resolve(outcomes)
        return True

    def deliver(self, outcomes: list[_Outcome]) -> None:
        """Hand each outcome to its caller's loop: one wake-up per loop per batch."""
        by_loop: dict[asyncio.AbstractEventLoop, list[_Outcome]] = {}
        for outcome in outcomes:
            by_loop.setdefault(outcome[0].loop, []).append(outcome)
        for loop, mine in by_loop.items():
            try:
                loop.call_soon_threadsafe(self._report, mine)
            except RuntimeError:  # that loop is closed: nobody is waiting
                self._reported(len(mine))

    def _report(self, outcomes: list[_Outcome]) -> None:
        _resolve(outcomes)  # hooks first: an inline write may not report before them
        self._reported(len(outcomes))

    def _reported(self, count: int) -> None:
        with self.counting:
            self.outstanding -= count

    def _maybe_checkpoint(self, written: int) -> None:
        """Every ``checkpoint_every`` writes, or sooner once the queue is idle, checkpoint.

        A checkpoint that ran while no write came in copied the whole WAL, so
        the next write starts the WAL over: that keeps the file small.
        """
        if not self.checkpoint_every:
            return
        self.since_checkpoint += written
        due = self.since_checkpoint >= self.checkpoint_every or (
            self.since_checkpoint > self.checkpoint_every // 10 and self.queue.empty())
        if due:
            self.since_checkpoint = 0
            self.checkpoint()

    def _commit(self, batch: list[_Job], begun: bool = False) -> list[_Outcome]:
        """Run ``batch`` in one transaction; every job gets its own outcome."""
        conn = self.conn
        if not begun:
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                error = _store_error(exc)
                return [(job, None, error) for job in batch]
        outcomes: list[_Outcome] = []
        try:
            if len(batch) == 1:
                outcomes.append(self._run_alone(batch[0]))
            else:
                outcomes.extend(self._run_in_savepoint(job) for job in batch)
            if conn.in_transaction:
                conn.execute("COMMIT")
        except BaseException as exc:  # COMMIT or ROLLBACK TO failed: nothing of the batch stays
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            error = _store_error(exc)
            return [(job, None, error) for job in batch]
        return outcomes

    def _run_alone(self, job: _Job) -> _Outcome:
        try:
            return job, core.drive(self._execute, job.steps), None
        except Exception as exc:
            self.conn.execute("ROLLBACK")
            return job, None, _store_error(exc)

    def _run_in_savepoint(self, job: _Job) -> _Outcome:
        conn = self.conn
        conn.execute("SAVEPOINT hw_write")
        try:
            result = core.drive(self._execute, job.steps)
        except Exception as exc:
            conn.execute("ROLLBACK TO hw_write")
            conn.execute("RELEASE hw_write")
            return job, None, _store_error(exc)
        conn.execute("RELEASE hw_write")
        return job, result, None

    def _execute(self, sql: str, params: dict[str, Any]) -> list[core.Row]:
        return self.conn.execute(sql, params).fetchall()


def _resolve(outcomes: list[_Outcome]) -> None:
    """On the caller's loop: report commits first (even to callers gone), then wake callers."""
    for job, result, error in outcomes:
        if error is None and job.on_commit is not None:
            try:
                job.on_commit(result)
            except Exception as exc:  # a bug in the hook must not strand the other callers
                job.loop.call_exception_handler({"message": "on_commit failed", "exception": exc})
        if job.future.done():  # the caller stopped waiting
            continue
        if error is not None:
            job.future.set_exception(error)
        else:
            job.future.set_result(result)


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
            found = _connect(self.config)
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
            raise _store_error(exc) from exc

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
        raise _store_error(exc.orig or exc) from exc
    except sqlite3.Error as exc:
        raise _store_error(exc) from exc
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
        conn = _connect(config)
        self.readers = _Readers(config, settings.sqlite_readers)
        every = settings.sqlite_checkpoint_every
        if every:
            conn.execute("PRAGMA wal_autocheckpoint=0")  # the readers checkpoint instead
        self.writer = _Writer(conn, config, self.readers.start_checkpoint)
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
        stranded: list[_Outcome] = []
        while True:
            try:
                job = self.writer.queue.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                stranded.append((job, None, SessionError(_CLOSED)))
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
        job = _Job(steps, loop, future, on_commit)
        writer = opened.writer
        if writer.inline and not self._reading and writer.run_now(job, key):
            return future
        if not writer.offer(job):
            self._submitting.spawn(self._submit_when_room(job, opened), name="submit a write")
        return future

    async def _submit_when_room(self, job: _Job, opened: _Open) -> None:
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
