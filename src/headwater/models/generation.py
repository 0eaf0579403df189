"""``GenerateContentConfig`` → each wire format's request fields: the one home of that mapping.

An agent's ``generate_content_config`` (genai's names, ``headwater.genai``) reaches
every adapter as ``LlmRequest.generate_content_config``. Each adapter asks its
:class:`ConfigMapping` here for the request fields it means and puts them in its
body before ``LlmRequest.config`` (raw provider keys, which win on a clash).

A field the provider has no equivalent for is left out, never an error: the
mapping logs it at debug level the first time it drops it (one line per field per
adapter, for the life of the process). docs/models.md "Generation config" has the
table.

Thinking goes to each provider's reasoning setting. A budget becomes an OpenAI
effort by :data:`EFFORT_BUDGETS`; a level becomes an Anthropic budget by
:data:`LEVEL_BUDGETS` (Anthropic's minimum is :data:`ANTHROPIC_MIN_BUDGET`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from enum import Enum
from typing import Any

from pydantic import BaseModel, TypeAdapter
from pydantic.alias_generators import to_camel

from ..core.genai import GenerateContentConfig, SafetySetting, ThinkingConfig, ThinkingLevel

logger = logging.getLogger(__name__)

Fields = dict[str, Any]  # raw wire JSON: request fields of one provider
Rule = str | Callable[[Any, str, "ConfigMapping"], Fields]
"""How one config field maps: a wire key taking the value as it is, or a function of
(value, model name, the mapping: to drop a part) returning the fields (empty when it
has nothing to send)."""

EFFORT_BUDGETS: tuple[tuple[int, str], ...] = ((1024, "low"), (8192, "medium"))
"""A thinking budget up to each bound is that OpenAI effort; above the last, ``"high"``.
``0`` (thinking off) is ``"minimal"``; ``-1`` (the model decides) sends none."""

LEVEL_BUDGETS: Mapping[ThinkingLevel, int] = {
    ThinkingLevel.MINIMAL: 1024, ThinkingLevel.LOW: 1024,
    ThinkingLevel.MEDIUM: 8192, ThinkingLevel.HIGH: 24576,
}
"""The Anthropic thinking budget of a thinking level."""

ANTHROPIC_MIN_BUDGET = 1024
"""Anthropic's smallest ``budget_tokens``: a smaller budget is raised to it."""

_JSON = "application/json"


class ConfigMapping:
    """How one adapter's wire format takes a :class:`GenerateContentConfig`.

    Args:
        adapter: the adapter's name in log lines (``"anthropic"``).
        rules: config field name → :data:`Rule`; a field without a rule is dropped.
    """

    def __init__(self, adapter: str, rules: Mapping[str, Rule]) -> None:
        self.adapter = adapter
        self._rules = dict(rules)
        self._logged: set[str] = set()

    def fields(self, config: GenerateContentConfig | None, model: str = "") -> Fields:
        """The request fields ``config`` maps to for ``model`` (empty for ``None``)."""
        out: Fields = {}
        if config is None:
            return out
        for name, value in config.given().items():
            rule = self._rules.get(name)
            if rule is None:
                self.drop(name)
            elif isinstance(rule, str):
                out[rule] = wire(value)
            else:
                out.update(rule(value, model, self))
        return out

    def drop(self, name: str) -> None:
        """Note that ``name`` was left out (a debug line the first time)."""
        if name not in self._logged:
            self._logged.add(name)
            logger.debug("generate_content_config.%s has no %s equivalent: not sent",
                         name, self.adapter)


def wire(value: Any) -> Any:  # raw wire JSON
    """A config value as JSON: enums by value, genai models by their camelCase fields."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True, exclude_none=True)
    if isinstance(value, list):
        return [wire(item) for item in value]
    return value


def json_schema(schema: Any) -> dict[str, Any]:  # raw JSON schema
    """A response schema as JSON Schema: a dict as it is, else a type (a pydantic model)'s."""
    if isinstance(schema, dict):
        return schema
    result: dict[str, Any] = TypeAdapter(schema).json_schema()
    return result


def effort(thinking: ThinkingConfig) -> str | None:
    """The OpenAI reasoning effort of ``thinking`` (``None``: the model's default)."""
    level = thinking.thinking_level
    if level is not None and level is not ThinkingLevel.THINKING_LEVEL_UNSPECIFIED:
        return str(level.value).lower()
    budget = thinking.thinking_budget
    if budget is None or budget < 0:
        return None
    if budget == 0:
        return "minimal"
    return next((name for bound, name in EFFORT_BUDGETS if budget <= bound), "high")


def anthropic_budget(thinking: ThinkingConfig) -> int | None:
    """The Anthropic thinking budget of ``thinking``: ``0`` off, ``None`` nothing to send."""
    budget = thinking.thinking_budget
    level = thinking.thinking_level
    if budget is None and level is not None:
        budget = LEVEL_BUDGETS.get(level)
    if budget is None or budget < 0:
        return None
    return budget and max(budget, ANTHROPIC_MIN_BUDGET)


# -- per wire format -----------------------------------------------------------------------------

def _chat_effort(thinking: ThinkingConfig, model: str, mapping: ConfigMapping) -> Fields:
    if thinking.include_thoughts is not None:
        mapping.drop("thinking_config.include_thoughts")
    chosen = effort(thinking)
    return {"reasoning_effort": chosen} if chosen else {}


