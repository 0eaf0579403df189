"""``FakeLiveProvider``: a loopback WebSocket server speaking Gemini Live and OpenAI Realtime.

A real ``websockets`` server on ``127.0.0.1``: a client connecting to
``/ws/…BidiGenerateContent`` gets the Gemini Live protocol, one connecting to
``/v1/realtime`` the OpenAI Realtime protocol, both at the message level a
provider sends (camelCase ``serverContent``/``toolCall``/``goAway``; typed
``response.*`` events). The model's side is scripted: each turn the server
plays is the next queued :class:`LiveTurn`, else what ``responder`` makes of
the conversation so far (an :class:`~headwater.models.LlmRequest` rebuilt from
what the client sent, so the examples' scripted responders run unchanged; a
:class:`~headwater.testing.ScriptedTurn` is accepted too)::

    async with FakeLiveProvider(responder=my_responder) as fake:
        model = GeminiLiveModel("gemini-live-test", base_url=fake.gemini_base_url)
        ...
        assert fake.sessions[0].kinds()[:2] == ["setup", "clientContent"]

Like the real services it interrupts an answer when new user content arrives
(Gemini: ``clientContent``, ``activityStart`` or audio while it speaks, then
``interrupted``; OpenAI: ``response.cancel``, then ``response.done`` with
``cancelled``), sends ``input_audio_buffer.speech_started`` on audio (OpenAI),
answers the user's audio once it ends (Gemini ``activityEnd``/``audioStreamEnd``,
OpenAI ``input_audio_buffer.commit`` then ``response.create``), refuses a
second ``response.create`` while a response is active, hands out
Gemini session-resumption handles after each finished turn and restores the
conversation from one, and can send ``goAway``, close abruptly (no close frame)
or close with a code. Every message a client sent is recorded per socket.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from ..core.tasks import TaskSet
from ..core.types import Blob, Content, FunctionCall, FunctionResponse, Part, ToolDeclaration, Usage
from ..models.llm_request import LlmRequest
from ..models.scripted import ScriptedCall, ScriptedTurn
from .clock import VirtualClock

GEMINI_PATH = "/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent"
REALTIME_PATH = "/v1/realtime"

Json = Any  # raw wire JSON


@dataclass(frozen=True)
class LiveTurn:
    """What the fake model does on one turn.

    Attributes:
        text: answer text, as the pieces it streams in.
        audio: audio chunks (``audio/pcm;rate=24000``), streamed after the text.
        calls: function calls that end the turn (Gemini ``toolCall``; OpenAI
            ``function_call`` items).
        usage: token usage reported with the turn's end.
        hold: after the pieces, keep the answer open until the client
            interrupts it or :meth:`FakeLiveProvider.release` is called.
        go_away: after the turn, send ``goAway`` with this many seconds left
            (Gemini) and close the socket when they are up.
        drop: after the pieces, cut the TCP connection (no close frame).
        close: after the pieces, close with this ``(code, reason)``.
        error: OpenAI: answer ``response.create`` with an ``error`` event of
            this ``(type, message)`` instead of a response.
        raw: text frames sent as they are before the pieces (a broken provider).
    """

    text: Sequence[str] = ()
    audio: Sequence[bytes] = ()
    calls: Sequence[ScriptedCall] = ()
    usage: Usage | None = None
    hold: bool = False
    go_away: float | None = None
    drop: bool = False
    close: tuple[int, str] | None = None
    error: tuple[str, str] | None = None
    raw: Sequence[str] = ()


LiveResponder = Callable[[LlmRequest], "LiveTurn | ScriptedTurn"]


@dataclass(eq=False)
class LiveSocketRecord:
    """One client socket, updated while it lives.

    Attributes:
        protocol: ``"gemini"`` or ``"openai"``.
        path: the request path; query: the query string (``key=…``, ``model=…``).
        headers: the upgrade request's headers (lower-case names).
        received: every message the client sent, parsed, in order.
        resumed: the resumption handle its setup carried, if any.
        closed: set once the socket is closed (by either side).
        close_code: the close code the server saw (``1006``: no close frame).
    """

    protocol: Literal["gemini", "openai"]
    path: str
    query: str
    headers: dict[str, str]
    received: list[dict[str, Json]] = field(default_factory=list)
    resumed: str | None = None
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    close_code: int | None = None

    def kinds(self) -> list[str]:
        """What each received message was: its ``type`` (OpenAI) or first key (Gemini)."""
        return [str(m.get("type")) if self.protocol == "openai" else next(iter(m), "")
                for m in self.received]

    def of_kind(self, kind: str) -> list[dict[str, Json]]:
        """The received messages of one kind (the whole message), in order."""
        return [m for m, k in zip(self.received, self.kinds(), strict=True) if k == kind]


class FakeLiveProvider:
    """A loopback live-model server (see the module docstring).

    Use it as ``async with``: it listens from ``__aenter__`` until
    ``__aexit__``, which closes every socket.

    Args:
        responder: builds a turn from the conversation when no turn is queued.
        turns: turns to play first, in order.
        handles: hand out Gemini resumption handles after each finished turn.
        vad: detect speech in the user's audio (anything but silence): Gemini
            interrupts an answer, OpenAI sends ``input_audio_buffer.speech_started``.

    Attributes:
        sessions: every socket accepted, in order.
        requests: what each played turn was asked (the rebuilt conversation).
        activity: messages received plus messages sent so far (a progress count).
    """

    def __init__(self, responder: LiveResponder | None = None, *,
                 turns: Sequence[LiveTurn] = (), handles: bool = True,
                 vad: bool = True) -> None:
        self.responder = responder
        self.handles = handles
        self.vad = vad
        self.sessions: list[LiveSocketRecord] = []
        self.requests: list[LlmRequest] = []
        self.activity = 0
        self._turns: deque[LiveTurn] = deque(turns)
        self._server: Server | None = None
        self._live: list[_Session] = []
        self._saved: dict[str, list[Content]] = {}
        self._ids = itertools.count(1)

    async def __aenter__(self) -> FakeLiveProvider:
        self._server = await serve(self._serve, "127.0.0.1", 0, max_size=None)
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
            await server.wait_closed()

    @property
    def base_url(self) -> str:
        """``ws://127.0.0.1:<port>``; valid once started."""
        if self._server is None:
            raise RuntimeError("FakeLiveProvider is not running; use `async with`")
        port = next(iter(self._server.sockets)).getsockname()[1]
        return f"ws://127.0.0.1:{port}"

    @property
    def gemini_base_url(self) -> str:
        """The ``base_url`` for ``GeminiLiveModel``."""
        return self.base_url

    @property
    def openai_base_url(self) -> str:
        """The ``base_url`` for ``OpenAIRealtimeModel`` (``…/v1``)."""
        return f"{self.base_url}/v1"

    def enqueue(self, *turns: LiveTurn) -> None:
        """Queue turns, played ahead of the responder."""
        self._turns.extend(turns)

    def release(self) -> None:
        """Let every held answer finish."""
        for session in self._live:
            session.release.set()

    async def go_away(self, time_left: float = 10.0) -> None:
        """Send ``goAway`` on every open Gemini socket; each closes when ``time_left`` is up."""
        for session in list(self._live):
            if isinstance(session, _Gemini):
                await session.go_away(time_left)

    def drop(self) -> None:
        """Cut every open socket's TCP connection now (no close frame)."""
        for session in list(self._live):
            session.ws.transport.abort()

    def virtual_clock(self, **options: Any) -> VirtualClock:
        """A :class:`VirtualClock` whose settling also waits for this server to go quiet.

        Sockets need real time: each settle lets the loop run, waits a little
        real time, and repeats until no message went either way meanwhile.
        ``options`` go to :class:`VirtualClock`.
        """
        return _QuietClock(lambda: self.activity, **options)

    def next_turn(self, request: LlmRequest) -> LiveTurn:
        self.requests.append(request)
        if self._turns:
            return self._turns.popleft()
        if self.responder is None:
            return LiveTurn(text=["(no scripted turn)"])
        turn = self.responder(request)
        if isinstance(turn, ScriptedTurn):
            return LiveTurn(text=tuple(turn.text), calls=tuple(turn.calls), usage=turn.usage)
        return turn

    def new_id(self, prefix: str) -> str:
        return f"{prefix}_{next(self._ids)}"

    def save(self, conversation: list[Content]) -> str:
        handle = self.new_id("handle")
        self._saved[handle] = list(conversation)
        return handle

    def restore(self, handle: str) -> list[Content] | None:
        saved = self._saved.get(handle)
        return None if saved is None else list(saved)

    async def _serve(self, ws: ServerConnection) -> None:
        request = ws.request
        assert request is not None
        path, _, query = request.path.partition("?")
        protocol: Literal["gemini", "openai"] | None = (
            "gemini" if path == GEMINI_PATH else "openai" if path == REALTIME_PATH else None)
        if protocol is None:
            await ws.close(1008, "unknown path")
            return
        record = LiveSocketRecord(protocol, path, query,
                                  {k.lower(): v for k, v in request.headers.raw_items()})
        self.sessions.append(record)
        session: _Session = (_Gemini if protocol == "gemini" else _Realtime)(self, ws, record)
        self._live.append(session)
        try:
            await session.run()
        except ConnectionClosed:
            pass
        finally:
            self._live.remove(session)  # nothing new starts on it while it stops
            await session.stop()
            record.close_code = ws.close_code if ws.close_code is not None else 1006
            record.closed.set()


