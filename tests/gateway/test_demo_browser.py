"""``headwater demo`` in a real browser: its default agent is a coordinator, so each of the
demo model's prompts, typed into a fresh session, reaches the agent that can answer it.

The same chromium and fixtures as ``test_page_browser.py``; the screenshot is left in
``test-artifacts/``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from headwater.cli._agents import PROMPT_AGENTS
from headwater.examples import research
from headwater.gateway import create_app
from headwater.models.demo import PROMPTS, DemoModel
from headwater.sessions import InMemorySessionService
from headwater.settings import reload_settings
from headwater.testing import wait_until

from .test_page_browser import ARTIFACTS, Serve, browser, demo_app, open_page, run_ended

__all__ = ["browser", "demo_app", "open_page"]  # fixtures, used by name

pytestmark = pytest.mark.slow  # drives a chromium process


async def type_in_a_fresh_session(page: Any, text: str) -> None:
    """A new session with the default agent (the coordinator), the text typed and sent."""
    await page.get_by_label("Agent", exact=True).select_option("coordinator")
    await page.get_by_role("button", name="New session", exact=True).click()
    await page.get_by_label("Message", exact=True).fill(text)
    await page.get_by_role("button", name="Send", exact=True).click()


async def answered_by(page: Any, agent: str) -> str:
    """The first message of ``agent`` once stored (not a draft), checking its label."""
    message = page.locator(f'article[data-author="{agent}"]:not([data-draft])').first
    await message.wait_for()
    assert (await message.locator(".who").inner_text()).strip() == agent
    return str(await message.locator(".text").inner_text())


async def transferred(page: Any, agent: str) -> None:
    """The page says the coordinator handed the conversation to ``agent`` (and draws no
    card for the transfer call)."""
    assert await page.locator(".transfer").all_inner_texts() == [
        f"coordinator handed the conversation to {agent}"]
    assert await page.get_by_role("region", name="Tool transfer_to_agent").count() == 0


async def test_each_prompt_typed_into_a_fresh_session_reaches_its_agent(
        serve: Serve, open_page: Any, demo_app: Any) -> None:
    page = await open_page(await serve(demo_app, lifespan="on"))
    await page.wait_for_function(
        "() => document.querySelector('#agent-info').innerText.endsWith('scripted model')")
    assert await page.locator("#agent-info").inner_text() == (
        "agent coordinator · model demo · scripted model")
    for prompt in PROMPTS:
        agent = PROMPT_AGENTS[prompt]
        await type_in_a_fresh_session(page, prompt)
        if agent == "support":
            assert "Order 1042 shipped" in await answered_by(page, "support")
            await transferred(page, "support")
        elif agent == "docs":
            assert (await answered_by(page, "docs")).startswith("I found 3 pages")
            await transferred(page, "docs")
            assert await page.get_by_role("progressbar", name="search_docs progress").evaluate(
                "bar => [bar.value, bar.max]") == [5, 5]
        elif agent == "indexer":  # its tool is an MCP server's: the bar fills from its progress
            assert await answered_by(page, "indexer") == (
                "I indexed 8 pages of the docs (25,300 words).")
            await transferred(page, "indexer")
            assert await page.get_by_role("progressbar", name="index_docs progress").evaluate(
                "bar => [bar.value, bar.max]") == [8, 8]
            assert await page.get_by_label("index_docs progress message").inner_text() == (
                "index written")
        elif agent == "deploy":
            card = page.get_by_role("region", name="Tool deploy")
            await card.get_by_role("button", name="Approve", exact=True).click()
            assert await answered_by(page, "deploy") == "Version 2 is live on staging."
            assert await card.locator(".who").inner_text() == "deploy"
            await transferred(page, "deploy")
        elif agent == "release":  # a pause inside the deployer agent release calls as a tool
            card = page.get_by_role("region", name="Tool deploy", exact=True)
            await card.get_by_role("button", name="Approve", exact=True).wait_for()
            assert await card.locator(":scope > .who").inner_text() == "deployer"  # inner agent
            outer = page.get_by_role("region", name="Tool deployer", exact=True)
            assert await outer.locator(":scope > .who").inner_text() == "release"
            assert await outer.get_attribute("data-status") == "waiting"
            await page.screenshot(path=str(ARTIFACTS / "demo-inner-approval.png"))
            await run_ended(page)
            await page.reload()  # the pause as the history holds it: the same cards
            await card.get_by_role("button", name="Approve", exact=True).wait_for()
            assert await card.locator(":scope > .who").inner_text() == "deployer"
            assert await outer.get_attribute("data-status") == "waiting"
            await card.get_by_role("button", name="Approve", exact=True).click()
            assert await answered_by(page, "release") == (
                "deployer says: Version 3 is live on staging.")
            assert await answered_by(page, "deployer") == "Version 3 is live on staging."
            assert await outer.get_attribute("data-status") == "ok"
            await transferred(page, "release")
        elif agent == "market":  # the coordinator's transfer opens a live session with market
            await page.wait_for_function(
                "() => document.querySelectorAll('.emissions li').length >= 1")
            assert await answered_by(page, "market") == (
                "Watching. I'll mention significant moves.")
            assert await page.locator("#agent-info").inner_text() == (
                "agent market · model demo · scripted model")
            assert await page.locator(".transfer").count() == 0  # the live session's own
            await page.get_by_role("button", name="End live", exact=True).click()
            await page.get_by_role("button", name="Go live", exact=True).wait_for()
        elif agent == "people":  # live, and the live panel takes the camera's frames
            await page.get_by_role("button", name="Play sample frames").wait_for()
            assert await page.locator("#agent-info").inner_text() == (
                "agent people · model demo · scripted model")
            assert await answered_by(page, "people") == (
                "Counting. I'll tell you when the number changes.")
            await page.get_by_role("button", name="End live", exact=True).click()
            await page.get_by_role("button", name="Go live", exact=True).wait_for()
        else:  # the story: the coordinator tells it itself
            assert agent == "coordinator"
            assert (await answered_by(page, "coordinator")).startswith("Once upon a time")
            assert await page.locator(".transfer").count() == 0
        await run_ended(page)
        assert await page.get_by_role("alert").count() == 0, prompt
        assert "Ask the agent that has it" not in await page.locator("#log").inner_text()
    # Each prompt has its session; a live prompt has the coordinator's and the live one.
    assert await page.locator("#sessions li").count() == len(PROMPTS) + 2


@pytest.fixture
def slow_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The demo's app with the index server at a pace a person sees (0.5 s a page)."""
    from headwater.cli import demo_app

    monkeypatch.setenv("HEADWATER_DEMO_WORD_DELAY", "0.05")
    monkeypatch.setenv("HEADWATER_SESSION_LOCK_TIMEOUT", "0")
    reload_settings()
    yield demo_app(f"sqlite+aiosqlite:///{tmp_path / 'demo.db'}", DemoModel(word_delay=0.003))
    monkeypatch.undo()
    reload_settings()


