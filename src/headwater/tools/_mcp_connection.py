"""One connection to an MCP server, held by a task of the event loop that opened it.

The official SDK's ``Client`` is an async context manager whose task groups
must be left by the task that entered them, so a connection is a task of its
own (:meth:`Connection._hold`): it enters the client, lists the server's
tools, hands both over and waits until it is told to close. Calls are made from
any task of that loop; the SDK matches their answers. A server that exits or
hangs up ends the connection: a call in flight gets ``CONNECTION_CLOSED`` at
once (stdio: the pipe closes; HTTP: the transport's task group fails and
cancels the holder), and the toolset starts a new connection for the next call.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager

import mcp_types as types
from mcp import Client

from ..core.errors import McpUnavailableError
from ..core.tasks import TaskSet

logger = logging.getLogger("headwater.tools.mcp")

ClientFactory = Callable[[], AbstractAsyncContextManager[Client]]
"""Makes what enters one connection's client (and what it needs, such as an HTTP client):
an async context manager that gives the entered client."""

CLOSE_GRACE = 10.0
"""Seconds a closing connection is given to stop its server before its task is cancelled
(the SDK's own stdio shutdown waits at most 2 s for an exit, then 2 s after SIGTERM)."""

_MAX_PAGES = 100  # a server whose tools/list never ends cannot hang the listing


class Connection:
    """A connection being opened, open, or over; one per toolset at a time.

    Args:
        make: the client of this connection (entered by the connection's task).
        target: the command or URL, for messages (never headers).
        connect_timeout: seconds to connect, hand-shake and list the tools.
    """

    def __init__(self, make: ClientFactory, target: str, connect_timeout: float) -> None:
        self._make = make
        self._target = target
        self._connect_timeout = connect_timeout
        self._stop = asyncio.Event()
        self._tasks = TaskSet(f"the MCP connection to {target}", logger=logger)
        self._task: asyncio.Task[None] | None = None
        self.client: Client | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.broken = False
        """A call found the connection closed (the server exited or hung up)."""

    @property
    def usable(self) -> bool:
        """Open, on the running loop, and not known to be broken."""
        task = self._task
        return (self.client is not None and not self.broken and task is not None
                and not task.done() and self.loop is asyncio.get_running_loop())

    async def open(self) -> list[types.Tool]:
        """Start the server (or reach it), hand-shake, and list its tools.

        Raises:
            McpUnavailableError: it could not be done within ``connect_timeout``
                (the message names the target and why).
        """
        self.loop = loop = asyncio.get_running_loop()
        ready: asyncio.Future[list[types.Tool]] = loop.create_future()
        # Its failures are handed to ``ready`` or logged by _hold itself.
        self._task = self._tasks.spawn(self._hold(ready), name=f"MCP connection to {self._target}",
                                       expected=(Exception,))
        try:
            async with asyncio.timeout(self._connect_timeout):
                return await asyncio.shield(ready)
        except TimeoutError:
            await self.aclose()
            raise McpUnavailableError(
                f"the MCP server {self._target} did not answer within "
                f"{self._connect_timeout:g} s (mcp_connect_timeout)") from None
        except asyncio.CancelledError:
            await self.aclose()
            raise
        except Exception as exc:
            await self.aclose()
            raise McpUnavailableError(
                f"the MCP server {self._target} could not be started or reached: "
                f"{_why(exc)}") from None

    async def _hold(self, ready: asyncio.Future[list[types.Tool]]) -> None:
        """The connection's task: enter the client, list, hand over, wait for the close."""
        try:
            async with self._make() as client:
                tools = await _list_tools(client)
                self.client = client
                if not ready.done():
                    ready.set_result(tools)
                await self._stop.wait()
        except asyncio.CancelledError:
            if not ready.done():
                ready.cancel()
            if not self._stop.is_set() and self.client is not None:
                logger.warning("the MCP server %s went away", self._target)
            raise
        except BaseException as exc:  # the SDK's task groups raise exception groups
            if not ready.done():
                ready.set_exception(exc)
            elif not self._stop.is_set():
                logger.warning("the MCP server %s went away: %s", self._target, _why(exc))
        finally:
            self.broken = True

    async def aclose(self) -> None:
        """Close the connection; its server process (stdio) stops. Idempotent.

        From another event loop than its own, the close is handed to that loop
        (not waited for); a connection whose loop is closed is dropped.
        """
        task, self._task = self._task, None
        self.broken = True
        if task is None or task.done():
            return
        loop = task.get_loop()
        if loop is not asyncio.get_running_loop():
            if not loop.is_closed():
                loop.call_soon_threadsafe(self._stop.set)
            return
        self._stop.set()
        done, _ = await asyncio.wait({task}, timeout=CLOSE_GRACE)
        if not done:
            task.cancel()
            await asyncio.wait({task})
        if not task.cancelled() and task.exception() is not None:
            logger.debug("the MCP connection to %s ended with %r", self._target,
                         task.exception())


async def _list_tools(client: Client) -> list[types.Tool]:
    """Every tool the server lists, page by page."""
    tools: list[types.Tool] = []
    cursor: str | None = None
    for _ in range(_MAX_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools += page.tools
        cursor = page.next_cursor
        if cursor is None:
            break
    return tools


def _why(exc: BaseException) -> str:
    """The first cause worth saying of a failure (an exception group's first leaf)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__

