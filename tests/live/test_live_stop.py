"""A live run stopped mid-answer keeps what its model had shown and records the stop;
a live run whose input closed ends normally (docs/event-contract.md, "What interrupted
keeps")."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx

from headwater import Agent, Content, Event, LiveRequestQueue, Runner
from headwater.models.openai import OpenAIChatModel
from headwater.sessions import InMemorySessionService
from headwater.testing import FakeProvider, Scenario, Sleep, render_openai

WORDS = [f"word{i} " for i in range(200)]


async def wait_until(predicate: Callable[[], bool], seconds: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + seconds
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


def slow_answer() -> Scenario:
    body: list[bytes | Sleep] = []
    for event in render_openai(text=WORDS):
        body += [event, Sleep(0.05)]
    return Scenario(body=body)


async def stopped_history(stop: str, scenario: Scenario | None = None
                          ) -> tuple[list[Event], list[Event]]:
    """Run a live turn on a slowly streaming model and stop it once some of the answer was
    shown: ``stop`` is ``interrupted`` or ``cancelled`` (``aclose`` with that reason),
    ``cancel`` (the consuming task), ``queue`` (close the input once the answer ended), or
    ``leave`` (close the input at once, then ``aclose``). The events seen and the
    session's stored events."""
    service = InMemorySessionService()
    async with FakeProvider() as provider, httpx.AsyncClient() as client:
        provider.enqueue(scenario or slow_answer())
        model = OpenAIChatModel("gpt-4o-mini", base_url=f"{provider.base_url}/v1",
                                http_client=client)
        runner = Runner(agent=Agent(name="voice", model=model), app_name="app",
                        session_service=service, auto_create_session=True)
        queue = LiveRequestQueue()
        stream = runner.run_live(user_id="u", session_id="s", live_request_queue=queue)
        events: list[Event] = []

        async def consume() -> None:
            async for event in stream:
                events.append(event)
                if sum(1 for e in events if e.partial) == 3 and stop != "cancel":
                    break
            if stop == "queue":  # the answer's end, then the input's: the run's normal end
                async for event in stream:
                    events.append(event)
                    if not event.partial:
                        queue.close()
                return
            if stop == "leave":  # the client left (the gateway closes its queue), the stop
                queue.close()
            await stream.aclose(reason="interrupted" if stop == "interrupted" else None)

        task = asyncio.create_task(consume())
        queue.send_content(Content.from_text("tell me a long story"))
        if stop == "cancel":
            await wait_until(lambda: sum(1 for e in events if e.partial) >= 3)
            task.cancel()
        await asyncio.wait([task], timeout=10)
        assert task.done()
    session = await service.get_session(app_name="app", user_id="u", session_id="s")
    assert session is not None
    return events, session.events


def shown(events: list[Event]) -> str:
    return "".join(e.text or "" for e in events if e.partial)


async def test_a_live_run_closed_as_interrupted_keeps_its_text_and_records_server_shutdown(
) -> None:
    events, stored = await stopped_history("interrupted")
    assert [e.author for e in stored] == ["user", "voice", "voice"]
    kept, record = stored[1], stored[2]
    assert kept.interrupted and kept.finish_reason == "interrupted"
    assert kept.text and kept.text.startswith("word0 word1 word2")
    assert kept.text != "".join(WORDS)
    assert kept.text.startswith(shown(events))  # all it had shown, some maybe not yet seen
    assert record.error_code == "server_shutdown"


async def test_a_live_run_closed_keeps_its_text_and_records_cancelled() -> None:
    _, stored = await stopped_history("cancelled")
    assert stored[1].interrupted and stored[1].text
    assert stored[-1].error_code == "cancelled"
    assert len(stored) == 3


async def test_a_cancelled_live_run_keeps_its_text_and_records_cancelled() -> None:
    _, stored = await stopped_history("cancel")
    assert [e.author for e in stored] == ["user", "voice", "voice"]
    assert stored[1].interrupted and stored[1].text
    assert stored[1].text.startswith("word0 word1 word2")
    assert stored[2].error_code == "cancelled"


async def test_a_live_run_whose_queue_closed_ends_without_a_stop_record() -> None:
    body: list[bytes | Sleep] = []
    for event in render_openai(text=["Once ", "upon ", "a ", "time."]):
        body += [event, Sleep(0.05)]
    quick = Scenario(body=body)
    events, stored = await stopped_history("queue", quick)
    assert [e.author for e in stored] == ["user", "voice"]
    assert stored[1].text == "Once upon a time." and not stored[1].interrupted
    assert all(e.error_code is None for e in stored)
    assert all(e.error_code is None for e in events)


async def test_a_live_run_whose_queue_closed_mid_answer_keeps_its_text_without_a_record(
) -> None:
    _, stored = await stopped_history("leave")
    assert [e.author for e in stored] == ["user", "voice"]
    assert stored[1].interrupted and stored[1].text
    assert all(e.error_code is None for e in stored)


