"""Native live connections (Gemini Live, OpenAI Realtime) over a real loopback WebSocket.

The seed examples' virtual-clock sessions (``examples/price_watcher.py``,
``examples/people_counter.py``) run over ``FakeLiveProvider`` speaking each
protocol, with the offline demo model's responder playing the model's side, and
must print the same conversation as over the emulated connection.
"""

from __future__ import annotations

import asyncio
import base64
import importlib
import json
import logging
import tomllib
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from examples.test_examples import PRICE_WATCHER_EMISSIONS, pc, pc_script, people, pw, pw_script
from headwater import Agent, Content, Runner
from headwater.errors import ERROR_MESSAGES, ModelError, UserError
from headwater.models import BaseLlm, DemoModel, LlmRequest, get_model
from headwater.models.connection import EmulatedLlmConnection
from headwater.models.gemini import GeminiModel, is_live_model
from headwater.models.gemini_live import GeminiLiveConnection, GeminiLiveModel
from headwater.models.gemini_live import from_spec as gemini_from_spec
from headwater.models.openai_realtime import OpenAIRealtimeModel
from headwater.models.openai_realtime import from_spec as realtime_from_spec
from headwater.sessions import InMemorySessionService
from headwater.settings import Settings
from headwater.testing import (
    FakeLiveProvider,
    LiveHarness,
    LiveTurn,
    ScriptedCall,
    ScriptedTurn,
    VirtualClock,
    wait_until,
)
from headwater.types import Blob, FunctionResponse, Part, Usage

ROOT = Path(__file__).resolve().parents[2]
PROTOCOLS = ("gemini", "openai")


def demo_responder() -> Callable[[LlmRequest], ScriptedTurn]:
    """The model's side the seed sessions run on: the offline demo model's turns."""
    return DemoModel(word_delay=0).respond


def native(protocol: str, fake: FakeLiveProvider, **options: Any) -> BaseLlm:
    if protocol == "gemini":
        return GeminiLiveModel("gemini-live-test", base_url=fake.gemini_base_url,
                               api_key="test-key", **options)
    return OpenAIRealtimeModel("gpt-realtime-test", base_url=fake.openai_base_url,
                               api_key="test-key", **options)


async def transcript(script: Any, monkeypatch: pytest.MonkeyPatch,
                     model: Callable[[], BaseLlm] | None = None,
                     clock: Callable[[], VirtualClock] | None = None) -> list[str]:
    """An example script's printed virtual session; with ``model``, its agent runs on that model."""
    lines: list[str] = []
    if model is not None:
        original = script.build_runner

        def build_runner(*args: Any) -> Runner:
            runner: Runner = original(*args)
            agent = runner.agent
            runner.agent = Agent(name=agent.name, model=model(), instruction=agent.instruction,
                                 tools=agent.tools)
            return runner

        monkeypatch.setattr(script, "build_runner", build_runner)
    if clock is not None:
        monkeypatch.setattr(script, "VirtualClock", clock)
    await script.virtual_session(lines.append)
    return lines


def same_conversation(native_lines: list[str], emulated: list[str], agent: str) -> None:
    """The same lines at the same virtual times, each speaker's in the same order.

    Only the interleaving of independent lines may differ: over the emulation a
    scripted model answers in zero time, so its answer to a tool's pending
    status is printed before the tool's first emission (committed in the same
    instant); over a socket that answer takes a round trip and comes second.
    (Likewise its answer to a stream's error and the stream's end, committed in
    the same instant.)
    """
    assert Counter(native_lines) == Counter(emulated)
    for speaker in ("-> model: ", f"] {agent}: ", "] user: ", " calls ", " answered: "):
        assert ([line for line in native_lines if speaker in line]
                == [line for line in emulated if speaker in line]), speaker


# -- the seed examples over both protocols ------------------------------------------------------

