"""What a new user meets when something goes wrong, in a real browser (issue 26).

Debian's chromium, driven by Playwright, on a real server (the fixtures of
test_page_browser.py): a request that fails says so by the message box, with the
server's words and code; a 401 asks for a token; a message that does not go stays
in the box, and leaves no empty session behind. Then what the demo's live agents
leave: New session after a live hand-off is the coordinator's again, and a live
counter's card says it started, not "answered", before any frame. Each test
leaves screenshots in ``test-artifacts/``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest
import uvicorn

from headwater import Agent
from headwater.gateway import StaticTokenAuth, create_app
from headwater.sessions import InMemorySessionService
from headwater.testing import ScriptedModel

from .conftest import Serve
from .test_page_browser import (
    ARTIFACTS,
    browser,
    demo_app,
    open_page,
    run_ended,
    says,
    settings,
    shown,
)
from .test_websocket import responder as live_responder
from .test_websocket import ticker

__all__ = ["browser", "demo_app", "open_page"]  # fixtures, used by name

pytestmark = pytest.mark.slow  # each test drives a chromium process

TOKEN = "secret-token"
RED = "rgb(192, 57, 43)"  # .error in style.css


async def status(page: Any) -> str:
    """The status line by the message box, once it says a problem (its code is set)."""
    await page.wait_for_function("() => document.getElementById('status').dataset.code")
    text: str = await page.locator("#status").inner_text()
    return text


async def box(page: Any) -> str:
    value: str = await page.get_by_label("Message", exact=True).input_value()
    return value


async def snapshot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    await page.screenshot(path=str(ARTIFACTS / f"{name}.png"))


async def send(page: Any, text: str) -> None:
    await page.get_by_label("Message", exact=True).fill(text)
    await page.get_by_role("button", name="Send", exact=True).click()


async def test_a_401_asks_for_the_token_and_the_typed_text_is_kept(
        serve: Serve, open_page: Any, request: pytest.FixtureRequest) -> None:
    service = InMemorySessionService()
    app = create_app(Agent(name="helper", model=ScriptedModel().reply("Hello, Alice.")),
                     session_service=service, auth=StaticTokenAuth({TOKEN: "alice"}),
                     settings=settings())
    page = await open_page(await serve(app))
    dialog = page.get_by_role("dialog", name="Token needed")
    await dialog.wait_for()  # the list needs a token: the page asks at once
    assert await page.locator("#token-why").inner_text() == (
        "Missing or malformed bearer token. (unauthorized)")
    assert await status(page) == "Missing or malformed bearer token. (unauthorized)"
    await snapshot(page, f"{request.node.name}-asked")
    # Put off, then a message sent without a token: asked again; the message stays.
    await dialog.get_by_role("button", name="Cancel").click()
    await send(page, "Is anyone there?")
    await dialog.wait_for()
    assert await status(page) == "Missing or malformed bearer token. (unauthorized)"
    assert await box(page) == "Is anyone there?"
    # A wrong token: refused in the server's words, asked again, the message still there.
    await page.get_by_label("Token", exact=True).fill("wrong")
    await page.get_by_role("button", name="Save token", exact=True).click()
    await page.wait_for_function(
        "() => document.getElementById('token-why').textContent === "
        "'Invalid token. (unauthorized)'")
    await dialog.wait_for()
    assert await status(page) == "Invalid token. (unauthorized)"
    assert await box(page) == "Is anyone there?"
    await snapshot(page, f"{request.node.name}-refused")
    assert await service.list_sessions(app_name="helper", user_id="alice") == []
    # The right one: the same message goes, in one new session.
    await page.get_by_label("Token", exact=True).fill(TOKEN)
    await page.get_by_role("button", name="Save token", exact=True).click()
    await dialog.wait_for(state="hidden")
    assert await page.locator("#status").inner_text() == ""
    await page.get_by_role("button", name="Send", exact=True).click()
    await says(page, "helper", "Hello, Alice.")
    await run_ended(page)
    assert await shown(page, "user") == ["Is anyone there?"]
    assert await box(page) == ""
    assert len(await service.list_sessions(app_name="helper", user_id="alice")) == 1
    # The token can be changed at any time from the header.
    await page.get_by_role("button", name="Token", exact=True).click()
    await dialog.wait_for()
    assert await page.get_by_label("Token", exact=True).input_value() == TOKEN


@contextlib.asynccontextmanager
async def stoppable(app: Any) -> AsyncIterator[tuple[str, Callable[[], Awaitable[None]]]]:
    """``app`` under uvicorn on loopback, and a way to stop it mid-test (the server down)."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning",
                                           lifespan="off"))
    task = asyncio.create_task(server.serve())
    while not server.started:
        assert not task.done(), "uvicorn exited before it started"
        await asyncio.sleep(0.005)
    port = server.servers[0].sockets[0].getsockname()[1]

    async def stop() -> None:
        server.should_exit = True
        await asyncio.wait_for(asyncio.shield(task), 10)

    try:
        yield f"http://127.0.0.1:{port}", stop
    finally:
        if not task.done():
            await stop()


