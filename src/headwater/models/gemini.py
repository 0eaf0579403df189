"""``GeminiModel``: the Gemini API (and Vertex AI) ``streamGenerateContent`` wire format.

Speaks ``POST {base_url}/models/{model}:streamGenerateContent?alt=sse``: each
event is one ``GenerateContentResponse``. Text parts become answer partials;
``thought: true`` parts become thought partials (never answer text).
``thoughtSignature`` is kept on the part it came with — a thought part, the
answer text or a function call — and sent back in the next request. Function
calls arrive whole (``args``) or streamed by JSON path (``partialArgs`` with
``willContinue``); either way they are parsed only at the end, so a call cut
short never runs. Gemini gives ids to few calls: a missing id is made from the
response id and the call's position (``gemini-<responseId>-<n>``), the same on
every chunk. ``usageMetadata`` repeats, cumulative, on every chunk: the last
one counts, once. A ``finishReason`` other than ``STOP`` (``MAX_TOKENS``,
``SAFETY``, ``RECITATION``, ``MALFORMED_FUNCTION_CALL``, …) and a prompt
blocked by ``promptFeedback.blockReason`` end the call with an error final
(``provider_error``) holding the text received so far.

The base URL picks the service: the Gemini API by default
(``https://generativelanguage.googleapis.com/v1beta``, key in
``x-goog-api-key``), or Vertex AI with :func:`vertex_base_url` and an OAuth
access token sent as a bearer token.
"""

from __future__ import annotations

import base64
import json
import os
import re
from collections.abc import Callable
from typing import Any

from pydantic_core import from_json

from ..core.errors import MalformedChunk, ToolCallAssemblyError, UserError
from ..core.events import new_id
from ..core.sse import ServerSentEvent
from ..core.types import Content, Part, Usage
from ._env import env_base_url
from ._http import HttpStreamingModel, StreamParser
from ._jsonpath import ArgsBuilder
from ._wire import bad, obj, opt_int, opt_list, opt_obj, opt_str, shown_enum
from .connection import BaseLlmConnection
from .gemini_live import DEFAULT_BASE_URL as LIVE_BASE_URL
from .gemini_live import GeminiLiveModel, gemini_key
from .generation import GEMINI
from .llm_request import LlmRequest
from .llm_response import LlmResponse

DEFAULT_BASE_URL = "https://generativelanguage.googleapis.com/v1beta"
SKIP_SIGNATURE = "skip_thought_signature_validator"
"""The signature Google documents for a function call the model did not make (e.g. history
from another model): the first call of a model turn must carry one on Gemini 3."""

_FINE = frozenset({"STOP", "FINISH_REASON_UNSPECIFIED"})
_CUT_SHORT = {
    "MAX_TOKENS": "the model stopped at its token limit",
    "SAFETY": "the provider's safety filter stopped the answer",
    "RECITATION": "the provider stopped the answer for reciting training data",
    "BLOCKLIST": "the provider's blocklist stopped the answer",
    "PROHIBITED_CONTENT": "the provider stopped the answer for prohibited content",
    "SPII": "the provider stopped the answer for sensitive personal data",
    "MALFORMED_FUNCTION_CALL": "the model produced a malformed function call",
}
_RETRYABLE_STATUS = frozenset({"UNAVAILABLE", "RESOURCE_EXHAUSTED", "INTERNAL",
                               "DEADLINE_EXCEEDED", "ABORTED", "UNKNOWN"})
# Request options that are fields of the request itself; every other option key
# goes into ``generationConfig``. Google's JSON accepts camelCase and snake_case.
_TOP_LEVEL = frozenset({"safetySettings", "safety_settings", "toolConfig", "tool_config",
                        "modelArmorConfig", "model_armor_config",
                        "cachedContent", "cached_content", "labels", "serviceTier",
                        "service_tier"})
_GENERATION_CONFIG = ("generationConfig", "generation_config")

Token = str | Callable[[], str]


