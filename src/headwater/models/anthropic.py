"""``AnthropicModel``: the Anthropic Messages wire format.

Speaks ``POST {base_url}/v1/messages`` with ``stream: true``. ``text_delta``
becomes answer partials; ``thinking_delta`` becomes thought partials (never
answer text) and its ``signature`` is kept for the round trip;
``input_json_delta`` fragments of ``tool_use`` blocks go into the aggregate.
Server-side tool blocks (``server_tool_use`` and their results) run at the
provider and never become calls here. Usage in ``message_delta`` is
cumulative: it overlays ``message_start``'s and is counted once.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any, ClassVar

from pydantic_core import from_json

from ..core.errors import MalformedChunk
from ..core.sse import ServerSentEvent
from ..core.types import Content, Part, Usage
from ._env import env_base_url, env_key
from ._http import HttpStreamingModel, StreamParser
from ._wire import bad, obj, opt_int, opt_obj, opt_str, req_int, req_str
from .generation import ANTHROPIC
from .llm_request import LlmRequest

DEFAULT_BASE_URL = "https://api.anthropic.com"
API_VERSION = "2023-06-01"
_CUT_SHORT = {"max_tokens": "the model stopped at its token limit",
              "refusal": "the model refused to continue",
              "model_context_window_exceeded": "the context window is full"}
_TOKEN_KEYS = ("input_tokens", "output_tokens", "cache_read_input_tokens",
               "cache_creation_input_tokens")
_NOT_RETRYABLE = ("invalid_request_error", "authentication_error", "permission_error",
                  "not_found_error", "request_too_large")


class AnthropicModel(HttpStreamingModel):
    """A model behind the Anthropic Messages API.

    Args:
        model: e.g. ``"claude-sonnet-4-5"``.
        base_url: the API root; default ``https://api.anthropic.com``.
        api_key: sent as ``x-api-key``.
        http_client, settings, headers: see :class:`HttpStreamingModel`.

    ``max_tokens`` comes from the agent's ``generate_config``, its
    ``generate_content_config.max_output_tokens``, or the ``anthropic_max_tokens``
    setting (the API requires one; with thinking on and no limit given, the
    setting plus the thinking budget, since the budget must be below it).
    """

    provider = "anthropic"

    def __init__(self, model: str, *, base_url: str = DEFAULT_BASE_URL,
                 api_key: str | None = None, **kwargs: Any) -> None:
        super().__init__(model, base_url=base_url, api_key=api_key, **kwargs)

    @property
    def url(self) -> str:
        return f"{self.base_url}/v1/messages"

    def auth_headers(self) -> dict[str, str]:
        headers = {"anthropic-version": API_VERSION}
        if self._api_key:
            headers["x-api-key"] = self._api_key
        return headers

    def new_parser(self) -> StreamParser:
        return _MessagesParser()

    def build_body(self, request: LlmRequest) -> dict[str, Any]:  # raw wire JSON
        body: dict[str, Any] = {
            "model": request.model or self.model,
            "max_tokens": self.settings.anthropic_max_tokens,
            "messages": to_messages(request.contents),
            "stream": True,
        }
        if request.system_instruction:
            body["system"] = request.system_instruction
        if request.tools:
            body["tools"] = [{"name": t.name, "description": t.description,
                              "input_schema": t.parameters} for t in request.tools]
        mapped = ANTHROPIC.fields(request.generate_content_config, body["model"])
        thinking = mapped.get("thinking", {})
        if thinking.get("type") == "enabled" and "max_tokens" not in mapped:
            body["max_tokens"] += thinking["budget_tokens"]  # the answer keeps its room
        body.update(mapped)
        body.update(request.config)
        return body


def to_messages(contents: list[Content]) -> list[dict[str, Any]]:  # raw wire JSON
    """History as alternating user/assistant messages of content blocks."""
    messages: list[dict[str, Any]] = []
    for content in contents:
        role = "assistant" if content.role == "model" else "user"
        blocks = [b for part in content.parts if (b := _block(part, role)) is not None]
        if not blocks:
            continue
        if messages and messages[-1]["role"] == role:
            messages[-1]["content"].extend(blocks)
        else:
            messages.append({"role": role, "content": blocks})
    for message in messages:  # tool results must open their user message
        message["content"].sort(key=lambda b: b["type"] != "tool_result")
    return messages


def _block(part: Part, role: str) -> dict[str, Any] | None:  # raw wire JSON
    if part.function_call is not None:
        call = part.function_call
        return {"type": "tool_use", "id": call.id, "name": call.name, "input": call.args}
    if part.function_response is not None:
        response = part.function_response
        return {"type": "tool_result", "tool_use_id": response.id,
                "content": json.dumps(response.response, ensure_ascii=False),
                "is_error": "error" in response.response}
    if part.inline_data is not None:
        blob = part.inline_data
        return {"type": "image", "source": {"type": "base64", "media_type": blob.mime_type,
                                            "data": base64.b64encode(blob.data).decode()}}
    if part.text:
        if part.thought:
            if role != "assistant" or not part.thought_signature:
                return None  # unsigned thinking cannot be sent back
            return {"type": "thinking", "thinking": part.text,
                    "signature": part.thought_signature}
        return {"type": "text", "text": part.text}
    return None


class _MessagesParser(StreamParser):
    """Messages stream events → partials and one aggregate."""

    provider = "anthropic"

    def __init__(self) -> None:
        super().__init__()
        self._blocks: dict[int, str] = {}
        self._usage: dict[str, int] = {}

    def feed(self, event: ServerSentEvent) -> None:
        try:
            data = from_json(event.data)
        except ValueError:
            raise MalformedChunk(f"anthropic: a stream event is not JSON ({len(event.data)} chars)"
                             ) from None
        if type(data) is not dict:
            raise bad("anthropic: a stream event", "an object")
        kind = opt_str(data, "type", "anthropic: event") or event.event
        handler = self.HANDLERS.get(kind)
        if handler is not None:
            handler(self, data)

    def _message_start(self, data: dict[str, Any]) -> None:
        message = obj(data.get("message"), "anthropic: message_start.message")
        self._overlay(opt_obj(message, "usage", "anthropic: message_start.message"))

    def _block_start(self, data: dict[str, Any]) -> None:
        where = "anthropic: content_block_start"
        index = req_int(data, "index", where)
        block = obj(data.get("content_block"), f"{where}.content_block")
        where += ".content_block"
        kind = req_str(block, "type", where)
        self._blocks[index] = kind
        if kind == "tool_use":
            self.agg.tool_call(index=index, call_id=req_str(block, "id", where),
                               name=req_str(block, "name", where))
        elif kind == "text":
            self.agg.add_text(opt_str(block, "text", where) or "")

    def _block_delta(self, data: dict[str, Any]) -> None:
        where = "anthropic: content_block_delta"
        index = req_int(data, "index", where)
        delta = obj(data.get("delta"), f"{where}.delta")
        where += ".delta"
        kind = req_str(delta, "type", where)
        if kind == "text_delta":
            self.agg.add_text(req_str(delta, "text", where))
        elif kind == "thinking_delta":
            self.agg.add_thought(req_str(delta, "thinking", where))
        elif kind == "signature_delta":
            self.agg.thought_signature(req_str(delta, "signature", where))
        elif kind == "input_json_delta":
            fragment = req_str(delta, "partial_json", where)
            if self._blocks.get(index) == "tool_use":
                self.agg.tool_call(index=index, arguments=fragment)

    def _message_delta(self, data: dict[str, Any]) -> None:
        where = "anthropic: message_delta"
        self._overlay(opt_obj(data, "usage", where))
        reason = opt_str(opt_obj(data, "delta", where) or {}, "stop_reason", f"{where}.delta")
        if reason:
            self.agg.finish_reason = reason
            if reason in _CUT_SHORT:
                self.agg.error("provider_error", f"anthropic: {_CUT_SHORT[reason]} ({reason})")

    def _message_stop(self, data: dict[str, Any]) -> None:
        self.complete = self.ended = True

    def _error(self, data: dict[str, Any]) -> None:
        error = data.get("error")
        if not isinstance(error, dict):
            self.in_band_error(str(error), retryable=True)
            return
        kind = str(error.get("type", "error"))
        self.in_band_error(f"{kind}: {error.get('message', '')}",
                           retryable=kind not in _NOT_RETRYABLE)

    def _overlay(self, usage: dict[str, Any] | None) -> None:
        if not usage:
            return
        for key in _TOKEN_KEYS:
            value = opt_int(usage, key, "anthropic: usage")
            if value is not None:
                self._usage[key] = value
        u = self._usage
        cache_read = u.get("cache_read_input_tokens", 0)
        prompt = u.get("input_tokens", 0) + cache_read + u.get("cache_creation_input_tokens", 0)
        output = u.get("output_tokens", 0)
        self.agg.usage = Usage(input_tokens=prompt, output_tokens=output,
                               total_tokens=prompt + output, cached_input_tokens=cache_read)

    # Which method handles each event type (by its ``type``).
    HANDLERS: ClassVar[dict[str, Callable[[Any, dict[str, Any]], None]]] = {
        "message_start": _message_start,
        "content_block_start": _block_start,
        "content_block_delta": _block_delta,
        "message_delta": _message_delta,
        "message_stop": _message_stop,
        "error": _error,
    }


def from_spec(name: str) -> AnthropicModel:
    """``"anthropic:<model>"``: key from ``ANTHROPIC_API_KEY``, root from ``ANTHROPIC_BASE_URL``.

    Raises:
        UserError: ``ANTHROPIC_API_KEY`` is not set.
    """
    key = env_key(f"anthropic:{name}", "ANTHROPIC_API_KEY")
    return AnthropicModel(name, base_url=env_base_url(DEFAULT_BASE_URL, "ANTHROPIC_BASE_URL"),
                          api_key=key)
