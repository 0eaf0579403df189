"""The page in a real browser: Debian's chromium, driven by Playwright, on a real server.

Skipped off CI when chromium or Playwright is missing (``scripts/test`` installs
chromium; Playwright comes with the dev extras); each test leaves a screenshot
in ``test-artifacts/``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from headwater import Agent, tool
from headwater.events import Event, ToolStreamEvent
from headwater.gateway import StaticTokenAuth, create_app
from headwater.sessions import InMemorySessionService
from headwater.settings import Settings, reload_settings
from headwater.testing import ScriptedModel, ScriptedTurn
from headwater.types import Content, Part, Usage

from .conftest import unavailable
from .test_gateway import lookup_order
from .test_websocket import responder as live_responder
from .test_websocket import ticker

pytestmark = pytest.mark.slow  # each test drives a chromium process

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
ANSWER = ("Order 1042 shipped ", "on 30 September and ", "is due Monday.")
STORY = tuple(f"word{n} " for n in range(60))

Serve = Callable[[Any], Awaitable[str]]


def _missing() -> str | None:
    if not Path(CHROMIUM).exists():
        return f"{CHROMIUM} is missing: apt-get install chromium"
    try:
        import playwright.async_api  # noqa: F401
    except ImportError:
        return 'playwright is missing: pip install -e ".[dev]"'
    return None


@pytest.fixture
async def browser() -> AsyncIterator[Any]:
    """A headless chromium (Playwright's async API: the server runs in this loop)."""
    reason = _missing()
    if reason is not None:
        unavailable(reason)
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            yield launched
        finally:
            await launched.close()


@pytest.fixture
async def open_page(browser: Any, request: pytest.FixtureRequest) -> AsyncIterator[
        Callable[[str], Awaitable[Any]]]:
    """``page = await open_page(base_url)``: a fresh page; its screenshot is saved after."""
    pages: list[Any] = []
    problems: list[str] = []

    async def make(base: str) -> Any:
        page = await browser.new_page(viewport={"width": 1000, "height": 700})
        page.set_default_timeout(10_000)
        page.on("pageerror", lambda error: problems.append(str(error)))
        await page.goto(base)
        pages.append(page)
        return page

    yield make
    ARTIFACTS.mkdir(exist_ok=True)
    for n, page in enumerate(pages):
        suffix = f"-{n}" if n else ""
        await page.screenshot(path=str(ARTIFACTS / f"{request.node.name}{suffix}.png"))
        await page.close()
    assert problems == [], problems


def settings() -> Settings:
    return Settings(session_lock_timeout=0, heartbeat_interval=5.0, send_timeout=2.0,
                    shutdown_grace=1.0)


def served(agent: Agent) -> tuple[Any, InMemorySessionService]:
    service = InMemorySessionService()
    return create_app(agent, session_service=service, settings=settings()), service


async def ask(page: Any, text: str) -> None:
    """Ask ``text`` in a new session (stored as the message goes: it is then listed)."""
    await page.get_by_role("button", name="New session", exact=True).click()
    await page.get_by_label("Message", exact=True).fill(text)
    await page.get_by_role("button", name="Send", exact=True).click()
    await page.wait_for_selector("#sessions li[aria-current=true]")


async def run_ended(page: Any) -> None:
    """The page has no run in progress (Stop is disabled again)."""
    await page.wait_for_function("() => document.getElementById('stop').disabled")


async def shown(page: Any, author: str) -> list[str]:
    texts: list[str] = await page.locator(
        f'[data-author="{author}"]:not([data-draft]) .text').all_inner_texts()
    return [t.strip() for t in texts]


async def says(page: Any, author: str, text: str) -> None:
    """Wait until the one message of ``author`` on the page is ``text``."""
    await page.wait_for_function(
        "([author, text]) => [...document.querySelectorAll("
        "`[data-author='${author}']:not([data-draft]) .text`)].map(e => e.textContent)"
        ".join('|') === text", arg=[author, text])


async def drafts(page: Any) -> list[str]:
    texts: list[str] = await page.locator("[data-draft]").all_inner_texts()
    return texts


async def history(base: str) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(base_url=base) as client:
        [session] = (await client.get("/sessions")).json()["items"]
        items: list[dict[str, Any]] = (
            await client.get(f"/sessions/{session['id']}/events")).json()["items"]
        return items


async def test_the_support_answer_appears_once_after_the_final_message(
        serve: Serve, open_page: Any) -> None:
    model = ScriptedModel().call("lookupOrder", {"order_id": "1042"}).reply(*ANSWER, delay=0.05)
    app, _ = served(Agent(name="support", model=model, tools=[tool(name="lookupOrder")(
        lookup_order)]))
    page = await open_page(await serve(app))
    await ask(page, "Where is order 1042?")
    await page.wait_for_selector("[data-draft]")  # the answer streams in first
    await page.wait_for_selector('[data-author="support"]:not([data-draft])')
    await run_ended(page)
    assert await shown(page, "support") == ["".join(ANSWER)]
    assert await shown(page, "user") == ["Where is order 1042?"]
    assert await drafts(page) == []
    card = page.get_by_role("region", name="Tool lookupOrder")
    assert await card.get_attribute("data-status") == "ok"
    assert "Tokens this run" in await page.locator(".usage").inner_text()


async def test_stop_ends_a_long_answer_and_the_server_records_cancelled(
        serve: Serve, open_page: Any) -> None:
    model = ScriptedModel().reply(*STORY, delay=0.1)
    app, _ = served(Agent(name="storyteller", model=model))
    base = await serve(app)
    page = await open_page(base)
    await ask(page, "Tell me a long story")
    await page.wait_for_function(
        "() => (document.querySelector('[data-draft]')?.textContent ?? '').includes('word2 ')")
    await page.get_by_role("button", name="Stop", exact=True).click()
    note = page.locator(".stopped")  # the user's own stop: a note, not a red error
    await note.wait_for()
    assert await note.inner_text() == "The run was stopped."
    assert await note.get_attribute("role") == "note"
    assert await note.evaluate("e => getComputedStyle(e).color") != "rgb(192, 57, 43)"  # red
    await run_ended(page)
    assert await page.get_by_role("alert").count() == 0
    assert await note.count() == 1  # shown again from the history, once
    assert await drafts(page) == []
    [kept] = await shown(page, "storyteller")  # what was shown is kept, as the server kept it
    assert kept.startswith("word0 word1 word2")
    assert await page.locator(".note").inner_text() == "(stopped here)"
    items = await history(base)
    assert [i["error"]["code"] for i in items if "error" in i] == ["cancelled"]
    assert model.streams[0].closed_early


async def test_a_reload_mid_answer_shows_the_history_no_stale_draft_and_the_rest(
        serve: Serve, open_page: Any) -> None:
    model = (ScriptedModel().call("lookupOrder", {"order_id": "1042"})
             .reply(*STORY[:30], delay=0.08))
    app, _ = served(Agent(name="storyteller", model=model, tools=[tool(name="lookupOrder")(
        lookup_order)]))
    page = await open_page(await serve(app))
    await ask(page, "Tell me a long story")
    await page.wait_for_function(
        "() => (document.querySelector('[data-draft]')?.textContent ?? '').includes('word3 ')")
    resumed: list[str | None] = []
    page.on("request", lambda request: resumed.append(request.headers.get("last-event-id"))
            if "/stream" in request.url else None)
    await page.reload()
    await page.wait_for_selector('[data-author="user"]')  # the history, from the server
    assert await shown(page, "user") == ["Tell me a long story"]
    assert await page.get_by_role("note").count() == 0  # a run going on: no "no answer"
    await page.wait_for_selector("[data-draft]")  # the answer streams in again, whole:
    await page.wait_for_function(  # not only the words after the reload
        "() => (document.querySelector('[data-draft] .text')?.textContent ?? '').startsWith("
        "'word0 word1 word2 word3 ')")
    await page.wait_for_selector('[data-author="storyteller"]:not([data-draft])')
    await run_ended(page)
    assert await shown(page, "storyteller") == ["".join(STORY[:30]).strip()]
    assert await drafts(page) == []
    assert await page.get_by_role("region", name="Tool lookupOrder").count() == 1
    # Followed again after the last stored frame (tool_call 1, tool_result 2), not run again.
    assert resumed[:1] == ["2"]
    assert len(model.requests) == 2  # the call's turn and the answer's


async def test_token_usage_per_run_is_shown_again_after_a_reload_and_after_stop(
        serve: Serve, open_page: Any) -> None:
    model = (ScriptedModel()
             .call("lookupOrder", {"order_id": "1042"}, usage=Usage(10, 2, 12))
             .reply(*ANSWER, usage=Usage(20, 3, 23))
             .call("lookupOrder", {"order_id": "1043"}, usage=Usage(7, 1, 8))
             .reply(*STORY, delay=0.1, usage=Usage(99, 99, 198)))
    app, _ = served(Agent(name="support", model=model, tools=[tool(name="lookupOrder")(
        lookup_order)]))
    page = await open_page(await serve(app))
    usage = page.locator(".usage")
    await ask(page, "Where is order 1042?")
    await run_ended(page)
    assert await usage.all_inner_texts() == ["Tokens this run: 30 in, 5 out"]  # from `done`
    await page.get_by_label("Message", exact=True).fill("Tell me about order 1043")
    await page.get_by_role("button", name="Send", exact=True).click()
    await page.wait_for_function(
        "() => (document.querySelector('[data-draft]')?.textContent ?? '').includes('word2 ')")
    await page.get_by_role("button", name="Stop", exact=True).click()
    await page.locator(".stopped").wait_for()
    await run_ended(page)
    # The stopped run stored its tool call's model turn; the answer cut short stored none.
    await page.wait_for_function("() => document.querySelectorAll('.usage').length === 2")
    expected = ["Tokens this run: 30 in, 5 out", "Tokens this run: 7 in, 1 out"]
    assert await usage.all_inner_texts() == expected
    await page.reload()
    await page.wait_for_selector('[data-author="support"]')
    assert await usage.all_inner_texts() == expected  # from the history


async def test_a_question_cut_off_by_a_crash_says_no_answer_was_stored(
        serve: Serve, open_page: Any) -> None:
    """What a crash leaves: the user's message stored, nothing after it, no run going on."""
    app, service = served(Agent(name="support", model=ScriptedModel().reply("Yes.")))
    base = await serve(app)
    async with httpx.AsyncClient(base_url=base) as client:
        sid = (await client.post("/sessions", json={})).json()["id"]
    session = await service.get_session(app_name="support", user_id="local", session_id=sid)
    assert session is not None
    await service.append_event(session, Event(
        invocation_id="crashed-run", author="user",
        content=Content("user", [Part(text="Where is order 1042?")])))
    page = await open_page(base)
    notice = page.get_by_role("note")
    await notice.wait_for()
    assert await shown(page, "user") == ["Where is order 1042?"]
    assert (await notice.inner_text()).startswith("No answer was stored for this message")
    assert await page.get_by_role("alert").count() == 0
    await page.get_by_label("Message", exact=True).fill("Are you there?")  # asked anew
    await page.get_by_role("button", name="Send", exact=True).click()
    await says(page, "support", "Yes.")
    await run_ended(page)
    await page.reload()
    await says(page, "support", "Yes.")
    assert await notice.count() == 0  # the last turn has its answer


ran: list[str] = []


@tool(streaming=True, requires_approval=True)
async def deploy(version: int, env: str) -> AsyncIterator[ToolStreamEvent]:
    """Deploy a version, with progress.

    Args:
        version: which version.
        env: where to.
    """
    ran.append(env)
    for percent in (25, 50, 75, 100):
        await asyncio.sleep(0.05)
        yield ToolStreamEvent(type="part_delta", index=0, delta=f"deploying {percent}%")
    yield ToolStreamEvent(type="done", response={"deployed": version, "env": env})


async def test_approve_runs_the_deploy_to_a_full_progress_bar(
        serve: Serve, open_page: Any) -> None:
    ran.clear()
    model = (ScriptedModel().call("deploy", {"version": 2, "env": "staging"})
             .reply("Version 2 is live ", "on staging."))
    app, _ = served(Agent(name="ops", model=model, tools=[deploy]))
    page = await open_page(await serve(app))
    await ask(page, "Deploy version 2 to staging")
    approve = page.get_by_role("button", name="Approve", exact=True)
    await approve.wait_for()
    assert ran == []
    await approve.click()
    bar = page.get_by_role("progressbar", name="deploy progress")
    await page.wait_for_selector('[data-author="ops"]:not([data-draft])')
    await run_ended(page)
    assert await bar.evaluate("bar => [bar.value, bar.max]") == [100, 100]
    assert ran == ["staging"]
    assert await shown(page, "ops") == ["Version 2 is live on staging."]
    assert await page.get_by_role("button", name="Approve").count() == 0


async def test_deny_shows_the_models_reply_and_the_tool_never_runs(
        serve: Serve, open_page: Any) -> None:
    ran.clear()
    model = (ScriptedModel().call("deploy", {"version": 2, "env": "staging"})
             .reply("Understood, ", "nothing was deployed."))
    app, _ = served(Agent(name="ops", model=model, tools=[deploy]))
    page = await open_page(await serve(app))
    await ask(page, "Deploy version 2 to staging")
    await page.get_by_role("button", name="Deny", exact=True).click()
    await page.wait_for_selector('[data-author="ops"]:not([data-draft])')
    await run_ended(page)
    assert await shown(page, "ops") == ["Understood, nothing was deployed."]
    card = page.get_by_role("region", name="Tool deploy")
    assert await card.get_attribute("data-status") == "denied"
    assert ran == []


async def superseded_card(page: Any) -> Any:
    """The deploy card, once it says its approval was superseded; it asks nothing more."""
    card = page.get_by_role("region", name="Tool deploy")
    await page.wait_for_selector('section.tool[data-status="superseded"]')
    assert await card.get_by_role("button").count() == 0
    assert "superseded" in await card.locator(".state").inner_text()
    return card


async def test_an_approval_shows_its_arguments_and_a_later_message_supersedes_it(
        serve: Serve, open_page: Any) -> None:
    ran.clear()
    model = (ScriptedModel().call("deploy", {"version": 2, "env": "staging"}, call_id="d1")
             .reply("Nothing ", "was deployed."))
    app, _ = served(Agent(name="ops", model=model, tools=[deploy]))
    base = await serve(app)
    page = await open_page(base)
    await ask(page, "Deploy version 2 to staging")
    await page.get_by_role("button", name="Approve", exact=True).wait_for()
    shows = 'deploy(version=2, env="staging")'  # what is approved, not just "deploy"
    assert await page.get_by_label("deploy approval").inner_text() == shows
    await run_ended(page)
    # Another message before answering: the server answers the call "superseded" first.
    await page.get_by_label("Message", exact=True).fill("Never mind, what else?")
    await page.get_by_role("button", name="Send", exact=True).click()
    await says(page, "ops", "Nothing was deployed.")
    await run_ended(page)
    card = await superseded_card(page)
    assert await card.get_by_label("deploy approval").inner_text() == shows
    results = [r for i in await history(base) for r in i.get("results", [])]
    assert [(r["id"], r.get("code")) for r in results] == [("d1", "superseded")]
    await page.reload()  # the page rebuilt from the history says the same
    await page.wait_for_selector('[data-author="ops"]:not([data-draft])')
    card = await superseded_card(page)
    assert await card.get_by_label("deploy approval").inner_text() == shows
    assert ran == []


async def test_in_a_live_session_approve_answers_through_the_socket_and_the_deploy_runs(
        serve: Serve, open_page: Any) -> None:
    """A live run holds the session: the card's Approve goes to the run over its socket
    (a new run would be refused ``session_busy``), and the approved call runs in it."""
    ran.clear()
    model = (ScriptedModel().call("deploy", {"version": 2, "env": "staging"})
             .reply("Version 2 is live ", "on staging."))
    app, _ = served(Agent(name="ops", model=model, tools=[deploy]))
    page = await open_page(await serve(app))
    await page.get_by_role("button", name="New session", exact=True).click()
    await page.get_by_role("button", name="Go live", exact=True).click()
    await page.wait_for_function("() => !document.getElementById('stop').disabled")  # ready
    await page.get_by_label("Message", exact=True).fill("Deploy version 2 to staging")
    await page.get_by_role("button", name="Send", exact=True).click()
    approve = page.get_by_role("button", name="Approve", exact=True)
    await approve.wait_for()
    assert ran == []
    await approve.click()
    await page.wait_for_function(
        "() => [...document.querySelectorAll('[data-author=ops]:not([data-draft]) .text')]"
        ".at(-1)?.textContent === 'Version 2 is live on staging.'")
    assert ran == ["staging"]
    assert await page.get_by_role("button", name="Approve").count() == 0
    assert await page.get_by_role("alert").count() == 0


async def test_a_late_approve_from_a_stale_page_is_refused_and_the_card_says_why(
        serve: Serve, open_page: Any) -> None:
    ran.clear()
    model = (ScriptedModel().call("deploy", {"version": 2, "env": "staging"}, call_id="d1")
             .reply("Nothing was deployed."))
    app, _ = served(Agent(name="ops", model=model, tools=[deploy]))
    base = await serve(app)
    page = await open_page(base)
    await ask(page, "Deploy version 2 to staging")
    approve = page.get_by_role("button", name="Approve", exact=True)
    await approve.wait_for()
    await run_ended(page)
    # Another page (or chat) sends the session a message: this page's card is stale.
    async with httpx.AsyncClient(base_url=base, timeout=10) as client:
        [session] = (await client.get("/sessions")).json()["items"]
        other = await client.post(f"/sessions/{session['id']}/runs",
                                  json={"message": "never mind"})
        assert other.status_code == 200
    await approve.click()
    card = await superseded_card(page)  # refused, and the record shown again
    alert = page.get_by_role("alert")
    await alert.wait_for()
    assert "(invalid_request)" in await alert.inner_text()
    assert await card.get_by_label("deploy approval").inner_text() == (
        'deploy(version=2, env="staging")')
    assert ran == []


async def test_sessions_are_made_switched_and_deleted_with_a_token_when_the_app_has_auth(
        serve: Serve, open_page: Any) -> None:
    model = ScriptedModel().reply("First answer.").reply("Second answer.")
    service = InMemorySessionService()
    app = create_app(Agent(name="helper", model=model), session_service=service,
                     auth=StaticTokenAuth({"secret-token": "alice"}), settings=settings())
    page = await open_page(await serve(app))
    await page.get_by_label("Token", exact=True).fill("secret-token")
    await page.get_by_role("button", name="Save token", exact=True).click()
    for question in ("one?", "two?"):
        await ask(page, question)
        await page.wait_for_selector('[data-author="helper"]:not([data-draft])')
        await run_ended(page)
    sessions = page.locator("#sessions li")
    assert await sessions.count() == 2
    assert await shown(page, "helper") == ["Second answer."]
    await sessions.nth(1).locator("button.open").click()  # the older one
    await says(page, "helper", "First answer.")
    assert await shown(page, "user") == ["one?"]
    page.once("dialog", lambda dialog: dialog.accept())
    await sessions.nth(1).get_by_role("button", name="Delete session", exact=False).click()
    await page.wait_for_function("() => document.querySelectorAll('#sessions li').length === 1")
    await says(page, "helper", "Second answer.")  # the session left is opened
    assert await page.evaluate("localStorage.getItem('headwater.token')") == "secret-token"
    assert len(await service.list_sessions(app_name="helper", user_id="alice")) == 1


async def test_an_agent_is_chosen_and_a_suggestion_asks_it(serve: Serve, open_page: Any) -> None:
    support = Agent(name="support", model=ScriptedModel().reply("Support here."))
    ops = Agent(name="ops", model=ScriptedModel(model="demo").reply("Ops ", "here."))
    app = create_app([support, ops], session_service=InMemorySessionService(),
                     settings=settings())
    app.state.page_suggestions = ["Deploy version 2 to staging"]
    app.state.page_note = "scripted model"
    page = await open_page(await serve(app))
    await page.get_by_label("Agent", exact=True).select_option("ops")
    await page.get_by_role("button", name="New session", exact=True).click()
    await page.get_by_role("button", name="Deploy version 2 to staging").click()
    await says(page, "ops", "Ops here.")
    await run_ended(page)
    assert await shown(page, "user") == ["Deploy version 2 to staging"]
    assert await page.locator("#agent-info").inner_text() == (
        "agent ops · model demo · scripted model")


async def test_live_a_watcher_shows_its_emissions_and_stops_when_asked(
        serve: Serve, open_page: Any) -> None:
    model = ScriptedModel(responder=live_responder)
    app, _ = served(Agent(name="voice", model=model, tools=[ticker]))
    page = await open_page(await serve(app))
    await page.get_by_role("button", name="New session", exact=True).click()
    await page.get_by_role("button", name="Go live", exact=True).click()
    await page.wait_for_function("() => !document.getElementById('stop').disabled")  # ready
    message = page.get_by_label("Message", exact=True)
    await message.fill("watch")
    await page.get_by_role("button", name="Send", exact=True).click()
    emissions = page.get_by_role("list", name="ticker emissions").get_by_role("listitem")
    await page.wait_for_function(
        "() => document.querySelectorAll('.emissions li').length >= 3")
    card = page.get_by_role("region", name="Tool ticker")
    # Still emitting: the card says so, with its count, and lists the values themselves.
    await page.wait_for_function(
        "() => /^streaming… \\((?:[3-9]|\\d\\d+) values\\)$/.test("
        "document.querySelector('[aria-label=\"Tool ticker\"] .state')?.textContent)")
    assert await card.get_attribute("data-status") == "streaming"
    assert (await emissions.all_inner_texts())[:3] == ["1", "2", "3"]
    await message.fill("stop")
    await page.get_by_role("button", name="Send", exact=True).click()
    await page.wait_for_function(
        "() => [...document.querySelectorAll('[data-author=voice]:not([data-draft]) .text')]"
        ".at(-1)?.textContent === 'Stopped.'")
    settled = await emissions.count()
    await asyncio.sleep(0.3)
    assert await emissions.count() == settled  # the watcher stopped
    assert await card.get_attribute("data-status") == "stopped"
    assert await card.locator(".state").inner_text() == f"stopped streaming ({settled} values)"
    await page.get_by_role("button", name="Stop", exact=True).click()  # ends the live run
    await page.get_by_role("button", name="Go live", exact=True).wait_for()
    assert await page.get_by_role("alert").count() == 0
    assert await emissions.count() >= 3  # kept: the history has them too
    await page.reload()  # from the history, the ended run's stream is over too
    await emissions.first.wait_for()
    assert await card.get_attribute("data-status") == "stopped"
    assert (await emissions.all_inner_texts())[:2] == ["1", "2"]


async def test_an_error_is_shown_in_words_with_its_code(serve: Serve, open_page: Any) -> None:
    model = ScriptedModel().add(ScriptedTurn(text=["Half an "], error=(
        "provider_error", "upstream said: secret internals")))
    app, _ = served(Agent(name="support", model=model))
    page = await open_page(await serve(app))
    await ask(page, "hello?")
    alert = page.get_by_role("alert")
    await alert.wait_for()
    await run_ended(page)
    assert await alert.inner_text() == "The model provider reported an error. (provider_error)"
    assert "secret" not in await page.locator("main").inner_text()
    assert await drafts(page) == []


@pytest.fixture
def demo_app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """``headwater demo``'s app on a fast demo model and a fresh SQLite file."""
    from headwater.cli import demo_app
    from headwater.models.demo import DemoModel

    monkeypatch.setenv("HEADWATER_DEMO_WORD_DELAY", "0.003")
    monkeypatch.setenv("HEADWATER_SESSION_LOCK_TIMEOUT", "0")
    reload_settings()
    yield demo_app(f"sqlite+aiosqlite:///{tmp_path / 'demo.db'}", DemoModel())
    monkeypatch.undo()
    reload_settings()


async def test_the_demo_suggestions_ask_their_agents(
        serve: Serve, open_page: Any, demo_app: Any) -> None:
    page = await open_page(await serve(demo_app, lifespan="on"))
    # The page fills the agent line once /agents has answered: wait for it.
    await page.wait_for_function(
        "() => document.querySelector('#agent-info').innerText.endsWith('scripted model')")
    await page.get_by_role("button", name="Where is order 1042?").click()
    await page.wait_for_selector('[data-author="support"]:not([data-draft])')
    await run_ended(page)
    [answer] = await shown(page, "support")
    assert "1042" in answer
    assert await page.locator("#agent-info").inner_text() == (
        "agent coordinator · model demo · scripted model")
    await page.get_by_role("button", name="Deploy version 2 to staging").click()
    await page.get_by_role("button", name="Approve", exact=True).wait_for()
    # The deploy tool's approval_summary, in place of its arguments.
    assert await page.get_by_label("deploy approval").inner_text() == (
        "deploy version 2 to staging")
    await page.get_by_role("button", name="Approve", exact=True).click()
    bar = page.get_by_role("progressbar", name="deploy progress")
    await page.wait_for_selector('[data-author="deploy"]:not([data-draft])')
    await run_ended(page)
    assert await bar.evaluate("bar => [bar.value, bar.max]") == [5, 5]
    await page.get_by_role("button", name="Watch GOOG").click()  # live: the market agent's
    await page.wait_for_function("() => document.querySelectorAll('.emissions li').length >= 1")
    assert await page.locator("#agent-info").inner_text() == (
        "agent market · model demo · scripted model")
    await page.get_by_role("button", name="Stop", exact=True).click()
    await page.get_by_role("button", name="Go live", exact=True).wait_for()
    # The same session, with support after the transfer, then deploy's; market's live one.
    assert await page.locator("#sessions li").count() == 2
    # Switching to a session selects its agent: New session then asks that agent again.
    await page.locator("#sessions li button.open", has_text="coordinator").click()
    await page.wait_for_function(
        "() => document.querySelector('#agent').value === 'coordinator'")
    assert await page.locator("#agent-info").inner_text() == (
        "agent coordinator · model demo · scripted model")


async def test_a_narrow_window_keeps_the_composer_in_view_and_nothing_sideways(
        serve: Serve, open_page: Any) -> None:
    """At 400 px (a phone) the sessions go above the chat: the message box is usable, Send,
    Stop and Go live are on screen, nothing scrolls sideways, and the page itself does not
    scroll (the conversation does)."""
    model = ScriptedModel()
    for n in range(4):
        model.call("lookupOrder", {"order_id": f"10{n}"}).reply(*ANSWER)
    app, _ = served(Agent(name="support", model=model, tools=[tool(name="lookupOrder")(
        lookup_order)]))
    page = await open_page(await serve(app))
    await page.set_viewport_size({"width": 400, "height": 700})
    await ask(page, "Where is order 1042? " * 8)
    await run_ended(page)
    for _ in range(3):
        await page.get_by_label("Message", exact=True).fill("And order 1043?")
        await page.get_by_role("button", name="Send", exact=True).click()
        await run_ended(page)
    assert await page.evaluate(
        "() => [document.documentElement.scrollWidth, document.documentElement.scrollHeight]"
    ) == [400, 700]
    boxes = [await page.get_by_label("Message", exact=True).bounding_box()]
    for name in ("Send", "Stop", "Go live", "New session"):
        boxes.append(await page.get_by_role("button", name=name, exact=True).bounding_box())
    for box in boxes:
        assert box is not None
        assert box["x"] >= 0 and box["x"] + box["width"] <= 400, boxes
        assert box["y"] >= 0 and box["y"] + box["height"] <= 700, boxes
    assert boxes[0]["width"] >= 300  # the message box takes the width, not a sliver


async def test_a_lost_server_keeps_the_session_list_and_says_so_once(
        serve: Serve, open_page: Any) -> None:
    model = ScriptedModel().reply(*ANSWER)
    app, _ = served(Agent(name="support", model=model))
    page = await open_page(await serve(app))
    await ask(page, "Where is order 1042?")
    await run_ended(page)
    sessions = page.locator("#sessions li")
    assert await sessions.count() == 1
    # The server goes away: every request fails as a refused connection would.
    await page.route("**/*", lambda route: route.abort("connectionrefused"))
    await page.get_by_label("Message", exact=True).fill("And order 1043?")
    async with page.expect_event(
            "requestfailed", lambda request: request.url.endswith("/runs")):
        await page.get_by_role("button", name="Send", exact=True).click()
    await page.wait_for_function("() => document.getElementById('status').dataset.code")
    await run_ended(page)
    # Said once, where the user looks, and the message is the box's again, not the log's.
    assert await page.locator("#status").inner_text() == (
        "The connection to the server was lost. (network)")
    assert await page.get_by_role("alert").count() == 0
    assert await page.get_by_label("Message", exact=True).input_value() == "And order 1043?"
    assert await shown(page, "user") == ["Where is order 1042?"]
    assert await sessions.count() == 1
    async with page.expect_event(  # sent again, still down: the text is kept again
            "requestfailed", lambda request: request.url.endswith("/runs")):
        await page.get_by_role("button", name="Send", exact=True).click()
    await run_ended(page)
    await page.wait_for_function("() => document.getElementById('status').dataset.code")
    assert await page.get_by_label("Message", exact=True).input_value() == "And order 1043?"
