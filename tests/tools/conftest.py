"""MCP servers for the tool tests: the SDK-built server of ``mcp_server.py``, over stdio or
Streamable HTTP on loopback (a process of its own either way)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from headwater.testing import wait_until
from headwater.tools.mcp import McpToolset

SERVER = str(Path(__file__).with_name("mcp_server.py"))


@dataclass
class McpServer:
    """One test server: how to reach it, and what it saw."""

    transport: str
    mark: Path
    url: str = ""
    process: subprocess.Popen[str] | None = None
    port: int = 0
    toolsets: list[McpToolset] = field(default_factory=list)

    def toolset(self, **options: Any) -> McpToolset:
        """A toolset on this server (closed after the test)."""
        if self.transport == "stdio":
            made = McpToolset(command=[sys.executable, SERVER],
                              env={"HW_MCP_MARK": str(self.mark)}, **options)
        else:
            made = McpToolset(url=self.url, **options)
        self.toolsets.append(made)
        return made

    def marks(self) -> list[str]:
        """What the server wrote: ``started <tool>``, ``cancelled <tool>``."""
        return self.mark.read_text().splitlines() if self.mark.exists() else []

    async def wait_mark(self, line: str) -> None:
        """Wait (generously) until the server wrote ``line``."""
        await wait_until(lambda: line in self.marks(), timeout=30, message=line)

    async def start_http(self) -> None:
        """Start (or start again, on the same port) the HTTP server."""
        env = {**os.environ, "HW_MCP_MARK": str(self.mark)}
        self.process = await asyncio.to_thread(
            subprocess.Popen, [sys.executable, SERVER, "http", str(self.port)],
            stdout=subprocess.PIPE, text=True, env=env)
        line = await asyncio.wait_for(asyncio.to_thread(self.process.stdout.readline), 60)  # type: ignore[union-attr]
        assert line.startswith("PORT "), f"the HTTP server said {line!r}"
        self.port = int(line.split()[1])
        self.url = f"http://127.0.0.1:{self.port}/mcp"

    def kill(self) -> None:
        """Kill the HTTP server's process."""
        process = self.process
        if process is None:
            return
        if process.poll() is None:
            process.kill()
            process.wait(10)
        if process.stdout is not None:
            process.stdout.close()


@pytest.fixture(params=["stdio", "http"])
async def mcp_server(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[McpServer]:
    """The test MCP server over each transport; every toolset made on it is closed after."""
    server = McpServer(request.param, tmp_path / "marks.txt")
    if server.transport == "http":
        await server.start_http()
    try:
        yield server
    finally:
        for toolset in server.toolsets:
            await toolset.aclose()
        server.kill()


@pytest.fixture
async def stdio_server(tmp_path: Path) -> AsyncIterator[McpServer]:
    """The test MCP server over stdio only."""
    server = McpServer("stdio", tmp_path / "marks.txt")
    try:
        yield server
    finally:
        for toolset in server.toolsets:
            await toolset.aclose()


@pytest.fixture
def unused_port() -> int:
    """A loopback port nothing listens on (bound and released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def pid_alive(pid: int) -> bool:
    """Whether a process of that id exists (and is not a zombie)."""
    with contextlib.suppress(FileNotFoundError):
        return " Z " not in Path(f"/proc/{pid}/stat").read_text().split(")", 1)[1][:4]
    return False


@pytest.fixture
def no_server_left() -> Iterator[list[int]]:
    """Pids to check after the test: none of them may still run."""
    pids: list[int] = []
    yield pids
    assert not [pid for pid in pids if pid_alive(pid)]
