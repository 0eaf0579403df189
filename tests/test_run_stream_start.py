"""RunStream.start(): a server learns of a busy or missing session before it answers,
and aclose(reason=) chooses the synthetic result of the calls a stop leaves open."""

from __future__ import annotations

import asyncio

import pytest

from headwater import Agent, RunConfig, Runner, StreamingMode
from headwater.errors import SessionBusyError, SessionNotFoundError, UserError
from headwater.settings import Settings
from headwater.testing import ScriptedModel

SSE = RunConfig(streaming_mode=StreamingMode.SSE)


def make_runner(model: ScriptedModel, tools: list[object] | None = None) -> Runner:
    return Runner(agent=Agent(name="bot", model=model, tools=tools or []), app_name="app",
                  settings=Settings(session_lock_timeout=0))


async def test_start_holds_the_session_and_stores_the_message_before_any_event() -> None:
    model = ScriptedModel().reply("hello ", "there")
    runner = make_runner(model)
    session = await runner.create_session(user_id="u")
    stream = runner.run_async(user_id="u", session_id=session.id, new_message="hi",
                              run_config=SSE)
    await stream.start()
    assert model.requests == []  # the model has not been called yet
    stored = await runner.session_service.get_session(app_name="app", user_id="u",
                                                      session_id=session.id)
    assert stored is not None and [e.text for e in stored.events] == ["hi"]
    second = runner.run_async(user_id="u", session_id=session.id, new_message="again")
    with pytest.raises(SessionBusyError):
        await second.start()
    events = [e async for e in stream]
    assert "".join(e.text for e in events if e.partial) == "hello there"
    assert events[-1].text == "hello there" and not events[-1].partial


async def test_start_raises_for_a_missing_session_and_refuses_a_second_call() -> None:
    runner = make_runner(ScriptedModel().reply("x").reply("y"))
    with pytest.raises(SessionNotFoundError):
        await runner.run_async(user_id="u", session_id="nope", new_message="hi").start()
    session = await runner.create_session(user_id="u")
    stream = runner.run_async(user_id="u", session_id=session.id, new_message="hi")
    await stream.start()
    with pytest.raises(UserError):
        await stream.start()
    with pytest.raises(UserError):
        stream.seal_reason = "done"  # type: ignore[assignment]
    await stream.aclose(reason="interrupted")
    begun = runner.run_async(user_id="u", session_id=session.id, new_message="hi")
    await begun.__anext__()  # iteration began: too late to start
    with pytest.raises(UserError):
        await begun.start()
    await begun.aclose()


@pytest.mark.parametrize("reason", ["cancelled", "interrupted"])
async def test_aclose_seals_open_calls_with_the_reason_given(reason: str) -> None:
    started = asyncio.Event()

    async def slow_lookup(order_id: str) -> str:
        """Looks an order up, slowly."""
        started.set()
        await asyncio.sleep(30)
        return "never"

    model = ScriptedModel().call("slow_lookup", {"order_id": "1"}).reply("next")
    runner = make_runner(model, [slow_lookup])
    session = await runner.create_session(user_id="u")
    stream = runner.run_async(user_id="u", session_id=session.id, new_message="go")
    await stream.start()
    first = await stream.__anext__()
    assert first.function_calls
    pending = asyncio.ensure_future(stream.__anext__())
    await started.wait()
    stream.seal_reason = reason  # type: ignore[assignment]
    pending.cancel()  # how a server stops the task that iterates a run
    with pytest.raises(asyncio.CancelledError):
        await pending
    await stream.aclose()
    stored = await runner.session_service.get_session(app_name="app", user_id="u",
                                                      session_id=session.id)
    assert stored is not None
    result = stored.events[-2].function_responses[0].response
    assert result["code"] == reason
    stop = stored.events[-1]  # the stop's record: what ended the run
    assert stop.error_code == ("cancelled" if reason == "cancelled" else "server_shutdown")


async def test_a_started_stream_dropped_unread_gives_the_session_back() -> None:
    """start() holds the session; a stream dropped before its first event is closed when
    it is collected (as Python closes an abandoned async generator), releasing the lease."""
    import gc

    runner = make_runner(ScriptedModel().reply("never").reply("second"))
    session = await runner.create_session(user_id="u")
    stream = runner.run_async(user_id="u", session_id=session.id, new_message="hi")
    await stream.start()
    del stream
    gc.collect()
    for _ in range(50):  # the close runs on the loop, soon
        await asyncio.sleep(0.01)
        again = runner.run_async(user_id="u", session_id=session.id, new_message="again")
        try:
            result = [e async for e in again]
        except SessionBusyError:
            continue
        break
    else:
        raise AssertionError("the dropped run kept the session")
    assert result[-1].text == "never"  # the first script step: the dropped run never ran
