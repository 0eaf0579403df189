"""The page's sessions, composer and approval card in a real browser (issue 19).

Debian's chromium, driven by Playwright, on a real server (the fixtures of
test_page_browser.py): a new session is stored with its first message, the list
shows that message as its title, delete asks first, Send waits for the run, and
at 400 px the approval card's buttons sit clear of its status, on one line.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from headwater import Agent, tool
from headwater.gateway import create_app
from headwater.sessions import InMemorySessionService
from headwater.testing import ScriptedModel, wait_until

from .conftest import Serve
from .test_page_browser import (  # noqa: F401 (browser, open_page: fixtures)
    ARTIFACTS,
    browser,
    deploy,
    open_page,
    run_ended,
    says,
    settings,
    shown,
)

pytestmark = pytest.mark.slow  # each test drives a chromium process


async def stored_sessions(base: str) -> list[dict[str, Any]]:
    """What the gateway holds (``GET /sessions``), newest first."""
    async with httpx.AsyncClient(base_url=base) as client:
        response = await client.get("/sessions")
        assert response.status_code == 200
        items: list[dict[str, Any]] = response.json()["items"]
        return items


async def titles(page: Any) -> list[str]:
    texts: list[str] = await page.locator("#sessions li .title").all_inner_texts()
    return texts


class Hold:
    """A tool that holds its run until the test lets it go: a run surely going on."""

    def __init__(self) -> None:
        self.released = asyncio.Event()

        @tool(name="hold")
        async def hold() -> str:
            """Wait for the go-ahead."""
            await self.released.wait()
            return "released"

        self.tool = hold

    def model(self, answer: str) -> ScriptedModel:
        """A model that calls the held tool, then answers ``answer``."""
        return ScriptedModel().call("hold", {}).reply(answer)


async def holding(page: Any) -> None:
    """The run is going on, at the held tool."""
    await page.wait_for_selector('[aria-label="Tool hold"][data-status="running"]')


def two_agents(support: Agent, ops: ScriptedModel) -> Any:
    app = create_app([support, Agent(name="ops", model=ops)],
                     session_service=InMemorySessionService(), settings=settings())
    app.state.page_suggestions = ["Where is order 1042?",
                                  {"text": "Deploy version 2 to staging", "agent": "ops"}]
    return app


async def test_new_session_and_suggestions_store_nothing_until_a_message_is_sent(
        serve: Serve, open_page: Any) -> None:  # noqa: F811
    held = Hold()
    support = Agent(name="support", model=held.model("Once upon a time."), tools=[held.tool])
    app = two_agents(support, ScriptedModel().reply("Deploying."))
    base = await serve(app)
    page = await open_page(base)
    new = page.get_by_role("button", name="New session", exact=True)
    hint = page.locator(".draft-hint")
    await hint.wait_for()  # no session yet: the page says what a new one is
    for agent in ("ops", "support", "ops", "support"):
        await page.get_by_label("Agent", exact=True).select_option(agent)
        await new.click()
        await new.click()
        assert (await hint.inner_text()).startswith(f"A new session with {agent}:")
    assert await stored_sessions(base) == []
    assert await page.locator("#sessions li").count() == 0
    # The first message stores the session, for the agent chosen.
    await page.get_by_label("Message", exact=True).fill("Tell me a long story")
    await page.get_by_role("button", name="Send", exact=True).click()
    await holding(page)
    [story] = await stored_sessions(base)
    assert story["agent"] == "support"
    # While it runs, the suggestions wait too (each would be a message, in a new session).
    suggestions = page.locator("#suggestions button")
    assert [await b.is_disabled() for b in await suggestions.all()] == [True, True]
    held.released.set()
    await says(page, "support", "Once upon a time.")
    await run_ended(page)
    for _ in range(3):
        await new.click()
    assert len(await stored_sessions(base)) == 1
    # A suggestion for another agent: a new session, stored with its message.
    await page.get_by_role("button", name="Deploy version 2 to staging").click()
    await says(page, "ops", "Deploying.")
    await run_ended(page)
    stored = await stored_sessions(base)
    assert [(s["agent"], s["title"]) for s in stored] == [
        ("ops", "Deploy version 2 to staging"), ("support", "Tell me a long story")]
    assert await titles(page) == ["Deploy version 2 to staging", "Tell me a long story"]
    await page.reload()  # what is listed is what is stored
    await page.locator("#sessions li").nth(1).wait_for()
    assert await titles(page) == ["Deploy version 2 to staging", "Tell me a long story"]


async def test_the_list_titles_a_session_by_its_first_message_from_the_moment_it_is_sent(
        serve: Serve, open_page: Any) -> None:  # noqa: F811
    long = "Where is my order? " * 10
    held = Hold()
    support = held.model("Once upon a time.").reply("It shipped.")
    app = create_app(Agent(name="support", model=support, tools=[held.tool]),
                     session_service=InMemorySessionService(), settings=settings())
    base = await serve(app)
    page = await open_page(base)
    message = page.get_by_label("Message", exact=True)
    await message.fill("Tell me a long story")
    await page.get_by_role("button", name="Send", exact=True).click()
    # Listed with its title at once, while the run is still going on.
    await holding(page)
    await page.wait_for_selector("#sessions li[aria-current=true]")
    assert await titles(page) == ["Tell me a long story"]
    held.released.set()
    await run_ended(page)
    await page.get_by_role("button", name="New session", exact=True).click()
    await message.fill(long)
    await page.get_by_role("button", name="Send", exact=True).click()
    await page.wait_for_function(
        "() => [...document.querySelectorAll('[data-author=support]:not([data-draft]) .text')]"
        ".at(-1)?.textContent === 'It shipped.'")
    await run_ended(page)
    [newest, first] = await stored_sessions(base)
    assert newest["title"] == long.strip()[:79].rstrip() + "…"  # cut by the gateway (80)
    assert await titles(page) == [newest["title"], "Tell me a long story"]
    assert first["title"] == "Tell me a long story"
    # Not "agent · time · id": the title, and under it the agent and the time.
    meta = await page.locator("#sessions li .meta").all_inner_texts()
    assert all(m.startswith("support · ") for m in meta) and newest["id"][:6] not in meta[0]
    # A long title stays on its line in the sidebar: cut there too, nothing sideways.
    nav = await page.get_by_role("navigation", name="Sessions").bounding_box()
    box = await page.locator("#sessions li .title").first.bounding_box()
    assert nav is not None and box is not None
    assert box["x"] + box["width"] <= nav["x"] + nav["width"]


async def test_delete_asks_first_and_a_no_keeps_the_session(
        serve: Serve, open_page: Any) -> None:  # noqa: F811
    app = create_app(Agent(name="support", model=ScriptedModel().reply("Yes.")),
                     session_service=InMemorySessionService(), settings=settings())
    base = await serve(app)
    page = await open_page(base)
    await page.get_by_label("Message", exact=True).fill("Are you there?")
    await page.get_by_role("button", name="Send", exact=True).click()
    await says(page, "support", "Yes.")
    await run_ended(page)
    delete = page.get_by_role("button", name="Delete session Are you there?", exact=True)
    asked: list[str] = []

    async def dismiss(dialog: Any) -> None:
        asked.append(dialog.message)
        await dialog.dismiss()

    page.once("dialog", dismiss)
    await delete.click()
    await wait_until(lambda: asked, timeout=10, interval=0.05, message="the page to ask")
    await page.evaluate("() => new Promise(requestAnimationFrame)")  # the answer is in
    assert asked == ['Delete the session "Are you there?"? Its messages are deleted too.']
    assert len(await stored_sessions(base)) == 1
    assert await page.locator("#sessions li").count() == 1
    assert await shown(page, "support") == ["Yes."]

    async def accept(dialog: Any) -> None:
        asked.append(dialog.message)
        await dialog.accept()

    page.once("dialog", accept)
    await delete.click()
    await page.wait_for_function("() => document.querySelectorAll('#sessions li').length === 0")
    assert len(asked) == 2
    assert await stored_sessions(base) == []
    await page.locator(".draft-hint").wait_for()  # nothing left: a new session, not stored


async def test_send_is_disabled_while_a_run_is_active_and_enabled_at_its_end(
        serve: Serve, open_page: Any) -> None:  # noqa: F811
    held = Hold()
    support = held.model("Once upon a time.").reply("Next answer.")
    app = create_app(Agent(name="support", model=support, tools=[held.tool]),
                     session_service=InMemorySessionService(), settings=settings())
    page = await open_page(await serve(app))
    message = page.get_by_label("Message", exact=True)
    send = page.get_by_role("button", name="Send", exact=True)
    await message.fill("Tell me a long story")
    await send.click()
    await holding(page)
    assert await send.is_disabled()
    await message.fill("And then?")  # typed while the run goes on: kept, not sent
    await message.press("Enter")
    assert await message.input_value() == "And then?"
    assert await page.locator("#status").inner_text() == "Calling hold…"
    held.released.set()
    await run_ended(page)
    await page.wait_for_function("() => !document.getElementById('send').disabled")
    assert await shown(page, "user") == ["Tell me a long story"]
    assert await message.input_value() == "And then?"
    await send.click()
    await page.wait_for_function(
        "() => [...document.querySelectorAll('[data-author=support]:not([data-draft]) .text')]"
        ".at(-1)?.textContent === 'Next answer.'")
    await run_ended(page)
    assert await shown(page, "support") == ["Once upon a time.", "Next answer."]
    assert await shown(page, "user") == ["Tell me a long story", "And then?"]
    assert len(support.requests) == 3  # the call, its answer; the next question's answer
    assert await send.is_enabled()


async def box_of(locator: Any) -> dict[str, float]:
    box: dict[str, float] | None = await locator.bounding_box()
    assert box is not None, locator
    return box


def overlaps(a: dict[str, float], b: dict[str, float]) -> bool:
    return (a["x"] < b["x"] + b["width"] and b["x"] < a["x"] + a["width"]
            and a["y"] < b["y"] + b["height"] and b["y"] < a["y"] + a["height"])


@pytest.mark.parametrize("width", [1280, 400])
async def test_the_approval_buttons_sit_clear_of_the_status_on_one_line(
        serve: Serve, open_page: Any, width: int) -> None:  # noqa: F811
    model = ScriptedModel().call("deploy", {"version": 2, "env": "staging"}).reply("Done.")
    app = create_app(Agent(name="ops", model=model, tools=[deploy]),
                     session_service=InMemorySessionService(), settings=settings())
    page = await open_page(await serve(app))
    await page.set_viewport_size({"width": width, "height": 700})
    await page.get_by_label("Message", exact=True).fill("Deploy version 2 to staging")
    await page.get_by_role("button", name="Send", exact=True).click()
    approve = page.get_by_role("button", name="Approve", exact=True)
    await approve.wait_for()
    await run_ended(page)
    card = page.get_by_role("region", name="Tool deploy")
    assert await card.locator(".state").inner_text() == "waiting for approval"
    state, outer = await box_of(card.locator(".state")), await box_of(card)
    approve_box, deny, send = [await box_of(page.get_by_role("button", name=name, exact=True))
                               for name in ("Approve", "Deny", "Send")]
    for box in (approve_box, deny):
        assert not overlaps(box, state), (box, state)
        assert box["x"] >= outer["x"] and box["x"] + box["width"] <= outer["x"] + outer["width"]
        assert abs(box["height"] - send["height"]) < 2, (box, send)  # one line, as Send is
    assert approve_box["y"] == deny["y"]  # side by side, on one row
    assert approve_box["x"] + approve_box["width"] < deny["x"]
    assert await page.evaluate("() => document.documentElement.scrollWidth") == width
    ARTIFACTS.mkdir(exist_ok=True)
    await page.screenshot(path=str(ARTIFACTS / f"approval-card-{width}.png"))
    await approve.click()
    await says(page, "ops", "Done.")
