"""``OpenAIChatModel``: the OpenAI-compatible Chat Completions wire format.

Speaks ``POST {base_url}/chat/completions`` with ``stream: true`` and
``stream_options.include_usage`` — OpenAI, vLLM, Ollama, llama.cpp server,
LM Studio, Groq, DeepSeek. Text deltas become partials at once; tool-call
fragments, the finish reason and the usage-only final chunk go into the one
aggregate. ``refusal`` deltas are answer text (the user is shown what the model
said); ``reasoning_content``/``reasoning`` deltas are thought parts.

OpenAI's Responses API (``POST /responses``) is :class:`OpenAIResponsesModel`,
defined in ``models/openai_responses.py`` and importable from here too.
"""

from __future__ import annotations

import base64
import json
import os
import re
from typing import Any

from pydantic_core import from_json

from ..core.errors import MalformedChunk, UserError
from ..core.sse import ServerSentEvent
from ..core.types import Content, Usage
from ._env import env_base_url, env_key
from ._http import HttpStreamingModel, StreamParser
from ._wire import bad, obj, opt_int, opt_list, opt_obj, opt_str
from .generation import CHAT_COMPLETIONS
from .llm_request import LlmRequest
from .openai_responses import OpenAIResponsesModel as OpenAIResponsesModel

DEFAULT_BASE_URL = "https://api.openai.com/v1"
_CUT_SHORT = {"length": "the model stopped at its token limit",
              "content_filter": "the provider's content filter stopped the answer"}


class OpenAIChatModel(HttpStreamingModel):
    """A model behind an OpenAI-compatible ``/chat/completions`` endpoint.

    Args:
        model: the model name, e.g. ``"gpt-4o-mini"``.
        base_url: the API root (``…/v1``); default ``https://api.openai.com/v1``.
        api_key: sent as ``Authorization: Bearer``; ``None`` for local servers.
        http_client, settings, headers: see :class:`HttpStreamingModel`.
    """

    provider = "openai"

    def __init__(self, model: str, *, base_url: str = DEFAULT_BASE_URL,
                 api_key: str | None = None, **kwargs: Any) -> None:
        super().__init__(model, base_url=base_url, api_key=api_key, **kwargs)

    @property
    def url(self) -> str:
        return f"{self.base_url}/chat/completions"

    def auth_headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self._api_key}"} if self._api_key else {}

    def new_parser(self) -> StreamParser:
        return _ChatParser()

    def build_body(self, request: LlmRequest) -> dict[str, Any]:  # raw wire JSON
        body: dict[str, Any] = {
            "model": request.model or self.model,
            "messages": to_messages(request),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.tools:
            body["tools"] = [
                {"type": "function", "function": {"name": t.name, "description": t.description,
                                                  "parameters": t.parameters}}
                for t in request.tools
            ]
        body.update(CHAT_COMPLETIONS.fields(request.generate_content_config, body["model"]))
        body.update(request.config)
        return body


def to_messages(request: LlmRequest) -> list[dict[str, Any]]:  # raw wire JSON
    """History as Chat Completions messages: system, user, assistant with tool_calls, tool."""
    messages: list[dict[str, Any]] = []
    if request.system_instruction:
        messages.append({"role": "system", "content": request.system_instruction})
    for content in request.contents:
        if content.role == "model":
            messages.append(_assistant(content))
            continue
        for part in content.parts:
            response = part.function_response
            if response is not None:
                messages.append({"role": "tool", "tool_call_id": response.id,
                                 "content": json.dumps(response.response, ensure_ascii=False)})
        user = _user_content(content)
        if user:
            messages.append({"role": "system" if content.role == "system" else "user",
                             "content": user})
    return messages


def _assistant(content: Content) -> dict[str, Any]:  # raw wire JSON
    message: dict[str, Any] = {"role": "assistant", "content": content.text or None}
    calls = content.function_calls
    if calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function",
             "function": {"name": c.name, "arguments": json.dumps(c.args, ensure_ascii=False)}}
            for c in calls
        ]
    return message


def _user_content(content: Content) -> str | list[dict[str, Any]]:  # raw wire JSON
    blobs = [p.inline_data for p in content.parts if p.inline_data is not None]
    text = content.text
    if not blobs:
        return text
    parts: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    for blob in blobs:
        url = f"data:{blob.mime_type};base64,{base64.b64encode(blob.data).decode()}"
        parts.append({"type": "image_url", "image_url": {"url": url}})
    return parts


