"""Live runs (seeds 000 and 002): the worked timeline, streams, stops, input streams, teardown."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from headwater import Agent, LiveRequestQueue, Runner, ToolContext, tool
from headwater.errors import UserError
from headwater.models import LlmRequest
from headwater.sessions import InMemorySessionService
from headwater.testing import LiveHarness, ScriptedCall, ScriptedModel, ScriptedTurn, VirtualClock
from headwater.types import Blob


class Quotes:
    """A quote source the test controls; it records every poll."""

    def __init__(self) -> None:
        self.prices: dict[str, float] = {"GOOG": 171.2, "MSFT": 410.0}
        self.polls: list[tuple[str, float]] = []
        self.fail_after: int | None = None

    def last_price(self, symbol: str, now: float) -> float:
        self.polls.append((symbol, now))
        if self.fail_after is not None and len(self.polls) > self.fail_after:
            raise ConnectionError("quote feed down")
        return self.prices[symbol]


def watcher(quotes: Quotes, **bounds: Any) -> Any:
    @tool(**bounds)
    async def watch_price(symbol: str, min_move_pct: float,
                          tool_context: ToolContext) -> AsyncIterator[dict[str, Any]]:
        """Watch a stock and report significant price moves until stopped."""
        last: float | None = None
        while True:
            price = quotes.last_price(symbol, tool_context.clock.time())
            if last is None or abs(price - last) / last * 100 >= min_move_pct:
                last = price
                yield {"symbol": symbol, "price": price}
            await tool_context.clock.sleep(5)

    return watch_price


def live_responder(request: LlmRequest) -> ScriptedTurn:
    """The scripted live model: reacts to the last thing it was told."""
    last = request.contents[-1]
    text = last.text
    if last.function_responses:
        response = last.function_responses[0]
        if response.name == "stop_streaming":
            return ScriptedTurn(text=["Stopped."])
        return ScriptedTurn(text=[f"Working on {response.name}."])
    if text.startswith("watch"):
        symbols = [w for w in text.replace(",", " ").split() if w.isupper()]
        return ScriptedTurn(calls=[ScriptedCall("watch_price", {"symbol": s, "min_move_pct": 1},
                                                id=f"w-{s}") for s in symbols])
    if text.startswith("stop"):
        args: dict[str, Any] = {"function_name": "watch_price"}
        if "call" in text:
            args["call_id"] = text.split()[-1]
        # Call ids are unique per session (the store keeps one result per id): count the stops.
        stops = sum(1 for c in request.contents for f in c.function_calls
                    if f.name == "stop_streaming")
        return ScriptedTurn(calls=[ScriptedCall("stop_streaming", args, id=f"stop-{stops}")])
    if text.startswith("Function"):
        return ScriptedTurn(text=["Noted: ", text.split(":", 1)[1].strip()])
    return ScriptedTurn(text=["Hello."])


class Live(LiveHarness):
    """The harness with this file's market agent, scripted by ``responder``."""

    def __init__(self, tools: list[Any], clock: VirtualClock,
                 service: InMemorySessionService | None = None,
                 responder: Callable[[LlmRequest], ScriptedTurn] = live_responder) -> None:
        self.model = ScriptedModel(responder=responder)
        super().__init__(Runner(agent=Agent(name="market_watch", model=self.model, tools=tools),
                                app_name="app", session_service=service, clock=clock,
                                auto_create_session=True), clock)
        self.clock: VirtualClock = clock


async def test_seed_000_worked_timeline() -> None:
    clock, quotes = VirtualClock(), Quotes()
    async with Live([watcher(quotes, max_lifetime=3600)], clock) as live:
        await live.say("watch GOOG and tell me about one percent moves")
        pending = [r.response for e in live.events for r in e.function_responses]
        assert pending == [{"status": "The function is running asynchronously and the "
                                      "results are pending."}]
        assert live.told("Function watch_price returned:") == [
            'Function watch_price returned: {"symbol": "GOOG", "price": 171.2}']
        for minute in range(40):  # forty minutes of small moves emit nothing
            quotes.prices["GOOG"] = 171.2 * (1 + (0.004 if minute % 2 else -0.004))
            await clock.advance(60)
        assert len(live.told("Function watch_price returned:")) == 1
        quotes.prices["GOOG"] = round(171.2 * 0.987, 2)  # a 1.3 % drop
        await clock.advance(5)
        emitted = live.told("Function watch_price returned:")
        assert emitted[-1] == f'Function watch_price returned: {{"symbol": "GOOG", "price": ' \
                              f'{quotes.prices["GOOG"]}}}'
        assert "Noted: " + emitted[-1].split(": ", 1)[1] in live.texts()
        await live.say("stop")
        stop = [r.response for e in live.events for r in e.function_responses
                if r.name == "stop_streaming"]
        assert stop == [{"result": "Successfully stopped streaming function watch_price",
                         "stopped": 1}]
        polls = len(quotes.polls)
        await clock.advance(600)
        assert len(quotes.polls) == polls  # the source is no longer polled
        assert live.texts()[-1] == "Stopped."