@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_price_watcher_timeline_is_the_same_as_over_the_emulation(
        protocol: str, monkeypatch: pytest.MonkeyPatch) -> None:
    emulated = await transcript(pw_script, monkeypatch)
    async with FakeLiveProvider(responder=demo_responder()) as fake:
        lines = await transcript(pw_script, monkeypatch, lambda: native(protocol, fake),
                                 fake.virtual_clock)
    same_conversation(lines, emulated, "market")
    told = [line.split("-> model: ", 1)[1] for line in lines if "-> model: " in line]
    assert told == PRICE_WATCHER_EMISSIONS
    assert "[00:04:10] market: GOOG fell 1.1% to 169.38." in lines
    # The model side really heard everything over the socket.
    assert len(fake.sessions) == 1
    heard = [r.contents[-1].text for r in fake.requests]
    assert all(e in heard for e in PRICE_WATCHER_EMISSIONS)
    record = fake.sessions[0]
    if protocol == "gemini":
        setup = record.received[0]["setup"]
        assert setup["model"] == "models/gemini-live-test"
        assert setup["systemInstruction"] == {"parts": [{"text": pw.INSTRUCTION}]}
        names = [d["name"] for d in setup["tools"][0]["functionDeclarations"]]
        assert names == ["watch_price", "stop_streaming"]
        assert "key=test-key" in record.query
        assert len(record.of_kind("toolResponse")) == 3  # watch, stop, watch
    else:
        session = record.received[0]["session"]
        assert session["instructions"] == pw.INSTRUCTION
        assert [t["name"] for t in session["tools"]] == ["watch_price", "stop_streaming"]
        assert record.headers["authorization"] == "Bearer test-key"
        assert "model=gpt-realtime-test" in record.query
        outputs = [m["item"] for m in record.of_kind("conversation.item.create")
                   if m["item"]["type"] == "function_call_output"]
        assert len(outputs) == 3
    assert record.closed.is_set() and record.close_code == 1000  # the run closed its socket


# What examples/people_counter.py's virtual session streams: one frame before the call,
# then the scene's frames, each followed by a chunk of (silent) microphone audio.
CAMERA = [pc.frame_blob(pc.spread(4)), *pc.scene_frames()]
MICROPHONE = [Blob("audio/pcm;rate=16000", bytes(320))] * len(pc.scene_frames())


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_people_counter_timeline_is_the_same_as_over_the_emulation(
        protocol: str, monkeypatch: pytest.MonkeyPatch) -> None:
    emulated = await transcript(pc_script, monkeypatch)
    async with FakeLiveProvider(responder=demo_responder()) as fake:
        lines = await transcript(pc_script, monkeypatch, lambda: native(protocol, fake),
                                 fake.virtual_clock)
    assert lines == emulated
    told = [line.split("-> model: ", 1)[1] for line in lines if "-> model: " in line]
    assert told == [people(0), people(1), people(2), people(3), people(1)]
    assert lines[-1].startswith(f"frames sent: {len(CAMERA)}; ")
    assert len(fake.sessions) == 1
    heard = [r.contents[-1].text for r in fake.requests]
    assert all(e in heard for e in told)
    record = fake.sessions[0]
    if protocol == "gemini":
        setup = record.received[0]["setup"]
        assert setup["systemInstruction"] == {"parts": [{"text": pc.INSTRUCTION}]}
        names = [d["name"] for d in setup["tools"][0]["functionDeclarations"]]
    else:
        session = record.received[0]["session"]
        assert session["instructions"] == pc.INSTRUCTION
        names = [t["name"] for t in session["tools"]]
    assert names == ["count_people", "stop_streaming"]
    # Unlike the emulation, a native session sends the camera and the microphone to the model:
    # every frame the session sends (the one before the call too) and every audio chunk, in order.
    frames: list[tuple[str, bytes]]
    if protocol == "gemini":
        media = [m["realtimeInput"] for m in record.of_kind("realtimeInput")]
        assert [next(iter(m)) for m in media] == ["video"] + ["video", "audio"] * len(MICROPHONE)
        frames = [(m["video"]["mimeType"], base64.b64decode(m["video"]["data"]))
                  for m in media if "video" in m]
        audio = [(m["audio"]["mimeType"], base64.b64decode(m["audio"]["data"]))
                 for m in media if "audio" in m]
        assert audio == [(b.mime_type, b.data) for b in MICROPHONE]
    else:
        appended = record.of_kind("input_audio_buffer.append")
        assert [base64.b64decode(m["audio"]) for m in appended] == [b.data for b in MICROPHONE]
        images = [m["item"]["content"][0]["image_url"] for m in record.of_kind(
            "conversation.item.create") if m["item"].get("content", [{}])[0].get("type")
            == "input_image"]
        frames = []
        for url in images:
            head, _, data = url.partition(";base64,")
            frames.append((head.removeprefix("data:"), base64.b64decode(data)))
    assert frames == [(b.mime_type, b.data) for b in CAMERA]
    assert frames[0] == (pc.PGM_MIME, pc.make_frame(pc.spread(4)))


