"""``headwater chat``'s gateway client against servers that are not a headwater gateway."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from headwater.cli._gateway_client import GatewayClient, GatewayError


class _HtmlEverywhere(BaseHTTPRequestHandler):
    """A web server that answers every path with 200 and an HTML page (an SPA, a proxy)."""

    def do_GET(self) -> None:
        body = b"<html><body>not a gateway</body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        if self.path.endswith("/runs"):  # an event stream whose data is not JSON
            body = b"id: 1\nevent: text_delta\ndata: <b>not json</b>\n\n"
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.do_GET()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def html_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _HtmlEverywhere)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


async def test_a_success_that_is_not_json_is_a_gateway_error(html_server: str) -> None:
    client = GatewayClient(html_server)
    try:
        with pytest.raises(GatewayError) as caught:
            await client.check()
        assert caught.value.code == "internal"
        assert "not a gateway" not in caught.value.message
    finally:
        await client.aclose()


async def test_an_event_stream_whose_data_is_not_json_is_a_gateway_error(
        html_server: str) -> None:
    client = GatewayClient(html_server)
    try:
        with pytest.raises(GatewayError) as caught:
            async with client.run("s1", {"message": "hi"}) as stream:
                async for _ in stream.frames():
                    pass
        assert caught.value.code == "internal"
        assert "not json" not in caught.value.message
    finally:
        await client.aclose()


# A gateway-like stream written the way any server may: a BOM, CRLF and CR line ends, comments,
# a retry, JSON over two data lines, a CRLF cut between writes, and bytes after the terminal frame.
_STREAM_PIECES = (
    b"\xef\xbb", b"\xbf: hello\r\nretry: 500\r\n\r\nid: 1\r\nevent: delta\r\n",
    b'data: {"author":"a",\r', b'\ndata: "text":"h\xc3', b'\xa9\\u2028"}\r\n\r\n',
    b': hb\r\rid: 2\revent: done\rdata: {"usage":{}}\r\r',
    b'id: 3\nevent: delta\ndata: {"author":"a","text":"after the end"}\n\n',
)


class _SplitStream(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("X-Run-Id", "r1")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        self.end_headers()
        for piece in _STREAM_PIECES:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")

    def log_message(self, *args: object) -> None:
        pass


async def test_frames_are_read_by_the_whatwg_rules_across_writes() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _SplitStream)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    client = GatewayClient(f"http://127.0.0.1:{server.server_address[1]}/")
    try:
        async with client.run("s1", {"message": "hi"}) as run:
            frames = [frame async for frame in run.frames()]
        assert run.run_id == "r1"
        assert [(f.id, f.type, f.data) for f in frames] == [
            ("1", "delta", {"author": "a", "text": "h\u00e9\u2028"}), ("2", "done", {"usage": {}})]
    finally:
        await client.aclose()
        server.shutdown()
        server.server_close()
        thread.join()
