"""Tasks with an owner: the one way library code starts a task outside a task group.

The event loop keeps only a weak reference to a task, so a task nobody holds
can be collected mid-way, and a failure nobody reads is reported only as
"Task exception was never retrieved" when it is collected. A :class:`TaskSet`
is the owner's side of that bargain, after trio's nursery and
``asyncio.TaskGroup``, for work that outlives the block that starts it: the
owner (the object whose lifetime bounds the work — a run manager, a session
store, a connection) keeps one, :meth:`TaskSet.spawn` starts a task in it and
holds it until it is done, an unexpected failure is logged once with the
task's name (and retrieved, so asyncio never warns about it), and the owner's
close calls :meth:`TaskSet.aclose`, which cancels what is left and waits for
it. Work scoped to one block uses ``asyncio.TaskGroup`` instead;
``tests/test_tasks_owned.py`` fails on any other way of starting a task.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Iterator
from types import TracebackType
from typing import Any, TypeAlias, TypeVar

__all__ = ("TaskSet",)

T = TypeVar("T")
_Expected: TypeAlias = type[BaseException] | tuple[type[BaseException], ...]

_logger = logging.getLogger("headwater.tasks")


class TaskSet:
    """The tasks one owner started and has not seen end.

    ``spawn`` starts a task and keeps a strong reference to it until it is
    done; ``aclose`` (or leaving ``async with``) cancels every task left and
    waits for them. Unlike ``asyncio.TaskGroup``, a task's failure does not
    cancel its siblings and is not raised to the owner: it is logged once on
    ``logger`` (at ``ERROR``, with its traceback and the task's name) unless
    its type is one of the task's ``expected`` exceptions — for a task whose
    caller awaits it and handles the failure, or a failure reported elsewhere.

    A set belongs to no event loop: each task runs on the loop running when
    ``spawn`` is called, so an owner used from several loops (a SQLite store)
    keeps one set for all of them.

    Args:
        name: what the set belongs to, for the log lines (``"run manager"``).
        logger: where failures go (default ``headwater.tasks``).
    """

    __slots__ = ("_closed", "_logger", "_name", "_tasks")

    def __init__(self, name: str = "tasks", *, logger: logging.Logger | None = None) -> None:
        self._name = name
        self._logger = logger or _logger
        # Each task not done yet, with the exceptions it is expected to fail with.
        self._tasks: dict[asyncio.Task[Any], _Expected] = {}
        self._closed = False

    def spawn(
        self, coro: Coroutine[Any, Any, T], *, name: str | None = None,
        expected: _Expected = (),
    ) -> asyncio.Task[T]:
        """Start ``coro`` as a task of this set and return the task.

        The set holds the task until it is done, then forgets it. Awaiting or
        cancelling the returned task is allowed; the set needs neither.

        Args:
            coro: the coroutine to run (on the running loop).
            name: the task's name, in log lines and ``asyncio`` debugging.
            expected: exception types whose failure is not logged (it is still
                retrieved): the caller awaits the task, or reports them itself.

        Raises:
            RuntimeError: the set is closed (``coro`` is closed, never run), or
                no event loop is running.
        """
        if self._closed:
            coro.close()
            raise RuntimeError(f"{self._name} is closed: no task may start in it")
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks[task] = expected
        task.add_done_callback(self._finished)
        return task

    def _finished(self, task: asyncio.Task[Any]) -> None:
        expected = self._tasks.pop(task, ())
        if task.cancelled():
            return
        error = task.exception()  # retrieved: asyncio never reports it again
        if error is not None and not isinstance(error, expected):
            self._logger.error("%s: task %s failed", self._name, task.get_name(),
                               exc_info=error)

    @property
    def closed(self) -> bool:
        """Whether :meth:`aclose` has been called: no task may start any more."""
        return self._closed

    def __len__(self) -> int:
        """How many tasks of the set are not done yet."""
        return len(self._tasks)

    def __iter__(self) -> Iterator[asyncio.Task[Any]]:
        """The tasks not done yet (a snapshot: the set may change while it is read)."""
        return iter(list(self._tasks))

    def cancel_all(self) -> None:
        """Cancel every task not done yet (but the caller's own), without waiting.

        The set stays open: for an owner that closes without awaiting (a
        synchronous close), or before it starts again. A task on another
        event loop is cancelled through that loop, thread-safely.
        """
        running = _running_loop()
        current = asyncio.current_task(running) if running is not None else None
        for task in list(self._tasks):
            if task is current:
                continue
            loop = task.get_loop()
            if loop is running:
                task.cancel()
            elif not loop.is_closed():
                loop.call_soon_threadsafe(task.cancel)

    async def wait(self) -> None:
        """Wait until every task is done, those started while waiting too.

        Nothing is cancelled: for an owner that drains its work before it
        closes (bound the wait with ``asyncio.timeout``). Only the tasks on the
        caller's event loop are waited for. Cancelling the caller only stops
        the waiting.
        """
        while mine := self._mine():
            await asyncio.wait(mine)

    async def aclose(self, grace: float | None = None) -> None:
        """Close the set: no task may start any more; cancel every task left and wait for it.

        A task that ignores its cancellation is waited for at most ``grace``
        seconds (``None``: until it ends); it is still held until it is done.
        Only the tasks on the caller's event loop are waited for (those on
        another loop are cancelled). Idempotent. Cancelling the caller stops
        the waiting, not the cancellation of the tasks.
        """
        self._closed = True
        self.cancel_all()
        if mine := self._mine():  # a task may close its own set: not itself
            await asyncio.wait(mine, timeout=grace)

    def _mine(self) -> set[asyncio.Task[Any]]:
        """The tasks on the running loop, but the caller's own."""
        loop, current = asyncio.get_running_loop(), asyncio.current_task()
        return {task for task in self._tasks if task.get_loop() is loop and task is not current}

    async def __aenter__(self) -> TaskSet:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        traceback: TracebackType | None) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<TaskSet {self._name!r} {state}, {len(self._tasks)} tasks>"


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None

