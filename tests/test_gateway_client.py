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
