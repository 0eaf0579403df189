"""The page's Inspect drawer (docs/inspector.md) in a real browser: Debian's chromium, driven
by Playwright, on a real server (the fixtures of ``test_page_browser``): a bar per span, every
frame in order, the state a tool changed highlighted, the timeline after a reload, the
keyboard shortcut, a transfer's arrow, and a live run's turns."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from headwater import Agent, ToolContext
from headwater.gateway import create_app
from headwater.sessions import InMemorySessionService
from headwater.testing import ScriptedModel
from headwater.types import Usage

from .conftest import Serve
from .test_page_browser import (  # noqa: F401 (browser, open_page: fixtures)
    browser,
    open_page,
    run_ended,
    settings,
)

pytestmark = pytest.mark.slow  # each test drives a chromium process


def remember_order(order_id: str, tool_context: ToolContext) -> dict[str, str]:
    """Look an order up and remember it as the session's last order.

    Args:
        order_id: the order.
    """
    tool_context.state["last_order"] = order_id
    return {"status": "shipped"}


def order_agent() -> Agent:
    model = (ScriptedModel(model="scripted-orders")
             .call("remember_order", {"order_id": "1042"}, call_id="c1",
                   usage=Usage(input_tokens=21, output_tokens=4, total_tokens=25))
             .reply("Order 1042 ", "has shipped.", delay=0.02,
                    usage=Usage(input_tokens=35, output_tokens=5, total_tokens=40)))
    return Agent(name="support", model=model, tools=[remember_order],
                 instruction="You answer questions about orders.")


async def trace_of(base: str, run_id: str) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=base) as client:
        response = await client.get(f"/runs/{run_id}/trace")
        assert response.status_code == 200, response.text
        trace: dict[str, Any] = response.json()
        return trace


async def frames_of(base: str, run_id: str) -> list[tuple[int, str]]:
    """The run's frames as the server logged them (replayed from its run log)."""
    async with httpx.AsyncClient(base_url=base) as client:
        response = await client.get(f"/runs/{run_id}/stream",
                                    headers={"Last-Event-ID": "0"})
        assert response.status_code == 200, response.text
    frames, fid = [], 0
    for line in response.text.splitlines():
        if line.startswith("id: "):
            fid = int(line[4:])
        elif line.startswith("event: "):
            frames.append((fid, line[7:]))
    return frames


async def ask(page: Any, text: str) -> None:
    await page.get_by_role("button", name="New session", exact=True).click()
    await page.get_by_label("Message", exact=True).fill(text)
    await page.get_by_role("button", name="Send", exact=True).click()
    await page.wait_for_selector("#sessions li[aria-current=true]")
    await run_ended(page)


async def bars(page: Any) -> list[dict[str, str]]:
    await page.wait_for_selector("#inspect-panel .tracks")
    found: list[dict[str, str]] = await page.locator("#inspect-panel [data-span]").evaluate_all(
        "nodes => nodes.map(n => ({id: n.dataset.span, kind: n.dataset.kind}))")
    return found


async def test_the_drawer_shows_the_run_s_spans_frames_events_and_state(
        serve: Serve, open_page: Any) -> None:  # noqa: F811
    app = create_app(order_agent(), session_service=InMemorySessionService(),
                     settings=settings())
    base = await serve(app)
    page = await open_page(base)
    await ask(page, "Where is order 1042?")
    button = page.get_by_role("button", name="Inspect this run")
    run_id = await button.get_attribute("data-run")
    await button.click()
    assert await page.get_by_role("tab", name="Timeline").get_attribute(
        "aria-selected") == "true"
    trace = await trace_of(base, run_id)
    shown = await bars(page)
    assert [(int(b["id"]), b["kind"]) for b in shown] == [
        (s["id"], s["kind"]) for s in trace["spans"]]  # a bar per span
    assert [b["kind"] for b in shown] == ["agent", "model", "tool", "model"]
    label = await page.locator('#inspect-panel .bar.model').first.inner_text()
    assert "scripted-orders" in label and "21→4 tok" in label
    assert "status: ok" in await page.locator(
        '#inspect-panel .bar.tool').get_attribute("title")  # hovering shows its attributes
    await page.locator('#inspect-panel .bar.model').last.click()
    detail = page.locator("#inspect-panel .span-detail")
    await detail.get_by_text("You answer questions about orders.").wait_for()  # dev mode: sent
    assert "has shipped." in await detail.inner_text()

    await page.get_by_role("tab", name="Frames").click()
    await page.wait_for_selector("#inspect-panel table.frames")
    rows = await page.locator("#inspect-panel tr[data-frame]").evaluate_all(
        "rows => rows.map(r => [Number(r.dataset.frame), r.children[2].innerText])")
    assert [tuple(r) for r in rows] == await frames_of(base, run_id)  # every frame, in order
    assert rows[-1][1] == "done"

    await page.get_by_role("tab", name="Events").click()
    await page.wait_for_selector("#inspect-panel ol.events")
    items = page.locator("#inspect-panel ol.events > li")
    assert await items.count() == 4  # the user's message, the call, its result, the answer
    assert "changed last_order" in await items.nth(2).inner_text()

    await page.get_by_role("tab", name="State").click()
    changed = page.locator('#inspect-panel tr.changed[data-key="last_order"]')
    await changed.wait_for()
    assert await changed.count() == 1  # highlighted where the tool's result changed it
    assert json.loads(await changed.locator("code").inner_text()) == "1042"

    await page.keyboard.press("Escape")
    assert await page.locator("#inspector").is_hidden()

    await page.reload()  # the trace and the events come from the server
    await page.get_by_role("button", name="Inspect this run").click()
    assert [(int(b["id"]), b["kind"]) for b in await bars(page)] == [
        (s["id"], s["kind"]) for s in trace["spans"]]
    await page.get_by_role("tab", name="Frames").click()
    await page.get_by_text("were not streamed to this page").wait_for()
    await page.keyboard.press("Alt+KeyI")  # the shortcut closes it, and opens the last run
    assert await page.locator("#inspector").is_hidden()
    await page.keyboard.press("Alt+KeyI")
    assert await page.locator("#inspector").is_visible()
    assert run_id in await page.locator("#inspect-title").inner_text()


