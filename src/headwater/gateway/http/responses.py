"""The SSE response: frames out, heartbeats while idle, and disposal when the client goes.

One writer per connection (ASGI forbids concurrent sends): it takes frames from
a small queue that a reader task fills from the run log, sends a heartbeat
comment after ``heartbeat_interval`` of silence, and gives each send at most
``send_timeout``. One :class:`StallWatch` for all responses watches both (a
stalled send, a silent stream), so a frame costs no timer. Frames queued
together go out in one send. A disconnect (``http.disconnect``), a failed send
or a client that stops reading past the timeout ends the response and calls
``on_end``; the terminal frame ends it normally.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Callable, Mapping
from typing import Any

from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from ...core.tasks import TaskSet
from ..wire.sse import Frame, heartbeat, retry_hint

logger = logging.getLogger("headwater.gateway")

SSE_HEADERS: Mapping[str, str] = {
    "content-type": "text/event-stream; charset=utf-8",
    "cache-control": "no-store",
    "x-accel-buffering": "no",
    "content-encoding": "identity",
}
"""Headers of every SSE response: never cached, never buffered by a proxy, never compressed."""

_END = object()
_BEAT = object()  # put in an idle response's queue by the watch: send a heartbeat

Render = Callable[[Frame], bytes]
"""A frame's bytes in one wire format (the typed frames, AG-UI, the Vercel UI stream)."""


def render_frame(frame: Frame) -> bytes:
    """The typed SSE frame (docs/frame-protocol.md), with a ``retry:`` hint before a
    retryable error."""
    if frame.type == "error" and frame.data.get("retryable"):
        return retry_hint(1000) + frame.raw
    return frame.raw


class StallWatch:
    """Cancels the writers whose send has been waiting longer than ``send_timeout``,
    and wakes the writers that have been silent for their ``heartbeat_interval``.

    One periodic check (every quarter of the shorter of the two) for all open
    responses, instead of a timer around every send and every wait: a heartbeat
    goes out between one and one and a quarter intervals of silence.
    """

    def __init__(self, send_timeout: float) -> None:
        self.send_timeout = send_timeout
        self._open: set[SSEResponse] = set()
        self._tasks = TaskSet("stall watch", logger=logger)
        self._task: asyncio.Task[None] | None = None  # runs while a response is open

    def add(self, response: SSEResponse) -> None:
        """Watch ``response`` (until :meth:`discard`)."""
        self._open.add(response)
        if self._task is None or self._task.done():
            self._task = self._tasks.spawn(self._run(), name="sse stall watch")

    async def aclose(self) -> None:
        """End the check and wait for it (the app's end); a response added later starts it
        again."""
        self._tasks.cancel_all()
        await self._tasks.wait()

    def discard(self, response: SSEResponse) -> None:
        """Stop watching ``response``."""
        self._open.discard(response)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while self._open:
            shortest = min(min(r.heartbeat_interval for r in self._open), self.send_timeout)
            await asyncio.sleep(max(shortest / 4, 0.01))
            now = loop.time()
            for response in list(self._open):
                response.check_stall(now, self.send_timeout)
                response.check_idle(now)