# -- barge-in -----------------------------------------------------------------------------------

class Voice(LiveHarness):
    """A live run of a tool-less agent on a native model, with its own session store."""

    def __init__(self, model: BaseLlm) -> None:
        self.service = InMemorySessionService()
        super().__init__(Runner(agent=Agent(name="voice", model=model), app_name="app",
                                session_service=self.service, auto_create_session=True))

    async def stored(self) -> list[tuple[str, str, bool]]:
        session = await self.service.get_session(app_name="app", user_id="u", session_id="s")
        assert session is not None
        return [(e.author, e.text, e.interrupted) for e in session.events]


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_new_user_content_interrupts_the_answer_and_the_server_closes_its_turn(
        protocol: str) -> None:
    turns = [LiveTurn(text=["Once ", "upon ", "a time"], hold=True),
             LiveTurn(text=["Sure, ", "stopping."])]
    async with FakeLiveProvider(turns=turns) as fake, Voice(native(protocol, fake)) as live:
        live.queue.send_content(Content.from_text("tell me a long story"))
        await wait_until(lambda: sum(1 for e in live.events if e.partial) >= 3)
        live.queue.send_content(Content.from_text("stop, please"))
        await wait_until(lambda: "Sure, stopping." in live.texts())
        assert await live.stored() == [
            ("user", "tell me a long story", False), ("voice", "Once upon a time", True),
            ("user", "stop, please", False), ("voice", "Sure, stopping.", False)]
        record = fake.sessions[0]
        if protocol == "openai":
            assert "response.cancel" in record.kinds()  # the server was told to stop
        # The server's view: the cut answer, then the new question.
        assert [c.text for c in fake.requests[1].contents] == [
            "tell me a long story", "Once upon a time", "stop, please"]
    interrupted = [e for e in live.events if e.interrupted]
    assert len(interrupted) == 1 and interrupted[0].turn_complete


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_the_user_speaking_over_the_answer_is_a_barge_in(protocol: str) -> None:
    long = LiveTurn(text=["Let me ", "explain"], hold=True)
    async with FakeLiveProvider(turns=[long]) as fake, Voice(native(protocol, fake)) as live:
        live.queue.send_content(Content.from_text("explain it"))
        await wait_until(lambda: sum(1 for e in live.events if e.partial) >= 2)
        live.queue.send_realtime(Blob("audio/pcm;rate=16000", bytes(64)))  # silence
        await asyncio.sleep(0.05)
        assert not any(e.interrupted for e in live.events)
        live.queue.send_realtime(Blob("audio/pcm;rate=16000", b"\x10\x20" * 32))  # speech
        await wait_until(lambda: any(e.interrupted for e in live.events))
        assert await live.stored() == [("user", "explain it", False),
                                       ("voice", "Let me explain", True)]
        if protocol == "openai":
            await wait_until(lambda: "response.cancel" in fake.sessions[0].kinds())


# -- goAway and session resumption --------------------------------------------------------------

async def test_go_away_moves_to_a_resumed_session_without_losing_the_price_stream() -> None:
    source = pw.QuoteSource({"GOOG": 100.0}, volatility_pct=0)
    async with FakeLiveProvider(responder=demo_responder()) as fake:
        clock = fake.virtual_clock()
        runner = pw_script.build_runner(source, clock)
        model = GeminiLiveModel("gemini-live-test", base_url=fake.gemini_base_url)
        runner.agent = Agent(name="market", model=model, instruction=pw.INSTRUCTION,
                             tools=runner.agent.tools)
        async with LiveHarness(runner, clock) as live:
            await live.say("Watch GOOG and tell me about 1% moves.")
            source.prices["GOOG"] = 102.0
            await clock.advance(5)
            await fake.go_away(time_left=30)
            await wait_until(lambda: len(fake.sessions) == 2 and fake.sessions[0].closed.is_set())
            await clock.settle()
            for value in (104.0, 101.0):
                source.prices["GOOG"] = value
                await clock.advance(5)
            await live.say("Stop watching.")
            first, second = fake.sessions
            assert second.resumed is not None and second.resumed.startswith("handle_")
            assert "sessionResumption" in second.received[0]["setup"]
            assert "clientContent" not in second.kinds()[:1]  # no history replayed on resume
            told = live.told("Function watch_price")
            assert told == [pw_price("GOOG", 100.0), pw_price("GOOG", 102.0),
                            pw_price("GOOG", 104.0), pw_price("GOOG", 101.0)]
            said = [t for t in live.texts() if t.startswith("GOOG")]
            assert said == ["GOOG is at 100.00.", "GOOG rose 2.0% to 102.00.",
                            "GOOG rose 2.0% to 104.00.", "GOOG fell 2.9% to 101.00."]
            assert live.texts()[-1] == "Stopped watching."
            # The resumed session remembered the conversation from before the move.
            assert fake.requests[-1].contents[0].text == "Watch GOOG and tell me about 1% moves."
            assert first.close_code == 1000