async def test_the_indexers_mcp_progress_fills_its_bar_and_stop_cancels_it_on_the_server(
        serve: Serve, open_page: Any, slow_index: Any, capfd: pytest.CaptureFixture[str]
        ) -> None:
    page = await open_page(await serve(slow_index, lifespan="on"))
    await type_in_a_fresh_session(page, "Index the docs")
    bar = page.get_by_role("progressbar", name="index_docs progress")
    await page.wait_for_function(
        "() => document.querySelector('[aria-label=\"index_docs progress\"]')?.value >= 2")
    assert await bar.evaluate("bar => bar.max") == 8
    message = page.get_by_label("index_docs progress message")
    assert (await message.inner_text()).startswith("indexing docs/")
    ARTIFACTS.mkdir(exist_ok=True)  # the bar and its message, as a person sees them
    await page.screenshot(path=str(ARTIFACTS / "indexer-progress-running.png"))
    await page.get_by_role("button", name="Stop", exact=True).click()
    await run_ended(page)
    await page.get_by_text("The run was stopped.").wait_for()
    card = page.get_by_role("region", name="Tool index_docs")
    assert await card.locator(".state").inner_text() == "stopped with the run"
    said: list[str] = []

    def cancelled() -> bool:
        said.append(capfd.readouterr().err)
        return "index_docs cancelled after" in "".join(said)

    await wait_until(cancelled, timeout=30)  # the server stopped indexing: it says so
    assert await page.get_by_role("alert").count() == 0


