"""``Settings.max_output_chars``: what one model call may stream (issue 23, hole 10).

A model that streams past the bound has its call ended with an ``error``
``budget_exceeded`` event (nothing of the call stored); a call stopped before
the bound keeps what was shown as ``interrupted`` text, which is therefore
bounded too.
"""

from __future__ import annotations

import asyncio
from contextlib import aclosing
from typing import Any

from headwater import Agent, Content, Event, LiveRequestQueue, RunConfig, Runner, StreamingMode
from headwater.sessions import InMemorySessionService
from headwater.settings import Settings
from headwater.testing import ScriptedModel

CHUNK = "0123456789"  # ten characters a chunk
SSE = RunConfig(streaming_mode=StreamingMode.SSE)


def runner_for(model: ScriptedModel, **settings: Any) -> Runner:
    return Runner(agent=Agent(name="bot", model=model), app_name="app",
                  session_service=InMemorySessionService(), settings=Settings(**settings))


async def stored(runner: Runner, sid: str) -> list[Event]:
    session = await runner.session_service.get_session(app_name="app", user_id="u",
                                                       session_id=sid)
    assert session is not None
    return session.events


async def test_a_call_streaming_past_max_output_chars_ends_with_budget_exceeded() -> None:
    model = ScriptedModel().reply(*[CHUNK] * 1000)  # 10,000 characters
    runner = runner_for(model, max_output_chars=95)
    sid = (await runner.session_service.create_session(app_name="app", user_id="u")).id
    events = [e async for e in runner.run_async(user_id="u", session_id=sid,
                                                new_message="talk", run_config=SSE)]
    shown = "".join(e.content.text for e in events if e.partial and e.content is not None)
    assert shown == CHUNK * 9  # the tenth chunk would pass 95: it is never shown
    final = events[-1]
    assert not final.partial and final.error_code == "budget_exceeded"
    record = await stored(runner, sid)
    assert [(e.author, e.error_code) for e in record] == [("user", None),
                                                          ("bot", "budget_exceeded")]
    assert all(e.content is None or e.author == "user" for e in record)


async def test_a_final_past_max_output_chars_without_partials_is_refused_too() -> None:
    model = ScriptedModel().reply("x" * 500)
    runner = runner_for(model, max_output_chars=100)
    sid = (await runner.session_service.create_session(app_name="app", user_id="u")).id
    events = [e async for e in runner.run_async(
        user_id="u", session_id=sid, new_message="talk",
        run_config=RunConfig(streaming_mode=StreamingMode.NONE))]
    assert [e.error_code for e in events] == ["budget_exceeded"]
    assert [e.author for e in await stored(runner, sid)] == ["user", "bot"]


async def test_what_a_stopped_call_keeps_as_interrupted_is_bounded_by_max_output_chars(
) -> None:
    model = ScriptedModel().reply(*[CHUNK] * 1000)
    runner = runner_for(model, max_output_chars=250)
    sid = (await runner.session_service.create_session(app_name="app", user_id="u")).id
    read = 0
    async with aclosing(runner.run_async(user_id="u", session_id=sid,
                                         new_message="talk", run_config=SSE)) as events:
        async for _ in events:
            read += 1
            if read == 20:  # the reader stops: the run is closed mid-call
                break
    record = await stored(runner, sid)
    kept = [e for e in record if e.interrupted]
    assert len(kept) == 1 and kept[0].content is not None
    assert kept[0].content.text == CHUNK * 20
    # A reader that never stops reading cannot make the run keep more than the bound.
    model.reply(*[CHUNK] * 1000)
    events = [e async for e in runner.run_async(user_id="u", session_id=sid,
                                                new_message="again", run_config=SSE)]
    assert events[-1].error_code == "budget_exceeded"
    assert sum(len(e.content.text) for e in events if e.partial and e.content) <= 250


async def test_a_live_turn_streaming_past_max_output_chars_ends_the_run_with_budget_exceeded(
) -> None:
    model = ScriptedModel().reply(*[CHUNK] * 1000)
    runner = runner_for(model, max_output_chars=95)
    sid = (await runner.session_service.create_session(app_name="app", user_id="u")).id
    queue = LiveRequestQueue()
    queue.send_content(Content.from_text("talk"))
    events: list[Event] = []

    async def consume() -> None:
        async for event in runner.run_live(user_id="u", session_id=sid,
                                           live_request_queue=queue):
            events.append(event)

    await asyncio.wait_for(consume(), 30)
    queue.close()
    shown = "".join(e.content.text for e in events if e.partial and e.content is not None)
    assert len(shown) <= 95
    assert events[-1].error_code == "budget_exceeded"
    record = await stored(runner, sid)
    assert record[-1].error_code == "budget_exceeded"
    assert sum(len(e.content.text) for e in record if e.author == "bot" and e.content) <= 95