async def test_a_server_down_when_the_session_is_created_says_so_and_keeps_the_text(
        open_page: Any) -> None:
    app = create_app(Agent(name="helper", model=ScriptedModel().reply("Hi.")),
                     session_service=InMemorySessionService(), settings=settings())
    async with stoppable(app) as (base, stop):
        page = await open_page(base)
        await page.locator(".draft-hint").wait_for()
        await stop()
        await send(page, "Where is order 1042?")
        assert await status(page) == "The connection to the server was lost. (network)"
        assert await page.locator("#status").evaluate("e => getComputedStyle(e).color") == RED
        assert await box(page) == "Where is order 1042?"
        assert await page.locator("#sessions li").count() == 0
        assert await page.locator('[data-author="user"]').count() == 0
        assert await page.get_by_role("button", name="Send", exact=True).is_enabled()


@pytest.mark.parametrize(("bounds", "length", "said"), [
    ({"max_message_chars": 50}, 80,
     "The message is over this server's limit of 50 characters. (payload_too_large)"),
    ({"max_body_bytes": 1024}, 2000,
     "The request body is over this server's limit of 1,024 bytes. (payload_too_large)"),
    ({}, 1_500_000,  # more than the sockets hold: still being sent when it is refused
     "The request body is over this server's limit of 1,048,576 bytes. (payload_too_large)"),
], ids=["message", "body", "1.5MB"])
async def test_a_message_too_long_says_the_limit_keeps_the_text_and_stores_no_session(
        serve: Serve, open_page: Any, bounds: dict[str, int], length: int, said: str,
        request: pytest.FixtureRequest) -> None:
    model = ScriptedModel().reply("Short and sweet.")
    app = create_app(Agent(name="helper", model=model), session_service=InMemorySessionService(),
                     settings=settings().model_copy(update=bounds))
    base = await serve(app)
    page = await open_page(base)
    await page.locator(".draft-hint").wait_for()
    long = ("A long message. " * (length // 16 + 1))[:length]
    await send(page, long)
    assert await status(page) == said
    await run_ended(page)
    assert await box(page) == long.strip()  # the text is the box's again
    await snapshot(page, f"{request.node.name}-refused")
    assert await page.locator('[data-author="user"]').count() == 0
    assert await page.get_by_role("alert").count() == 0
    await page.wait_for_function("() => document.querySelectorAll('#sessions li').length === 0")
    async with httpx.AsyncClient(base_url=base) as client:  # the session made for it: gone
        assert (await client.get("/sessions")).json()["items"] == []
    assert model.requests == []
    await page.reload()
    await page.locator(".draft-hint").wait_for()  # still a draft after a reload
    assert await page.locator("#sessions li").count() == 0
    await send(page, "Short?")  # a message that fits goes, in one session
    await says(page, "helper", "Short and sweet.")
    await run_ended(page)
    assert await page.locator("#sessions li").count() == 1


async def test_in_a_live_session_a_message_too_long_is_the_boxs_again(
        serve: Serve, open_page: Any) -> None:
    app = create_app(Agent(name="voice", model=ScriptedModel(responder=live_responder),
                           tools=[ticker]),
                     session_service=InMemorySessionService(),
                     settings=settings().model_copy(update={"max_message_chars": 50}))
    page = await open_page(await serve(app))
    await page.get_by_role("button", name="Go live", exact=True).click()
    await page.wait_for_function("() => !document.getElementById('stop').disabled")  # ready
    long = "watch " * 20
    await send(page, long)
    assert await status(page) == (
        "The message is over this server's limit of 50 characters. (payload_too_large)")
    assert await box(page) == long.strip()
    assert await page.locator('[data-author="user"]').count() == 0
    await send(page, "watch")  # the socket is still open: a message that fits goes
    await page.wait_for_function("() => document.querySelectorAll('.emissions li').length >= 1")
    assert await page.locator("#status").inner_text() == "Live: messages go to the live run."
    await page.get_by_role("button", name="End live", exact=True).click()
    await page.get_by_role("button", name="Go live", exact=True).wait_for()


async def coordinator_draft(page: Any) -> None:
    """New session starts with the coordinator: the picker, the header and the hint say so."""
    await page.get_by_role("button", name="New session", exact=True).click()
    await page.locator(".draft-hint").wait_for()
    assert await page.get_by_label("Agent", exact=True).input_value() == "coordinator"
    assert await page.locator("#agent-info").inner_text() == (
        "agent coordinator · model demo · scripted model")
    assert (await page.locator(".draft-hint").inner_text()).startswith(
        "A new session with coordinator")


async def test_after_a_live_hand_off_new_session_is_the_coordinators_again(
        serve: Serve, open_page: Any, demo_app: Any, request: pytest.FixtureRequest) -> None:
    page = await open_page(await serve(demo_app, lifespan="on"))
    await page.wait_for_function(
        "() => document.querySelector('#agent-info').innerText.endsWith('scripted model')")
    for ask in ("typed", "suggested"):
        if ask == "typed":  # the coordinator hands it to market: a live session with market
            await send(page, "Watch GOOG")
        else:
            await page.locator("#suggestions").get_by_role("button", name="Watch GOOG").click()
        await page.wait_for_function(
            "() => document.querySelectorAll('.emissions li').length >= 1")
        assert await page.locator("#agent-info").inner_text() == (
            "agent market · model demo · scripted model")
        assert await page.get_by_label("Agent", exact=True).input_value() == "coordinator"
        await page.get_by_role("button", name="End live", exact=True).click()
        await page.get_by_role("button", name="Go live", exact=True).wait_for()
        await coordinator_draft(page)
    await snapshot(page, f"{request.node.name}-new")
    await send(page, "Where is order 1042?")  # the coordinator takes it, and hands it on
    await page.locator('article[data-author="support"]:not([data-draft])').wait_for()
    await run_ended(page)
    assert await page.locator(".transfer").all_inner_texts() == [
        "coordinator handed the conversation to support"]
    # A session opened from the list still sets the picker: market's, then New session.
    await page.locator("#sessions li button.open", has_text="market").first.click()
    await page.wait_for_function("() => document.querySelector('#agent').value === 'market'")


async def test_a_live_counter_says_it_started_until_its_first_value(
        serve: Serve, open_page: Any, demo_app: Any, request: pytest.FixtureRequest) -> None:
    page = await open_page(await serve(demo_app, lifespan="on"))
    await page.locator("#suggestions").get_by_role("button", name="Count the people").click()
    card = page.get_by_role("region", name="Tool count_people")
    await page.wait_for_selector('[aria-label="Tool count_people"][data-status="started"]')
    assert await card.locator(".state").inner_text() == "started: waiting for its first value"
    await snapshot(page, f"{request.node.name}-started")
    await page.get_by_role("button", name="Play sample frames").click()
    await page.wait_for_selector('[aria-label="Tool count_people"][data-status="streaming"]')
    assert (await card.locator(".state").inner_text()).startswith("streaming… (")
    await page.get_by_role("button", name="End live", exact=True).click()
    await page.get_by_role("button", name="Go live", exact=True).wait_for()
    assert await card.get_attribute("data-status") == "stopped"
    assert await page.get_by_role("alert").count() == 0
