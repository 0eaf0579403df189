"""The no-network guard from conftest.py: outside loopback is refused, loopback works."""

from __future__ import annotations

import asyncio
import socket
import threading

import pytest

OUTSIDE = ("10.1.2.3", 80)


def test_connect_outside_loopback_is_refused_before_connecting() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1)  # only matters if the guard is broken
        with pytest.raises(RuntimeError, match="tests never reach the network"):
            sock.connect(OUTSIDE)
        with pytest.raises(RuntimeError, match="tests never reach the network"):
            sock.connect_ex(OUTSIDE)
        with pytest.raises(OSError):  # never connected: the guard raised first
            sock.getpeername()


def test_create_connection_and_name_lookup_are_refused() -> None:
    with pytest.raises(RuntimeError, match="tests never reach the network"):
        socket.create_connection(OUTSIDE, timeout=1)
    with pytest.raises(RuntimeError, match="tests never reach the network"):
        socket.getaddrinfo("api.openai.com", 443)


async def test_asyncio_connection_outside_loopback_is_refused() -> None:
    with pytest.raises(RuntimeError, match="tests never reach the network"):
        await asyncio.wait_for(asyncio.open_connection(*OUTSIDE), timeout=1)


def test_loopback_server_is_reachable() -> None:
    hosts = ("127.0.0.1", "localhost")
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]

        def echo() -> None:
            for _ in hosts:
                conn, _ = server.accept()
                with conn:
                    conn.sendall(conn.recv(16))

        thread = threading.Thread(target=echo, daemon=True)
        thread.start()
        for host in hosts:
            with socket.create_connection((host, port), timeout=5) as client:
                client.sendall(b"ping")
                assert client.recv(16) == b"ping"
        thread.join(timeout=5)


async def test_asyncio_loopback_server_is_reachable() -> None:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(await reader.read(16))
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    async with server:
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"ping")
        assert await reader.read(16) == b"ping"
        writer.close()
        await writer.wait_closed()