class _Session(ABC):
    """One socket's server side: the conversation, the answer playing, the wire."""

    def __init__(self, fake: FakeLiveProvider, ws: ServerConnection,
                 record: LiveSocketRecord) -> None:
        self.fake = fake
        self.ws = ws
        self.record = record
        self.conversation: list[Content] = []
        self.system: str | None = None
        self.tools: list[ToolDeclaration] = []
        self.model = ""
        self.playing: asyncio.Task[None] | None = None
        self.said: list[str] = []
        self.answering = False  # between a turn's start and its end marker
        self.release = asyncio.Event()
        # The turns playing, sends under way, a close to come: closed by stop().
        self.tasks = TaskSet("fake live session")

    async def run(self) -> None:
        async for raw in self.ws:
            message = json.loads(raw)
            self.fake.activity += 1
            self.record.received.append(message)
            await self.on_message(message)

    @abstractmethod
    async def on_message(self, message: dict[str, Json]) -> None:
        """Act on one message the client sent (this protocol's client events)."""

    async def send(self, payload: dict[str, Json]) -> None:
        """Send one message; an answer interrupted meanwhile never leaves half a send."""
        self.fake.activity += 1
        # A send to a socket that closed meanwhile is nothing to report; the sender sees it.
        sending = self.tasks.spawn(self.ws.send(json.dumps(payload)), name="send",
                                   expected=Exception)
        await asyncio.shield(sending)

    async def send_raw(self, frames: Sequence[str]) -> None:
        for frame in frames:
            self.fake.activity += 1
            await self.ws.send(frame)

    async def stop(self) -> None:
        await self.tasks.aclose()

    def request(self) -> LlmRequest:
        return LlmRequest(model=self.model, system_instruction=self.system,
                          contents=list(self.conversation), tools=list(self.tools))

    def start(self) -> None:
        """Play the next turn (after the one playing, if any)."""
        previous = self.playing
        self.playing = self.tasks.spawn(self._after(previous), name="play a turn",
                                        expected=ConnectionClosed)

    async def _after(self, previous: asyncio.Task[None] | None) -> None:
        if previous is not None and not previous.done():
            await asyncio.wait([previous])
        turn = self.fake.next_turn(self.request())
        self.said = []
        self.release.clear()
        self.answering = True
        try:
            await self.play(turn)
        finally:
            self.answering = False

    async def interrupt(self) -> bool:
        """Stop the answer playing; ``True`` if one was (not yet at its end marker)."""
        task = self.playing
        if task is None or task.done() or not self.answering:
            return False
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        if self.said:
            self.conversation.append(Content("model", [Part(text="".join(self.said))]))
        return True

    async def end_of_pieces(self, turn: LiveTurn) -> bool:
        """Hold, drop or close as the turn says; ``False`` if the socket is gone."""
        if turn.hold:
            await self.release.wait()
        self.answering = False  # what follows ends the turn: nothing left to interrupt
        if turn.drop:
            self.ws.transport.abort()
            return False
        if turn.close is not None:
            await self.ws.close(*turn.close)
            return False
        return True

    @abstractmethod
    async def play(self, turn: LiveTurn) -> None:
        """Send one scripted server turn in this protocol's messages."""

    def calls(self, turn: LiveTurn) -> list[FunctionCall]:
        return [FunctionCall(c.id or self.fake.new_id("call"), c.name, dict(c.args))
                for c in turn.calls]

    def finished(self, calls: list[FunctionCall]) -> None:
        parts = [Part(text="".join(self.said))] if self.said else []
        parts += [Part(function_call=c) for c in calls]
        if parts:
            self.conversation.append(Content("model", parts))
        self.said = []


