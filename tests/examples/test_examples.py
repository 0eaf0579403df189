"""The seed examples: the price watcher (seed 000) and the people counter (seed 002).

The tools, detector and frames come from their one home, ``headwater.examples``;
the virtual-clock sessions from the repository's ``examples/*.py`` (imported by
path: ``examples/`` is not a package). Live behaviour is driven through a real
``Runner.run_live`` with the offline demo model and a ``VirtualClock``, as in
``tests/live/test_live.py``.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from headwater.examples import people_counter as pc
from headwater.examples import price_watcher as pw
from headwater.testing import LiveHarness, VirtualClock
from headwater.types import Blob

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load(name: str) -> ModuleType:
    """Import ``examples/<name>.py`` under a private module name."""
    qualified = f"headwater_example_{name}"
    if qualified in sys.modules:
        return sys.modules[qualified]
    spec = importlib.util.spec_from_file_location(qualified, EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[qualified] = module
    spec.loader.exec_module(module)
    return module


pw_script = load("price_watcher")
pc_script = load("people_counter")


Live = LiveHarness


PENDING = {"status": "The function is running asynchronously and the results are pending."}


# -- price watcher --------------------------------------------------------------------------------

def price(symbol: str, value: float) -> str:
    return f'Function watch_price returned: {{"symbol": "{symbol}", "price": {value}}}'


async def test_quote_source_is_a_seeded_random_walk() -> None:
    async def walk(seed: int) -> list[float]:
        source = pw.QuoteSource({"GOOG": 171.2}, seed=seed)
        return [await source.last_price("GOOG") for _ in range(30)]

    first = await walk(7)
    assert first == await walk(7)
    assert first != await walk(8)
    assert first[0] == 171.2
    assert len(set(first)) > 20  # it does move
    assert all(p == round(p, 2) for p in first)


async def test_watcher_emits_only_moves_at_least_the_threshold_then_stops() -> None:
    clock = VirtualClock()
    source = pw.QuoteSource({"GOOG": 100.0}, volatility_pct=0)
    async with Live(pw_script.build_runner(source, clock), clock) as live:
        await live.say("Watch GOOG and tell me about 1% moves.")
        assert live.responses("watch_price") == [PENDING]
        for value in (100.5, 100.99, 101.0, 101.5, 100.0, 99.0, 98.0):
            source.prices["GOOG"] = value  # read by the next poll, 5 s on
            await clock.advance(5)
        assert live.told("Function watch_price") == [
            price("GOOG", 100.0), price("GOOG", 101.0), price("GOOG", 99.0), price("GOOG", 98.0)]
        assert list(source.polls) == ["GOOG"] * 8
        said = [t for t in live.texts() if t.startswith("GOOG")]
        assert said == ["GOOG is at 100.00.", "GOOG rose 1.0% to 101.00.",
                        "GOOG fell 2.0% to 99.00.", "GOOG fell 1.0% to 98.00."]
        await live.say("Stop watching.")
        assert live.responses("stop_streaming") == [
            {"result": "Successfully stopped streaming function watch_price", "stopped": 1}]
        source.prices["GOOG"] = 150.0
        await clock.advance(600)
        assert list(source.polls) == ["GOOG"] * 8  # no longer polled
        assert len(live.told("Function watch_price")) == 4
        assert live.texts()[-1] == "Stopped watching."


async def test_watcher_ends_itself_after_an_hour() -> None:
    clock = VirtualClock()
    source = pw.QuoteSource({"GOOG": 100.0}, volatility_pct=0)
    async with Live(pw_script.build_runner(source, clock), clock) as live:
        await live.say("Watch GOOG and tell me about 1% moves.")
        await clock.advance(1800)
        source.prices["GOOG"] = 102.0
        await clock.advance(1795)  # t = 3595: the last poll inside the hour
        assert len(source.polls) == 720
        assert live.told("Function watch_price") == [price("GOOG", 100.0),
                                                       price("GOOG", 102.0)]
        await clock.advance(5)
        assert live.told("Function watch_price")[2:] == [
            "Function watch_price stopped streaming: it reached its maximum lifetime of 3600 s."]
        await clock.advance(3600)
        assert len(source.polls) == 720  # t = 0, 5, …, 3595, as take(3600 / 5) in the seed
        assert len(live.told("Function watch_price")) == 3
        assert live.texts()[-1] == "The price watch has ended."


async def test_an_upstream_failure_is_exactly_one_final_emitted_error() -> None:
    clock = VirtualClock()
    source = pw.QuoteSource({"GOOG": 100.0}, volatility_pct=0, fail_after=3)
    runner = pw_script.build_runner(source, clock)
    runner.agent.model.record = True  # type: ignore[attr-defined]  # the demo model keeps none
    async with Live(runner, clock) as live:
        await live.say("Watch GOOG and tell me about 1% moves.")
        for value in (102.0, 104.0):
            source.prices["GOOG"] = value
            await clock.advance(5)
        await clock.advance(5)  # t = 15: the fourth poll fails
        error = ('Function watch_price returned: {"symbol": "GOOG", '
                 '"error": "quote feed failed: connection reset after 3 polls"}')
        assert live.told("Function watch_price") == [
            price("GOOG", 100.0), price("GOOG", 102.0), price("GOOG", 104.0), error,
            "Function watch_price finished streaming."]
        await clock.advance(600)
        assert len(source.polls) == 4
        assert len(live.told("Function watch_price")) == 5
        heard = [r.contents[-1].text for r in live.runner.agent.model.requests]
        assert error in heard  # the model was told the stream died
        assert ("I can no longer watch GOOG: quote feed failed: connection reset after 3 polls."
                in live.texts())


async def test_an_unknown_symbol_is_one_error_emission() -> None:
    clock = VirtualClock()
    source = pw.QuoteSource({"GOOG": 100.0})
    async with Live(pw_script.build_runner(source, clock), clock) as live:
        await live.say("Watch XYZ and tell me about 2% moves.")
        assert live.told("Function watch_price") == [
            'Function watch_price returned: {"symbol": "XYZ", '
            '"error": "quote feed failed: unknown symbol \'XYZ\'"}',
            "Function watch_price finished streaming."]


PRICE_WATCHER_EMISSIONS = [
    price("GOOG", 171.2), price("GOOG", 169.38), price("GOOG", 167.03), price("GOOG", 168.77),
    price("MSFT", 410.0), price("MSFT", 412.69), price("MSFT", 415.44), price("MSFT", 418.12),
    price("MSFT", 420.54), price("MSFT", 417.84),
    'Function watch_price returned: {"symbol": "MSFT", '
    '"error": "quote feed failed: connection reset after 150 polls"}',
    "Function watch_price finished streaming.",
]


def test_the_virtual_price_watch_prints_the_seed_session(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert pw_script.main(["--virtual"]) == 0
    lines = capsys.readouterr().out.splitlines()
    told = [line.split("-> model: ", 1)[1] for line in lines if "-> model: " in line]
    assert told == PRICE_WATCHER_EMISSIONS
    assert "[00:00:00] user: Watch GOOG and tell me about 1% moves." in lines
    assert "[00:04:10] market: GOOG fell 1.1% to 169.38." in lines
    assert "[00:07:05] market: GOOG rose 1.0% to 168.77." in lines
    assert ('[00:10:00]   stop_streaming answered: {"result": "Successfully stopped streaming '
            'function watch_price", "stopped": 1}') in lines
    assert "[00:10:00] market: Stopped watching." in lines
    assert ("[00:13:25] market: I can no longer watch MSFT: quote feed failed: connection "
            "reset after 150 polls.") in lines
    assert lines[-2] == "[00:13:25] market: The price watch has ended."
    assert lines[0].startswith("price watcher: demo model (scripted)")
    assert lines[-1] == "quote polls: 151"


def test_the_demo_watcher_polls_its_own_feed_and_knows_its_symbols() -> None:
    agent = pw.build_agent("demo", poll_seconds=2.0)
    [watch] = agent.tools
    assert watch.name == "watch_price"
    assert watch.options.max_lifetime == pw.DEMO_LIFETIME
    assert set(pw.demo_source().prices) == set(pw.DEMO_PRICES)


async def test_the_source_remembers_a_bounded_history() -> None:
    source = pw.QuoteSource({"GOOG": 100.0}, history=3)
    for _ in range(5):
        await source.last_price("GOOG")
    assert list(source.polls) == ["GOOG"] * 3
    assert source.count == 5


# -- people counter: the detector -----------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["pgm", "ppm"])
@pytest.mark.parametrize("people", range(6))
def test_detector_counts_separate_people(people: int, fmt: Any) -> None:
    assert pc.detect_people(pc.make_frame(pc.spread(people), fmt=fmt)) == people


@pytest.mark.parametrize(("where", "expected"), [
    ([(5, 5), (8, 8)], 2),                      # corners touch diagonally: two people
    ([(0, 0), (3, 3), (6, 6), (9, 9)], 4),      # a diagonal chain stays four
    ([(5, 5), (8, 5)], 1),                      # side by side, edges touching: one blob
    ([(5, 5), (5, 8)], 1),                      # stacked, edges touching: one blob
    ([(5, 5), (7, 7)], 1),                      # overlapping
    ([(0, 0), (29, 0), (0, 21), (29, 21)], 4),  # in the four corners, touching the edges
    ([(-1, -1), (30, 22), (15, -2)], 3),        # clipped by the edges
    ([(29, 5), (0, 6)], 2),                     # right edge and next row's left edge: no wrap
])
@pytest.mark.parametrize("fmt", ["pgm", "ppm"])
def test_detector_uses_4_connectivity_and_the_image_edges(
        where: list[tuple[int, int]], expected: int, fmt: Any) -> None:
    assert pc.detect_people(pc.make_frame(where, fmt=fmt)) == expected


def test_detector_thresholds_brightness() -> None:
    pixels = bytearray(16)
    pixels[0], pixels[5], pixels[10], pixels[15] = 127, 128, 255, 200
    image = b"P5 4 4 255\n" + bytes(pixels)  # a diagonal: 128, 255 and 200 are bright
    assert pc.detect_people(image) == 3
    assert pc.detect_people(image, threshold=201) == 1
    assert pc.detect_people(b"P5\n# comment\n2 1\n15\n" + bytes([15, 7])) == 1  # maxval 15


@pytest.mark.parametrize("bad", [b"\xff\xd8\xff\xe0 a jpeg", b"P2 2 2 255\n1 2 3 4",
                                 b"P5 4 4 255\n" + bytes(15), b"P5 4 4 65535\n" + bytes(32),
                                 b"P5 4"])
def test_detector_refuses_what_it_cannot_decode(bad: bytes) -> None:
    with pytest.raises(ValueError):
        pc.detect_people(bad)


# -- people counter: the live tool ----------------------------------------------------------------

def people(n: int) -> str:
    return f'Function count_people returned: {{"people": {n}}}'


def frame(n: int, fmt: Any = "pgm") -> Blob:
    return pc.frame_blob(pc.spread(n), fmt)


def recording_counter() -> tuple[Any, list[int]]:
    seen: list[int] = []

    def detect(image: bytes) -> int:
        seen.append(pc.detect_people(image))
        return seen[-1]

    return pc.make_count_people(detect), seen


async def test_counter_sees_later_frames_once_a_second_and_speaks_on_change() -> None:
    counter, seen = recording_counter()
    assert "input_stream" not in str(counter.declaration().parameters)
    clock = VirtualClock()
    async with Live(pc_script.build_runner(clock, counter), clock) as live:
        live.queue.send_realtime(frame(5))  # before the call: never seen
        await live.say("How many people can you see?")
        assert live.responses("count_people") == [PENDING]
        assert seen == []
        live.queue.send_realtime(frame(2))
        live.queue.send_realtime(frame(4))  # same instant: dropped by sampling
        await clock.advance(0.5)
        live.queue.send_realtime(frame(4, "ppm"))  # half a second later: still dropped
        await clock.advance(0.5)
        for n in (2, 3, 3, 0):
            live.queue.send_realtime(Blob("audio/pcm", bytes(64)))  # not an image: ignored
            live.queue.send_realtime(frame(n, "ppm"))
            await live.say("hello")  # text reaches the tool's queue too: ignored
            await clock.advance(1)
        assert seen == [2, 2, 3, 3, 0]
        assert live.told("Function count_people") == [people(2), people(3), people(0)]
        assert "I can see 3 people." in live.texts()
        assert "Nobody is in view." in live.texts()


async def test_counter_gets_a_fresh_queue_after_a_stop_and_a_new_call() -> None:
    counter, seen = recording_counter()
    clock = VirtualClock()
    async with Live(pc_script.build_runner(clock, counter), clock) as live:
        await live.say("How many people can you see?")
        live.queue.send_realtime(frame(3))
        await clock.advance(1)
        await live.say("Stop counting.")
        assert live.responses("stop_streaming") == [
            {"result": "Successfully stopped streaming function count_people", "stopped": 1}]
        live.queue.send_realtime(frame(4))  # between the stop and the new call: never seen
        await clock.advance(1)
        assert seen == [3]
        await live.say("How many people can you see?")
        live.queue.send_realtime(frame(3))
        await clock.advance(1)
        live.queue.send_realtime(frame(1))
        await clock.advance(1)
        assert seen == [3, 3, 1]
        # The new call starts with no last count: 3 is said again.
        assert live.told("Function count_people") == [people(3), people(3), people(1)]
        calls = [c.id for e in live.events for c in e.function_calls if c.name == "count_people"]
        assert len(set(calls)) == 2
        await live.say("Stop counting.")
        assert [r["stopped"] for r in live.responses("stop_streaming")] == [1, 1]


def test_the_virtual_count_prints_the_emissions(capsys: pytest.CaptureFixture[str]) -> None:
    assert pc_script.main(["--virtual"]) == 0
    lines = capsys.readouterr().out.splitlines()
    told = [line.split("-> model: ", 1)[1] for line in lines if "-> model: " in line]
    assert told == [people(0), people(1), people(2), people(3), people(1)]
    assert "[t= 0.00s] people: Nobody is in view." in lines
    assert "[t= 1.00s] people: I can see 1 person." in lines
    assert "[t= 6.00s] people: I can see 3 people." in lines
    assert "[t=10.00s] people: Stopped counting." in lines
    assert lines[0].startswith("people counter: demo model (scripted)")
    assert lines[-1] == ("frames sent: 41; frames analysed: 10 "
                         "(counts [0, 1, 1, 2, 2, 2, 3, 3, 1, 1])")


def test_the_bundled_sequence_is_the_scene_at_four_frames_a_second() -> None:
    frames = pc.scene_frames()
    assert len(frames) == len(pc.SCENE) * pc.FPS == 40
    assert frames == pc.scene_frames()  # deterministic
    counts = [pc.detect_people(f.data) for f in frames]
    assert counts == [n for n in pc.SCENE for _ in range(pc.FPS)]
    assert {f.mime_type for f in frames[:4]} == {pc.PGM_MIME}
    assert {f.mime_type for f in frames[4:8]} == {pc.PPM_MIME}
    assert len({f.data for f in frames[12:16]}) == 4  # the people move within a second