def pw_price(symbol: str, value: float) -> str:
    return f'Function watch_price returned: {{"symbol": "{symbol}", "price": {value}}}'


async def test_content_sent_while_moving_is_held_and_answered_on_the_new_socket() -> None:
    turns = [LiveTurn(text=["one"], hold=True), LiveTurn(text=["two"])]
    async with asyncio.timeout(10), FakeLiveProvider(turns=turns) as fake:
        model = native("gemini", fake)
        conn = model.connect(LlmRequest())
        seen: list[Any] = []

        async def read() -> None:
            async for response in conn.receive():
                seen.append(response)

        reader = asyncio.create_task(read())
        await conn.send_content(Content.from_text("first"))
        await wait_until(lambda: any(r.partial for r in seen))
        await fake.go_away(time_left=30)  # mid-turn: the answer is not cut
        await conn.send_content(Content.from_text("second"), interrupt=False)
        await asyncio.sleep(0.05)
        fake.release()
        await wait_until(lambda: sum(1 for r in seen if not r.partial) == 2)
        first, second = fake.sessions
        await conn.close()
        await reader
    finals = [r for r in seen if not r.partial]
    assert [f.content.text for f in finals] == ["one", "two"]
    assert not any(f.interrupted or f.error_code for f in finals)
    assert first.kinds() == ["setup", "clientContent"]  # "second" waited for the new socket
    assert second.resumed is not None and second.kinds() == ["setup", "clientContent"]
    # Resumed with the handle given after "one": the new socket's model remembers it.
    assert [c.text for c in fake.requests[-1].contents] == ["first", "one", "second"]


async def test_a_go_away_after_a_turn_moves_at_once_and_the_next_turn_runs_resumed() -> None:
    async with FakeLiveProvider(turns=[LiveTurn(text=["one"], go_away=0.5),
                                       LiveTurn(text=["two"])]) as fake:
        conn = native("gemini", fake).connect(LlmRequest())
        seen, reader = await read_all(conn)
        await conn.send_content(Content.from_text("first"))
        await wait_until(lambda: len(fake.sessions) == 2 and fake.sessions[0].closed.is_set())
        await conn.send_content(Content.from_text("second"))
        await wait_until(lambda: sum(1 for r in seen if not r.partial) == 2)
        await conn.close()
        await reader
    assert [r.content.text for r in seen if not r.partial] == ["one", "two"]
    assert fake.sessions[0].close_code == 1000  # the client left before the deadline (1001)
    assert [c.text for c in fake.requests[-1].contents] == ["first", "one", "second"]


# -- failures -----------------------------------------------------------------------------------