class _ChatParser(StreamParser):
    """Chat Completions chunks → partials and one aggregate.

    Every field read is checked (``_wire``): a chunk of the wrong shape fails
    the call with ``provider_bad_response``. A chunk must be an object with a
    ``choices`` list (an ``error`` object instead is an in-band error).
    """

    provider = "openai"

    def feed(self, event: ServerSentEvent) -> None:
        data = event.data
        if data == b"[DONE]":
            self.complete = self.ended = True
            return
        try:
            chunk = from_json(data)
        except ValueError:
            raise MalformedChunk(f"openai: a stream chunk is not JSON ({len(data)} bytes)"
                                 ) from None
        if type(chunk) is not dict:
            raise bad("openai: a stream chunk", "an object")
        if "error" in chunk or event.event == "error":
            error = chunk.get("error", chunk)
            message = error.get("message", "error") if isinstance(error, dict) else error
            self.in_band_error(str(message), retryable=_retryable_in_band(error))
            return
        choices = chunk.get("choices")
        if type(choices) is list and len(choices) == 1:
            choice = choices[0]
            if type(choice) is dict and choice.get("finish_reason") is None and (
                    index := choice.get("index", 0)) == 0 and type(index) is int:
                delta = choice.get("delta")
                if type(delta) is dict and len(delta) == 1:
                    content = delta.get("content")
                    if type(content) is str and content:  # the hot path: one text delta
                        self.agg.add_text(content)
                        if "usage" not in chunk:
                            return
        self._general(chunk)

    def _general(self, chunk: dict[str, Any]) -> None:  # raw wire JSON
        agg = self.agg
        usage = opt_obj(chunk, "usage", "openai: chunk")
        if usage:
            agg.usage = _usage(usage)
        choices = chunk.get("choices")
        if type(choices) is not list:
            raise bad("openai: chunk.choices", "a list")
        for n, raw in enumerate(choices):
            where = f"openai: choices[{n}]"
            choice = obj(raw, where)
            if (opt_int(choice, "index", where) or 0) != 0:
                continue
            delta = opt_obj(choice, "delta", where)
            reason = opt_str(choice, "finish_reason", where)
            if delta and not (len(delta) == 1 and type(delta.get("content")) is str):
                self._rare(delta, f"{where}.delta")
            if reason:
                agg.finish_reason = reason
                self.complete = True
                if reason in _CUT_SHORT:
                    agg.error("provider_error", f"openai: {_CUT_SHORT[reason]} ({reason})")

    def _rare(self, delta: dict[str, Any], where: str) -> None:  # raw wire JSON
        agg = self.agg
        for key in ("reasoning_content", "reasoning"):
            thought = opt_str(delta, key, where)
            if thought:
                agg.add_thought(thought)
        for key in ("content", "refusal"):
            text = opt_str(delta, key, where)
            if text:
                agg.add_text(text)
        for n, raw in enumerate(opt_list(delta, "tool_calls", where) or ()):
            at = f"{where}.tool_calls[{n}]"
            call = obj(raw, at)
            function = opt_obj(call, "function", at) or {}
            agg.tool_call(index=opt_int(call, "index", at), call_id=opt_str(call, "id", at),
                          name=opt_str(function, "name", f"{at}.function"),
                          arguments=opt_str(function, "arguments", f"{at}.function"))


def _retryable_in_band(error: Any) -> bool:
    if not isinstance(error, dict):
        return True
    kind = str(error.get("type") or error.get("code") or "")
    return not any(word in kind for word in ("invalid", "auth", "permission", "not_found"))


def _usage(raw: dict[str, Any]) -> Usage:  # raw wire JSON
    where = "openai: usage"
    prompt = opt_int(raw, "prompt_tokens", where) or 0
    completion = opt_int(raw, "completion_tokens", where) or 0
    total = opt_int(raw, "total_tokens", where)
    prompt_details = opt_obj(raw, "prompt_tokens_details", where) or {}
    completion_details = opt_obj(raw, "completion_tokens_details", where) or {}
    cached = opt_int(prompt_details, "cached_tokens", f"{where}.prompt_tokens_details")
    reasoning = opt_int(completion_details, "reasoning_tokens",
                        f"{where}.completion_tokens_details")
    return Usage(input_tokens=prompt, output_tokens=completion,
                 total_tokens=total or prompt + completion,
                 cached_input_tokens=cached or 0, reasoning_tokens=reasoning or 0)


def from_spec(name: str) -> OpenAIChatModel:
    """``"openai:<model>"``: key from ``OPENAI_API_KEY``, root from ``OPENAI_BASE_URL``.

    Raises:
        UserError: ``OPENAI_API_KEY`` is not set.
    """
    key = env_key(f"openai:{name}", "OPENAI_API_KEY")
    return OpenAIChatModel(name, base_url=env_base_url(DEFAULT_BASE_URL, "OPENAI_BASE_URL"),
                           api_key=key)


def compatible_from_spec(spec: str) -> OpenAIChatModel:
    """``"openai-compatible:<model>@<base_url>"``; key from ``OPENAI_COMPATIBLE_API_KEY`` if set.

    Raises:
        UserError: no ``@<base_url>`` part.
    """
    match = re.fullmatch(r"(.+)@(https?://.+)", spec)
    if match is None:
        raise UserError(f"'openai-compatible:{spec}' must look like "
                        "'openai-compatible:<model>@<http(s)://host/v1>'")
    name, base_url = match.groups()
    return OpenAIChatModel(name, base_url=base_url,
                           api_key=os.environ.get("OPENAI_COMPATIBLE_API_KEY") or None)