class GeminiModel(HttpStreamingModel):
    """A Gemini model behind the Gemini API or Vertex AI.

    Args:
        model: e.g. ``"gemini-2.5-flash"``.
        base_url: the API root up to ``/models``: default
            ``https://generativelanguage.googleapis.com/v1beta``; for Vertex AI
            ``vertex_base_url(project, location)``.
        api_key: a Gemini API key, sent as ``x-goog-api-key``.
        access_token: an OAuth access token (Vertex AI), sent as
            ``Authorization: Bearer``; or a function returning one, called for
            every request so that a refreshed token is used.
        live_base_url: the Live API's WebSocket root, for native live sessions
            (default ``wss://generativelanguage.googleapis.com``).
        http_client, settings, headers: see :class:`HttpStreamingModel`.

    :meth:`connect` (``Runner.run_live``) opens a native Gemini Live session
    for a Live API model (its name says ``live`` or ``native-audio``, e.g.
    ``gemini-live-2.5-flash-preview``) on the Gemini API; any other model, and
    every model on Vertex AI, gets a live session emulated over streamed calls.

    ``request.config`` options go into ``generationConfig`` (``temperature``,
    ``maxOutputTokens``, ``thinkingConfig``, …), except ``safetySettings``,
    ``toolConfig``, ``cachedContent``, ``labels`` and ``serviceTier``, which
    are fields of the request; a ``generationConfig`` mapping is merged in.
    """

    provider = "gemini"

    def __init__(self, model: str, *, base_url: str = DEFAULT_BASE_URL,
                 api_key: str | None = None, access_token: Token | None = None,
                 live_base_url: str = LIVE_BASE_URL, **kwargs: Any) -> None:
        super().__init__(model, base_url=base_url, api_key=api_key, **kwargs)
        self._access_token = access_token
        self.live_base_url = live_base_url

    def connect(self, request: LlmRequest) -> BaseLlmConnection:
        """A native Gemini Live session for a Live API model with a key, else the emulation."""
        if is_live_model(self.model) and self._api_key and self._access_token is None:
            native = GeminiLiveModel(self.model, base_url=self.live_base_url,
                                     api_key=self._api_key, settings=self.settings)
            return native.connect(request)
        return super().connect(request)

    @property
    def url(self) -> str:
        return f"{self.base_url}/models/{self.model}:streamGenerateContent?alt=sse"

    def auth_headers(self) -> dict[str, str]:
        headers = {}
        if self._api_key:
            headers["x-goog-api-key"] = self._api_key
        token = self._access_token
        if token is not None:
            headers["authorization"] = f"Bearer {token() if callable(token) else token}"
        return headers

    def retry_after_in_body(self, body: bytes) -> float | None:
        """Google's ``RetryInfo.retryDelay`` (``"7s"``, ``"0.5s"``) in the error's details."""
        return google_retry_delay(body)

    def new_parser(self) -> StreamParser:
        return _GeminiParser()

    def build_body(self, request: LlmRequest) -> dict[str, Any]:  # raw wire JSON
        body: dict[str, Any] = {"contents": to_contents(request.contents)}
        if request.system_instruction:
            body["systemInstruction"] = {"parts": [{"text": request.system_instruction}]}
        if request.tools:
            body["tools"] = [{"functionDeclarations": [_declaration(t.name, t.description,
                                                                    t.parameters)
                                                       for t in request.tools]}]
        generation: dict[str, Any] = {}
        config = {**GEMINI.fields(request.generate_content_config, self.model), **request.config}
        for key, value in config.items():
            if key in _GENERATION_CONFIG and isinstance(value, dict):
                generation.update(value)
            elif key in _TOP_LEVEL:
                body[key] = value
            else:
                generation[key] = value
        if generation:
            body["generationConfig"] = generation
        return body


def vertex_base_url(project: str, location: str) -> str:
    """The Vertex AI root for Google's models in ``project`` at ``location`` (or ``global``)."""
    host = ("aiplatform.googleapis.com" if location == "global"
            else f"{location}-aiplatform.googleapis.com")
    return f"https://{host}/v1/projects/{project}/locations/{location}/publishers/google"


def _declaration(name: str, description: str, parameters: dict[str, Any]) -> dict[str, Any]:
    declaration: dict[str, Any] = {"name": name, "description": description}
    if parameters:
        declaration["parametersJsonSchema"] = parameters  # full JSON Schema, $defs and all
    return declaration


