"""The page at ``GET /``: served from the package, and its JavaScript's own tests."""

from __future__ import annotations

import asyncio
import base64
import importlib.util
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from headwater import Agent, LiveRequestQueue, tool
from headwater.gateway import StaticTokenAuth, create_app
from headwater.testing import ScriptedModel

from .conftest import require_node
from .stores import new_service
from .test_websocket import ticker

ROOT = Path(__file__).resolve().parents[2]


@tool
async def frames_seen(input_stream: LiveRequestQueue) -> AsyncIterator[int]:
    """How many frames came in so far, after each one."""
    seen = 0
    async for request in input_stream:
        if request.blob is not None:
            seen += 1
            yield seen


def lookup(order_id: str) -> str:
    """Look an order up (not a stream)."""
    return order_id


def config_of(html: str) -> Any:
    start = html.index('<script type="application/json" id="headwater-config">')
    body = html[html.index(">", start) + 1:html.index("</script>", start)]
    return json.loads(body)


def app(**options: Any) -> Any:
    agent = Agent(name="support", model=ScriptedModel().reply("hi"))
    return create_app(agent, session_service=new_service(), **options)


def test_the_pages_sse_fixture_is_the_python_encoders_output() -> None:
    # reducer.test.mjs feeds tests/fixtures/sse-page.json to the page's SSE reader: it must be
    # what headwater.sse writes today, not what it once wrote.
    spec = importlib.util.spec_from_file_location("sse_page", ROOT / "tests/fixtures/sse_page.py")
    assert spec is not None and spec.loader is not None
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    assert generator.FIXTURE.read_text(encoding="ascii") == generator.render(), (
        "tests/fixtures/sse-page.json is stale: run PYTHONPATH=src python "
        "tests/fixtures/sse_page.py")
    events = json.loads(generator.render())["events"]
    assert {e["type"] for e in events} == {"delta", "message", "done"} and len(events) > 10


@pytest.mark.parametrize("name", ["reducer.test.mjs", "media.test.mjs"])
async def test_the_pages_modules_pass_their_node_tests(name: str) -> None:
    process = await asyncio.create_subprocess_exec(
        require_node(), "--test", f"tests/js/{name}", cwd=ROOT,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 0, out.decode()
    assert "# fail 0" in out.decode()


async def test_the_page_and_its_modules_come_from_this_origin(client_for: Any) -> None:
    client = await client_for(app())
    page = await client.get("/")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert "default-src 'self'" in page.headers["content-security-policy"]
    assert config_of(page.text) == {
        "auth": "none", "agents": [{"name": "support", "model": "scripted",
                                    "input_stream": False, "live": False}],
        "suggestions": [], "note": "", "sample_frames": 0}
    # The browser asks for an icon: one is named (no 404 in the console on a fresh load).
    assert '<link rel="icon" href="/static/icon.svg"' in page.text
    assert 'src="/static/app.js"' in page.text and "http" not in page.text.split("<body>")[0]
    for name, kind in (("app.js", "text/javascript"), ("reducer.js", "text/javascript"),
                       ("sse.js", "text/javascript"), ("media.js", "text/javascript"),
                       ("inspect.js", "text/javascript"), ("dom.js", "text/javascript"),
                       ("style.css", "text/css"), ("icon.svg", "image/svg+xml")):
        asset = await client.get(f"/static/{name}")
        assert asset.status_code == 200, name
        assert asset.headers["content-type"].startswith(kind)


async def test_with_auth_the_page_asks_for_a_token_and_the_api_still_needs_one(
        client_for: Any) -> None:
    client = await client_for(app(auth=StaticTokenAuth({"t": "alice"})))
    page = await client.get("/")
    assert page.status_code == 200
    assert config_of(page.text)["auth"] == "bearer"
    assert (await client.get("/sessions")).status_code == 401


@pytest.mark.parametrize("name", ["nope.js", "..%2Fpage.py", ".hidden.js", "page.py"])
async def test_only_the_static_files_are_served(client_for: Any, name: str) -> None:
    client = await client_for(app())
    response = await client.get(f"/static/{name}")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


async def test_an_app_may_give_the_page_suggestions_and_a_note(client_for: Any) -> None:
    served = create_app([Agent(name="support", model=ScriptedModel(), tools=[ticker]),
                         Agent(name="ops", model=ScriptedModel(model="demo"),
                               tools=[ticker, frames_seen]),
                         Agent(name="plain", model=ScriptedModel(), tools=[lookup])],
                        session_service=new_service())
    served.state.page_suggestions = ["Where is order 1042?", "</script><b>",
                                      {"text": "Watch GOOG", "agent": "ops", "live": True}]
    served.state.page_note = "scripted model"
    client = await client_for(served)
    html = (await client.get("/")).text
    assert "</script><b>" not in html  # cannot close the JSON block
    assert config_of(html) == {
        "auth": "none", "agents": [  # a live tool alone takes no frames; an input-stream one does
            {"name": "support", "model": "scripted", "input_stream": False, "live": True},
            {"name": "ops", "model": "demo", "input_stream": True, "live": True},
            {"name": "plain", "model": "scripted", "input_stream": False, "live": False}],
        "suggestions": [{"text": "Where is order 1042?", "agent": None, "live": False},
                        {"text": "</script><b>", "agent": None, "live": False},
                        {"text": "Watch GOOG", "agent": "ops", "live": True}],
        "note": "scripted model", "sample_frames": 0}


async def test_an_app_may_give_the_live_panel_sample_frames(client_for: Any) -> None:
    served = app(auth=StaticTokenAuth({"t": "alice"}))
    pgm = b"P5 1 1 255\n\x00"
    served.state.page_frames = {"fps": 4, "frames": [("image/x-portable-graymap", pgm),
                                                     ("image/png", b"\x89PNG")]}
    client = await client_for(served)
    assert config_of((await client.get("/")).text)["sample_frames"] == 2
    frames = await client.get("/page/frames")  # public, like the page's files
    assert frames.status_code == 200
    assert frames.json() == {"fps": 4.0, "frames": [
        {"mime_type": "image/x-portable-graymap", "data": base64.b64encode(pgm).decode()},
        {"mime_type": "image/png", "data": "iVBORw=="}]}


async def test_without_sample_frames_the_route_answers_not_found(client_for: Any) -> None:
    client = await client_for(app())
    response = await client.get("/page/frames")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_the_page_is_not_in_the_api_schema() -> None:
    paths = app().openapi()["paths"]
    assert "/" not in paths and not any(p.startswith(("/static", "/page")) for p in paths)
