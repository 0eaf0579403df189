"""``GeminiLiveModel``: the Gemini Live API (``BidiGenerateContent``) over a WebSocket.

One socket per live session at
``{base_url}/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent?key=…``.
The connection sends ``setup`` (model, ``generationConfig.responseModalities``,
``systemInstruction``, ``tools.functionDeclarations``, ``sessionResumption``)
and waits for ``setupComplete``; history and user content go as
``clientContent`` turns, tool results as ``toolResponse`` (by call id), media
as ``realtimeInput`` (``audio``, ``video``, ``mediaChunks``).

What the server says becomes the stream contract per model turn:
``serverContent.modelTurn.parts`` are partials (text, thoughts, ``inlineData``
audio as inline blobs; ``outputTranscription`` is answer text), ``toolCall``
ends the turn with its function calls, ``turnComplete`` ends it, and
``interrupted`` (the server heard the user) ends it marked ``interrupted``.
``usageMetadata`` goes on the final. ``sessionResumptionUpdate`` keeps the
newest resumable handle; on ``goAway`` the connection moves to a new socket
resumed with that handle — once the turn in progress ends, or
``Settings.live_go_away_margin`` before the deadline — holding content sent
meanwhile, so tool streams and turns go on without a gap.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import os
import re
from typing import Any
from urllib.parse import quote

from websockets.asyncio.client import ClientConnection

from ..core.errors import MalformedChunk, UserError
from ..core.settings import Settings, settings_or_default
from ..core.types import Blob, Content, FunctionCall, Usage
from ._env import env_base_url, env_key
from ._live_socket import SocketConnection, SocketModel, logger
from ._wire import obj, opt_int, opt_list, opt_obj, opt_str
from .generation import GEMINI_LIVE
from .llm_request import LlmRequest

DEFAULT_BASE_URL = "wss://generativelanguage.googleapis.com"
PATH = "/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent"
_UNSUPPORTED_SCHEMA_KEYS = frozenset({"$schema", "additionalProperties"})

Json = Any  # raw wire JSON


class GeminiLiveModel(SocketModel):
    """A Gemini model reached through the Live API (native live sessions only).

    Args:
        model: the model name, e.g. ``"gemini-live-2.5-flash-preview"``
            (``models/`` is added when missing).
        base_url: the WebSocket root; default ``wss://generativelanguage.googleapis.com``.
        api_key: sent as the ``key`` query parameter.
        response_modality: ``"TEXT"`` or ``"AUDIO"`` (the model speaks; audio
            chunks arrive as inline blobs, the transcript as text).
        realtime_input_config: sent as the setup's ``realtimeInputConfig``, e.g.
            ``{"automaticActivityDetection": {"disabled": True}}`` to mark speech
            by hand with :meth:`GeminiLiveConnection.activity`.
        settings: timeouts and the message size bound (default: from the env).
    """

    def __init__(self, model: str, *, base_url: str = DEFAULT_BASE_URL,
                 api_key: str | None = None, response_modality: str = "TEXT",
                 realtime_input_config: dict[str, Any] | None = None,  # raw wire JSON
                 settings: Settings | None = None) -> None:
        super().__init__(model)
        if response_modality not in ("TEXT", "AUDIO"):
            raise UserError(f"response_modality must be 'TEXT' or 'AUDIO', not "
                            f"{response_modality!r}")
        self.base_url = base_url.rstrip("/")
        self._api_key = api_key
        self.response_modality = response_modality
        self.realtime_input_config = realtime_input_config
        self.settings = settings_or_default(settings)

    @property
    def url(self) -> str:
        """The ``BidiGenerateContent`` endpoint, key included."""
        key = f"?key={quote(self._api_key, safe='')}" if self._api_key else ""
        return f"{self.base_url}{PATH}{key}"

    def connect(self, request: LlmRequest) -> GeminiLiveConnection:
        """A live session; its socket opens on first use and closes in ``close()``."""
        return GeminiLiveConnection(self, request)


def _with_models_prefix(name: str) -> str:
    return name if name.startswith(("models/", "tunedModels/")) else f"models/{name}"


class GeminiLiveConnection(SocketConnection):
    """One Gemini Live session (see the module docstring).

    Attributes:
        resume_handle: the newest resumable session handle the server gave, or ``None``.
        sockets: sockets opened so far (a ``goAway`` move opens one more).
    """

    def __init__(self, model: GeminiLiveModel, request: LlmRequest) -> None:
        super().__init__(model.model, request, model.settings)
        self._owner = model
        self.resume_handle: str | None = None
        self.sockets = 0
        self._discarding = False
        self._calls: list[FunctionCall] = []
        self._handle_turn = -1  # turns_ended when the newest handle came

    def ready_to_move(self) -> bool:
        # Resume from a handle given after the last turn ended, so the new
        # session remembers that turn (else wait for one until the deadline).
        return not self.active and self._handle_turn == self.turns_ended

    async def _open(self) -> ClientConnection:
        self.sockets += 1
        return await self.open_socket(self._owner.url, {})

    async def setup(self, ws: ClientConnection, *, resume: bool) -> None:
        self._ws = ws
        await self.send_json({"setup": self._setup_body(resume)})
        while True:
            message = await self.receive_setup(ws)
            if "setupComplete" in message:
                break
            await self.handle(message)  # e.g. a resumption update ahead of setupComplete
        if not resume and self.history:
            await self.send_json({"clientContent": {
                "turns": [to_wire(c) for c in self.history if c.parts], "turnComplete": False}})
        self._discarding = False

    def _setup_body(self, resume: bool) -> dict[str, Json]:
        request = self.request
        config: dict[str, Json] = {"responseModalities": [self._owner.response_modality]}
        config.update(GEMINI_LIVE.fields(request.generate_content_config, self.model))
        config.update(request.config)
        body: dict[str, Json] = {"model": _with_models_prefix(request.model or self.model),
                                 "generationConfig": config}
        if request.system_instruction:
            body["systemInstruction"] = {"parts": [{"text": request.system_instruction}]}
        if request.tools:
            body["tools"] = [{"functionDeclarations": [
                {"name": t.name, "description": t.description,
                 "parameters": _schema(t.parameters)} for t in request.tools]}]
        handle = self.resume_handle if resume else None
        body["sessionResumption"] = {"handle": handle} if handle else {}
        if self._owner.response_modality == "AUDIO":
            body["outputAudioTranscription"] = {}
        if self._owner.realtime_input_config is not None:
            body["realtimeInputConfig"] = self._owner.realtime_input_config
        return body

    async def start_turn(self, contents: list[Content]) -> None:
        responses = [r for c in contents for r in c.function_responses]
        turns = [to_wire(Content(c.role, [p for p in c.parts if p.function_response is None]))
                 for c in contents]
        turns = [t for t in turns if t["parts"]]
        if turns:
            # With tool results in the same batch, the results start the turn.
            await self.send_json({"clientContent": {"turns": turns,
                                                    "turnComplete": not responses}})
        if responses:
            await self.send_json({"toolResponse": {"functionResponses": [
                {"id": r.id, "name": r.name, "response": r.response} for r in responses]}})

    async def stop_answer(self, said: bool) -> None:
        # New clientContent interrupts the server's generation by itself; what it
        # still sends of the cut answer, up to ``interrupted``/``turnComplete``, is
        # dropped. An answer that had said nothing yet is not waited for.
        self._discarding = said
        self._calls.clear()

    async def send_blob(self, blob: Blob) -> None:
        data = base64.b64encode(blob.data).decode("ascii")
        chunk = {"mimeType": blob.mime_type, "data": data}
        kind = blob.mime_type.split("/", 1)[0]
        if kind == "audio":
            await self.send_json({"realtimeInput": {"audio": chunk}})
        elif kind in ("image", "video"):
            await self.send_json({"realtimeInput": {"video": chunk}})
        else:
            await self.send_json({"realtimeInput": {"mediaChunks": [chunk]}})

    async def activity(self, *, start: bool) -> None:
        """Mark the user's speech by hand (``activityStart``/``activityEnd``), for sessions
        set up with automatic activity detection off."""
        if await self.wait_open():
            await self.send_json({"realtimeInput": {
                "activityStart" if start else "activityEnd": {}}})

    async def send_text(self, text: str) -> None:
        """Send text as realtime input (answered like speech, not as a ``clientContent`` turn)."""
        if await self.wait_open():
            await self.send_json({"realtimeInput": {"text": text}})

    # -- server messages ------------------------------------------------------------------------

    async def handle(self, message: dict[str, Json]) -> None:
        usage = opt_obj(message, "usageMetadata", "message")
        if usage is not None:
            self.usage = _usage(usage)
        if (update := opt_obj(message, "sessionResumptionUpdate", "message")) is not None:
            handle = opt_str(update, "newHandle", "sessionResumptionUpdate")
            if handle and update.get("resumable") is not False:
                self.resume_handle = handle
                self._handle_turn = self.turns_ended
        if (away := opt_obj(message, "goAway", "message")) is not None:
            self._go_away(away)
        if (call := opt_obj(message, "toolCall", "message")) is not None:
            await self._tool_call(call)
        if (cancelled := opt_obj(message, "toolCallCancellation", "message")) is not None:
            # The live flow answers every call once; a cancelled call's result is
            # still sent and the server ignores it.
            logger.debug("Gemini cancelled tool calls %s", cancelled.get("ids"))
        if (content := opt_obj(message, "serverContent", "message")) is not None:
            await self._server_content(content)

    def _go_away(self, away: dict[str, Json]) -> None:
        left = _seconds(opt_str(away, "timeLeft", "goAway"))
        if self.resume_handle is None:
            logger.info("Gemini live session of %s is ending and gave no resumption handle",
                        self.model)
            return  # nothing to resume with: the close ends the connection
        self.going_away_at = asyncio.get_running_loop().time() + left

    async def _tool_call(self, call: dict[str, Json]) -> None:
        if self._discarding:
            return
        for index, item in enumerate(opt_list(call, "functionCalls", "toolCall") or []):
            where = f"toolCall.functionCalls[{index}]"
            item = obj(item, where)
            name = opt_str(item, "name", where)
            if not name:
                raise MalformedChunk(f"{where}.name is not a string")
            args = opt_obj(item, "args", where) or {}
            self._calls.append(FunctionCall(id=opt_str(item, "id", where) or f"call_{index}",
                                            name=name, args=args))
        calls, self._calls = self._calls, []
        self.finish(calls)
        await self.flush()

    async def _server_content(self, content: dict[str, Json]) -> None:
        turn = opt_obj(content, "modelTurn", "serverContent")
        transcript = opt_obj(content, "outputTranscription", "serverContent")
        ended = content.get("turnComplete") is True or content.get("interrupted") is True
        if self._discarding:
            self._discarding = not ended
            if ended:
                await self.flush()
            return
        if turn is not None:
            self._parts(opt_list(turn, "parts", "modelTurn") or [])
        if transcript is not None:
            self.text(opt_str(transcript, "text", "outputTranscription") or "")
        if content.get("interrupted") is True:
            if self.active:
                self.interrupted()
        elif content.get("turnComplete") is True and (self.active or self.said):
            self.finish()
        if ended:
            await self.flush()

    def _parts(self, parts: list[Json]) -> None:
        for index, raw in enumerate(parts):
            where = f"modelTurn.parts[{index}]"
            part = obj(raw, where)
            text = opt_str(part, "text", where)
            if text is not None:
                self.text(text, thought=part.get("thought") is True)
            inline = opt_obj(part, "inlineData", where)
            if inline is not None:
                self.audio(_blob(inline, f"{where}.inlineData"))


def to_wire(content: Content) -> dict[str, Json]:
    """A content as a Gemini ``Content`` (role ``user`` or ``model``)."""
    parts: list[dict[str, Json]] = []
    for part in content.parts:
        if part.text is not None and not part.thought:
            parts.append({"text": part.text})
        elif part.inline_data is not None:
            parts.append({"inlineData": {"mimeType": part.inline_data.mime_type,
                                         "data": base64.b64encode(part.inline_data.data)
                                         .decode("ascii")}})
        elif part.function_call is not None:
            call = part.function_call
            parts.append({"functionCall": {"id": call.id, "name": call.name, "args": call.args}})
        elif part.function_response is not None:
            res = part.function_response
            parts.append({"functionResponse": {"id": res.id, "name": res.name,
                                               "response": res.response}})
    return {"role": "model" if content.role == "model" else "user", "parts": parts}


def _schema(schema: Json) -> Json:
    """A JSON schema without the keywords Gemini's ``Schema`` refuses."""
    if isinstance(schema, dict):
        return {k: _schema(v) for k, v in schema.items() if k not in _UNSUPPORTED_SCHEMA_KEYS}
    if isinstance(schema, list):
        return [_schema(v) for v in schema]
    return schema


