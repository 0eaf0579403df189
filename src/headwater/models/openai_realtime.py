"""``OpenAIRealtimeModel``: the OpenAI Realtime API over a WebSocket.

One socket per live session at ``{base_url}/realtime?model=…`` with
``Authorization: Bearer``. The connection sends ``session.update`` (GA shape:
``type: realtime``, ``instructions``, function ``tools``,
``output_modalities``) and waits for ``session.updated``; history, user
content and tool results (``function_call_output``) go as
``conversation.item.create``, and ``response.create`` starts a turn; audio goes
through ``input_audio_buffer.append`` (``commit`` ends a user's spoken turn when
the session has no server VAD).

What the server says becomes the stream contract per response:
``response.output_text.delta`` (or the beta ``response.text.delta``) and the
audio transcript are text partials, ``response.output_audio.delta`` (or
``response.audio.delta``) are inline audio blobs, function-call arguments are
assembled from ``response.function_call_arguments.delta``/``.done``, and
``response.done`` is the final with usage — ``cancelled`` ends it marked
``interrupted``, ``failed`` with an error code. ``input_audio_buffer.speech_started``
during an answer is a barge-in: the answer ends ``interrupted`` at once and
``response.cancel`` is sent. An ``error`` event during a turn fails it with a
code (never the provider's text). The Realtime API has no session resumption:
a closed socket breaks the connection.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from typing import Any
from urllib.parse import quote

from websockets.asyncio.client import ClientConnection

from ..core.errors import ErrorCode, MalformedChunk, ProviderUnavailable, UserError
from ..core.settings import Settings, settings_or_default
from ..core.types import Blob, Content, FunctionCall, Usage
from ._live_socket import SocketConnection, SocketModel, logger
from ._wire import obj, opt_int, opt_list, opt_obj, opt_str
from .generation import OPENAI_REALTIME
from .llm_request import LlmRequest

DEFAULT_BASE_URL = "wss://api.openai.com/v1"
_BENIGN_ERRORS = frozenset({"response_cancel_not_active"})
_FINISH = {"max_output_tokens": "length", "content_filter": "content_filter"}

Json = Any  # raw wire JSON


class OpenAIRealtimeModel(SocketModel):
    """An OpenAI model reached through the Realtime API (native live sessions only).

    Args:
        model: the model name, e.g. ``"gpt-realtime"``.
        base_url: the WebSocket root (``…/v1``); default ``wss://api.openai.com/v1``.
        api_key: sent as ``Authorization: Bearer``.
        output_modality: ``"text"`` or ``"audio"`` (the model speaks; audio
            chunks arrive as inline blobs, the transcript as text).
        settings: timeouts and the message size bound (default: from the env).
    """

    def __init__(self, model: str, *, base_url: str = DEFAULT_BASE_URL,
                 api_key: str | None = None, output_modality: str = "text",
                 settings: Settings | None = None) -> None:
        super().__init__(model)
        if output_modality not in ("text", "audio"):
            raise UserError(f"output_modality must be 'text' or 'audio', not {output_modality!r}")
        self.base_url = base_url.rstrip("/")
        self._api_key = api_key
        self.output_modality = output_modality
        self.settings = settings_or_default(settings)

    @property
    def url(self) -> str:
        """The Realtime endpoint for this model."""
        return f"{self.base_url}/realtime?model={quote(self.model, safe='')}"

    def auth_headers(self) -> dict[str, str]:
        """The credential header (none without a key)."""
        return {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}

    def connect(self, request: LlmRequest) -> OpenAIRealtimeConnection:
        """A live session; its socket opens on first use and closes in ``close()``."""
        return OpenAIRealtimeConnection(self, request)


class OpenAIRealtimeConnection(SocketConnection):
    """One OpenAI Realtime session (see the module docstring)."""

    def __init__(self, model: OpenAIRealtimeModel, request: LlmRequest) -> None:
        super().__init__(model.model, request, model.settings)
        self._owner = model
        self._response: str | None = None  # the response in progress
        self._cut_ids: set[str] = set()  # responses cut short whose response.done is awaited
        self._cancel_next = False  # the turn we asked for was cut before it was created
        self._args: dict[str, tuple[str, str, list[str]]] = {}  # item id -> call id, name, args

    def can_start(self) -> bool:
        # Only one response at a time: a cut one must be done before the next is created.
        return not self.active and not self._cut_ids and not self._cancel_next

    async def _open(self) -> ClientConnection:
        return await self.open_socket(self._owner.url, self._owner.auth_headers())

    async def setup(self, ws: ClientConnection, *, resume: bool) -> None:
        self._ws = ws
        request = self.request
        session: dict[str, Json] = {"type": "realtime",
                                    "output_modalities": [self._owner.output_modality]}
        if request.system_instruction:
            session["instructions"] = request.system_instruction
        if request.tools:
            session["tools"] = [{"type": "function", "name": t.name,
                                 "description": t.description, "parameters": t.parameters}
                                for t in request.tools]
        session.update(OPENAI_REALTIME.fields(request.generate_content_config, self.model))
        session.update(request.config)
        await self.send_json({"type": "session.update", "session": session})
        while True:
            message = await self.receive_setup(ws)
            kind = message.get("type")
            if kind == "session.updated":
                break
            if kind == "error":
                _log_error(message)
                raise ProviderUnavailable("the provider refused the live session setup")
        for content in self.history:
            for item in to_items(content):
                await self.send_json({"type": "conversation.item.create", "item": item})

    async def start_turn(self, contents: list[Content]) -> None:
        for content in contents:
            for item in to_items(content):
                await self.send_json({"type": "conversation.item.create", "item": item})
        await self.send_json({"type": "response.create"})

    async def stop_answer(self, said: bool) -> None:
        if self._response is None:
            self._cancel_next = True  # asked for, not created yet: cancel it once it is
            return
        self._cut_ids.add(self._response)
        self._response = None
        await self.send_json({"type": "response.cancel"})

    async def send_blob(self, blob: Blob) -> None:
        data = base64.b64encode(blob.data).decode("ascii")
        if blob.mime_type.startswith("audio/"):
            await self.send_json({"type": "input_audio_buffer.append", "audio": data})
        elif blob.mime_type.startswith("image/"):
            async with self.lock:  # never between a turn's items and its response.create
                await self.send_json({"type": "conversation.item.create", "item": {
                    "type": "message", "role": "user", "content": [{
                        "type": "input_image",
                        "image_url": f"data:{blob.mime_type};base64,{data}"}]}})
        else:
            logger.debug("OpenAI Realtime takes no %s input; dropped", blob.mime_type)

    async def commit_audio(self) -> None:
        """End the user's spoken turn by hand and ask for an answer (no server VAD)."""
        if not await self.wait_open():
            return
        await self.send_json({"type": "input_audio_buffer.commit"})
        async with self.lock:
            if self.can_start() and self.admit_turn():
                self.begin()
                await self.send_json({"type": "response.create"})

    # -- server messages ------------------------------------------------------------------------

    async def handle(self, message: dict[str, Json]) -> None:
        kind = message.get("type")
        if not isinstance(kind, str):
            raise MalformedChunk("a Realtime event has no type")
        if kind == "error":
            await self._error(message)
            return
        if kind == "input_audio_buffer.speech_started":
            if self.active:
                async with self.lock:
                    if self.active:
                        await self.cut_answer()
            return
        if kind == "response.created":
            await self._created(obj(message.get("response"), "response.created.response"))
            return
        rid = message.get("response_id")
        if kind == "response.done":
            await self._done(obj(message.get("response"), "response.done.response"))
            return
        if isinstance(rid, str) and (rid in self._cut_ids or rid != self._response):
            return  # what the server still says of an answer that was cut short
        if kind in ("response.output_text.delta", "response.text.delta",
                    "response.output_audio_transcript.delta", "response.audio_transcript.delta"):
            self.text(opt_str(message, "delta", kind) or "")
        elif kind in ("response.output_audio.delta", "response.audio.delta"):
            self.audio(Blob("audio/pcm;rate=24000", _b64(opt_str(message, "delta", kind))))
        elif kind == "response.output_item.added":
            item = obj(message.get("item"), f"{kind}.item")
            if item.get("type") == "function_call":
                self._args[opt_str(item, "id", kind) or ""] = (
                    opt_str(item, "call_id", kind) or "", opt_str(item, "name", kind) or "", [])
        elif kind == "response.function_call_arguments.delta":
            entry = self._args.get(opt_str(message, "item_id", kind) or "")
            if entry is not None:
                entry[2].append(opt_str(message, "delta", kind) or "")
        elif kind == "response.function_call_arguments.done":
            item_id = opt_str(message, "item_id", kind) or ""
            call_id, name, _ = self._args.get(item_id, ("", "", []))
            self._args[item_id] = (opt_str(message, "call_id", kind) or call_id,
                                   opt_str(message, "name", kind) or name,
                                   [opt_str(message, "arguments", kind) or ""])

    async def _created(self, response: dict[str, Json]) -> None:
        rid = opt_str(response, "id", "response.created.response") or ""
        if self._cancel_next:
            self._cancel_next = False
            self._cut_ids.add(rid)
            await self.send_json({"type": "response.cancel", "response_id": rid})
            return
        self._response = rid
        self._args.clear()
        self.begin()  # ours, or one the server started on its own (server VAD)

    async def _done(self, response: dict[str, Json]) -> None:
        rid = opt_str(response, "id", "response.done.response") or ""
        if rid in self._cut_ids:
            self._cut_ids.discard(rid)
            await self.flush()
            return
        if rid != self._response:
            return
        self._response = None
        usage = opt_obj(response, "usage", "response")
        if usage is not None:
            self.usage = _usage(usage)
        status = opt_str(response, "status", "response")
        if status == "cancelled":
            self.interrupted()
        elif status == "failed":
            _log_error(response)
            self.fail("provider_error")
        else:
            details = opt_obj(response, "status_details", "response") or {}
            reason = opt_str(details, "reason", "status_details")
            self.finish(self._calls(response), finish_reason=_FINISH.get(reason or "", "stop"))
        self._args.clear()
        await self.flush()

    def _calls(self, response: dict[str, Json]) -> list[FunctionCall]:
        calls: list[FunctionCall] = []
        for index, raw in enumerate(opt_list(response, "output", "response") or []):
            where = f"response.output[{index}]"
            item = obj(raw, where)
            if item.get("type") != "function_call":
                continue
            call_id, name, pieces = self._args.get(opt_str(item, "id", where) or "", ("", "", []))
            arguments = opt_str(item, "arguments", where) or "".join(pieces) or "{}"
            try:
                args = json.loads(arguments)
            except ValueError:
                raise MalformedChunk(f"{where}.arguments is not JSON") from None
            calls.append(FunctionCall(id=opt_str(item, "call_id", where) or call_id,
                                      name=opt_str(item, "name", where) or name,
                                      args=obj(args, f"{where}.arguments")))
        return calls

    async def _error(self, message: dict[str, Json]) -> None:
        error = opt_obj(message, "error", "error") or {}
        code = opt_str(error, "code", "error")
        if code in _BENIGN_ERRORS:
            return
        _log_error(message)
        if self.active:
            self._response = None
            self.fail(_error_code(opt_str(error, "type", "error"), code))
            await self.flush()


