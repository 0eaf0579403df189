"""Which pages may call the gateway (CORS, dev mode's Host and Origin), and bodies no store
can encode, over real HTTP (uvicorn on loopback) with a real SQLite store."""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import HTMLResponse
from starlette.routing import Route
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from headwater import Agent
from headwater.errors import UserError
from headwater.gateway import StaticTokenAuth, create_app
from headwater.sessions import BaseSessionService
from headwater.settings import Settings
from headwater.testing import ScriptedModel

from .conftest import Serve
from .stores import new_service
from .test_page_browser import browser  # noqa: F401 - the chromium fixture

A = {"Authorization": "Bearer token-a"}
AUTH = StaticTokenAuth({"token-a": "alice"})
PAGE = "http://localhost:3000"  # a listed origin (a React dev server, say)
EVIL = "https://evil.example"
LONE = '"\\ud800"'  # JSON text of a string holding a lone surrogate

Start = Callable[..., Awaitable[tuple[str, httpx.AsyncClient]]]


@pytest.fixture
async def start(serve: Serve, tmp_path: Path) -> AsyncIterator[Start]:
    """``base, client = await start(auth=..., cors_origins=...)``: a gateway on SQLite."""
    clients: list[httpx.AsyncClient] = []
    services: list[BaseSessionService] = []

    async def starting(**options: Any) -> tuple[str, httpx.AsyncClient]:
        service = new_service("sqlite")
        services.append(service)
        agent = Agent(name="bot", model=ScriptedModel().reply("hi").reply("again"))
        app = create_app(agent, session_service=service,
                         settings=Settings(shutdown_grace=1.0), **options)
        base = await serve(app)
        client = httpx.AsyncClient(base_url=base, timeout=10)
        clients.append(client)
        return base, client

    yield starting
    for client in clients:
        await client.aclose()
    for service in services:
        await service.close()


def preflight(origin: str, method: str = "POST") -> dict[str, str]:
    return {"Origin": origin, "Access-Control-Request-Method": method,
            "Access-Control-Request-Headers": "authorization, content-type"}


# -- CORS ----------------------------------------------------------------------------------------


async def test_a_preflight_from_a_listed_origin_is_answered(start: Start) -> None:
    _, client = await start(auth=AUTH, cors_origins=[PAGE])
    answer = await client.options("/vercel/bot", headers=preflight(PAGE))
    assert answer.status_code == 204
    assert answer.headers["access-control-allow-origin"] == PAGE
    assert "POST" in answer.headers["access-control-allow-methods"]
    allowed = answer.headers["access-control-allow-headers"].lower()
    assert "authorization" in allowed and "content-type" in allowed
    assert answer.headers["vary"] == "Origin"
    # ...and the request that follows gets its CORS headers, X-Run-Id readable by the page
    created = await client.post("/sessions", json={}, headers={**A, "Origin": PAGE})
    assert created.status_code == 201
    assert created.headers["access-control-allow-origin"] == PAGE
    assert "X-Run-Id" in created.headers["access-control-expose-headers"]


async def test_a_preflight_from_an_unlisted_origin_is_not_allowed(start: Start) -> None:
    _, client = await start(auth=AUTH, cors_origins=[PAGE])
    answer = await client.options("/vercel/bot", headers=preflight(EVIL))
    assert answer.status_code == 403
    assert answer.json()["error"]["code"] == "forbidden"
    assert "access-control-allow-origin" not in answer.headers
    plain = await client.post("/sessions", json={}, headers={**A, "Origin": EVIL})
    assert "access-control-allow-origin" not in plain.headers  # the browser hides it


@pytest.mark.parametrize("auth", [AUTH, None], ids=["auth", "dev"])
async def test_nothing_is_allowed_by_default(start: Start, auth: Any) -> None:
    _, client = await start(auth=auth)
    for origin in (PAGE, "http://127.0.0.1:3000"):
        answer = await client.options("/sessions", headers=preflight(origin))
        assert answer.status_code == 403
        assert "access-control-allow-origin" not in answer.headers


def test_cors_origins_are_origins() -> None:
    agent = Agent(name="bot", model=ScriptedModel())
    for bad in ("*", "localhost:3000", "http://localhost:3000/app", "ftp://x"):
        with pytest.raises(UserError, match="scheme://host"):
            create_app(agent, cors_origins=[bad])
    listed = Settings(cors_origins=["HTTP://LocalHost:3000/"])
    assert create_app(agent, settings=listed) is not None  # normalised, accepted


# -- dev mode: Host and Origin -------------------------------------------------------------------


async def test_dev_mode_refuses_a_host_that_is_not_loopback(start: Start) -> None:
    base, client = await start()
    await client.post("/sessions", json={"state": {"secret": "x"}})
    rebound = await client.get("/sessions", headers={"Host": "attacker.example"})
    assert rebound.status_code == 403
    assert rebound.json()["error"]["code"] == "forbidden"
    assert "secret" not in rebound.text
    for host in ("localhost:8000", "127.0.0.1", "[::1]:8000"):
        assert (await client.get("/sessions", headers={"Host": host})).status_code == 200
    port = urlsplit(base).port
    with socket.create_connection(("127.0.0.1", port)) as sock, \
            pytest.raises(InvalidStatus) as refused:  # a page at attacker.example, rebound
        async with connect(f"ws://attacker.example:{port}/live/any", sock=sock):
            pass
    assert refused.value.response.status_code == 403