async def test_a_transfer_is_an_arrow_between_two_agents_rows(
        serve: Serve, open_page: Any) -> None:  # noqa: F811
    billing = Agent(name="billing", model=ScriptedModel(model="m-billing").reply("Refunded."))
    coordinator = Agent(name="coordinator", sub_agents=[billing], model=ScriptedModel(
        model="m-coord").call("transfer_to_agent", {"agent_name": "billing"}, call_id="t1"))
    app = create_app(coordinator, session_service=InMemorySessionService(),
                     settings=settings())
    page = await open_page(await serve(app))
    await ask(page, "Refund me")
    await page.get_by_role("button", name="Inspect this run").click()
    shown = sorted(await bars(page), key=lambda b: int(b["id"]))
    assert [b["kind"] for b in shown] == ["agent", "model", "tool", "transfer", "agent",
                                          "model"]
    lanes = await page.locator("#inspect-panel .lane").evaluate_all(
        "nodes => nodes.map(n => n.dataset.agent)")
    assert lanes == ["coordinator", "billing"]
    arrow = page.get_by_role("img", name="transfer from coordinator to billing")
    box = await arrow.bounding_box()
    assert box is not None and box["height"] > 20  # it spans from one row to the next


async def test_a_live_run_can_be_inspected_while_it_goes(
        serve: Serve, open_page: Any) -> None:  # noqa: F811
    model = ScriptedModel(model="m-live").reply("Hello ", "there.").reply("Again.")
    app = create_app(Agent(name="voice", model=model), session_service=InMemorySessionService(),
                     settings=settings())
    page = await open_page(await serve(app))
    await page.get_by_role("button", name="New session", exact=True).click()
    await page.get_by_role("button", name="Go live").click()
    await page.wait_for_function("() => !document.getElementById('send').disabled")
    for text in ("hi", "again"):
        await page.get_by_label("Message", exact=True).fill(text)
        await page.get_by_role("button", name="Send", exact=True).click()
        await page.wait_for_selector(f'[data-author="voice"]:not([data-draft]) >> '
                                     f'text={"there." if text == "hi" else "Again."}')
    await page.keyboard.press("Alt+KeyI")
    shown = await bars(page)
    assert [b["kind"] for b in shown] == ["agent", "model", "model"]
    await page.get_by_text("still going").wait_for()
    await page.get_by_role("tab", name="Frames").click()
    types = await page.locator("#inspect-panel tr[data-frame]").evaluate_all(
        "rows => rows.map(r => r.children[2].innerText)")
    assert types.count("turn_complete") == 2 and types.count("message") == 2


async def test_the_frames_of_a_stream_resumed_after_a_reload_say_where_it_resumed(
        serve: Serve, open_page: Any) -> None:  # noqa: F811
    model = ScriptedModel(model="m-slow").reply(*(f"word{n} " for n in range(30)), delay=0.06)
    app = create_app(Agent(name="storyteller", model=model),
                     session_service=InMemorySessionService(), settings=settings())
    base = await serve(app)
    page = await open_page(base)
    await page.get_by_role("button", name="New session", exact=True).click()
    await page.get_by_label("Message", exact=True).fill("Tell me a long story")
    await page.get_by_role("button", name="Send", exact=True).click()
    await page.wait_for_function(
        "() => (document.querySelector('[data-draft]')?.textContent ?? '').includes('word3 ')")
    await page.reload()  # the page follows the run again after the last stored frame
    await page.wait_for_selector('[data-author="storyteller"]:not([data-draft])')
    await run_ended(page)
    button = page.get_by_role("button", name="Inspect this run")
    run_id = await button.get_attribute("data-run")
    await button.click()
    await page.get_by_role("tab", name="Frames").click()
    marker = page.locator("#inspect-panel tr.resumed")
    await marker.wait_for()
    assert "resumed after frame 0" in await marker.inner_text()  # no frame of it was stored
    rows = await page.locator("#inspect-panel tr[data-frame]").evaluate_all(
        "rows => rows.map(r => [Number(r.dataset.frame), r.children[2].innerText])")
    assert [tuple(r) for r in rows] == await frames_of(base, run_id)  # replayed whole, in order