@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_an_abrupt_close_is_an_error_code_and_later_turns_fail_fast(protocol: str) -> None:
    dropped = LiveTurn(text=["half an ans"], drop=True)
    async with FakeLiveProvider(turns=[dropped]) as fake, Voice(native(protocol, fake)) as live:
        await live.say("hello")
        await wait_until(lambda: any(e.error_code for e in live.events))
        await live.say("are you there?")
        await wait_until(lambda: sum(1 for e in live.events if e.error_code) == 2)
        stored = await live.stored()
    errors = [e for e in live.events if e.error_code]
    assert [(e.error_code, e.turn_complete) for e in errors] == [
        ("provider_unavailable", True)] * 2
    assert all(e.error_message == ERROR_MESSAGES["provider_unavailable"] for e in errors)
    assert ("voice", "half an ans", False) not in stored  # nothing of the broken turn is kept
    assert fake.sessions[0].close_code == 1006


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_provider_text_never_reaches_an_event(protocol: str,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    secret = "SECRET provider detail sk-live-123"
    turn = (LiveTurn(close=(1011, secret)) if protocol == "gemini"
            else LiveTurn(error=("invalid_request_error", secret)))
    async with FakeLiveProvider(turns=[turn]) as fake, Voice(native(protocol, fake)) as live:
        await live.say("hello")
        await wait_until(lambda: any(e.error_code for e in live.events))
    error = next(e for e in live.events if e.error_code)
    expected = "provider_unavailable" if protocol == "gemini" else "provider_rejected"
    assert error.error_code == expected
    assert error.error_message == ERROR_MESSAGES[expected]
    assert all(secret not in json.dumps([e.text, e.error_message]) for e in live.events)
    assert secret not in caplog.text or all(r.levelno <= logging.DEBUG for r in caplog.records
                                            if secret in r.getMessage())
    client_side = [r.getMessage() for r in caplog.records if r.name != "websockets.server"]
    assert not any("test-key" in m for m in client_side)  # no handshake trace is logged
    assert fake.sessions[0].closed.is_set()


@pytest.mark.parametrize("said", [["thinking"], []])
async def test_a_turn_that_goes_quiet_fails_with_provider_timeout(said: list[str]) -> None:
    settings = Settings(live_idle_timeout=0.2)
    quiet = LiveTurn(text=said, hold=True)  # silent after a piece, or from the start
    async with (FakeLiveProvider(turns=[quiet]) as fake,
                Voice(native("gemini", fake, settings=settings)) as live):
        await live.say("hello")
        await wait_until(lambda: any(e.error_code for e in live.events))
    assert [e.error_code for e in live.events if e.error_code] == ["provider_timeout"]


async def test_a_refused_setup_is_an_error_final() -> None:
    async with FakeLiveProvider() as fake:
        model = GeminiLiveModel("m", base_url=fake.base_url + "/wrong")
        conn = model.connect(LlmRequest())
        await conn.send_content(Content.from_text("hi"))
        responses = conn.receive()
        first = await anext(responses)
        await conn.close()
    assert first.error_code == "provider_unavailable" and first.turn_complete


# -- closing ------------------------------------------------------------------------------------

@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_cancelling_the_consumer_closes_the_socket(protocol: str) -> None:
    held = LiveTurn(text=["a ", "long ", "answer"], hold=True)
    async with FakeLiveProvider(turns=[held]) as fake:
        live = Voice(native(protocol, fake))
        await live.__aenter__()
        live.queue.send_content(Content.from_text("go"))
        await wait_until(lambda: any(e.partial for e in live.events))
        assert live.task is not None
        live.task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await live.task
        await asyncio.wait_for(fake.sessions[0].closed.wait(), 2)
        assert fake.sessions[0].close_code == 1000


# -- audio as blobs -----------------------------------------------------------------------------

@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_audio_goes_in_and_comes_out_as_inline_blobs(protocol: str) -> None:
    chunks = [b"\x01\x02\x03\x04", b"\x05\x06"]
    options = {"response_modality": "AUDIO"} if protocol == "gemini" else {
        "output_modality": "audio"}
    async with FakeLiveProvider(turns=[LiveTurn(text=["Hi there"], audio=chunks)]) as fake:
        async with Voice(native(protocol, fake, **options)) as live:
            spoken = b"\x00\x01" * 16
            live.queue.send_realtime(Blob("audio/pcm;rate=16000", spoken))
            await wait_until(lambda: len(fake.sessions) == 1 and len(fake.sessions[0].received) > 1)
            live.queue.send_content(Content.from_text("say hi"))
            await wait_until(lambda: "Hi there" in live.texts())
        record = fake.sessions[0]
    blobs = [p.inline_data for e in live.events if e.partial and e.content
             for p in e.content.parts if p.inline_data is not None]
    assert [b.data for b in blobs] == chunks
    assert all(b.mime_type.startswith("audio/pcm") for b in blobs)
    if protocol == "gemini":
        sent = record.of_kind("realtimeInput")[0]["realtimeInput"]["audio"]
        assert sent["mimeType"] == "audio/pcm;rate=16000"
        assert record.received[0]["setup"]["generationConfig"]["responseModalities"] == ["AUDIO"]
    else:
        sent = record.of_kind("input_audio_buffer.append")[0]
        assert record.received[0]["session"]["output_modalities"] == ["audio"]
    assert base64.b64decode(sent["audio"] if protocol == "openai" else sent["data"]) == spoken


# -- one-turn calls, tool results, history ------------------------------------------------------

@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_generate_content_runs_one_turn_over_its_own_session(protocol: str) -> None:
    async with FakeLiveProvider(turns=[LiveTurn(text=["4"], calls=[
            ScriptedCall("add", {"a": 2, "b": 2}, id="c1")])]) as fake:
        model = native(protocol, fake)
        request = LlmRequest(system_instruction="be brief", contents=[
            Content.from_text("earlier"), Content.from_text("earlier answer", role="model"),
            Content.from_text("2+2?")])
        responses = [r async for r in model.generate_content(request, stream=True)]
        await asyncio.wait_for(fake.sessions[0].closed.wait(), 2)
    assert [r.partial for r in responses] == [True, False]
    final = responses[-1]
    assert final.content is not None and final.content.text == "4"
    assert [(c.id, c.name, c.args) for c in final.content.function_calls] == [
        ("c1", "add", {"a": 2, "b": 2})]
    assert [c.text for c in fake.requests[0].contents] == ["earlier", "earlier answer", "2+2?"]
    assert [c.role for c in fake.requests[0].contents] == ["user", "model", "user"]
    assert fake.requests[0].system_instruction == "be brief"


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_tool_results_are_sent_by_call_id_and_wait_for_the_answer(protocol: str) -> None:
    async with FakeLiveProvider(turns=[
            LiveTurn(calls=[ScriptedCall("lookup", {"q": "x"}, id="call-7")]),
            LiveTurn(text=["found ", "it"], hold=True), LiveTurn(text=["and more"])]) as fake:
        conn = native(protocol, fake).connect(LlmRequest())
        seen: list[Any] = []

        async def read() -> None:
            async for response in conn.receive():
                seen.append(response)

        reader = asyncio.create_task(read())
        await conn.send_content(Content.from_text("look it up"))
        await wait_until(lambda: any(r.content and r.content.function_calls for r in seen))
        result = FunctionResponse("call-7", "lookup", {"value": 42})
        await conn.send_content(Content("user", [Part(function_response=result)]),
                                interrupt=False)
        await wait_until(lambda: sum(1 for r in seen if r.partial) == 2)
        await conn.send_content(Content.from_text("Function lookup returned: 43"),
                                interrupt=False)  # waits for the held answer's end
        await asyncio.sleep(0.05)
        assert len(fake.requests) == 2  # not sent yet
        fake.release()
        await wait_until(lambda: sum(1 for r in seen if not r.partial) == 3)
        await conn.close()
        await reader
    record = fake.sessions[0]
    if protocol == "gemini":
        assert record.of_kind("toolResponse")[0]["toolResponse"] == {"functionResponses": [
            {"id": "call-7", "name": "lookup", "response": {"value": 42}}]}
    else:
        output = [m["item"] for m in record.of_kind("conversation.item.create")
                  if m["item"]["type"] == "function_call_output"]
        assert output == [{"type": "function_call_output", "call_id": "call-7",
                           "output": '{"value": 42}'}]
    finals = [r for r in seen if not r.partial]
    assert [f.content.text for f in finals] == ["", "found it", "and more"]
    assert not any(f.interrupted for f in finals)


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_send_history_replaces_the_conversation_with_a_fresh_session(protocol: str) -> None:
    async with FakeLiveProvider(turns=[LiveTurn(text=["first answer"]),
                                       LiveTurn(text=["second answer"])]) as fake:
        conn = native(protocol, fake).connect(LlmRequest(contents=[Content.from_text("old")]))
        seen: list[Any] = []

        async def read() -> None:
            async for response in conn.receive():
                seen.append(response)

        reader = asyncio.create_task(read())
        await conn.send_content(Content.from_text("one"))
        await wait_until(lambda: any(not r.partial for r in seen))
        await conn.send_history([Content.from_text("replaced"),
                                 Content.from_text("ok", role="model")])
        await conn.send_content(Content.from_text("two"))
        await wait_until(lambda: sum(1 for r in seen if not r.partial) == 2)
        await conn.close()
        await reader
    assert [c.text for c in fake.requests[0].contents] == ["old", "one"]
    assert [c.text for c in fake.requests[1].contents] == ["replaced", "ok", "two"]
    assert len(fake.sessions) == 2 and fake.sessions[1].resumed is None


async def read_all(conn: Any) -> tuple[list[Any], asyncio.Task[None]]:
    seen: list[Any] = []

    async def read() -> None:
        async for response in conn.receive():
            seen.append(response)

    return seen, asyncio.create_task(read())


async def test_gemini_activity_marks_and_realtime_text() -> None:
    speech = b"\x01\x02" * 8
    async with FakeLiveProvider(turns=[LiveTurn(text=["long ", "answer"], hold=True),
                                       LiveTurn(text=["heard you"]),
                                       LiveTurn(text=["read you"])]) as fake:
        model = native("gemini", fake, realtime_input_config={
            "automaticActivityDetection": {"disabled": True}})
        assert isinstance(model, GeminiLiveModel)
        conn = model.connect(LlmRequest())
        seen, reader = await read_all(conn)
        await conn.send_content(Content.from_text("talk"))
        await wait_until(lambda: sum(1 for r in seen if r.partial) == 2)
        await conn.activity(start=True)  # the user starts speaking: the server cuts the answer
        await wait_until(lambda: any(r.interrupted for r in seen))
        await conn.send_realtime(Blob("audio/pcm;rate=16000", speech))
        await conn.activity(start=False)
        await wait_until(lambda: any(r.content and r.content.text == "heard you" and not r.partial
                                     for r in seen))
        await conn.send_text("typed")
        await wait_until(lambda: sum(1 for r in seen if not r.partial) == 3)
        await conn.close()
        await reader
    finals = [(r.content.text if r.content else None, r.interrupted) for r in seen
              if not r.partial]
    assert finals == [("long answer", True), ("heard you", False), ("read you", False)]
    setup = fake.sessions[0].received[0]["setup"]
    assert setup["realtimeInputConfig"] == {"automaticActivityDetection": {"disabled": True}}
    heard = fake.requests[1].contents[-1].parts[0].inline_data
    assert heard is not None and heard.data == speech
    assert fake.requests[2].contents[-1].text == "typed"


async def test_openai_committed_audio_is_answered() -> None:
    speech = b"\x03\x04" * 8
    async with FakeLiveProvider(turns=[LiveTurn(text=["heard you"])], vad=False) as fake:
        model = native("openai", fake)
        assert isinstance(model, OpenAIRealtimeModel)
        conn = model.connect(LlmRequest())
        seen, reader = await read_all(conn)
        await conn.send_realtime(Blob("audio/pcm;rate=24000", speech))
        await conn.commit_audio()
        await wait_until(lambda: any(not r.partial for r in seen))
        await conn.close()
        await reader
    assert [r.content.text for r in seen if not r.partial] == ["heard you"]
    assert fake.sessions[0].kinds()[1:] == ["input_audio_buffer.append",
                                            "input_audio_buffer.commit", "response.create"]
    heard = fake.requests[0].contents[-1].parts[0].inline_data
    assert heard is not None and heard.data == speech


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_usage_is_on_the_final_and_a_message_not_json_is_bad_response(
        protocol: str) -> None:
    async with FakeLiveProvider(turns=[
            LiveTurn(text=["a"], usage=Usage(input_tokens=7, output_tokens=3, total_tokens=10)),
            LiveTurn(raw=["<html>proxy error</html>"])]) as fake:
        conn = native(protocol, fake).connect(LlmRequest())
        seen, reader = await read_all(conn)
        await conn.send_content(Content.from_text("one"))
        await wait_until(lambda: any(not r.partial for r in seen))
        await conn.send_content(Content.from_text("two"))
        await wait_until(lambda: sum(1 for r in seen if not r.partial) == 2)
        await conn.close()
        await reader
    first, second = [r for r in seen if not r.partial]
    assert first.usage == Usage(input_tokens=7, output_tokens=3, total_tokens=10)
    assert second.error_code == "provider_bad_response" and "proxy" not in str(second)


# -- model strings ------------------------------------------------------------------------------

def test_model_strings_and_their_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("GEMINI_API_KEY", "GOOGLE_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(UserError, match="GEMINI_API_KEY"):
        gemini_from_spec("gemini-live-2.5-flash-preview")
    with pytest.raises(UserError, match="OPENAI_API_KEY"):
        realtime_from_spec("gpt-realtime")
    monkeypatch.setenv("GOOGLE_API_KEY", "g-key")
    monkeypatch.setenv("OPENAI_API_KEY", "o-key")
    gemini = gemini_from_spec("gemini-live-2.5-flash-preview")
    assert gemini.url == ("wss://generativelanguage.googleapis.com/ws/google.ai."
                          "generativelanguage.v1beta.GenerativeService.BidiGenerateContent"
                          "?key=g-key")
    realtime = realtime_from_spec("gpt-realtime")
    assert realtime.url == "wss://api.openai.com/v1/realtime?model=gpt-realtime"
    assert realtime.auth_headers() == {"Authorization": "Bearer o-key"}
    points = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    for prefix, factory in (("gemini-live", gemini_from_spec),
                            ("openai-realtime", realtime_from_spec)):
        module, _, attr = points["headwater.models"][prefix].partition(":")
        assert getattr(importlib.import_module(module), attr) is factory
    with pytest.raises(UserError, match="response_modality"):
        GeminiLiveModel("m", response_modality="VIDEO")


# -- GeminiModel picks the native connection for Live API models ---------------------------------

@pytest.mark.parametrize(("name", "live"), [
    ("gemini-live-2.5-flash-preview", True), ("models/gemini-2.0-flash-live-001", True),
    ("gemini-2.5-flash-native-audio-preview-09-2025", True), ("gemini-2.5-flash", False),
    ("gemini-2.5-flash-lite", False), ("delivery-model", False)])
def test_a_live_api_model_is_told_by_its_name(name: str, live: bool) -> None:
    assert is_live_model(name) is live


async def test_gemini_model_runs_a_live_api_model_natively_and_others_emulated() -> None:
    async with FakeLiveProvider(turns=[LiveTurn(text=["native ", "hello"])]) as fake:
        model = GeminiModel("gemini-live-2.5-flash-preview", api_key="test-key",
                            base_url="http://127.0.0.1:9/unused",
                            live_base_url=fake.gemini_base_url)
        conn = model.connect(LlmRequest(system_instruction="be brief"))
        assert isinstance(conn, GeminiLiveConnection)
        try:
            await conn.send_content(Content.from_text("hi"))
            async with asyncio.timeout(5):
                async for response in conn.receive():
                    if not response.partial:
                        break
        finally:
            await conn.close()
        assert response.content is not None and response.content.text == "native hello"
        record = fake.sessions[0]
        assert record.received[0]["setup"]["model"] == "models/gemini-live-2.5-flash-preview"
        assert "key=test-key" in record.query
    emulated = GeminiModel("gemini-2.5-flash", api_key="k").connect(LlmRequest())
    assert isinstance(emulated, EmulatedLlmConnection)
    await emulated.close()
    # Vertex AI (a bearer token) has no Live endpoint here: emulated.
    vertex = GeminiModel("gemini-live-2.5-flash-preview", access_token="t").connect(LlmRequest())
    assert isinstance(vertex, EmulatedLlmConnection)
    await vertex.close()


def test_the_gemini_string_reads_the_live_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOOGLE_API_KEY", "g-key")
    monkeypatch.setenv("GEMINI_LIVE_BASE_URL", "ws://127.0.0.1:1234")
    model = get_model("gemini:gemini-live-2.5-flash-preview")
    assert isinstance(model, GeminiModel) and model.live_base_url == "ws://127.0.0.1:1234"


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_call_given_up_early_has_closed_its_session_when_aclose_returns(
        protocol: str) -> None:
    async with FakeLiveProvider(turns=[LiveTurn(text=["one ", "two ", "three"], hold=True)]
                                ) as fake:
        model = native(protocol, fake)
        opened: list[Any] = []
        connect = model.connect

        def connect_and_keep(request: LlmRequest) -> Any:
            opened.append(connect(request))
            return opened[-1]

        model.connect = connect_and_keep  # type: ignore[method-assign]
        responses = model.generate_content(LlmRequest(contents=[Content.from_text("hi")]),
                                           stream=True)
        first = await anext(responses)
        assert first.partial
        await responses.aclose()  # the caller stops reading: the session ends here, not later
        with pytest.raises(ModelError, match="closed"):
            await opened[0].send_content(Content.from_text("more"))
        await asyncio.wait_for(fake.sessions[0].closed.wait(), 2)