class _Gemini(_Session):
    def __init__(self, fake: FakeLiveProvider, ws: ServerConnection,
                 record: LiveSocketRecord) -> None:
        super().__init__(fake, ws, record)
        self.heard = bytearray()  # the user's audio since the last answer it started
        self.heard_mime = "audio/pcm;rate=16000"

    async def on_message(self, message: dict[str, Json]) -> None:
        if "setup" in message:
            await self._setup(message["setup"])
        elif "clientContent" in message:
            body = message["clientContent"]
            if body.get("turnComplete"):
                await self._interrupt()  # the cut answer stays in the conversation, first
            self.conversation += [_from_gemini(t) for t in body.get("turns", [])]
            if body.get("turnComplete"):
                self.start()
        elif "toolResponse" in message:
            responses = [FunctionResponse(r.get("id", ""), r.get("name", ""), r.get("response", {}))
                         for r in message["toolResponse"].get("functionResponses", [])]
            self.conversation.append(Content("user", [Part(function_response=r)
                                                      for r in responses]))
            self.start()
        elif "realtimeInput" in message:
            await self._realtime(message["realtimeInput"])

    async def _setup(self, setup: dict[str, Json]) -> None:
        self.model = setup.get("model", "")
        instruction = setup.get("systemInstruction")
        if instruction:
            self.system = "".join(p.get("text", "") for p in instruction.get("parts", []))
        self.tools = [ToolDeclaration(d["name"], d.get("description", ""), d.get("parameters", {}))
                      for t in setup.get("tools", []) for d in t.get("functionDeclarations", [])]
        handle = (setup.get("sessionResumption") or {}).get("handle")
        if handle:
            restored = self.fake.restore(handle)
            if restored is None:
                await self.ws.close(1008, "unknown session handle")
                return
            self.record.resumed = handle
            self.conversation = restored
        await self.send({"setupComplete": {}})
        await self._new_handle()

    async def _new_handle(self) -> None:
        if self.fake.handles:
            await self.send({"sessionResumptionUpdate": {
                "newHandle": self.fake.save(self.conversation), "resumable": True}})

    async def _realtime(self, body: dict[str, Json]) -> None:
        audio = body.get("audio")
        if "activityStart" in body or (audio and self.fake.vad and _speech(audio.get("data", ""))):
            await self._interrupt()  # the user speaks: barge-in
        if audio:
            self.heard += base64.b64decode(audio.get("data", ""))
            self.heard_mime = audio.get("mimeType", self.heard_mime)
        if ("activityEnd" in body or body.get("audioStreamEnd")) and self.heard:
            blob = Blob(self.heard_mime, bytes(self.heard))
            self.heard.clear()
            self.conversation.append(Content("user", [Part(inline_data=blob)]))
            self.start()  # the user stopped speaking: answer
        if "text" in body:
            await self._interrupt()
            self.conversation.append(Content.from_text(body["text"]))
            self.start()

    async def _interrupt(self) -> None:
        if await self.interrupt():
            await self.send({"serverContent": {"interrupted": True}})

    async def go_away(self, time_left: float) -> None:
        await self.send({"goAway": {"timeLeft": f"{time_left:g}s"}})

        async def close_later() -> None:
            await asyncio.sleep(time_left)
            await self.ws.close(1001, "session time is up")

        self.tasks.spawn(close_later(), name="close later", expected=ConnectionClosed)

    async def play(self, turn: LiveTurn) -> None:
        await self.send_raw(turn.raw)
        for piece in turn.text:
            self.said.append(piece)
            await self.send({"serverContent": {"modelTurn": {"parts": [{"text": piece}]}}})
        for chunk in turn.audio:
            await self.send({"serverContent": {"modelTurn": {"parts": [{"inlineData": {
                "mimeType": "audio/pcm;rate=24000",
                "data": base64.b64encode(chunk).decode("ascii")}}]}}})
        if not await self.end_of_pieces(turn):
            return
        usage = _gemini_usage(turn.usage)
        calls = self.calls(turn)
        self.finished(calls)
        if calls:
            await self.send({"toolCall": {"functionCalls": [
                {"id": c.id, "name": c.name, "args": c.args} for c in calls]}, **usage})
        else:
            await self.send({"serverContent": {"turnComplete": True}, **usage})
            await self._new_handle()  # resumable only between turns, not with calls open
        if turn.go_away is not None:
            await self.go_away(turn.go_away)


