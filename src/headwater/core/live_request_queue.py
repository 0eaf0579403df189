"""``LiveRequestQueue``: what a client pushes into a live (BIDI) run.

Safe to call from a WebSocket handler on the event loop, and from other threads
(``send*`` methods hand over to the loop the queue was created on).
"""

from __future__ import annotations

import asyncio
import collections
import threading
from dataclasses import dataclass
from typing import Literal

from .errors import QueueFull, UserError
from .types import Blob, Content

OverflowPolicy = Literal["drop_oldest_realtime", "error"]


@dataclass(slots=True)
class LiveRequest:
    """One item of a live session's input.

    Exactly one of ``content`` (a turn), ``blob`` (realtime media),
    ``activity_start``/``activity_end`` (the user starts/stops speaking) or
    ``close`` is set.
    """

    content: Content | None = None
    blob: Blob | None = None
    activity_start: bool = False
    activity_end: bool = False
    close: bool = False




class LiveRequestQueue:
    """A bounded queue of :class:`LiveRequest`, consumed by ``async for``.

    Overflow policy: when ``maxsize`` requests are waiting, a new realtime blob
    replaces the oldest waiting blob (media is perishable) under
    ``"drop_oldest_realtime"`` (the default); content and control requests are
    never dropped and raise :class:`QueueFull` instead. Under ``"error"``
    every overflow raises. ``dropped`` counts dropped blobs.

    After :meth:`close`, iteration ends once the queued requests are consumed
    and further sends raise ``UserError``.
    """

    def __init__(self, maxsize: int = 256, overflow: OverflowPolicy = "drop_oldest_realtime"
                 ) -> None:
        if maxsize < 1:
            raise UserError("LiveRequestQueue maxsize must be at least 1")
        self.maxsize = maxsize
        self.overflow = overflow
        self.dropped = 0
        self._items: collections.deque[LiveRequest] = collections.deque()
        self._closed = False
        self._lock = threading.Lock()
        self._waiter: asyncio.Future[None] | None = None
        try:
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None

    @property
    def waiting(self) -> bool:
        """Whether a consumer is parked in :meth:`get`, waiting for a request."""
        waiter = self._waiter
        return waiter is not None and not waiter.done()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def send_content(self, content: Content) -> None:
        """Send a user turn."""
        self.send(LiveRequest(content=content))

    def send_realtime(self, blob: Blob) -> None:
        """Send a piece of realtime media (audio, an image frame)."""
        self.send(LiveRequest(blob=blob))

    def send_activity_start(self) -> None:
        """Signal that the user started speaking."""
        self.send(LiveRequest(activity_start=True))

    def send_activity_end(self) -> None:
        """Signal that the user stopped speaking."""
        self.send(LiveRequest(activity_end=True))

    def close(self) -> None:
        """End the session's input; idempotent."""
        with self._lock:
            if self._closed:
                return
            self._items.append(LiveRequest(close=True))
            self._closed = True
        self._wake()

    def send(self, request: LiveRequest) -> None:
        """Enqueue a request.

        Raises:
            UserError: the queue is closed.
            QueueFull: the queue is full and the policy does not drop this request.
        """
        with self._lock:
            if self._closed:
                raise UserError("LiveRequestQueue is closed")
            if len(self._items) >= self.maxsize:
                self._make_room(request)
            self._items.append(request)
        self._wake()

    def _make_room(self, request: LiveRequest) -> None:
        if self.overflow == "drop_oldest_realtime" and request.blob is not None:
            for i, waiting in enumerate(self._items):
                if waiting.blob is not None:
                    del self._items[i]
                    self.dropped += 1
                    return
        raise QueueFull(f"LiveRequestQueue is full ({self.maxsize} requests waiting)")

    def _wake(self) -> None:
        loop = self._loop
        if loop is None:
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._set_waiter()
        else:
            loop.call_soon_threadsafe(self._set_waiter)

    def _set_waiter(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def get(self) -> LiveRequest:
        """The next request; a ``close`` request once the queue is closed and drained."""
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        while True:
            with self._lock:
                if self._items:
                    item = self._items.popleft()
                    if item.close:
                        self._items.appendleft(item)  # stays, so every later get() sees it
                    return item
                self._waiter = self._loop.create_future()
                waiter = self._waiter
            await waiter

    def __aiter__(self) -> LiveRequestQueue:
        return self

    async def __anext__(self) -> LiveRequest:
        item = await self.get()
        if item.close:
            raise StopAsyncIteration
        return item