def to_contents(contents: list[Content]) -> list[dict[str, Any]]:  # raw wire JSON
    """History as ``user``/``model`` contents; consecutive ones of a role are merged.

    Function responses go in the user content after the calls (Gemini wants as
    many response parts as the model turn had calls); a model turn's first
    call without a signature gets :data:`SKIP_SIGNATURE`.
    """
    out: list[dict[str, Any]] = []
    for content in contents:
        role = "model" if content.role == "model" else "user"
        parts = [p for part in content.parts if (p := _part(part, role)) is not None]
        if not parts:
            continue
        if out and out[-1]["role"] == role:
            out[-1]["parts"].extend(parts)
        else:
            out.append({"role": role, "parts": parts})
    for turn in out:
        if turn["role"] == "model":
            first = next((p for p in turn["parts"] if "functionCall" in p), None)
            if first is not None:
                first.setdefault("thoughtSignature", SKIP_SIGNATURE)
    return out


def _part(part: Part, role: str) -> dict[str, Any] | None:  # raw wire JSON
    wire: dict[str, Any]
    if part.function_call is not None:
        call = part.function_call
        wire = {"functionCall": {"id": call.id, "name": call.name, "args": call.args}}
    elif part.function_response is not None:
        response = part.function_response
        wire = {"functionResponse": {"id": response.id, "name": response.name,
                                     "response": response.response}}
    elif part.inline_data is not None:
        blob = part.inline_data
        wire = {"inlineData": {"mimeType": blob.mime_type,
                               "data": base64.b64encode(blob.data).decode()}}
    elif part.text is not None and (part.text or part.thought_signature):
        if part.thought and role != "model":
            return None
        wire = {"text": part.text, "thought": True} if part.thought else {"text": part.text}
    else:
        return None
    if part.thought_signature and role == "model":
        wire["thoughtSignature"] = part.thought_signature
    return wire


class _Call:
    __slots__ = ("args", "id", "name", "signature")

    def __init__(self, call_id: str, name: str, signature: str | None) -> None:
        self.id = call_id
        self.name = name
        self.signature = signature
        self.args = ArgsBuilder()


