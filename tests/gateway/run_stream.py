"""An open SSE response of a served gateway (a run's, or a follower's), read as a browser would.

Not a test module. Shared by ``test_gateway_process.py`` and ``test_deployment.py``.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from headwater.testing import SSEMessage, SSEParser


@dataclass
class RunStream:
    """An open SSE response, read frame by frame; ``within`` is a read's default time limit."""

    response: httpx.Response
    chunks: AsyncIterator[bytes]
    parser: SSEParser = field(default_factory=SSEParser)
    frames: list[SSEMessage] = field(default_factory=list)
    raw: bytearray = field(default_factory=bytearray)
    ended: bool = False
    within: float = 5.0

    @property
    def types(self) -> list[str]:
        return [f.event for f in self.frames]

    def data(self, index: int) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.frames[index].data)
        return data

    async def read_until(self, done: Callable[[RunStream], bool],
                         within: float | None = None) -> None:
        """Read until ``done(self)`` or the end of the stream (fails past ``within``)."""
        async with asyncio.timeout(self.within if within is None else within):
            while not done(self) and not self.ended:
                try:
                    chunk = await anext(self.chunks)
                except StopAsyncIteration:
                    self.ended = True
                    self.frames += self.parser.flush()
                    break
                self.raw += chunk
                self.frames += self.parser.feed(chunk)

    async def read_to_end(self, within: float | None = None) -> None:
        await self.read_until(lambda _: False, within)

    async def hang_up(self) -> float:
        """Close the connection mid-stream; when that happened (``time.monotonic()``)."""
        await self.response.aclose()
        return time.monotonic()
