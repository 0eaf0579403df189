"""LiveRequestQueue: bounded, ordered, closable, safe from other threads."""

from __future__ import annotations

import asyncio
import threading

import pytest

from headwater import Content, LiveRequestQueue
from headwater.errors import QueueFull, UserError
from headwater.testing import wait_until
from headwater.types import Blob


async def test_order_and_close() -> None:
    queue = LiveRequestQueue()
    queue.send_content(Content.from_text("hi"))
    queue.send_realtime(Blob("audio/pcm", b"\x00\x01"))
    queue.send_activity_start()
    queue.send_activity_end()
    queue.close()
    queue.close()  # idempotent
    items = [item async for item in queue]
    assert items[0].content is not None and items[0].content.text == "hi"
    assert [i.blob is not None for i in items] == [False, True, False, False]
    assert items[2].activity_start and items[3].activity_end
    with pytest.raises(UserError, match="closed"):
        queue.send_content(Content.from_text("late"))


async def test_overflow_drops_oldest_blob_but_never_content() -> None:
    queue = LiveRequestQueue(maxsize=3)
    queue.send_realtime(Blob("audio/pcm", b"1"))
    queue.send_content(Content.from_text("keep"))
    queue.send_realtime(Blob("audio/pcm", b"2"))
    queue.send_realtime(Blob("audio/pcm", b"3"))
    assert queue.dropped == 1
    with pytest.raises(QueueFull):
        queue.send_content(Content.from_text("no room"))
    got = [await queue.get() for _ in range(3)]
    assert [g.content.text if g.content else g.blob.data for g in got  # type: ignore[union-attr]
            ] == ["keep", b"2", b"3"]


async def test_waiting_consumer_is_woken_from_another_thread() -> None:
    queue = LiveRequestQueue()
    assert not queue.waiting
    waiter = asyncio.ensure_future(queue.get())
    await wait_until(lambda: queue.waiting)
    thread = threading.Thread(target=queue.send_content, args=(Content.from_text("x"),))
    thread.start()
    thread.join()
    item = await asyncio.wait_for(waiter, 2)
    assert item.content is not None and item.content.text == "x"
    assert not queue.waiting