class _GeminiParser(StreamParser):
    """``GenerateContentResponse`` events → partials and one aggregate.

    Every field read is checked (``_wire``): an event of the wrong shape fails
    the call with ``provider_bad_response``. Only candidate 0 is read.
    """

    provider = "gemini"

    def __init__(self) -> None:
        super().__init__()
        self._calls: list[_Call] = []
        self._open: _Call | None = None  # a call whose pieces are still streaming
        self._response_id: str | None = None
        self._text_signature: str | None = None

    def feed(self, event: ServerSentEvent) -> None:
        try:
            chunk = from_json(event.data)
        except ValueError:
            raise MalformedChunk(f"gemini: a stream chunk is not JSON ({len(event.data)} bytes)"
                                 ) from None
        if type(chunk) is not dict:
            raise bad("gemini: a stream chunk", "an object")
        if "error" in chunk:
            self._error(chunk["error"])
            return
        where = "gemini: chunk"
        self._response_id = opt_str(chunk, "responseId", where) or self._response_id
        usage = opt_obj(chunk, "usageMetadata", where)
        if usage:
            self._usage(usage)
        feedback = opt_obj(chunk, "promptFeedback", where)
        block = opt_str(feedback, "blockReason", f"{where}.promptFeedback") if feedback else None
        if block:
            self._stop(block, f"the provider blocked the prompt ({shown_enum(block)})")
        for n, raw in enumerate(opt_list(chunk, "candidates", where) or ()):
            at = f"gemini: candidates[{n}]"
            candidate = obj(raw, at)
            if (opt_int(candidate, "index", at) or 0) == 0:
                self._candidate(candidate, at)

    def _candidate(self, candidate: dict[str, Any], where: str) -> None:  # raw wire JSON
        content = opt_obj(candidate, "content", where)
        if content:
            for n, raw in enumerate(opt_list(content, "parts", f"{where}.content") or ()):
                self._part(obj(raw, f"{where}.content.parts[{n}]"),
                           f"{where}.content.parts[{n}]")
        reason = opt_str(candidate, "finishReason", where)
        if reason:
            message = None
            if reason not in _FINE:
                message = _CUT_SHORT.get(reason, "the provider ended the answer early")
                message = f"{message} ({shown_enum(reason)})"
            self._stop(reason, message)

    def _part(self, part: dict[str, Any], where: str) -> None:  # raw wire JSON
        agg = self.agg
        signature = opt_str(part, "thoughtSignature", where)
        call = opt_obj(part, "functionCall", where)
        if call is not None:
            self._function_call(call, signature, f"{where}.functionCall")
            return
        text = opt_str(part, "text", where)
        if part.get("thought") is True:
            agg.add_thought(text or "")
            if signature:
                agg.thought_signature(signature)
        else:
            agg.add_text(text or "")
            if signature:
                self._text_signature = signature

    def _function_call(self, wire: dict[str, Any], signature: str | None,
                       where: str) -> None:  # raw wire JSON
        name = opt_str(wire, "name", where)
        args = opt_obj(wire, "args", where)
        pieces = opt_list(wire, "partialArgs", where)
        call = self._open
        if name:
            index = len(self._calls)
            call_id = opt_str(wire, "id", where) or self._new_id(index)
            call = _Call(call_id, name, signature)
            self._calls.append(call)
            self.agg.tool_call(index=index, call_id=call_id, name=name)
        elif call is None:
            raise MalformedChunk(f"{where} continues no open call")
        elif signature and not call.signature:
            call.signature = signature
        if args:
            call.args = ArgsBuilder(args)
        for n, raw in enumerate(pieces or ()):
            piece = obj(raw, f"{where}.partialArgs[{n}]")
            _apply(call.args, piece, f"{where}.partialArgs[{n}]")
        self._open = call if wire.get("willContinue") is True else None

    def _new_id(self, index: int) -> str:
        if self._response_id and _ID.fullmatch(self._response_id):
            return f"gemini-{self._response_id}-{index}"
        return new_id("call")

    def _stop(self, reason: str, message: str | None) -> None:
        self.agg.finish_reason = reason
        self.complete = True
        if message is not None:
            self.agg.error("provider_error", f"gemini: {message}")

    def _error(self, error: Any) -> None:  # raw wire JSON
        if not isinstance(error, dict):
            self.in_band_error(str(error), retryable=True)
            return
        status = error.get("status")
        code = error.get("code")
        retryable = (status in _RETRYABLE_STATUS if isinstance(status, str)
                     else not isinstance(code, int) or code == 429 or code >= 500)
        self.in_band_error(f"{status or code}: {error.get('message', '')}", retryable=retryable)

    def _usage(self, raw: dict[str, Any]) -> None:  # raw wire JSON
        where = "gemini: usageMetadata"
        counts = {key: opt_int(raw, key, where) for key in _USAGE_KEYS}
        if not any(value is not None for value in counts.values()):
            return  # a chunk with only e.g. trafficType: keep the counts seen so far
        prompt = (counts["promptTokenCount"] or 0) + (counts["toolUsePromptTokenCount"] or 0)
        thoughts = counts["thoughtsTokenCount"] or 0
        output = (counts["candidatesTokenCount"] or 0) + thoughts
        self.agg.usage = Usage(input_tokens=prompt, output_tokens=output,
                               total_tokens=counts["totalTokenCount"] or prompt + output,
                               cached_input_tokens=counts["cachedContentTokenCount"] or 0,
                               reasoning_tokens=thoughts)

    def finish(self) -> LlmResponse:
        """The aggregate, with each signature on the part it came with.

        Raises:
            ToolCallAssemblyError: a call's streamed arguments never finished.
        """
        agg = self.agg
        if self._open is not None and agg.finish_reason in _FINE:
            raise ToolCallAssemblyError(
                f"tool call {self._open.id} ({self._open.name}): the arguments never finished")
        for index, call in enumerate(self._calls):
            agg.tool_call(index=index, arguments=json.dumps(call.args.args, ensure_ascii=False))
        final = agg.finish()
        if final.content is not None:
            self._sign(final.content)
        return final

    def _sign(self, content: Content) -> None:
        signatures = {call.id: call.signature for call in self._calls if call.signature}
        text_signature = self._text_signature
        for part in content.parts:
            if part.function_call is not None:
                part.thought_signature = signatures.get(part.function_call.id)
            elif part.text is not None and not part.thought and text_signature:
                part.thought_signature, text_signature = text_signature, None
        if text_signature and not content.function_calls:
            content.parts.append(Part(text="", thought_signature=text_signature))


_USAGE_KEYS = ("promptTokenCount", "candidatesTokenCount", "totalTokenCount",
               "thoughtsTokenCount", "cachedContentTokenCount", "toolUsePromptTokenCount")
