"""``headwater serve`` at its edge, as a real child process on loopback.

Raw sockets that send half a request line are closed after ``header_timeout``;
past ``max_connections`` a new connection is answered 503 and closed at once,
and the server serves again once connections go. At ``--log-level debug`` a
WebSocket's bearer token (its subprotocol header, or a refused query string)
never reaches the log.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from websockets.exceptions import InvalidStatus, WebSocketException
from websockets.sync.client import connect

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
TOKEN = "token-a"  # served_app's one token
HEADER_TIMEOUT = 2.0
CAP = 3


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def healthz(port: int, timeout: float = 5.0) -> bytes:
    """``GET /healthz`` on a raw socket the server closes after answering (or b"")."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        return read_all(sock)


def read_all(sock: socket.socket) -> bytes:
    chunks = []
    try:
        while chunk := sock.recv(4096):
            chunks.append(chunk)
    except ConnectionResetError:
        pass
    return b"".join(chunks)


class Served:
    def __init__(self, process: subprocess.Popen[bytes], port: int, log: Path) -> None:
        self.process, self.port, self.log = process, port, log

    def stderr(self) -> str:
        return self.log.read_text(errors="replace")


def start(target: str, env: dict[str, str], log: Path, *args: str) -> Served:
    port = free_port()
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "headwater.cli", "serve", target, "--port", str(port), *args],
            cwd=HERE, env=env, stdout=out, stderr=subprocess.STDOUT)
    served = Served(process, port, log)
    deadline = time.monotonic() + 30
    while True:
        if process.poll() is not None:
            pytest.fail(f"the server exited:\n{served.stderr()}")
        try:
            if healthz(port).startswith(b"HTTP/1.1 200"):
                return served
        except OSError:
            pass
        if time.monotonic() > deadline:
            pytest.fail(f"the server did not come up:\n{served.stderr()}")
        time.sleep(0.05)


@pytest.fixture
def edge_env(child_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    return {**child_env, "HW_TEST_DIR": str(tmp_path), "HEADWATER_SHUTDOWN_GRACE": "1",
            "HEADWATER_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'dev.db'}",
            "HEADWATER_HEADER_TIMEOUT": str(HEADER_TIMEOUT),
            "HEADWATER_MAX_CONNECTIONS": str(CAP), "HEADWATER_WS_AUTH_TIMEOUT": "1"}


@pytest.fixture
def served(edge_env: dict[str, str], tmp_path: Path) -> Iterator[Served]:
    server = start("served_app:app", edge_env, tmp_path / "serve.log")
    yield server
    server.process.kill()
    server.process.wait(10)


def test_a_half_sent_request_head_is_closed_after_header_timeout(served: Served) -> None:
    with contextlib.ExitStack() as stack:
        socks = []
        for _ in range(CAP):
            sock = stack.enter_context(socket.create_connection(("127.0.0.1", served.port),
                                                                timeout=30))
            sock.sendall(b"GET /heal")  # half a request line, and nothing more
            socks.append(sock)
        sent = time.monotonic()
        for sock in socks:
            assert read_all(sock) == b""  # closed by the server, without an answer
    assert time.monotonic() - sent >= HEADER_TIMEOUT * 0.5  # not before the deadline
    assert healthz(served.port).startswith(b"HTTP/1.1 200")


def test_past_max_connections_a_connection_is_refused_at_once_and_the_server_recovers(
        served: Served) -> None:
    with contextlib.ExitStack() as stack:
        for _ in range(CAP):
            sock = stack.enter_context(socket.create_connection(("127.0.0.1", served.port),
                                                                timeout=30))
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 12")  # a head that never ends
        time.sleep(0.2)  # the server has taken them (accepts are in order anyway)
        with socket.create_connection(("127.0.0.1", served.port), timeout=10) as extra:
            answer = read_all(extra)  # well before header_timeout: the 503 comes first
        assert answer.startswith(b"HTTP/1.1 503"), answer
        assert b"retry-after: 1" in answer.lower()
        assert "max_connections" in served.stderr()
    deadline = time.monotonic() + 20
    while not healthz(served.port).startswith(b"HTTP/1.1 200"):
        assert time.monotonic() < deadline, "the server did not serve again"
        time.sleep(0.1)


def test_a_completed_head_is_not_cut_by_header_timeout(served: Served) -> None:
    # A request whose head is complete but whose body is slow is body_read_timeout's
    # (408), not header_timeout's: the answer arrives, it is not a bare close.
    with socket.create_connection(("127.0.0.1", served.port), timeout=30) as sock:
        sock.sendall(b"POST /sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n"
                     b"Authorization: Bearer " + TOKEN.encode() + b"\r\n"
                     b"Content-Type: application/json\r\n\r\n{")
        time.sleep(HEADER_TIMEOUT * 1.5)
        sock.sendall(b"}")
        answer = sock.recv(65536)
    assert answer.startswith(b"HTTP/1.1 201"), answer


def test_bearer_tokens_never_reach_the_debug_log(edge_env: dict[str, str],
                                                 tmp_path: Path) -> None:
    server = start("served_app:app", {**edge_env, "HEADWATER_MAX_CONNECTIONS": "100"},
                   tmp_path / "debug.log", "--log-level", "debug")
    try:
        url = f"ws://127.0.0.1:{server.port}/live/no-such-session"
        secret = "s3cr3t-in-query"
        with pytest.raises(WebSocketException), \
                connect(url, subprotocols=["bearer", TOKEN],  # type: ignore[list-item]
                        open_timeout=10) as ws:
            ws.recv(timeout=10)  # the token opens no session: closed 4404
        with pytest.raises((InvalidStatus, WebSocketException)), \
                connect(f"{url}?token={secret}", open_timeout=10) as ws:
            ws.recv(timeout=20)  # no token: closed 1008 after ws_auth_timeout
    finally:
        server.process.kill()
        server.process.wait(10)
    log = server.stderr()
    assert "Sec-WebSocket-Protocol" in log  # the debug lines are there, without the token
    assert "/live/no-such-session" in log
    assert TOKEN not in log, log
    assert secret not in log, log


def test_serve_cors_origin_lists_origins(edge_env: dict[str, str], tmp_path: Path) -> None:
    page, other = "http://localhost:3000", "http://127.0.0.1:5173"
    server = start("served_agents:agent", edge_env, tmp_path / "cors.log",
                   "--cors-origin", page, "--cors-origin", other)
    try:
        for origin, status in ((page, b"204"), (other, b"204"), ("https://evil.example", b"403")):
            with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
                sock.sendall(b"OPTIONS /sessions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                             b"Origin: " + origin.encode() + b"\r\n"
                             b"Access-Control-Request-Method: POST\r\nConnection: close\r\n\r\n")
                answer = read_all(sock)
            assert answer.startswith(b"HTTP/1.1 " + status), answer
            allowed = b"access-control-allow-origin: " + origin.encode()
            assert (allowed in answer.lower()) is (status == b"204")
    finally:
        server.process.kill()
        server.process.wait(10)


@pytest.mark.parametrize("command", ["serve", "demo"])
def test_a_cors_origin_that_is_not_an_origin_is_refused_in_words(
        command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from headwater.cli import main

    args = ["served_agents:agent"] if command == "serve" else [
        "--no-browser", "--db", f"sqlite:///{tmp_path / 'demo.db'}", "--port", str(free_port())]
    assert main([command, *args, "--cors-origin", "*"]) == 2
    assert "scheme://host[:port]" in capsys.readouterr().err