class _Realtime(_Session):
    def __init__(self, fake: FakeLiveProvider, ws: ServerConnection,
                 record: LiveSocketRecord) -> None:
        super().__init__(fake, ws, record)
        self.response: str | None = None
        self.speaking = False
        self.audio = bytearray()
        self.call_names: dict[str, str] = {}
        self.model = record.query.partition("model=")[2]
        self.tasks.spawn(self.send({"type": "session.created", "session": {}}),
                         name="session.created", expected=ConnectionClosed)

    async def on_message(self, message: dict[str, Json]) -> None:
        kind = message.get("type")
        if kind != "input_audio_buffer.append":
            self.speaking = False  # anything else ends a burst of speech
        if kind == "session.update":
            session = message.get("session", {})
            self.system = session.get("instructions")
            self.tools = [ToolDeclaration(t["name"], t.get("description", ""),
                                          t.get("parameters", {}))
                          for t in session.get("tools", [])]
            await self.send({"type": "session.updated", "session": session})
        elif kind == "conversation.item.create":
            item = message.get("item", {})
            self.conversation.append(self._from_item(item))
            await self.send({"type": "conversation.item.created",
                             "item": {"id": self.fake.new_id("item"), **item}})
        elif kind == "response.create":
            if self.response is not None:
                await self._error("invalid_request_error", "conversation_already_has_active_"
                                  "response", "Conversation already has an active response")
                return
            self.response = self.fake.new_id("resp")
            self.start()
        elif kind == "response.cancel":
            rid = self.response
            if rid is None or not await self.interrupt():
                await self._error("invalid_request_error", "response_cancel_not_active",
                                  "Cancellation failed: no active response found")
                return
            self.response = None
            await self.send({"type": "response.done",
                             "response": {"id": rid, "status": "cancelled", "output": []}})
        elif kind == "input_audio_buffer.append":
            self.audio += base64.b64decode(message.get("audio", ""))
            if not self.speaking and self.fake.vad and _speech(message.get("audio", "")):
                self.speaking = True
                await self.send({"type": "input_audio_buffer.speech_started"})
        elif kind == "input_audio_buffer.commit":
            blob = Blob("audio/pcm;rate=24000", bytes(self.audio))
            self.audio.clear()
            self.conversation.append(Content("user", [Part(inline_data=blob)]))
            await self.send({"type": "input_audio_buffer.committed"})

    def _from_item(self, item: dict[str, Json]) -> Content:
        kind = item.get("type")
        if kind == "function_call_output":
            call_id = item.get("call_id", "")
            response = FunctionResponse(call_id, self.call_names.get(call_id, ""),
                                        json.loads(item.get("output", "{}")))
            return Content("user", [Part(function_response=response)])
        if kind == "function_call":
            call = FunctionCall(item.get("call_id", ""), item.get("name", ""),
                                json.loads(item.get("arguments", "{}")))
            self.call_names[call.id] = call.name
            return Content("model", [Part(function_call=call)])
        role = {"assistant": "model", "system": "system"}.get(item.get("role", ""), "user")
        parts = []
        for piece in item.get("content", []):
            if "text" in piece:
                parts.append(Part(text=piece["text"]))
            elif piece.get("type") == "input_image":
                mime, _, data = piece["image_url"].removeprefix("data:").partition(";base64,")
                parts.append(Part(inline_data=Blob(mime, base64.b64decode(data))))
        return Content(role, parts)  # type: ignore[arg-type]  # role is one of three

    async def _error(self, kind: str, code: str, message: str) -> None:
        await self.send({"type": "error", "error": {"type": kind, "code": code,
                                                    "message": message}})

    async def play(self, turn: LiveTurn) -> None:
        rid = self.response or self.fake.new_id("resp")
        self.response = rid
        if turn.error is not None:
            self.response = None
            await self._error(turn.error[0], "scripted_error", turn.error[1])
            return
        await self.send({"type": "response.created",
                         "response": {"id": rid, "status": "in_progress"}})
        await self.send_raw(turn.raw)
        item = self.fake.new_id("item")
        for piece in turn.text:
            self.said.append(piece)
            await self.send({"type": "response.output_text.delta", "response_id": rid,
                             "item_id": item, "delta": piece})
        for chunk in turn.audio:
            await self.send({"type": "response.output_audio.delta", "response_id": rid,
                             "item_id": item,
                             "delta": base64.b64encode(chunk).decode("ascii")})
        output: list[dict[str, Json]] = []
        calls = self.calls(turn)
        for call in calls:
            await self._call(rid, call, output)
        if not await self.end_of_pieces(turn):
            return
        self.finished(calls)
        self.response = None
        await self.send({"type": "response.done", "response": {
            "id": rid, "status": "completed", "output": output,
            **_openai_usage(turn.usage)}})

    async def _call(self, rid: str, call: FunctionCall, output: list[dict[str, Json]]) -> None:
        item = self.fake.new_id("item")
        self.call_names[call.id] = call.name
        arguments = json.dumps(call.args)
        await self.send({"type": "response.output_item.added", "response_id": rid, "item": {
            "id": item, "type": "function_call", "call_id": call.id, "name": call.name}})
        half = len(arguments) // 2
        for piece in (arguments[:half], arguments[half:]):
            await self.send({"type": "response.function_call_arguments.delta",
                             "response_id": rid, "item_id": item, "delta": piece})
        await self.send({"type": "response.function_call_arguments.done", "response_id": rid,
                         "item_id": item, "call_id": call.id, "name": call.name,
                         "arguments": arguments})
        output.append({"id": item, "type": "function_call", "call_id": call.id,
                       "name": call.name, "arguments": arguments})


