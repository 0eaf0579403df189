"""The bounded uvicorn protocols (h11 and httptools) in process, over raw loopback sockets."""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

import pytest
from fastapi import FastAPI

from headwater.gateway.connections import http_protocol
from headwater.settings import Settings

from .conftest import Serve

HEADER_TIMEOUT = 0.5
CAP = 2
BOUNDS = Settings(header_timeout=HEADER_TIMEOUT, max_connections=CAP)
PROTOCOLS = ("h11", "auto")


def app() -> FastAPI:
    served = FastAPI()

    @served.get("/ok")
    async def ok() -> dict[str, bool]:
        return {"ok": True}

    @served.get("/slow")
    async def slow() -> dict[str, bool]:
        await asyncio.sleep(HEADER_TIMEOUT * 3)
        return {"ok": True}

    return served


async def start(serve: Serve, protocol: str, bounds: Settings = BOUNDS) -> int:
    # uvicorn's own keep-alive timeout is far longer: a close within the waits below is ours
    base = await serve(app(), http=http_protocol(bounds, protocol),  # type: ignore[arg-type]
                       timeout_keep_alive=120)
    port = urlsplit(base).port
    assert port is not None
    return port


async def closed(reader: asyncio.StreamReader, within: float = 20.0) -> bytes:
    """What the server sent before closing (fails if it does not close ``within``)."""
    return await asyncio.wait_for(reader.read(), within)


GET = b"GET /ok HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_late_head_is_closed_on_a_new_and_on_a_kept_alive_connection(
        serve: Serve, protocol: str) -> None:
    port = await start(serve, protocol)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /o")
    assert await closed(reader) == b""
    writer.close()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(GET)
    head = await asyncio.wait_for(reader.readuntil(b'{"ok":true}'), 20)
    assert head.startswith(b"HTTP/1.1 200")
    writer.write(b"GET /ok HTTP/1.1\r\nHo")  # the next request's head, cut short
    assert await closed(reader) == b""
    writer.close()


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_an_answer_slower_than_header_timeout_is_not_cut(serve: Serve,
                                                               protocol: str) -> None:
    port = await start(serve, protocol)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for path in (b"/slow", b"/ok"):  # the head deadline ended with each head
        writer.write(GET.replace(b"/ok", path))
        answer = await asyncio.wait_for(reader.readuntil(b'{"ok":true}'), 20)
        assert answer.startswith(b"HTTP/1.1 200")
    writer.close()


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_past_the_cap_a_connection_gets_503_and_the_server_recovers(
        serve: Serve, protocol: str) -> None:
    held_open = Settings(header_timeout=60, max_connections=CAP)  # held ones stay until closed
    port = await start(serve, protocol, held_open)
    held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(CAP)]
    await asyncio.sleep(0.1)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    refused = await closed(reader)
    assert refused.startswith(b"HTTP/1.1 503")  # the cap's answer (a late head gets none)
    writer.close()
    for _, held_writer in held:
        held_writer.close()
    await asyncio.sleep(0.2)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(GET)
    assert (await asyncio.wait_for(reader.readuntil(b'{"ok":true}'), 20)).startswith(
        b"HTTP/1.1 200")
    writer.close()
