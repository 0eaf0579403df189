"""RequestLimits (request ids, body bounds, log lines) and the error envelope over real HTTP."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import httpx
import pytest
from fastapi import Depends, FastAPI, Request
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel
from starlette.responses import StreamingResponse
from starlette.types import ASGIApp

from headwater.errors import UserError
from headwater.gateway.auth import StaticTokenAuth, user_dependency
from headwater.gateway.limits import RequestLimits, lone_surrogate
from headwater.gateway.problems import (
    GatewayHTTPError,
    error_response,
    install_error_handlers,
    request_id_of,
)
from headwater.testing.waiting import wait_until

from .conftest import Serve

MAX_BODY = 1024
HEX_ID = re.compile(r"[0-9a-f]{32}")


class Order(BaseModel):
    text: str
    n: int


@dataclass
class Seen:
    """What the routes of the test app saw."""

    calls: list[str] = field(default_factory=list)
    stream_ended: asyncio.Event = field(default_factory=asyncio.Event)


def make_app(seen: Seen, *, wrap: bool = False, body_read_timeout: float = 0.5) -> ASGIApp:
    """The test app: RequestLimits added as middleware, or wrapped around the whole app."""
    app = FastAPI()
    install_error_handlers(app)

    @app.post("/orders")
    async def orders(order: Order, request: Request) -> dict[str, object]:
        seen.calls.append("orders")
        return {"order": order.model_dump(), "request_id": request_id_of(request)}

    @app.post("/raw")
    async def raw(request: Request) -> dict[str, int]:
        seen.calls.append("raw")
        return {"size": len(await request.body())}

    @app.get("/me")
    async def me(user: str = Depends(user_dependency(StaticTokenAuth({"t": "alice"})))
                 ) -> dict[str, str]:
        return {"user": user}

    @app.get("/boom")
    async def boom() -> None:
        raise RuntimeError("secret")

    @app.get("/teapot")
    async def teapot() -> None:
        raise GatewayHTTPError("session_busy", "Another run holds the session.",
                               headers={"Retry-After": "1"})

    @app.post("/stream")
    async def stream(order: Order) -> StreamingResponse:
        async def frames() -> AsyncIterator[bytes]:
            try:
                yield f"got {order.text}\n".encode()
                await asyncio.Event().wait()  # until the client goes away
            finally:
                seen.stream_ended.set()

        return StreamingResponse(frames(), media_type="text/plain")

    if wrap:
        return RequestLimits(app, max_body_bytes=MAX_BODY, body_read_timeout=body_read_timeout)
    app.add_middleware(RequestLimits, max_body_bytes=MAX_BODY,
                       body_read_timeout=body_read_timeout)
    return app


@pytest.fixture
def seen() -> Seen:
    return Seen()


@pytest.fixture
async def client(serve: Serve, seen: Seen) -> AsyncIterator[httpx.AsyncClient]:
    base = await serve(make_app(seen))
    async with httpx.AsyncClient(base_url=base, timeout=5) as c:
        yield c


async def raw_exchange(base_url: str, request: bytes, *, close_after: bool = False) -> bytes:
    """Send raw bytes; read the answer until the server closes (or a 5 s bound)."""
    url = urlsplit(base_url)
    reader, writer = await asyncio.open_connection(url.hostname, url.port)
    try:
        writer.write(request)
        await writer.drain()
        if close_after:
            return b""
        async with asyncio.timeout(5):
            return await reader.read()  # the server closes after a 408/413
    finally:
        writer.close()
        await writer.wait_closed()


def envelope(response: httpx.Response, code: str, status: int) -> dict[str, str]:
    assert response.status_code == status, response.text
    assert response.headers["cache-control"] == "no-store"
    error: dict[str, str] = response.json()["error"]
    assert error["code"] == code
    assert error["request_id"] == response.headers["x-request-id"]
    return error


# --- bodies ------------------------------------------------------------------------------


async def test_a_json_post_reaches_the_route_unchanged(client: httpx.AsyncClient) -> None:
    response = await client.post("/orders", json={"text": "héllo ☃", "n": 3})
    assert response.status_code == 200
    assert response.json()["order"] == {"text": "héllo ☃", "n": 3}
    assert response.json()["request_id"] == response.headers["x-request-id"]


async def test_a_body_at_the_bound_passes(client: httpx.AsyncClient) -> None:
    response = await client.post("/raw", content=b"x" * MAX_BODY)
    assert response.json() == {"size": MAX_BODY}


async def test_a_declared_length_past_the_bound_is_413(client: httpx.AsyncClient,
                                                        seen: Seen) -> None:
    envelope(await client.post("/raw", content=b"x" * (MAX_BODY + 1)),
             "payload_too_large", 413)
    assert seen.calls == []


async def test_a_declared_length_is_refused_before_any_body_arrives(
        serve: Serve, seen: Seen) -> None:
    base = await serve(make_app(seen))
    answer = await raw_exchange(base, b"POST /raw HTTP/1.1\r\nHost: t\r\n"
                                      b"Content-Length: 1000000000\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 413 ")  # not 408: it did not wait for the body
    assert b'"payload_too_large"' in answer
    assert seen.calls == []


@pytest.mark.parametrize("chunked", [False, True], ids=["declared", "chunked"])
async def test_a_client_still_sending_a_body_past_the_bound_reads_the_413_naming_it(
        serve: Serve, seen: Seen, chunked: bool) -> None:
    """More than the socket buffers hold: the client is still sending when the server
    refuses. The rest is read and dropped, so the client reads the answer (which says the
    bound), not a reset; the route never runs."""
    base = await serve(make_app(seen, body_read_timeout=30))
    body = b"x" * (8 << 20)

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(body), 1 << 16):
            yield body[start:start + (1 << 16)]

    async with httpx.AsyncClient(base_url=base, timeout=30) as client:
        response = await client.post("/raw", content=chunks() if chunked else body)
    error = envelope(response, "payload_too_large", 413)
    assert error["message"] == "The request body is over this server's limit of 1,024 bytes."
    assert response.headers["connection"] == "close"
    assert seen.calls == []


async def test_a_chunked_body_past_the_bound_is_413(client: httpx.AsyncClient,
                                                     seen: Seen) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(3):
            yield b"y" * 400

    envelope(await client.post("/raw", content=chunks()), "payload_too_large", 413)
    assert seen.calls == []


async def test_a_chunked_body_within_the_bound_is_replayed_whole(
        client: httpx.AsyncClient) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(2):
            yield b"y" * 400

    response = await client.post("/raw", content=chunks())
    assert response.json() == {"size": 800}


async def test_a_client_that_stalls_mid_body_gets_408(serve: Serve, seen: Seen) -> None:
    base = await serve(make_app(seen))
    answer = await raw_exchange(base, b"POST /raw HTTP/1.1\r\nHost: t\r\n"
                                      b"Content-Length: 100\r\n\r\n" + b"z" * 50)
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert b'"request_timeout"' in answer
    assert seen.calls == []


async def test_a_client_that_leaves_mid_body_ends_quietly(
        serve: Serve, seen: Seen, caplog: pytest.LogCaptureFixture) -> None:
    base = await serve(make_app(seen))
    with caplog.at_level(logging.INFO):
        await raw_exchange(base, b"POST /raw HTTP/1.1\r\nHost: t\r\n"
                                 b"Content-Length: 100\r\n\r\n" + b"z" * 50, close_after=True)
        await wait_until(lambda: any(r.name == "headwater.gateway" for r in caplog.records))
    [line] = [r for r in caplog.records if r.name == "headwater.gateway"]
    assert line.status is None  # type: ignore[attr-defined]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert seen.calls == []


async def test_a_streaming_route_still_sees_the_disconnect(client: httpx.AsyncClient,
                                                            seen: Seen) -> None:
    async with client.stream("POST", "/stream", json={"text": "hi", "n": 1}) as response:
        assert response.status_code == 200
        async for line in response.aiter_lines():
            assert line == "got hi"
            break
    # the response closed with the stream unfinished: httpx drops the connection
    await asyncio.wait_for(seen.stream_ended.wait(), 5)


# --- request ids and log lines -----------------------------------------------------------


async def test_every_response_has_a_request_id(client: httpx.AsyncClient) -> None:
    first, second = await client.get("/me"), await client.get("/nowhere")
    ids = [first.headers["x-request-id"], second.headers["x-request-id"]]
    assert all(HEX_ID.fullmatch(i) for i in ids) and ids[0] != ids[1]


@pytest.mark.parametrize("incoming", ["abc-123.X_y", "a" * 64])
async def test_a_sane_incoming_request_id_is_echoed(client: httpx.AsyncClient,
                                                    incoming: str) -> None:
    response = await client.post("/orders", json={"text": "t", "n": 1},
                                 headers={"X-Request-Id": incoming})
    assert response.headers["x-request-id"] == incoming
    assert response.json()["request_id"] == incoming


@pytest.mark.parametrize("incoming", ["a" * 65, "has space", "<script>", "a/b", b"\xfc"])
async def test_an_odd_incoming_request_id_is_replaced(client: httpx.AsyncClient,
                                                      incoming: str | bytes) -> None:
    response = await client.get("/me", headers={"X-Request-Id": incoming})
    assert HEX_ID.fullmatch(response.headers["x-request-id"])


async def test_one_log_line_per_request_without_the_query(
        client: httpx.AsyncClient, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="headwater.gateway"):
        response = await client.get("/me?token=hunter2", headers={"Authorization": "Bearer t"})
        await wait_until(lambda: any(r.name == "headwater.gateway" for r in caplog.records))
    [line] = [r for r in caplog.records if r.name == "headwater.gateway"]
    assert line.levelno == logging.INFO
    fields = {name: getattr(line, name) for name in
              ("request_id", "method", "path", "status", "user")}
    assert fields == {"request_id": response.headers["x-request-id"], "method": "GET",
                      "path": "/me", "status": 200, "user": "alice"}
    assert isinstance(line.duration_ms, float)  # type: ignore[attr-defined]
    assert re.fullmatch(r"GET /me 200 \d+\.\dms", line.getMessage())
    assert "hunter2" not in caplog.text


async def test_a_streaming_response_is_logged_when_it_ends(
        client: httpx.AsyncClient, seen: Seen, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="headwater.gateway"):
        async with client.stream("POST", "/stream", json={"text": "hi", "n": 1}) as response:
            lines = response.aiter_lines()  # kept: a dropped iterator closes the response
            assert await anext(lines) == "got hi"
            await asyncio.sleep(0.05)
            assert not [r for r in caplog.records if r.name == "headwater.gateway"]
        await wait_until(lambda: any(r.name == "headwater.gateway" for r in caplog.records))
    [line] = [r for r in caplog.records if r.name == "headwater.gateway"]
    assert (line.path, line.status) == ("/stream", 200)  # type: ignore[attr-defined]


# --- the error envelope ------------------------------------------------------------------


async def test_a_validation_error_names_the_fields_not_the_values(
        client: httpx.AsyncClient) -> None:
    response = await client.post("/orders", json={"n": "SECRET-NOT-A-NUMBER"})
    error = envelope(response, "invalid_request", 422)
    assert "body.n" in error["message"] and "body.text" in error["message"]
    assert "SECRET" not in response.text


async def test_malformed_json_is_422(client: httpx.AsyncClient) -> None:
    response = await client.post("/orders", content=b'{"text": "SECRET',
                                 headers={"Content-Type": "application/json"})
    envelope(response, "invalid_request", 422)
    assert "SECRET" not in response.text


async def test_an_unknown_path_is_404_not_found(client: httpx.AsyncClient) -> None:
    envelope(await client.get("/nowhere"), "not_found", 404)


async def test_a_wrong_method_is_405_with_allow(client: httpx.AsyncClient) -> None:
    response = await client.delete("/me")
    envelope(response, "method_not_allowed", 405)
    assert response.headers["allow"] == "GET"


async def test_a_gateway_error_keeps_its_code_status_and_headers(
        client: httpx.AsyncClient) -> None:
    response = await client.get("/teapot")
    error = envelope(response, "session_busy", 409)
    assert error["message"] == "Another run holds the session."
    assert response.headers["retry-after"] == "1"


@pytest.mark.parametrize("wrap", [False, True], ids=["add_middleware", "wrapped"])
async def test_an_unexpected_exception_is_500_internal_logged_once_without_its_text(
        serve: Serve, seen: Seen, caplog: pytest.LogCaptureFixture, wrap: bool) -> None:
    base = await serve(make_app(seen, wrap=wrap))
    server_log = logging.getLogger("uvicorn.error")  # it does not propagate to caplog's root
    server_log.addHandler(caplog.handler)
    try:
        with caplog.at_level(logging.INFO):
            async with httpx.AsyncClient(base_url=base) as client:
                response = await client.get("/boom")
            await wait_until(lambda: any(getattr(r, "status", None) == 500
                                         for r in caplog.records))
    finally:
        server_log.removeHandler(caplog.handler)
    envelope(response, "internal", 500)
    assert "secret" not in response.text
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and errors[0].name == "headwater.gateway"  # not uvicorn's too
    assert errors[0].exc_info is not None
    assert errors[0].request_id == response.headers["x-request-id"]  # type: ignore[attr-defined]


def test_error_response_always_challenges_a_401() -> None:
    response = error_response("unauthorized", "no", "rid")
    assert response.headers["www-authenticate"] == "Bearer"
    response = error_response("invalid_request", "bad cursor", "rid", status=400)
    assert response.status_code == 400


def test_an_unknown_code_is_a_programming_error() -> None:
    with pytest.raises(UserError):
        GatewayHTTPError("teapot", "short and stout")
    assert GatewayHTTPError("teapot", "short and stout", status=418).status == 418


@pytest.mark.parametrize(("size", "timeout"), [(0, 1.0), (1024, 0.0)])
def test_request_limits_refuse_bounds_that_are_not_positive(size: int, timeout: float) -> None:
    with pytest.raises(UserError):
        RequestLimits(FastAPI(), max_body_bytes=size, body_read_timeout=timeout)


@given(st.lists(st.one_of(st.text(max_size=4), st.sampled_from(
    ["\ud800", "\udfff", "\ud83d\ude00", "\\", "\\u", "u", "d800", '"']))).map("".join))
def test_lone_surrogate_finds_exactly_the_strings_utf8_cannot_encode(text: str) -> None:
    body = json.dumps({"k": text, text: [text]}).encode("ascii")  # every non-ASCII escaped
    try:  # what a store would do with the decoded body
        json.dumps(json.loads(body), ensure_ascii=False).encode("utf-8")
        encodable = True
    except UnicodeEncodeError:
        encodable = False
    assert lone_surrogate(body) is not encodable


async def test_a_lone_surrogate_escape_is_400_before_the_route(client: httpx.AsyncClient,
                                                               seen: Seen) -> None:
    answer = await client.post("/orders", content=b'{"text": "\\udc00", "n": 1}',
                               headers={"Content-Type": "application/json"})
    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == "invalid_request"
    assert seen.calls == []