def _blob(inline: dict[str, Json], where: str) -> Blob:
    mime = opt_str(inline, "mimeType", where) or "application/octet-stream"
    try:
        data = base64.b64decode(opt_str(inline, "data", where) or "", validate=True)
    except (binascii.Error, ValueError):
        raise MalformedChunk(f"{where}.data is not base64") from None
    return Blob(mime, data)


def _usage(meta: dict[str, Json]) -> Usage:
    def count(key: str) -> int:
        return opt_int(meta, key, "usageMetadata") or 0

    output = count("responseTokenCount") or count("candidatesTokenCount")
    return Usage(input_tokens=count("promptTokenCount"), output_tokens=output,
                 total_tokens=count("totalTokenCount"),
                 cached_input_tokens=count("cachedContentTokenCount"),
                 reasoning_tokens=count("thoughtsTokenCount"))


def _seconds(duration: str | None) -> float:
    """A protobuf JSON ``Duration`` (``"12.5s"``) in seconds; 0 when absent or unreadable."""
    if duration is None:
        return 0.0
    match = re.fullmatch(r"(\d+(?:\.\d+)?)s", duration)
    return float(match.group(1)) if match else 0.0


def from_spec(name: str) -> GeminiLiveModel:
    """``"gemini-live:<model>"``: key from ``GEMINI_API_KEY`` (or ``GOOGLE_API_KEY``).

    ``GEMINI_LIVE_BASE_URL`` replaces the WebSocket root.

    Raises:
        UserError: neither key variable is set.
    """
    return GeminiLiveModel(name, base_url=env_base_url(DEFAULT_BASE_URL, "GEMINI_LIVE_BASE_URL"),
                           api_key=gemini_key(f"gemini-live:{name}"))


def gemini_key(model: str) -> str:
    """A Gemini API key: ``GOOGLE_API_KEY`` wins over ``GEMINI_API_KEY``, as in Google's SDK.

    Raises:
        UserError: neither is set.
    """
    return os.environ.get("GOOGLE_API_KEY") or env_key(model, "GEMINI_API_KEY", "GOOGLE_API_KEY")

