"""A ``/live/{sid}`` WebSocket of a served gateway, as the process tests open and drain it.

Not a test module. Shared by ``test_gateway_process.py`` and ``reliability/test_process.py``.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed


async def live_socket(base_url: str, sid: str, headers: dict[str, str]) -> ClientConnection:
    """The session's live socket, past its ``ready`` message."""
    url = base_url.replace("http://", "ws://", 1) + f"/live/{sid}"
    socket = await connect(url, additional_headers=headers)
    ready = json.loads(await socket.recv())
    assert ready["type"] == "ready", ready
    return socket


async def socket_to_end(socket: ClientConnection, within: float) -> list[dict[str, Any]]:
    """Every message until the server closes the socket."""
    messages: list[dict[str, Any]] = []
    async with asyncio.timeout(within):
        try:
            while True:
                messages.append(json.loads(await socket.recv()))
        except ConnectionClosed:
            pass
    return messages
