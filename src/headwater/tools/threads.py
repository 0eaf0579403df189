"""The threads sync tools run on: a bounded pool of their own, apart from the loop's default.

A sync function cannot be interrupted. When its call times out or is
cancelled, the caller moves on, but the thread runs until the function
returns. On the event loop's default executor such threads would starve
everything else that uses it — ``getaddrinfo`` for the HTTP client first. So
sync tools get their own pool (``Settings.sync_tool_workers`` threads, from the
runner's settings; outside a run, the setting's default): an
abandoned call keeps its thread, the pool does not count it as free until the
function really returns, the abandonment is logged at WARNING (and the late
return at INFO), and name resolution never waits behind a tool.

The pool is per process (one per worker count), shared by every loop.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

from ..core.settings import Settings

logger = logging.getLogger("headwater.tools")

_workers: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "headwater_sync_tool_workers", default=None)
_pools: dict[int, _Pool] = {}
_pools_lock = threading.Lock()
_DEFAULT_WORKERS: int = Settings.model_fields["sync_tool_workers"].default
_in_flight = 0  # sync-tool calls submitted and not yet finished, in every pool


def sync_calls_in_flight() -> int:
    """Sync-tool calls queued or running on their threads now (any pool).

    ``VirtualClock.settle`` waits for them: their results reach the event loop
    only once the thread is done.
    """
    return _in_flight


def _finished(_: Future[Any]) -> None:
    global _in_flight
    with _pools_lock:
        _in_flight -= 1


class _Pool:
    __slots__ = ("busy", "executor", "lock", "workers")

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self.executor = ThreadPoolExecutor(max_workers=workers,
                                           thread_name_prefix="headwater-sync-tool")
        self.busy = 0
        self.lock = threading.Lock()

    def call(self, func: Callable[[], Any]) -> Any:
        with self.lock:
            self.busy += 1
        try:
            return func()
        finally:
            with self.lock:
                self.busy -= 1


def _pool(workers: int) -> _Pool:
    with _pools_lock:
        pool = _pools.get(workers)
        if pool is None:
            pool = _pools[workers] = _Pool(workers)
        return pool


@contextmanager
def sync_tool_workers(workers: int) -> Iterator[None]:
    """Within this block (and tasks started in it), sync tools use a pool of ``workers``."""
    token = _workers.set(workers)
    try:
        yield
    finally:
        _workers.reset(token)


async def run_sync(name: str, func: Callable[..., Any], /, **kwargs: Any) -> Any:
    """Run ``func(**kwargs)`` on a sync-tool thread, with the caller's context variables.

    Cancelling the caller (a timeout) abandons the call: a call still queued
    never runs; a running one keeps its thread until it returns.
    """
    pool = _pool(_workers.get() or _DEFAULT_WORKERS)
    context = contextvars.copy_context()
    global _in_flight
    with _pools_lock:
        _in_flight += 1
    future: Future[Any] = pool.executor.submit(
        pool.call, functools.partial(context.run, func, **kwargs))
    future.add_done_callback(_finished)
    try:
        return await asyncio.wrap_future(future)
    except asyncio.CancelledError:
        if future.running():
            logger.warning(
                "sync tool %s was abandoned (timeout or cancel) while it runs: its thread stays "
                "busy until it returns (%d of %d sync-tool threads busy)",
                name, pool.busy, pool.workers)
            future.add_done_callback(lambda _: logger.info(
                "abandoned sync tool %s returned; its thread is free again", name))
        raise