@pytest.fixture
def paced(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The demo model at a fast reading pace (the page still sees drafts)."""
    monkeypatch.setenv("HEADWATER_DEMO_WORD_DELAY", "0.003")
    reload_settings()
    yield
    monkeypatch.undo()
    reload_settings()


async def test_the_research_pipeline_labels_each_agent_and_nests_the_checker(
        serve: Serve, open_page: Any, paced: None) -> None:
    """The research example on the page: two searchers on their branches, each message
    labelled with its agent; the writer's fact checker (an ``AgentTool``) drawn inside the
    writer's call card, live and again from the history."""
    app = create_app(research.build_agent(DemoModel()), session_service=InMemorySessionService())
    page = await open_page(await serve(app))
    await page.wait_for_function(
        "() => document.querySelector('#agent-info').innerText.startsWith('agent research')")
    await page.get_by_label("Message", exact=True).fill("Research rivers")
    await page.get_by_role("button", name="Send", exact=True).click()
    await page.locator('article[data-author="writer"]:not([data-draft])').wait_for()
    await run_ended(page)

    async def shown(live: bool) -> None:
        for agent, branch in (("web", "searchers.web"), ("papers", "searchers.papers")):
            message = page.locator(f'article[data-author="{agent}"]')
            assert await message.get_attribute("data-branch") == branch
            assert await message.locator(".who").inner_text() == agent
            assert (await message.locator(".text").inner_text()).startswith(
                f"From {agent} on rivers: ")
        if live:  # progress is shown, never stored
            assert await page.get_by_role("progressbar", name="search_web progress").evaluate(
                "bar => [bar.value, bar.max]") == [3, 3]
        card = page.get_by_role("region", name="Tool fact_checker")
        assert await card.locator(":scope > .who").inner_text() == "writer"
        inside = card.locator(":scope > .inner")
        checked = inside.get_by_role("region", name="Tool check_claim")
        assert await checked.locator(".who").inner_text() == "fact_checker"
        if not live:  # the writer's request, stored on the call's branch, is labelled so
            request = inside.locator('article[data-author="user"]')
            assert await request.locator(".who").inner_text() == "request"
            assert (await request.locator(".text").inner_text()).startswith("Check: From web")
        inner = inside.locator('article[data-author="fact_checker"]')
        assert await inner.locator(".text").inner_text() == "The claim is supported (2 sources)."
        # The writer's report follows the card, outside it.
        assert await card.locator('article[data-author="writer"]').count() == 0
        [report] = await page.locator(
            '#log > article[data-author="writer"] .text').all_inner_texts()
        assert report.startswith("Here is what the research found. From web on rivers")
        assert report.endswith("fact_checker says: The claim is supported (2 sources).")

    await shown(live=True)
    await page.reload()
    await page.locator('article[data-author="writer"]').wait_for()
    await shown(live=False)


async def test_a_live_coordinator_hands_the_camera_to_the_people_counter(
        serve: Serve, open_page: Any, demo_app: Any) -> None:
    """Gone live with the coordinator, "Count the people" is transferred in the live run
    itself: the people counter answers, the live panel shows, and its frames are counted."""
    page = await open_page(await serve(demo_app, lifespan="on"))
    await page.get_by_role("button", name="Go live", exact=True).click()
    await page.wait_for_function("() => !document.getElementById('stop').disabled")  # ready
    await page.get_by_label("Message", exact=True).fill("Count the people")
    await page.get_by_role("button", name="Send", exact=True).click()
    assert await answered_by(page, "people") == (
        "Counting. I'll tell you when the number changes.")
    await page.get_by_role("button", name="Play sample frames").click()
    await page.wait_for_function("() => document.querySelectorAll('.emissions li').length >= 1")
    assert await page.locator("#agent-info").inner_text() == (
        "agent coordinator · model demo · scripted model")  # one session, the coordinator's
    await page.get_by_role("button", name="End live", exact=True).click()
    await page.get_by_role("button", name="Go live", exact=True).wait_for()
    assert await page.locator("#sessions li").count() == 1
    assert await page.get_by_role("alert").count() == 0
