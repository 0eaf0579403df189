"""Barge-in on an emulated live connection over a real HTTP adapter."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx

from headwater import Agent, Content, Event, LiveRequestQueue, Runner
from headwater.models import LlmRequest
from headwater.models.openai import OpenAIChatModel
from headwater.sessions import InMemorySessionService, SqlSessionService
from headwater.settings import Settings
from headwater.testing import (
    FakeProvider,
    Scenario,
    ScriptedModel,
    ScriptedTurn,
    Sleep,
    render_openai,
)


async def wait_until(predicate: object, seconds: float = 3.0) -> None:
    deadline = asyncio.get_running_loop().time() + seconds
    while not predicate():  # type: ignore[operator]
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


async def cut_a_story(runner: Runner, cut: str
                      ) -> tuple[LiveRequestQueue, list[Event], asyncio.Task[None]]:
    """Start a live run, ask for a long story and send ``cut`` once three partials are in;
    the queue, the events yielded so far (the list keeps filling) and the consuming task."""
    queue = LiveRequestQueue()
    events: list[Event] = []

    async def consume() -> None:
        async for event in runner.run_live(user_id="u", session_id="s",
                                           live_request_queue=queue):
            events.append(event)

    task = asyncio.create_task(consume())
    queue.send_content(Content.from_text("tell me a long story"))
    await wait_until(lambda: sum(1 for e in events if e.partial) >= 3)
    queue.send_content(Content.from_text(cut))
    return queue, events, task


async def test_a_new_user_message_interrupts_the_answer_and_closes_the_stream() -> None:
    words = [f"word{i} " for i in range(40)]
    slow = render_openai(text=words)
    body: list[bytes | Sleep] = []
    for event in slow:
        body += [event, Sleep(0.05)]
    service = InMemorySessionService()
    async with FakeProvider() as provider, httpx.AsyncClient() as client:
        provider.enqueue(Scenario(body=body), Scenario(body=render_openai(text=["Sure, ",
                                                                                "stopping."])))
        model = OpenAIChatModel("gpt-4o-mini", base_url=f"{provider.base_url}/v1",
                                http_client=client)
        runner = Runner(agent=Agent(name="voice", model=model), app_name="app",
                        session_service=service, auto_create_session=True)
        queue, events, task = await cut_a_story(runner, "stop, please")
        record = await provider.wait_closed(0, timeout=2.0)
        assert record.close_kind in ("client_fin", "client_rst")
        await wait_until(lambda: any(e.text == "Sure, stopping." for e in events))
        queue.close()
        await asyncio.wait_for(task, 2)

    interrupted = [e for e in events if e.interrupted and not e.partial]
    assert len(interrupted) == 1
    spoken = interrupted[0].text
    assert spoken and spoken.startswith("word0 word1 word2") and spoken != "".join(words)
    assert interrupted[0].turn_complete
    assert events[-1].turn_complete and not events[-1].interrupted
    session = await service.get_session(app_name="app", user_id="u", session_id="s")
    assert session is not None
    stored = [(e.author, e.text, e.interrupted) for e in session.events]
    assert stored == [("user", "tell me a long story", False), ("voice", spoken, True),
                      ("user", "stop, please", False), ("voice", "Sure, stopping.", False)]
    second = provider.requests[1].json()["messages"]
    assert [m["role"] for m in second] == ["user", "assistant", "user"]
    assert second[1]["content"] == spoken


async def test_the_message_that_cut_an_answer_is_stored_before_a_fast_reply_to_it(
        tmp_path: Path) -> None:
    # The store's writes take a thread hop (no inline writes), so the model's instant
    # reply to "hi" is out while the cut answer is still being stored; it waits.
    def respond(request: LlmRequest) -> ScriptedTurn:
        if request.contents[-1].text == "tell me a long story":
            return ScriptedTurn(text=[f"word{i} " for i in range(60)], delay=0.03)
        return ScriptedTurn(text=["Hello ", "there."])

    service = SqlSessionService(f"sqlite:///{tmp_path / 'sessions.db'}",
                                settings=Settings(sqlite_inline_writes=False))
    runner = Runner(agent=Agent(name="voice", model=ScriptedModel(responder=respond)),
                    app_name="app", session_service=service, auto_create_session=True)
    async with runner:
        queue, events, task = await cut_a_story(runner, "hi")
        await wait_until(lambda: any(e.text == "Hello there." for e in events))
        queue.close()
        await asyncio.wait_for(task, 5)
        session = await service.get_session(app_name="app", user_id="u", session_id="s")
    assert session is not None
    stored = [(e.author, e.text, e.interrupted) for e in session.events]
    spoken = stored[1][1]
    assert spoken.startswith("word0 word1 word2 ")
    assert stored == [("user", "tell me a long story", False), ("voice", spoken, True),
                      ("user", "hi", False), ("voice", "Hello there.", False)]
    told = [(e.author, e.text) for e in events if not e.partial]
    assert told == [(a, t) for a, t, _ in stored]  # yielded in the order stored
