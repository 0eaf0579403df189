"""Hostile input over raw sockets: every answer a 4xx with the error envelope, nothing
stored, no model called, the server healthy after, and no secret anywhere it shows."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from headwater.testing import FakeProvider

from .conftest import (
    CANARY_TOKEN,
    A,
    Raw,
    Served,
    canaries_in,
    history,
    new_session,
)

pytestmark = [pytest.mark.reliability, pytest.mark.slow]


async def exchange(served: Served, parts: list[bytes | float]) -> tuple[int, dict[str, Any]]:
    """Send ``parts`` (a float: pause that long), then read one response with a
    ``Content-Length`` body; (status, JSON body). A send the server cuts short is fine."""
    raw = await Raw.open(served.port)
    for part in parts:
        if isinstance(part, float):
            await asyncio.sleep(part)
            continue
        try:
            await raw.send(part)
        except (BrokenPipeError, ConnectionResetError):
            break
    loop = asyncio.get_running_loop()
    data = bytearray()
    async with asyncio.timeout(15):
        while True:
            try:
                chunk = await loop.sock_recv(raw.sock, 65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            data += chunk
            head, _, body = bytes(data).partition(b"\r\n\r\n")
            length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), None)
            if length is not None and len(body) >= length:
                break
    raw.fin()
    head, _, body = bytes(data).partition(b"\r\n\r\n")
    assert head, f"no answer to {parts[0][:80]!r}"  # type: ignore[index]
    status = int(head.split(b" ", 2)[1])
    return status, (json.loads(body) if body.strip() else {})


def post(path: str, body: bytes, extra: str = "") -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {CANARY_TOKEN}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n{extra}\r\n"
            ).encode() + body


def chunked(path: str, size: int) -> list[bytes | float]:
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {CANARY_TOKEN}\r\n"
            "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n").encode()
    piece = b"x" * 65536
    parts: list[bytes | float] = [head, b'%X\r\n{"message": "\r\n' % 13]
    parts += [b"%X\r\n%b\r\n" % (len(piece), piece)] * (size // len(piece))
    return [*parts, b'2\r\n"}\r\n0\r\n\r\n']


async def test_bad_input_gets_a_4xx_and_leaves_nothing(
        server: Served, provider: FakeProvider) -> None:
    async with server.client() as client:
        sid = await new_session(client)
    runs = f"/sessions/{sid}/runs"
    nested = b'{"message": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    cases: dict[str, tuple[list[bytes | float], set[int]]] = {
        "10 GB declared": ([post(runs, b"")[:-4].replace(b"Content-Length: 0",
                                                         b"Content-Length: 10737418240")
                            + b"\r\n\r\n" + b'{"message": "'], {413}),
        "3 MiB chunked": (chunked(runs, 3 << 20), {413}),
        "invalid JSON": ([post(runs, b'{"message": "hi"')], {400, 422}),
        "100k nesting": ([post(runs, nested)], {400, 422}),
        "NUL byte": ([post(runs, b'{"message": "a\x00b"}')], {400, 422}),
        "NUL escape in state": ([post("/sessions", b'{"state": {"k": "a\\u0000b", '
                                                   b'"\\u0000": 1}}')], {201, 400, 422}),
        "lone surrogate": ([post(runs, b'{"message": "\\ud800"}')], {400}),
        "surrogate in state": ([post("/sessions", b'{"state": {"k": "\\udfff"}}')], {400}),
        "long message": ([post(runs, json.dumps({"message": "y" * 1_000_000}).encode())],
                         {413}),
        "slow body": ([post(runs, b'{"message": "slow"}')[:-10], 3.5], {408}),
        "not an object": ([post(runs, b'"hi"')], {400, 422}),
        "wrong types": ([post(runs, b'{"message": 5, "resumable": "yes"}')], {400, 422}),
        "unknown agent": ([post("/sessions", b'{"agent": "nobody"}')], {400, 404, 422}),
    }
    seen: list[str] = []
    for name, (parts, expected) in cases.items():
        status, body = await exchange(server, parts)
        assert status in expected, (name, status, body)
        if status >= 400:
            assert set(body) == {"error"} and body["error"]["code"], (name, body)
        seen += canaries_in(f"{name} answer", json.dumps(body))

    # slow headers: half a request line, then nothing; closed after header_timeout (2 s)
    raw = await Raw.open(server.port)
    await raw.send(b"GET /heal")
    started = time.monotonic()
    await raw.read_until(lambda r: False, within=10)
    assert raw.eof and time.monotonic() - started < 2 + 6
    raw.fin()

    # a WebSocket from a foreign page, and a token in the query string: refused
    url = server.base_url.replace("http://", "ws://", 1) + f"/live/{sid}"
    for kwargs in ({"additional_headers": {**A, "Origin": "https://evil.example"}},
                   {"uri_suffix": f"?token={CANARY_TOKEN}"}):
        suffix = str(kwargs.pop("uri_suffix", ""))
        with pytest.raises((InvalidStatus, ConnectionClosed, OSError)):
            async with connect(url + suffix, open_timeout=10, **kwargs) as socket:
                await socket.recv()  # refused after the handshake: a close

    async with server.client() as client:
        assert (await client.get("/healthz")).status_code == 200
        assert await history(client, sid) == []  # nothing of any of it stored
    assert provider.requests == []  # and no model called
    log = server.text()
    assert " 500 " not in log and "Traceback" not in log and "ERROR" not in log, log[-3000:]
    seen += canaries_in("log at DEBUG", log)
    assert seen == []