_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")
_VALUE_KEYS = ("numberValue", "boolValue", "structValue", "listValue")


def _apply(args: ArgsBuilder, piece: dict[str, Any], where: str) -> None:  # raw wire JSON
    path = piece.get("jsonPath")
    if type(path) is not str:
        raise bad(f"{where}.jsonPath", "a string")
    if "stringValue" in piece:
        value = opt_str(piece, "stringValue", where) or ""
        args.set(path, value, append=True)
        return
    if "nullValue" in piece:
        args.set(path, None)
        return
    for key in _VALUE_KEYS:
        if key in piece:
            args.set(path, piece[key])
            return


def is_live_model(model: str) -> bool:
    """Whether a Gemini model name is a Live API model (``…-live-…``, ``…native-audio…``)."""
    name = model.removeprefix("models/")
    return bool(re.search(r"(^|-)live(-|$)", name)) or "native-audio" in name


def from_spec(name: str) -> GeminiModel:
    """``"gemini:<model>"``: key from ``GOOGLE_API_KEY`` or ``GEMINI_API_KEY``.

    ``GOOGLE_API_KEY`` wins when both are set, as in Google's SDK. The root comes
    from ``GEMINI_BASE_URL`` (or ``GOOGLE_GEMINI_BASE_URL``) when set.

    Raises:
        UserError: neither key variable is set.
    """
    key = gemini_key(f"gemini:{name}")
    base_url = env_base_url(DEFAULT_BASE_URL, "GEMINI_BASE_URL", "GOOGLE_GEMINI_BASE_URL")
    return GeminiModel(name, base_url=base_url, api_key=key,
                       live_base_url=env_base_url(LIVE_BASE_URL, "GEMINI_LIVE_BASE_URL"))


def vertex_from_spec(spec: str) -> GeminiModel:
    """``"vertex:<model>@<project>/<location>"`` (or ``"vertex:<model>"``).

    Without ``@<project>/<location>`` they come from ``GOOGLE_CLOUD_PROJECT``
    and ``GOOGLE_CLOUD_LOCATION`` (default ``global``). The access token comes
    from ``GOOGLE_CLOUD_ACCESS_TOKEN`` (e.g. ``gcloud auth print-access-token``;
    it expires: pass ``access_token=`` a function to :class:`GeminiModel` to
    refresh it).

    Raises:
        UserError: a malformed spec, no project, or no access token.
    """
    match = re.fullmatch(r"([^@/]+)(?:@([^/@]+)/([^/@]+))?", spec)
    if match is None:
        raise UserError(f"'vertex:{spec}' must look like 'vertex:<model>@<project>/<location>'")
    name, project, location = match.groups()
    project = project or os.environ.get("GOOGLE_CLOUD_PROJECT")
    location = location or os.environ.get("GOOGLE_CLOUD_LOCATION") or "global"
    if not project:
        raise UserError(f"model 'vertex:{spec}' needs a project: write "
                        "'vertex:<model>@<project>/<location>' or set GOOGLE_CLOUD_PROJECT")
    token = os.environ.get("GOOGLE_CLOUD_ACCESS_TOKEN")
    if not token:
        raise UserError(f"model 'vertex:{spec}' needs an access token: set "
                        "GOOGLE_CLOUD_ACCESS_TOKEN (e.g. from `gcloud auth print-access-token`)")
    return GeminiModel(name, base_url=vertex_base_url(project, location), access_token=token)


_RETRY_INFO = "type.googleapis.com/google.rpc.RetryInfo"


def google_retry_delay(body: bytes) -> float | None:
    """The ``retryDelay`` of a Google error body's ``RetryInfo`` detail, in seconds.

    ``None`` when the body is not JSON, has no such detail, or the delay is not
    a duration like ``"7s"`` or ``"0.25s"`` (a wrong shape is ignored, never raised).
    """
    try:
        details = json.loads(body)["error"]["details"]
        delay = next(d["retryDelay"] for d in details
                     if isinstance(d, dict) and d.get("@type") == _RETRY_INFO)
        seconds = float(delay.removesuffix("s")) if delay.endswith("s") else None
    except (ValueError, TypeError, KeyError, StopIteration, AttributeError):
        return None
    return seconds if seconds is not None and 0 <= seconds < float("inf") else None
