"""The live panel in a real browser: the demo's people counter, fed frames over the WebSocket.

Debian's chromium, driven by Playwright, on ``headwater demo``'s app (the demo
model, a SQLite file); the fixtures are those of test_page_browser.py, and each
test leaves a screenshot in ``test-artifacts/``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from .conftest import Serve, unavailable
from .test_page_browser import (  # noqa: F401 (demo_app, open_page: fixtures)
    ARTIFACTS,
    CHROMIUM,
    _missing,
    demo_app,
    open_page,
)

pytestmark = pytest.mark.slow  # each test drives a chromium process

COUNTS = "count_people emissions"


@pytest.fixture
async def browser() -> AsyncIterator[Any]:
    """A headless chromium whose camera is chromium's fake device (a moving test pattern)."""
    reason = _missing()
    if reason is not None:
        unavailable(reason)
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True,
            args=["--use-fake-device-for-media-stream", "--use-fake-ui-for-media-stream"])
        try:
            yield launched
        finally:
            await launched.close()


async def emissions(page: Any) -> list[str]:
    texts: list[str] = await page.get_by_role("list", name=COUNTS).get_by_role(
        "listitem").all_inner_texts()
    return texts


async def start_counting(page: Any) -> None:
    """Ask the people agent to count, over the live WebSocket (the suggestion does it)."""
    await page.get_by_role("button", name="Count the people").click()
    card = page.get_by_role("region", name="Tool count_people")
    await card.wait_for()
    await page.get_by_role("region", name="Live input").wait_for()
    await page.wait_for_function(  # the model said it is counting: the call is running
        "() => [...document.querySelectorAll('[data-author=people]:not([data-draft]) .text')]"
        ".some(e => e.textContent.startsWith('Counting.'))")


async def test_the_people_counter_plays_the_sample_frames_shows_the_counts_and_stops(
        serve: Serve, open_page: Any, demo_app: Any) -> None:  # noqa: F811
    base = await serve(demo_app, lifespan="on")
    page = await open_page(base)
    await start_counting(page)
    await page.get_by_role("button", name="Play sample frames", exact=True).click()
    # The sequence shows 0, then 1, then 2 people (1 s sampling, 4 fps): the counts change.
    await page.wait_for_function(
        f"() => document.querySelectorAll('[aria-label=\"{COUNTS}\"] li').length >= 3",
        timeout=20_000)
    shown = [json.loads(t)["people"] for t in await emissions(page)]  # the values themselves
    assert shown[:3] == [0, 1, 2]
    assert (await page.get_by_role("region", name="Tool count_people").locator(".state")
            .inner_text()).startswith("streaming… (")
    latest = await page.get_by_label("Latest emission").inner_text()
    assert latest.startswith("count_people: {\"people\": ")
    assert await page.locator("#frame-preview").evaluate("c => [c.width, c.height]") == [32, 24]
    sent = int((await page.locator("#frames-status").inner_text()).split(": ")[1].split()[0])
    assert sent >= 8
    await page.wait_for_function(  # the model speaks each new count
        "() => [...document.querySelectorAll('[data-author=people]:not([data-draft]) .text')]"
        ".some(e => e.textContent === 'I can see 2 people.')")
    ARTIFACTS.mkdir(exist_ok=True)
    await page.screenshot(path=str(ARTIFACTS / "live-panel-playing.png"))
    await page.get_by_role("button", name="Stop", exact=True).click()  # ends the live run
    await page.get_by_role("button", name="Go live", exact=True).wait_for()
    assert await page.get_by_role("region", name="Live input").is_hidden()
    settled = len(await emissions(page))
    await asyncio.sleep(1.5)  # more than a sampling period: nothing more is counted
    assert len(await emissions(page)) == settled >= 3
    assert await page.get_by_role("alert").count() == 0
    assert await page.get_by_role("region", name="Tool count_people").get_attribute(
        "data-status") == "stopped"  # the run's end ended its stream
    async with httpx.AsyncClient(base_url=base) as client:
        [session] = [s for s in (await client.get("/sessions")).json()["items"]
                     if s["agent"] == "people"]
        items = (await client.get(f"/sessions/{session['id']}/events")).json()["items"]
    stored = [i["text"] for i in items if i.get("text", "").startswith("Function count_people")]
    assert stored[:3] == [f'Function count_people returned: {{"people": {n}}}' for n in range(3)]


async def test_the_camera_sends_pgm_frames_the_counter_reads(
        serve: Serve, open_page: Any, demo_app: Any) -> None:  # noqa: F811
    page = await open_page(await serve(demo_app, lifespan="on"))
    await start_counting(page)
    await page.get_by_role("button", name="Use camera", exact=True).click()
    await page.wait_for_function(
        "() => /Camera: [1-9]/.test(document.getElementById('frames-status').textContent)")
    # The fake camera's pattern is decoded and counted: the first count arrives.
    await page.wait_for_function(
        f"() => document.querySelectorAll('[aria-label=\"{COUNTS}\"] li').length >= 1",
        timeout=15_000)
    assert await page.locator("#frame-preview").evaluate("c => [c.width, c.height]") == [64, 48]
    await page.get_by_role("button", name="Stop frames", exact=True).click()
    assert await page.locator("#frames-status").inner_text() == ""
    await page.get_by_role("button", name="Stop", exact=True).click()
    await page.get_by_role("button", name="Go live", exact=True).wait_for()
    assert await page.get_by_role("alert").count() == 0


async def test_the_live_panel_shows_only_for_an_agent_with_an_input_stream_tool(
        serve: Serve, open_page: Any, demo_app: Any) -> None:  # noqa: F811
    page = await open_page(await serve(demo_app, lifespan="on"))
    panel = page.get_by_role("region", name="Live input")
    # The price watcher is live but reads no frames: no camera, no sample frames.
    await page.get_by_role("button", name="Watch GOOG").click()
    await page.wait_for_function("() => document.querySelectorAll('.emissions li').length >= 1")
    assert await page.get_by_role("button", name="End live", exact=True).is_visible()
    assert await panel.is_hidden()
    assert await page.get_by_role("button", name="Use camera").is_hidden()
    # The people counter's tool takes the input stream: the panel is there for it.
    await start_counting(page)
    assert await panel.is_visible()
    assert await page.get_by_role("button", name="Use camera", exact=True).is_visible()
    await page.get_by_role("button", name="Stop", exact=True).click()
    await page.get_by_role("button", name="Go live", exact=True).wait_for()
    assert await panel.is_hidden()
