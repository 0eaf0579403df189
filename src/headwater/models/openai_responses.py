"""``OpenAIResponsesModel``: OpenAI's Responses API wire format.

Speaks ``POST {base_url}/responses`` with ``stream: true`` and, by default,
``store: false`` (nothing is kept at OpenAI; every call sends the whole
history). Events are typed (``event: response.output_text.delta``):
``output_text`` and ``refusal`` deltas are answer text (as in the Chat
Completions adapter); reasoning summary and reasoning text deltas are thought
parts, and each reasoning item's id and ``encrypted_content`` travel in the
thought part's ``thought_signature`` so the reasoning goes back to the model
in the next request. Function-call arguments are buffered per output item and
parsed only at the end. ``response.completed`` ends the stream with its usage;
``response.incomplete`` (``max_output_tokens``, ``content_filter``),
``response.failed`` and ``error`` events end it with an error. Unknown event
types (hosted tools, annotations, new events) are ignored.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any, ClassVar

from pydantic_core import from_json

from ..core.errors import MalformedChunk, UserError
from ..core.sse import ServerSentEvent
from ..core.types import Blob, Content, Part, Usage
from ._env import env_base_url, env_key
from ._http import HttpStreamingModel, StreamParser
from ._wire import bad, obj, opt_int, opt_obj, opt_str, req_str, shown_enum
from .generation import RESPONSES
from .llm_request import LlmRequest

DEFAULT_BASE_URL = "https://api.openai.com/v1"
ENCRYPTED_REASONING = "reasoning.encrypted_content"
_REASONING_PREFIXES = ("o1", "o3", "o4", "gpt-5", "codex")
# Why a response stopped short: (the chat adapter's finish reason, what the user is told).
_INCOMPLETE = {"max_output_tokens": ("length", "the model stopped at its token limit"),
               "content_filter": ("content_filter",
                                  "the provider's content filter stopped the answer")}
_RETRYABLE_WORDS = ("server", "rate_limit", "overload", "timeout", "unavailable", "internal")
_SIGNATURE_TYPE = "openai-responses.reasoning"


class OpenAIResponsesModel(HttpStreamingModel):
    """A model behind OpenAI's ``/responses`` endpoint.

    Args:
        model: the model name, e.g. ``"gpt-5-mini"``.
        base_url: the API root (``…/v1``); default ``https://api.openai.com/v1``.
        api_key: sent as ``Authorization: Bearer``.
        store: ask OpenAI to keep the response (``store: true``); default
            ``False``: the full history goes with every call and nothing is kept.
        encrypted_reasoning: request ``include: ["reasoning.encrypted_content"]``
            so reasoning can be sent back while ``store`` is off. ``None`` (the
            default) asks for it when ``store`` is off and the model name looks
            like a reasoning model (``o1``, ``o3``, ``o4``, ``gpt-5``, ``codex``),
            since other models reject it.
        http_client, settings, headers: see :class:`HttpStreamingModel`.

    Reasoning summaries appear only when asked for, e.g.
    ``generate_config={"reasoning": {"effort": "low", "summary": "auto"}}``;
    ``generate_config`` keys go into the request body as they are.
    """

    provider = "openai"

    def __init__(self, model: str, *, base_url: str = DEFAULT_BASE_URL,
                 api_key: str | None = None, store: bool = False,
                 encrypted_reasoning: bool | None = None, **kwargs: Any) -> None:
        super().__init__(model, base_url=base_url, api_key=api_key, **kwargs)
        self.store = store
        self.encrypted_reasoning = encrypted_reasoning

    @property
    def url(self) -> str:
        return f"{self.base_url}/responses"

    def auth_headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self._api_key}"} if self._api_key else {}

    def new_parser(self) -> StreamParser:
        return _ResponsesParser()

    def build_body(self, request: LlmRequest) -> dict[str, Any]:  # raw wire JSON
        model = request.model or self.model
        body: dict[str, Any] = {
            "model": model,
            "input": to_input(request.contents, store=self.store),
            "stream": True,
            "store": self.store,
        }
        if request.system_instruction:
            body["instructions"] = request.system_instruction
        if request.tools:
            body["tools"] = [{"type": "function", "name": t.name, "description": t.description,
                              "parameters": t.parameters, "strict": False}
                             for t in request.tools]
        wants = self.encrypted_reasoning
        if wants is None:
            wants = not self.store and model.lower().startswith(_REASONING_PREFIXES)
        if wants:
            body["include"] = [ENCRYPTED_REASONING]
        body.update(RESPONSES.fields(request.generate_content_config, model))
        body.update(request.config)
        return body


# -- history → input items ----------------------------------------------------------------------

def to_input(contents: list[Content], *, store: bool = False) -> list[dict[str, Any]]:  # raw JSON
    """History as Responses input items.

    A model turn becomes its reasoning items (when they can be sent back),
    an assistant message of ``output_text`` and ``function_call`` items, in
    the order of its parts; a user turn becomes ``function_call_output``
    items, then a message of ``input_text``/``input_image``/``input_file``.

    Raises:
        UserError: an inline blob that is neither an image nor a PDF.
    """
    items: list[dict[str, Any]] = []
    for content in contents:
        if content.role == "model":
            items.extend(_model_items(content, store))
            continue
        for part in content.parts:
            response = part.function_response
            if response is not None:
                items.append({"type": "function_call_output", "call_id": response.id,
                              "output": json.dumps(response.response, ensure_ascii=False)})
        blocks = [b for part in content.parts if (b := _input_block(part)) is not None]
        if blocks:
            role = "system" if content.role == "system" else "user"
            items.append({"type": "message", "role": role, "content": blocks})
    return items


def _model_items(content: Content, store: bool) -> list[dict[str, Any]]:  # raw wire JSON
    items: list[dict[str, Any]] = []
    text: list[dict[str, Any]] = []  # output_text blocks of the assistant message being built

    def flush() -> None:
        if text:
            items.append({"type": "message", "role": "assistant", "content": list(text)})
            text.clear()

    for part in content.parts:
        if part.function_call is not None:
            flush()
            call = part.function_call
            items.append({"type": "function_call", "call_id": call.id, "name": call.name,
                          "arguments": json.dumps(call.args, ensure_ascii=False)})
        elif part.thought:
            reasoning = _reasoning_item(part, store)
            if reasoning is not None:
                flush()
                items.append(reasoning)
        elif part.text:
            text.append({"type": "output_text", "text": part.text})
    flush()
    return items


def _reasoning_item(part: Part, store: bool) -> dict[str, Any] | None:  # raw wire JSON
    """A thought part as the reasoning item it came from, or None if it cannot go back."""
    signature = reasoning_signature(part.thought_signature)
    if signature is None:
        return None  # another provider's thought, or one never signed: the model cannot read it
    item_id, encrypted = signature
    if encrypted is None and not store:
        return None  # without storage the id refers to nothing
    item: dict[str, Any] = {"type": "reasoning", "id": item_id, "summary": (
        [{"type": "summary_text", "text": part.text}] if part.text else [])}
    if encrypted is not None:
        item["encrypted_content"] = encrypted
    return item


def _input_block(part: Part) -> dict[str, Any] | None:  # raw wire JSON
    if part.inline_data is not None:
        return _blob_block(part.inline_data)
    if part.text and not part.thought:
        return {"type": "input_text", "text": part.text}
    return None


def _blob_block(blob: Blob) -> dict[str, Any]:  # raw wire JSON
    url = f"data:{blob.mime_type};base64,{base64.b64encode(blob.data).decode()}"
    if blob.mime_type.startswith("image/"):
        return {"type": "input_image", "image_url": url, "detail": "auto"}
    if blob.mime_type == "application/pdf":
        return {"type": "input_file", "filename": "document.pdf", "file_data": url}
    raise UserError(f"the Responses API takes images and PDFs as input, not {blob.mime_type!r}; "
                    "convert the blob or leave it out of the message")


def signature_of(item_id: str, encrypted_content: str | None) -> str:
    """The ``thought_signature`` that carries a reasoning item back to the model."""
    return json.dumps({"type": _SIGNATURE_TYPE, "id": item_id,
                       "encrypted_content": encrypted_content}, separators=(",", ":"))


def reasoning_signature(signature: str | None) -> tuple[str, str | None] | None:
    """``(item id, encrypted content)`` from a signature :func:`signature_of` made, else None."""
    if not signature or not signature.startswith("{"):
        return None
    try:
        data = json.loads(signature)
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("type") != _SIGNATURE_TYPE:
        return None
    item_id, encrypted = data.get("id"), data.get("encrypted_content")
    if not isinstance(item_id, str) or not (encrypted is None or isinstance(encrypted, str)):
        return None
    return item_id, encrypted


# -- stream events → partials and one aggregate ---------------------------------------------

class _ResponsesParser(StreamParser):
    """Responses stream events → partials and one aggregate.

    Function calls are keyed by ``output_index`` (the aggregator's index) and
    found again by their item id; the call id is the item's ``call_id``. The
    terminal events are ``response.completed``, ``response.incomplete`` and
    ``response.failed``.
    """

    provider = "openai"

    def __init__(self) -> None:
        super().__init__()
        self._calls: dict[str, int] = {}  # function_call item id -> output_index
        self._open: set[int] = set()  # output indexes of the function calls opened
        self._with_deltas: set[int] = set()  # calls whose arguments came as deltas
        self._summary_parts: dict[str, int] = {}  # reasoning item id -> summary parts seen

    def feed(self, event: ServerSentEvent) -> None:
        data = event.data
        if data == b"[DONE]":  # not sent by OpenAI; some compatible servers add it
            self.ended = True
            return
        try:
            payload = from_json(data)
        except ValueError:
            raise MalformedChunk(f"openai: a stream event is not JSON ({len(data)} bytes)"
                                 ) from None
        if type(payload) is not dict:
            raise bad("openai: a stream event", "an object")
        kind = payload.get("type")
        if kind == "response.output_text.delta":  # the hot path
            delta = payload.get("delta")
            if type(delta) is str:
                self.agg.add_text(delta)
                return
        if type(kind) is not str:
            kind = event.event
        handler = self.HANDLERS.get(kind)
        if handler is not None:
            handler(self, payload)

    def _text(self, data: dict[str, Any]) -> None:
        self.agg.add_text(req_str(data, "delta", f"openai: {data.get('type')}"))

    def _thought(self, data: dict[str, Any]) -> None:
        self.agg.add_thought(req_str(data, "delta", f"openai: {data.get('type')}"))

    def _summary_part(self, data: dict[str, Any]) -> None:
        """A new summary part of a reasoning item: parts after the first start a paragraph."""
        item_id = opt_str(data, "item_id", "openai: response.reasoning_summary_part.added") or ""
        seen = self._summary_parts.get(item_id, 0)
        self._summary_parts[item_id] = seen + 1
        if seen:
            self.agg.add_thought("\n\n")

    def _item_added(self, data: dict[str, Any]) -> None:
        where = "openai: response.output_item.added"
        index = opt_int(data, "output_index", where)
        item = obj(data.get("item"), f"{where}.item")
        where += ".item"
        if opt_str(item, "type", where) != "function_call":
            return
        if index is None:
            index = len(self._open)
        item_id = opt_str(item, "id", where)
        if item_id:
            self._calls[item_id] = index
        self._open.add(index)
        self.agg.tool_call(index=index, call_id=req_str(item, "call_id", where),
                           name=req_str(item, "name", where))
        arguments = opt_str(item, "arguments", where)
        if arguments:
            self._with_deltas.add(index)
            self.agg.tool_call(index=index, arguments=arguments)

    def _arguments(self, data: dict[str, Any]) -> None:
        where = "openai: response.function_call_arguments.delta"
        index = self._call_index(data, where)
        self._with_deltas.add(index)
        self.agg.tool_call(index=index, arguments=req_str(data, "delta", where))

    def _arguments_done(self, data: dict[str, Any]) -> None:
        """The whole arguments: used only when no delta carried them."""
        where = "openai: response.function_call_arguments.done"
        index = self._call_index(data, where)
        arguments = opt_str(data, "arguments", where)
        if index not in self._with_deltas and arguments:
            self._with_deltas.add(index)
            self.agg.tool_call(index=index, arguments=arguments)

    def _call_index(self, data: dict[str, Any], where: str) -> int:
        item_id = opt_str(data, "item_id", where)
        index = self._calls.get(item_id) if item_id else None
        if index is None:
            index = opt_int(data, "output_index", where)
        if index is None or index not in self._open:
            raise MalformedChunk(f"{where} names no function call that was opened")
        return index

    def _item_done(self, data: dict[str, Any]) -> None:
        where = "openai: response.output_item.done"
        item = obj(data.get("item"), f"{where}.item")
        where += ".item"
        kind = opt_str(item, "type", where)
        if kind == "reasoning":
            encrypted = opt_str(item, "encrypted_content", where)
            self.agg.thought_signature(signature_of(req_str(item, "id", where), encrypted))
        elif kind == "function_call":
            item_id = opt_str(item, "id", where)
            index = self._calls.get(item_id) if item_id else None
            arguments = opt_str(item, "arguments", where)
            if index is not None and index not in self._with_deltas and arguments:
                self._with_deltas.add(index)
                self.agg.tool_call(index=index, arguments=arguments)

    def _completed(self, data: dict[str, Any]) -> None:
        self._response(data)
        self.agg.finish_reason = "tool_calls" if self._open else "stop"
        self.complete = self.ended = True

    def _incomplete(self, data: dict[str, Any]) -> None:
        response = self._response(data)
        details = opt_obj(response, "incomplete_details", "openai: response") or {}
        reason = opt_str(details, "reason", "openai: response.incomplete_details") or "unknown"
        finish, said = _INCOMPLETE.get(reason, (reason, "the response ended incomplete"))
        self.agg.finish_reason = finish
        self.agg.error("provider_error", f"openai: {said} ({shown_enum(reason)})")
        self.complete = self.ended = True

    def _failed(self, data: dict[str, Any]) -> None:
        response = self._response(data)
        error = opt_obj(response, "error", "openai: response") or {}
        self._report(error)  # before content this raises; after, the final carries the error
        self.complete = self.ended = True

    def _error(self, data: dict[str, Any]) -> None:
        # The API reference puts code/message at the top; some streams nest them in "error".
        error = data.get("error")
        self._report(error if isinstance(error, dict) else data)
        self.complete = self.ended = True

    def _report(self, error: dict[str, Any]) -> None:  # raw wire JSON
        kind = str(error.get("code") or error.get("type") or "")
        self.in_band_error(f"{kind}: {error.get('message', '')}",
                           retryable=not kind or any(w in kind for w in _RETRYABLE_WORDS))

    def _response(self, data: dict[str, Any]) -> dict[str, Any]:  # raw wire JSON
        """The event's ``response`` object; its usage, when present, is the call's (once)."""
        response = obj(data.get("response"), f"openai: {data.get('type')}.response")
        usage = opt_obj(response, "usage", "openai: response")
        if usage:
            self.agg.usage = _usage(usage)
        return response

    # Which method handles each event type (by its ``type``).
    HANDLERS: ClassVar[dict[str, Callable[[Any, dict[str, Any]], None]]] = {
        "response.output_text.delta": _text,
        "response.refusal.delta": _text,
        "response.reasoning_summary_text.delta": _thought,
        "response.reasoning_text.delta": _thought,
        "response.reasoning_summary_part.added": _summary_part,
        "response.output_item.added": _item_added,
        "response.function_call_arguments.delta": _arguments,
        "response.function_call_arguments.done": _arguments_done,
        "response.output_item.done": _item_done,
        "response.completed": _completed,
        "response.incomplete": _incomplete,
        "response.failed": _failed,
        "error": _error,
    }


def _usage(raw: dict[str, Any]) -> Usage:  # raw wire JSON
    where = "openai: response.usage"
    prompt = opt_int(raw, "input_tokens", where) or 0
    output = opt_int(raw, "output_tokens", where) or 0
    total = opt_int(raw, "total_tokens", where)
    input_details = opt_obj(raw, "input_tokens_details", where) or {}
    output_details = opt_obj(raw, "output_tokens_details", where) or {}
    cached = opt_int(input_details, "cached_tokens", f"{where}.input_tokens_details")
    reasoning = opt_int(output_details, "reasoning_tokens", f"{where}.output_tokens_details")
    return Usage(input_tokens=prompt, output_tokens=output, total_tokens=total or prompt + output,
                 cached_input_tokens=cached or 0, reasoning_tokens=reasoning or 0)


def from_spec(name: str) -> OpenAIResponsesModel:
    """``"openai-responses:<model>"``: key from ``OPENAI_API_KEY``, root from ``OPENAI_BASE_URL``.

    Raises:
        UserError: ``OPENAI_API_KEY`` is not set.
    """
    key = env_key(f"openai-responses:{name}", "OPENAI_API_KEY")
    return OpenAIResponsesModel(
        name, base_url=env_base_url(DEFAULT_BASE_URL, "OPENAI_BASE_URL"), api_key=key)