class SSEResponse(Response):
    """An ASGI response streaming ``frames`` as Server-Sent Events.

    Args:
        frames: the frames to send, ending after a terminal one.
        headers: extra response headers (``X-Run-Id``).
        heartbeat_interval: seconds of silence before a heartbeat comment.
        send_timeout: seconds one send may take before the client counts as gone.
        on_end: called once when the response ends, with ``True`` when the
            client went away (disconnect, failed or stalled send) before the
            terminal frame.
        render: a frame's bytes on the wire (:func:`render_frame`: the typed frames).
        prologue: bytes sent before the first frame (a format's opening event).
        queue_size: frames read ahead of the client.
        watch: the stall watch of the app (default: a timer around each send).
    """

    def __init__(self, frames: AsyncGenerator[Frame, None], *, headers: Mapping[str, str],
                 heartbeat_interval: float, send_timeout: float,
                 on_end: Callable[[bool], None], render: Render = render_frame,
                 prologue: bytes = b"", queue_size: int = 64,
                 watch: StallWatch | None = None) -> None:
        self.status_code = 200
        self.background = None
        self.frames = frames
        self.sse_headers = {**SSE_HEADERS, **headers}
        self.heartbeat_interval = heartbeat_interval
        self.send_timeout = send_timeout
        self.on_end = on_end
        self.encode = render
        self.prologue = prologue
        self.queue_size = queue_size
        self.sent = 0
        self.watch = watch
        self._client_gone = False
        self._sending_since: float | None = None
        self._last_sent = 0.0  # loop time of the last send's start
        self._queue: asyncio.Queue[Any] | None = None  # while the writer waits on it
        self._writer: asyncio.Task[Any] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        gone = True
        queue: asyncio.Queue[Any] = asyncio.Queue(self.queue_size)
        writer = asyncio.current_task()
        assert writer is not None
        self._writer = writer
        self._last_sent = asyncio.get_running_loop().time()
        if self.watch is not None:
            self.watch.add(self)
        tasks = TaskSet("sse response", logger=logger)  # closed before on_end
        tasks.spawn(self._read(queue), name="read frames")
        tasks.spawn(self._watch(receive, writer), name="watch for a disconnect")
        try:
            await self._send(send, {"type": "http.response.start", "status": 200,
                                    "headers": [(k.encode("latin-1"), v.encode("latin-1"))
                                                for k, v in self.sse_headers.items()]})
            if self.prologue:
                await self._send(send, _body(self.prologue))
            gone = not await self._pump(queue, send)
            if not gone:
                await self._send(send, {"type": "http.response.body", "body": b"",
                                        "more_body": False})
        except (OSError, TimeoutError):  # a failed or stalled send: the client is gone
            gone = True
        except asyncio.CancelledError:
            if not self._client_gone:
                raise
            writer.uncancel()  # our own watcher stopped the writer: the client left
            gone = True
        finally:
            if self.watch is not None:
                self.watch.discard(self)
            await tasks.aclose()
            self.on_end(gone)

    async def _pump(self, queue: asyncio.Queue[Any], send: Send) -> bool:
        """Send frames until the terminal one (``True``); a heartbeat after each silence.

        The frames already queued when the writer wakes go out in one send.
        """
        encode = self.encode
        while True:
            # Not `except QueueEmpty: await ...`: the exception would live through the wait.
            item = await self._next(queue) if queue.empty() else queue.get_nowait()
            if item is _BEAT:
                await self._send(send, _body(heartbeat()))
                continue
            if item is _END:
                return True
            frame: Frame = item
            body = encode(frame)
            self.sent += 1
            ended = frame.terminal
            while not ended and not queue.empty():  # a batch: the frames queued meanwhile
                item = queue.get_nowait()
                if item is _BEAT:
                    continue  # frames are going out: no heartbeat needed
                if item is _END:
                    ended = True
                    break
                frame = item
                body += encode(frame)
                self.sent += 1
                ended = frame.terminal
            if body:
                await self._send(send, _body(body))
            if ended:
                return True

    async def _next(self, queue: asyncio.Queue[Any]) -> Any:
        """Wait for the next item; without a watch, a timer puts the heartbeat's turn."""
        if self.watch is None:
            try:
                async with asyncio.timeout(self.heartbeat_interval):
                    return await queue.get()
            except TimeoutError:
                return _BEAT
        self._queue = queue  # the watch may put _BEAT while the writer waits
        try:
            return await queue.get()
        finally:
            self._queue = None

    async def _read(self, queue: asyncio.Queue[Any]) -> None:
        try:
            async with contextlib.aclosing(self.frames) as frames:
                async for frame in frames:
                    await queue.put(frame)
            await queue.put(_END)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the log failed: end the stream, do not hang
            logger.warning("reading a run's frames failed: %s", type(exc).__name__)
            await queue.put(_END)

    async def _watch(self, receive: Receive, writer: asyncio.Task[Any]) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                self._client_gone = True
                writer.cancel()
                return

    async def _send(self, send: Send, message: Message) -> None:
        if self.watch is None:
            async with asyncio.timeout(self.send_timeout):
                await send(message)
            return
        self._sending_since = self._last_sent = asyncio.get_running_loop().time()
        try:
            await send(message)
        finally:
            self._sending_since = None

    def check_stall(self, now: float, limit: float) -> None:
        """Called by the watch: a send waiting past ``limit`` means the client stopped reading."""
        since = self._sending_since
        if since is not None and now - since > limit and self._writer is not None:
            self._client_gone = True  # handled as a disconnect
            self._sending_since = None
            self._writer.cancel()


    def check_idle(self, now: float) -> None:
        """Called by the watch: a writer silent for ``heartbeat_interval`` sends a heartbeat."""
        queue = self._queue
        if queue is not None and now - self._last_sent >= self.heartbeat_interval:
            self._last_sent = now  # one heartbeat per interval of silence
            with contextlib.suppress(asyncio.QueueFull):
                queue.put_nowait(_BEAT)


def _body(data: bytes) -> Message:
    return {"type": "http.response.body", "body": data, "more_body": True}