def _responses_reasoning(thinking: ThinkingConfig, model: str, mapping: ConfigMapping) -> Fields:
    reasoning: Fields = {}
    chosen = effort(thinking)
    if chosen:
        reasoning["effort"] = chosen
    if thinking.include_thoughts:
        reasoning["summary"] = "auto"
    return {"reasoning": reasoning} if reasoning else {}


def _anthropic_thinking(thinking: ThinkingConfig, model: str, mapping: ConfigMapping) -> Fields:
    if thinking.include_thoughts is not None:
        mapping.drop("thinking_config.include_thoughts")
    budget = anthropic_budget(thinking)
    if budget is None:
        if thinking.thinking_budget is not None or thinking.thinking_level is not None:
            mapping.drop("thinking_config.thinking_budget=-1")
        return {}
    if budget == 0:
        return {"thinking": {"type": "disabled"}}
    return {"thinking": {"type": "enabled", "budget_tokens": budget}}


def _chat_tokens(value: int, model: str, mapping: ConfigMapping) -> Fields:
    # OpenAI's reasoning models refuse ``max_tokens``; other servers may not know the new name.
    reasoning = model.lower().startswith(("o1", "o3", "o4", "gpt-5"))
    return {"max_completion_tokens" if reasoning else "max_tokens": value}


def _anthropic_top_k(value: float, model: str, mapping: ConfigMapping) -> Fields:
    return {"top_k": int(value)}  # genai's is a float; Anthropic's an integer


def _chat_format(mime: str, model: str, mapping: ConfigMapping) -> Fields:
    if mime == _JSON:
        return {"response_format": {"type": "json_object"}}
    if mime != "text/plain":
        mapping.drop(f"response_mime_type={mime}")
    return {}


def _chat_schema(schema: Any, model: str, mapping: ConfigMapping) -> Fields:
    return {"response_format": {"type": "json_schema", "json_schema": {
        "name": "response", "schema": json_schema(schema)}}}


def _responses_format(mime: str, model: str, mapping: ConfigMapping) -> Fields:
    if mime == _JSON:
        return {"text": {"format": {"type": "json_object"}}}
    if mime != "text/plain":
        mapping.drop(f"response_mime_type={mime}")
    return {}


def _responses_schema(schema: Any, model: str, mapping: ConfigMapping) -> Fields:
    return {"text": {"format": {"type": "json_schema", "name": "response",
                                "schema": json_schema(schema)}}}


def _safety(settings: list[SafetySetting], model: str, mapping: ConfigMapping) -> Fields:
    return {"safetySettings": wire(settings)}


def _gemini_schema(schema: Any, model: str, mapping: ConfigMapping) -> Fields:
    # A dict is genai's Schema (OpenAPI subset); a type is described as JSON Schema.
    if isinstance(schema, dict):
        return {"responseSchema": schema}
    return {"responseJsonSchema": json_schema(schema)}


def _camel(*names: str) -> dict[str, Rule]:
    return {name: to_camel(name) for name in names}


_GEMINI_LIVE_FIELDS = ("temperature", "top_p", "top_k", "candidate_count", "max_output_tokens",
                       "presence_penalty", "frequency_penalty", "seed", "speech_config",
                       "media_resolution", "thinking_config")

CHAT_COMPLETIONS = ConfigMapping("OpenAI Chat Completions", {
    "temperature": "temperature", "top_p": "top_p", "seed": "seed",
    "presence_penalty": "presence_penalty", "frequency_penalty": "frequency_penalty",
    "stop_sequences": "stop", "candidate_count": "n", "response_logprobs": "logprobs",
    "logprobs": "top_logprobs", "max_output_tokens": _chat_tokens,
    "response_mime_type": _chat_format, "response_schema": _chat_schema,
    "response_json_schema": _chat_schema, "thinking_config": _chat_effort,
})
"""``models/openai.py``: OpenAI and the OpenAI-compatible servers."""

RESPONSES = ConfigMapping("OpenAI Responses", {
    "temperature": "temperature", "top_p": "top_p", "max_output_tokens": "max_output_tokens",
    "logprobs": "top_logprobs", "response_mime_type": _responses_format,
    "response_schema": _responses_schema, "response_json_schema": _responses_schema,
    "thinking_config": _responses_reasoning,
})
"""``models/openai_responses.py``."""

ANTHROPIC = ConfigMapping("Anthropic Messages", {
    "temperature": "temperature", "top_p": "top_p", "top_k": _anthropic_top_k,
    "max_output_tokens": "max_tokens", "stop_sequences": "stop_sequences",
    "thinking_config": _anthropic_thinking,
})
"""``models/anthropic.py``."""

GEMINI = ConfigMapping("Gemini", {
    **_camel(*_GEMINI_LIVE_FIELDS, "stop_sequences", "response_logprobs", "logprobs",
             "response_mime_type", "response_json_schema", "routing_config",
             "model_selection_config", "tool_config", "labels", "cached_content",
             "response_modalities", "audio_timestamp", "image_config",
             "enable_enhanced_civic_answers", "model_armor_config", "service_tier"),
    "safety_settings": _safety, "response_schema": _gemini_schema,
})
"""``models/gemini.py`` (Gemini API and Vertex AI): camelCase; the adapter puts each key
in ``generationConfig`` or at the top of the request, as it does a ``config`` key."""

GEMINI_LIVE = ConfigMapping("Gemini Live", _camel(*_GEMINI_LIVE_FIELDS))
"""``models/gemini_live.py``: the setup's ``generationConfig``."""

OPENAI_REALTIME = ConfigMapping("OpenAI Realtime", {"max_output_tokens": "max_output_tokens"})
"""``models/openai_realtime.py``: the ``session.update`` session (GA: no sampling fields)."""