async def test_two_watches_run_side_by_side_and_stop_by_name_or_call_id() -> None:
    clock, quotes = VirtualClock(), Quotes()
    async with Live([watcher(quotes)], clock) as live:
        await live.say("watch GOOG MSFT")
        emitted = live.told("Function watch_price returned:")
        assert sorted(emitted) == sorted([
            'Function watch_price returned: {"symbol": "GOOG", "price": 171.2}',
            'Function watch_price returned: {"symbol": "MSFT", "price": 410.0}'])
        await live.say("stop call w-GOOG")
        await clock.advance(10)
        assert {s for s, _ in quotes.polls[-2:]} == {"MSFT"}
        await live.say("stop")
        stops = [r.response for e in live.events for r in e.function_responses
                 if r.name == "stop_streaming"]
        assert [s.get("stopped") for s in stops] == [1, 1]
        polls = len(quotes.polls)
        await clock.advance(60)
        assert len(quotes.polls) == polls
        await live.say("stop")
        stops = [r.response for e in live.events for r in e.function_responses
                 if r.name == "stop_streaming"]
        assert stops[-1] == {"result": "No active streaming function named watch_price"}


async def test_a_stop_by_name_stops_every_stream_of_that_name() -> None:
    clock, quotes = VirtualClock(), Quotes()
    async with Live([watcher(quotes)], clock) as live:
        await live.say("watch GOOG MSFT")
        await clock.advance(10)
        assert {s for s, _ in quotes.polls} == {"GOOG", "MSFT"}
        await live.say("stop")
        stops = [r.response for e in live.events for r in e.function_responses
                 if r.name == "stop_streaming"]
        assert stops == [{"result": "Successfully stopped streaming function watch_price",
                          "stopped": 2}]
        polls = len(quotes.polls)
        await clock.advance(60)
        assert len(quotes.polls) == polls


async def test_emissions_are_stored_and_a_new_live_run_starts_from_them() -> None:
    clock, quotes = VirtualClock(), Quotes()
    service = InMemorySessionService()
    async with Live([watcher(quotes)], clock, service) as live:
        await live.say("watch GOOG")
        await live.say("stop")
    session = await service.get_session(app_name="app", user_id="u", session_id="s")
    assert session is not None
    stored = [e.text for e in session.events if e.text.startswith("Function watch_price")]
    assert stored == ['Function watch_price returned: {"symbol": "GOOG", "price": 171.2}']
    assert not any(e.partial for e in session.events)
    async with Live([watcher(quotes)], clock, service) as again:
        await again.say("hello")
        history = again.model.requests[0].contents
        assert any(c.text == stored[0] for c in history)
        calls = {c.id for c in history for c in c.function_calls}
        answered = {r.id for c in history for r in c.function_responses}
        assert calls == answered


async def test_a_stream_that_raises_or_completes_says_so_once() -> None:
    clock, quotes = VirtualClock(), Quotes()
    quotes.fail_after = 2
    async with Live([watcher(quotes)], clock) as live:
        await live.say("watch GOOG")
        await clock.advance(30)
        failed = live.told("Function watch_price failed:")
        assert failed == ["Function watch_price failed: ConnectionError: quote feed down"]
        assert live.model.requests[-1].contents[-1].text == failed[0]

    @tool
    async def countdown(n: int) -> AsyncIterator[int]:
        """Counts down."""
        for i in range(n, 0, -1):
            yield i

    def responder(request: LlmRequest) -> ScriptedTurn:
        if request.contents[-1].text == "go":
            return ScriptedTurn(calls=[ScriptedCall("countdown", {"n": 2}, id="c")])
        return ScriptedTurn(text=["ok"])

    async with Live([countdown], VirtualClock(), responder=responder) as live:
        await live.say("go")
        assert live.told("Function countdown") == [
            "Function countdown returned: 2", "Function countdown returned: 1",
            "Function countdown finished streaming."]