def to_items(content: Content) -> list[dict[str, Json]]:
    """A content as Realtime conversation items (messages, calls and call outputs)."""
    items: list[dict[str, Json]] = []
    model = content.role == "model"
    texts: list[dict[str, Json]] = []
    for part in content.parts:
        if part.text is not None and not part.thought:
            texts.append({"type": "output_text" if model else "input_text", "text": part.text})
        elif part.inline_data is not None and not model:
            blob = part.inline_data
            data = base64.b64encode(blob.data).decode("ascii")
            if blob.mime_type.startswith("audio/"):
                texts.append({"type": "input_audio", "audio": data})
            else:
                texts.append({"type": "input_image",
                              "image_url": f"data:{blob.mime_type};base64,{data}"})
        elif part.function_call is not None:
            call = part.function_call
            items.append({"type": "function_call", "call_id": call.id, "name": call.name,
                          "arguments": json.dumps(call.args, ensure_ascii=False)})
        elif part.function_response is not None:
            res = part.function_response
            items.append({"type": "function_call_output", "call_id": res.id,
                          "output": json.dumps(res.response, ensure_ascii=False)})
    if texts:
        role = "assistant" if model else "system" if content.role == "system" else "user"
        items.insert(0, {"type": "message", "role": role, "content": texts})
    return items


