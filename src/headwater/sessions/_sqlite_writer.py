"""The writer thread of one SQLite database, and what it shares with the store's other parts.

:class:`Writer` owns the database's one write connection and runs every write
transaction whole on its thread — ``BEGIN IMMEDIATE``, the work, ``COMMIT`` —
committing writes queued together in one transaction (each in its own
``SAVEPOINT``), or, when nothing else is writing, on the caller's thread
(:meth:`Writer.run_now`); it hands each outcome back to its caller's loop
(:func:`resolve`). :class:`SqliteConfig`, :func:`connect` and
:func:`store_error` are shared with the readers of :mod:`.sqlite`, which
builds and owns the writer. Imports only the SQL steps of :mod:`._sqlcore`,
the errors and the settings.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from ..core.errors import HeadwaterError, SessionError
from ..core.settings import Settings
from . import _sqlcore as core

Trace = Callable[[str], None]
STOP: Final = None  # the writer's queue sentinel
CLOSED: Final = "session store closed before the write could run"
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


class Job:
    """One write: its steps, and the future on the caller's loop that gets the outcome."""

    __slots__ = ("future", "loop", "on_commit", "steps")

    def __init__(self, steps: core.Steps[Any], loop: asyncio.AbstractEventLoop,
                 future: asyncio.Future[Any], on_commit: Callable[[Any], None] | None) -> None:
        self.steps = steps
        self.loop = loop
        self.future = future
        self.on_commit = on_commit


Outcome = tuple[Job, Any, BaseException | None]


def connect(config: SqliteConfig) -> sqlite3.Connection:
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


def store_error(exc: BaseException) -> BaseException:
    """What the caller sees: headwater errors as they are, driver errors as ``SessionError``."""
    if isinstance(exc, HeadwaterError) or not isinstance(exc, sqlite3.Error):
        return exc
    if isinstance(exc, sqlite3.IntegrityError):
        return SessionError(f"the database refused the write (already stored?): {exc}")
    # The driver's message (e.g. "database is locked"), never SQL or parameters.
    return SessionError(f"session store failed: {exc}")


class Writer(threading.Thread):
    """The one thread that writes one database; see the module docstring."""

    def __init__(self, conn: sqlite3.Connection, config: SqliteConfig,
                 checkpoint: Callable[[], None]) -> None:
        super().__init__(name="headwater-sqlite-writer", daemon=True)
        settings = config.settings
        self.conn = conn
        # A C queue (no Python-level condition variable): a write's hand-over is on the
        # path of every stored event. The bound is kept by ``offer``.
        self.queue: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
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

    def offer(self, job: Job) -> bool:
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
                    job.future.set_exception(SessionError(CLOSED))
                return True
            self.outstanding += 1
            self.queue.put_nowait(job)
        return True

    def stop(self) -> None:
        """Take no more writes; the thread ends after those already queued."""
        with self.counting:
            self.closed = True
            self.queue.put_nowait(STOP)

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

    def run_now(self, job: Job, key: core.Key | None) -> bool:
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
        resolve(outcomes)
        return True

    def deliver(self, outcomes: list[Outcome]) -> None:
        """Hand each outcome to its caller's loop: one wake-up per loop per batch."""
        by_loop: dict[asyncio.AbstractEventLoop, list[Outcome]] = {}
        for outcome in outcomes:
            by_loop.setdefault(outcome[0].loop, []).append(outcome)
        for loop, mine in by_loop.items():
            try:
                loop.call_soon_threadsafe(self._report, mine)
            except RuntimeError:  # that loop is closed: nobody is waiting
                self._reported(len(mine))

    def _report(self, outcomes: list[Outcome]) -> None:
        resolve(outcomes)  # hooks first: an inline write may not report before them
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

    def _commit(self, batch: list[Job], begun: bool = False) -> list[Outcome]:
        """Run ``batch`` in one transaction; every job gets its own outcome."""
        conn = self.conn
        if not begun:
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                error = store_error(exc)
                return [(job, None, error) for job in batch]
        outcomes: list[Outcome] = []
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
            error = store_error(exc)
            return [(job, None, error) for job in batch]
        return outcomes

    def _run_alone(self, job: Job) -> Outcome:
        try:
            return job, core.drive(self._execute, job.steps), None
        except Exception as exc:
            self.conn.execute("ROLLBACK")
            return job, None, store_error(exc)

    def _run_in_savepoint(self, job: Job) -> Outcome:
        conn = self.conn
        conn.execute("SAVEPOINT hw_write")
        try:
            result = core.drive(self._execute, job.steps)
        except Exception as exc:
            conn.execute("ROLLBACK TO hw_write")
            conn.execute("RELEASE hw_write")
            return job, None, store_error(exc)
        conn.execute("RELEASE hw_write")
        return job, result, None

    def _execute(self, sql: str, params: dict[str, Any]) -> list[core.Row]:
        return self.conn.execute(sql, params).fetchall()


def resolve(outcomes: list[Outcome]) -> None:
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
