"""One run, one lifecycle: the same start, stop and end whatever makes the events.

A run's state is checked on entry (start twice, start after iteration, iterate
after close); a started stream dropped unread gives its session back without any
finaliser of ours (the event loop closes the generator it began); and the three
sources of events — a lone agent, a tree of agents, a live session — end the same
way when the store fails mid-run (one ``store_unavailable`` event, nothing raised)
and when the reader stops them (the stop recorded).
"""

from __future__ import annotations

import asyncio

import pytest

from headwater import Agent, Event, LiveRequestQueue, Runner
from headwater.errors import SessionBusyError, SessionError, UserError
from headwater.models import LlmRequest
from headwater.run_config import RunConfig, StreamingMode
from headwater.runner import RunStream
from headwater.sessions import InMemorySessionService
from headwater.sessions.base import Lease, Session
from headwater.settings import Settings
from headwater.testing import ScriptedCall, ScriptedModel, ScriptedTurn
from headwater.types import Content

SSE = RunConfig(streaming_mode=StreamingMode.SSE)


class FailingAt(InMemorySessionService):
    """``append_event`` raises ``SessionError`` at the ``fail_at``-th append (0: never)."""

    fail_at = 0
    appends = 0

    async def append_event(self, session: Session, event: Event, *,
                           lease: Lease | None = None, release: bool = False) -> Event:
        self.appends += 1
        if self.appends == self.fail_at:
            raise SessionError("session store failed: disk I/O error")
        return await super().append_event(session, event, lease=lease, release=release)


def runner_of(agent: Agent, service: InMemorySessionService | None = None) -> Runner:
    return Runner(agent=agent, app_name="app", auto_create_session=True,
                  session_service=service or InMemorySessionService(),
                  settings=Settings(session_lock_timeout=0))


async def history(runner: Runner, session_id: str = "s") -> list[Event]:
    session = await runner.session_service.get_session(app_name="app", user_id="u",
                                                       session_id=session_id)
    assert session is not None
    return session.events


async def is_free(runner: Runner, session_id: str = "s") -> bool:
    """Whether another run could take the session now (the store's lease, taken and given
    back at once)."""
    service = runner.session_service
    try:
        lease = await service.acquire_lease(app_name="app", user_id="u", session_id=session_id,
                                            owner="probe", run_id="probe", ttl=5)
    except SessionBusyError:
        return False
    await service.release_lease(lease)
    return True


# -- the state, checked on entry ------------------------------------------------------------


async def test_start_twice_and_start_after_the_first_event_are_refused() -> None:
    runner = runner_of(Agent(name="bot", model=ScriptedModel().reply("a").reply("b")))
    stream = runner.run_async(user_id="u", session_id="s", new_message="hi")
    await stream.start()
    with pytest.raises(UserError, match="before the first event, once"):
        await stream.start()
    assert [e.text for e in [e async for e in stream]] == ["a"]
    begun = runner.run_async(user_id="u", session_id="s", new_message="again",
                             run_config=SSE)
    first = await begun.__anext__()
    assert first.partial and first.text == "b"
    with pytest.raises(UserError, match="before the first event, once"):
        await begun.start()
    assert [e.text for e in [e async for e in begun]] == ["b"]  # the run went on
    assert [e.text for e in await history(runner)] == ["hi", "a", "again", "b"]


async def test_a_closed_stream_has_no_events_and_cannot_start() -> None:
    runner = runner_of(Agent(name="bot", model=ScriptedModel().reply("a")))
    unread = runner.run_async(user_id="u", session_id="s", new_message="hi")
    await unread.aclose()  # before anything: nothing was taken, nothing is stored
    assert [e async for e in unread] == []
    with pytest.raises(UserError):
        await unread.start()
    assert await runner.session_service.get_session(  # not even made (auto_create_session)
        app_name="app", user_id="u", session_id="s") is None
    stream = runner.run_async(user_id="u", session_id="s", new_message="hi")
    assert [e.text for e in [e async for e in stream]] == ["a"]
    assert [e async for e in stream] == []  # read to its end: nothing more
    await stream.aclose()  # idempotent
    assert [e async for e in stream] == []


async def test_a_failed_start_leaves_nothing_held_and_no_events() -> None:
    runner = runner_of(Agent(name="bot", model=ScriptedModel().reply("a")))
    holder = runner.run_async(user_id="u", session_id="s", new_message="hi")
    await holder.start()
    busy = runner.run_async(user_id="u", session_id="s", new_message="too soon")
    with pytest.raises(SessionBusyError):
        await busy.start()
    assert [e async for e in busy] == []  # its start failed: it is over
    with pytest.raises(UserError):
        await busy.start()
    await holder.aclose()
    assert await is_free(runner)


async def test_a_started_stream_dropped_unread_is_closed_by_the_event_loop() -> None:
    """No collector pass and no finaliser of the run's: dropping the last reference to a
    started stream hands its generator to the event loop, which closes it (the run's end:
    the lease released; closed before its first event, no stop is recorded)."""
    runner = runner_of(Agent(name="bot", model=ScriptedModel().reply("never")))
    stream: RunStream | None = runner.run_async(user_id="u", session_id="s",
                                                new_message="hi")
    assert stream is not None
    await stream.start()
    assert not await is_free(runner)
    stream = None  # the drop is the point
    for _ in range(20):  # the loop's finaliser closes it in a task of its own, soon
        await asyncio.sleep(0)
        if await is_free(runner):
            break
    else:
        raise AssertionError("the dropped run kept the session")
    assert [(e.author, e.text, e.error_code) for e in await history(runner)] == [
        ("user", "hi", None)]