def _b64(data: str | None) -> bytes:
    try:
        return base64.b64decode(data or "", validate=True)
    except (binascii.Error, ValueError):
        raise MalformedChunk("a Realtime audio delta is not base64") from None


def _usage(usage: dict[str, Json]) -> Usage:
    details = opt_obj(usage, "input_token_details", "usage") or {}
    return Usage(input_tokens=opt_int(usage, "input_tokens", "usage") or 0,
                 output_tokens=opt_int(usage, "output_tokens", "usage") or 0,
                 total_tokens=opt_int(usage, "total_tokens", "usage") or 0,
                 cached_input_tokens=opt_int(details, "cached_tokens", "details") or 0)


def _error_code(kind: str | None, code: str | None) -> ErrorCode:
    if code == "rate_limit_exceeded" or kind in ("server_error", "rate_limit_error"):
        return "provider_unavailable"
    if kind in ("invalid_request_error", "authentication_error", "permission_error"):
        return "provider_rejected"
    return "provider_error"


def _log_error(message: dict[str, Json]) -> None:
    logger.debug("OpenAI Realtime reported an error: %s", json.dumps(message)[:500])


def from_spec(name: str) -> OpenAIRealtimeModel:
    """``"openai-realtime:<model>"``: key from ``OPENAI_API_KEY``.

    ``OPENAI_REALTIME_BASE_URL`` replaces the WebSocket root.

    Raises:
        UserError: ``OPENAI_API_KEY`` is not set.
    """
    key = os.environ.get("OPENAI_API_KEY")
    if not key:
        raise UserError(f"model 'openai-realtime:{name}' needs an API key: set OPENAI_API_KEY")
    return OpenAIRealtimeModel(name, base_url=os.environ.get("OPENAI_REALTIME_BASE_URL")
                               or DEFAULT_BASE_URL, api_key=key)