async def test_emission_bounds_end_the_stream_with_a_reason() -> None:
    clock, quotes = VirtualClock(), Quotes()

    async def moving() -> None:
        for i in range(10):
            quotes.prices["GOOG"] = 100.0 + 10 * i
            await clock.advance(5)

    async with Live([watcher(quotes, max_emissions=3)], clock) as live:
        await live.say("watch GOOG")
        await moving()
        told = live.told("Function watch_price")
        assert len([t for t in told if "returned" in t]) == 3
        assert told[-1] == ("Function watch_price stopped streaming: it reached its maximum "
                            "of 3 emissions.")
    clock, quotes = VirtualClock(), Quotes()
    async with Live([watcher(quotes, max_lifetime=12)], clock) as live:
        await live.say("watch GOOG")
        await clock.advance(30)
        assert live.told("Function watch_price stopped")[-1] == (
            "Function watch_price stopped streaming: it reached its maximum lifetime of 12 s.")
        assert len(quotes.polls) == 3  # t = 0, 5, 10


def frame(people: int) -> Blob:
    """A test image: a tiny PGM whose bright pixels are people (one per bright pixel)."""
    pixels = bytes([255] * people + [0] * (16 - people))
    return Blob("image/x-portable-graymap", b"P5 4 4 255\n" + pixels)


def count_people(blob: Blob) -> int:
    return sum(1 for b in blob.data.split(b"\n", 1)[1] if b > 128)


async def test_input_stream_tool_gets_only_later_frames_sampled_and_on_change() -> None:
    seen: list[int] = []

    @tool
    async def people_counter(input_stream: LiveRequestQueue,
                             tool_context: ToolContext) -> AsyncIterator[dict[str, int]]:
        """Report how many people are visible whenever the number changes."""
        last_count: int | None = None
        last_sample: float | None = None
        async for request in input_stream:
            if request.blob is None or not request.blob.mime_type.startswith("image/"):
                continue
            now = tool_context.clock.monotonic()
            if last_sample is not None and now - last_sample < 1:
                continue  # at most one frame per second
            last_sample = now
            count = count_people(request.blob)
            seen.append(count)
            if count != last_count:
                last_count = count
                yield {"people": count}

    def responder(request: LlmRequest) -> ScriptedTurn:
        if request.contents[-1].text.startswith("count"):
            return ScriptedTurn(calls=[ScriptedCall("people_counter", {}, id=request.contents[
                -1].text)])
        if request.contents[-1].text == "stop":
            return ScriptedTurn(calls=[ScriptedCall("stop_streaming",
                                                    {"function_name": "people_counter"})])
        return ScriptedTurn(text=["ok"])

    assert "input_stream" not in str(people_counter.declaration().parameters)
    clock = VirtualClock()
    async with Live([people_counter], clock, responder=responder) as live:
        live.queue.send_realtime(frame(7))  # before the call: never seen
        await live.say("count 1")
        for people in (2, 2, 3, 3, 3, 1):
            live.queue.send_realtime(frame(people))
            live.queue.send_realtime(frame(9))  # same second: dropped by sampling
            await clock.advance(1)
        assert seen == [2, 2, 3, 3, 3, 1]
        assert live.told("Function people_counter returned:") == [
            'Function people_counter returned: {"people": 2}',
            'Function people_counter returned: {"people": 3}',
            'Function people_counter returned: {"people": 1}']
        await live.say("stop")
        seen.clear()
        await live.say("count 2")
        live.queue.send_realtime(frame(4))
        await clock.advance(1)
        assert seen == [4]  # a fresh queue: nothing from before the new call


def test_a_non_generator_tool_cannot_take_the_input_stream() -> None:
    def snapshot(input_stream: LiveRequestQueue) -> str:
        return "x"

    with pytest.raises(UserError, match="not an async generator"):
        tool(snapshot)


async def test_closing_the_queue_ends_every_background_task_within_a_second() -> None:
    clock, quotes = VirtualClock(), Quotes()
    before = asyncio.all_tasks()
    live = Live([watcher(quotes)], clock)
    await live.__aenter__()
    await live.say("watch GOOG MSFT")
    assert len(asyncio.all_tasks() - before) >= 4
    live.queue.close()
    assert live.task is not None
    await asyncio.wait_for(live.task, 1.0)
    assert asyncio.all_tasks() - before == set()  # structured: nothing outlives the run