def _from_gemini(turn: dict[str, Json]) -> Content:
    parts: list[Part] = []
    for part in turn.get("parts", []):
        if "text" in part:
            parts.append(Part(text=part["text"]))
        elif "inlineData" in part:
            inline = part["inlineData"]
            parts.append(Part(inline_data=Blob(inline["mimeType"],
                                               base64.b64decode(inline["data"]))))
        elif "functionCall" in part:
            call = part["functionCall"]
            parts.append(Part(function_call=FunctionCall(call.get("id", ""), call["name"],
                                                         call.get("args", {}))))
        elif "functionResponse" in part:
            res = part["functionResponse"]
            parts.append(Part(function_response=FunctionResponse(
                res.get("id", ""), res["name"], res.get("response", {}))))
    return Content("model" if turn.get("role") == "model" else "user", parts)


def _speech(data: str) -> bool:
    """Whether base64 audio holds sound (the fake's voice activity detection: not all zeros)."""
    return any(base64.b64decode(data))


def _gemini_usage(usage: Usage | None) -> dict[str, Json]:
    if usage is None:
        return {}
    return {"usageMetadata": {"promptTokenCount": usage.input_tokens,
                              "responseTokenCount": usage.output_tokens,
                              "totalTokenCount": usage.total_tokens}}


def _openai_usage(usage: Usage | None) -> dict[str, Json]:
    if usage is None:
        return {}
    return {"usage": {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens,
                      "total_tokens": usage.total_tokens}}


class _QuietClock(VirtualClock):
    """A virtual clock whose settle also waits until a progress count stops moving."""

    def __init__(self, progress: Callable[[], int], *, quiet_seconds: float = 0.002,
                 **options: Any) -> None:
        super().__init__(**options)
        self._progress = progress
        self._quiet_seconds = quiet_seconds

    async def settle(self) -> None:
        last = -1
        while True:
            await super().settle()
            await asyncio.sleep(self._quiet_seconds)  # real time: socket I/O
            await super().settle()
            now = self._progress()
            if now == last:
                return
            last = now