async def test_dev_mode_refuses_a_cross_origin_request(start: Start) -> None:
    base, client = await start(cors_origins=[PAGE])
    sid = (await client.post("/sessions", json={})).json()["id"]
    # a simple request (no preflight in a browser): text/plain, from another origin
    cancel = await client.post("/runs/r1/cancel", content="x",
                               headers={"Content-Type": "text/plain", "Origin": EVIL})
    assert cancel.status_code == 403
    for origin in (EVIL, "null", "http://[bad"):  # an opaque or malformed one too
        listing = await client.get("/sessions", headers={"Origin": origin})
        assert listing.status_code == 403, origin
    # the page's own origin, a listed one and none at all are served
    for origin in (base, PAGE):
        assert (await client.get("/sessions", headers={"Origin": origin})).status_code == 200
    assert (await client.get("/sessions")).status_code == 200
    ws_url = base.replace("http", "ws") + f"/live/{sid}"
    with pytest.raises(InvalidStatus) as refused:
        async with connect(ws_url, origin=EVIL):  # type: ignore[arg-type]
            pass
    assert refused.value.response.status_code == 403
    async with connect(ws_url, origin=base) as ws:  # type: ignore[arg-type]
        ready = json.loads(await ws.recv())
        assert ready["type"] == "ready"


async def test_with_auth_a_cross_origin_websocket_is_refused_unless_listed(
        start: Start) -> None:
    base, client = await start(auth=AUTH, cors_origins=[PAGE])
    sid = (await client.post("/sessions", json={}, headers=A)).json()["id"]
    ws_url = base.replace("http", "ws") + f"/live/{sid}"
    with pytest.raises(InvalidStatus) as refused:
        async with connect(ws_url, origin=EVIL,  # type: ignore[arg-type]
                           subprotocols=["bearer", "token-a"]):  # type: ignore[list-item]
            pass
    assert refused.value.response.status_code == 403
    async with connect(ws_url, origin=PAGE,  # type: ignore[arg-type]
                       subprotocols=["bearer", "token-a"]) as ws:  # type: ignore[list-item]
        assert json.loads(await ws.recv())["type"] == "ready"


# -- lone surrogates -----------------------------------------------------------------------------


async def test_a_lone_surrogate_in_any_json_body_is_400_invalid_request(
        start: Start, caplog: pytest.LogCaptureFixture) -> None:
    _, client = await start(auth=AUTH)
    sid = (await client.post("/sessions", json={}, headers=A)).json()["id"]
    json_headers = {**A, "Content-Type": "application/json"}
    bodies = {
        "/sessions": f'{{"state": {{"note": {LONE}}}}}',
        f"/sessions/{sid}/runs": f'{{"message": {LONE}}}',
        "/ag-ui/bot": (f'{{"threadId": "{sid}", "runId": "r1", "messages": '
                       f'[{{"id": "m1", "role": "user", "content": {LONE}}}]}}'),
        "/vercel/bot": (f'{{"id": "{sid}", "messages": [{{"id": "m1", "role": "user", '
                        f'"parts": [{{"type": "text", "text": {LONE}}}]}}]}}'),
        "/sessions#key": f'{{"state": {{{LONE}: 1}}}}',  # a key is a string too
    }
    for path, body in bodies.items():
        answer = await client.post(path.partition("#")[0], content=body, headers=json_headers)
        assert answer.status_code == 400, (path, answer.text)
        assert answer.json()["error"]["code"] == "invalid_request"
    assert not [r for r in caplog.records if r.levelname == "ERROR"]
    # an escaped pair, and an escaped backslash before "ud800", are fine
    fine = await client.post("/sessions", headers=json_headers,
                             content='{"state": {"a": "\\ud83d\\ude00", "b": "\\\\ud800"}}')
    assert fine.status_code == 201
    assert fine.json()["state"] == {"a": "\U0001f600", "b": "\\ud800"}


# -- a real browser on another origin ------------------------------------------------------------

FETCH_RUN = """async ([gateway, token]) => {
  const headers = {"Authorization": `Bearer ${token}`, "Content-Type": "application/json"};
  try {
    const made = await fetch(`${gateway}/sessions`, {method: "POST", headers, body: "{}"});
    const sid = (await made.json()).id;
    const run = await fetch(`${gateway}/sessions/${sid}/runs`, {
      method: "POST", headers, body: JSON.stringify({message: "hello"})});
    return {status: run.status, runId: run.headers.get("X-Run-Id"), body: await run.text()};
  } catch (error) {
    return {blocked: String(error)};
  }
}"""


@pytest.mark.slow
async def test_a_page_of_a_listed_origin_runs_the_agent_from_a_browser(
        start: Start, serve: Serve, browser: Any) -> None:  # noqa: F811 - the fixture
    page_app = Starlette(routes=[Route("/", lambda _: HTMLResponse("<p>another origin</p>"))])
    page_origin = await serve(page_app)
    listed, _ = await start(auth=AUTH, cors_origins=[page_origin])
    unlisted, _ = await start(auth=AUTH)
    page = await browser.new_page()
    try:
        await page.goto(page_origin + "/")
        ran = await page.evaluate(FETCH_RUN, [listed, "token-a"])
        assert ran.get("status") == 200, ran
        assert ran["runId"]  # X-Run-Id is exposed to the page
        assert "event: done" in ran["body"]
        refused = await page.evaluate(FETCH_RUN, [unlisted, "token-a"])
        assert "blocked" in refused, refused  # the preflight is refused: fetch fails
    finally:
        await page.close()