# -- one lifecycle for every source -------------------------------------------------------


def lone(model: ScriptedModel) -> Agent:
    return Agent(name="bot", model=model)


def tree(model: ScriptedModel) -> Agent:
    helper = Agent(name="helper", model=ScriptedModel().reply("unused"), description="Helps.")
    return Agent(name="bot", model=model, sub_agents=[helper])


def answering(request: LlmRequest) -> ScriptedTurn:
    return ScriptedTurn(text=["You said ", request.contents[-1].text])


class LiveRun:
    """A live run read in a task, fed through its queue."""

    def __init__(self, runner: Runner) -> None:
        self.queue = LiveRequestQueue()
        self.events: list[Event] = []
        self.stream = runner.run_live(user_id="u", session_id="s",
                                      live_request_queue=self.queue)
        self.task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for event in self.stream:
            self.events.append(event)

    async def until(self, count: int) -> None:
        for _ in range(500):
            if len([e for e in self.events if not e.partial]) >= count or self.task.done():
                return
            await asyncio.sleep(0.01)


@pytest.mark.parametrize("kind", ["lone", "tree"])
async def test_a_store_failing_mid_run_is_one_error_event(kind: str) -> None:
    service = FailingAt()
    model = ScriptedModel().reply("Your ", "answer.")
    runner = runner_of((lone if kind == "lone" else tree)(model), service)
    service.fail_at = 1  # the message goes in with the lease; the answer is refused
    async with runner.run_async(user_id="u", session_id="s", new_message="hi",
                                run_config=SSE) as stream:
        events = [e async for e in stream]
    assert [e.text for e in events if e.partial] == ["Your ", "answer."]
    assert [e.error_code for e in events if e.error_code] == ["store_unavailable"]
    last = events[-1]
    assert not last.partial and "disk" not in (last.error_message or "")
    assert [e.text for e in await history(runner)] == ["hi"]
    assert await is_free(runner)


async def test_a_live_runs_store_failing_mid_run_is_one_error_event() -> None:
    service = FailingAt()
    runner = runner_of(lone(ScriptedModel(responder=answering)), service)
    live = LiveRun(runner)
    live.queue.send_content(Content.from_text("hi"))
    await live.until(2)
    assert [e.text for e in live.events if not e.partial] == ["hi", "You said hi"]
    service.fail_at = service.appends + 2  # the next user turn goes in; its answer fails
    live.queue.send_content(Content.from_text("again"))
    await asyncio.wait_for(live.task, 5)  # the run ended by itself: nothing raised
    final = [e for e in live.events if not e.partial]
    assert [e.error_code for e in final if e.error_code] == ["store_unavailable"]
    assert final[-1].error_code == "store_unavailable"
    assert [e.text for e in await history(runner)] == ["hi", "You said hi", "again"]
    assert await is_free(runner)


@pytest.mark.parametrize("kind", ["lone", "tree", "live"])
async def test_a_reader_stopping_the_run_is_recorded(kind: str) -> None:
    started = asyncio.Event()

    async def wait_for_ever(query: str) -> str:
        """Waits."""
        started.set()
        await asyncio.sleep(60)
        return "never"

    def calls_it(request: LlmRequest) -> ScriptedTurn:
        return ScriptedTurn(calls=[ScriptedCall("wait_for_ever", {"query": "q"}, id="c1")])

    model = ScriptedModel(responder=calls_it)
    helpers = [Agent(name="helper", model=ScriptedModel(), description="Helps.")]
    runner = runner_of(Agent(name="bot", model=model, tools=[wait_for_ever],
                             sub_agents=helpers if kind == "tree" else []))
    if kind == "live":
        live = LiveRun(runner)
        live.queue.send_content(Content.from_text("go"))
        reader = live.task
    else:
        stream = runner.run_async(user_id="u", session_id="s", new_message="go")

        async def read() -> None:
            async for _ in stream:
                pass

        reader = asyncio.create_task(read())
    await asyncio.wait_for(started.wait(), 5)
    reader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reader
    stored = await history(runner)
    assert stored[-2].function_responses[0].response["code"] == "cancelled"  # the seal
    assert stored[-1].error_code == "cancelled"  # the stop's record
    assert await is_free(runner)


# -- the lease kept alive ------------------------------------------------------------------


async def test_a_run_longer_than_its_lease_keeps_the_session() -> None:
    """The runner renews the lease of a live run (every sixth of its lifetime, once it is a
    third old): a run three times longer than the lease's lifetime still holds its session
    and stores its answer; once it ends, the session is free again."""
    ttl = 0.3
    working = asyncio.Event()

    async def slow(query: str) -> str:
        """Works for a while."""
        working.set()
        await asyncio.sleep(3 * ttl)
        return "done"

    model = ScriptedModel().call("slow", {"query": "q"}).reply("All done.")
    runner = Runner(agent=Agent(name="bot", model=model, tools=[slow]), app_name="app",
                    auto_create_session=True,
                    settings=Settings(session_lease_ttl=ttl, session_lock_timeout=0))
    stream = runner.run_async(user_id="u", session_id="s", new_message="go")
    reader = asyncio.create_task(_drain(stream))
    await asyncio.wait_for(working.wait(), 5)
    for _ in range(5):  # past the lease's lifetime, again and again: still held
        await asyncio.sleep(ttl / 2)
        assert not await is_free(runner)
    events = await asyncio.wait_for(reader, 5)
    assert events[-1].text == "All done."
    assert (await history(runner))[-1].text == "All done."
    assert await is_free(runner)


async def _drain(stream: RunStream) -> list[Event]:
    async with stream:
        return [e async for e in stream]
