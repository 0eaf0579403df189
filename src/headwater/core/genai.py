"""Generation settings under the names of ``google.genai.types`` (ADK's types), without genai.

An ADK agent moves over by changing ``from google.genai import types`` to
``from headwater import types``: these classes carry genai's names, fields and
enum values, so ``types.GenerateContentConfig(temperature=0.2,
safety_settings=[types.SafetySetting(...)], thinking_config=types.ThinkingConfig(...))``
is written as before. They are re-exported by :mod:`headwater.types`; each
model adapter maps them onto its provider's request (``headwater.models.generation``,
docs/models.md "Generation config").

Like genai's they are pydantic models: fields are snake_case, camelCase aliases
are accepted, nested settings may be given as dicts, and a field genai does not
have is refused (``pydantic.ValidationError``: a typo is not silently ignored).
Enums compare equal to their string values and accept them in any case.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

__all__ = ("GenerateContentConfig", "HarmBlockMethod", "HarmBlockThreshold", "HarmCategory",
           "SafetySetting", "ThinkingConfig", "ThinkingLevel")


class _CaseInsensitiveEnum(StrEnum):
    """A string enum that also takes its values in another case (``"block_none"``)."""

    @classmethod
    def _missing_(cls, value: object) -> Any:
        if isinstance(value, str):
            for member in cls:
                if member.value.lower() == value.lower():
                    return member
        return None


class HarmCategory(_CaseInsensitiveEnum):
    """A harm category a :class:`SafetySetting` blocks (genai's names and values)."""

    HARM_CATEGORY_UNSPECIFIED = "HARM_CATEGORY_UNSPECIFIED"
    HARM_CATEGORY_HARASSMENT = "HARM_CATEGORY_HARASSMENT"
    HARM_CATEGORY_HATE_SPEECH = "HARM_CATEGORY_HATE_SPEECH"
    HARM_CATEGORY_SEXUALLY_EXPLICIT = "HARM_CATEGORY_SEXUALLY_EXPLICIT"
    HARM_CATEGORY_DANGEROUS_CONTENT = "HARM_CATEGORY_DANGEROUS_CONTENT"
    HARM_CATEGORY_CIVIC_INTEGRITY = "HARM_CATEGORY_CIVIC_INTEGRITY"
    HARM_CATEGORY_JAILBREAK = "HARM_CATEGORY_JAILBREAK"
    HARM_CATEGORY_IMAGE_HATE = "HARM_CATEGORY_IMAGE_HATE"
    HARM_CATEGORY_IMAGE_DANGEROUS_CONTENT = "HARM_CATEGORY_IMAGE_DANGEROUS_CONTENT"
    HARM_CATEGORY_IMAGE_HARASSMENT = "HARM_CATEGORY_IMAGE_HARASSMENT"
    HARM_CATEGORY_IMAGE_SEXUALLY_EXPLICIT = "HARM_CATEGORY_IMAGE_SEXUALLY_EXPLICIT"


class HarmBlockThreshold(_CaseInsensitiveEnum):
    """From which harm probability a :class:`SafetySetting` blocks (genai's names and values)."""

    HARM_BLOCK_THRESHOLD_UNSPECIFIED = "HARM_BLOCK_THRESHOLD_UNSPECIFIED"
    BLOCK_LOW_AND_ABOVE = "BLOCK_LOW_AND_ABOVE"
    BLOCK_MEDIUM_AND_ABOVE = "BLOCK_MEDIUM_AND_ABOVE"
    BLOCK_ONLY_HIGH = "BLOCK_ONLY_HIGH"
    BLOCK_NONE = "BLOCK_NONE"
    OFF = "OFF"


class HarmBlockMethod(_CaseInsensitiveEnum):
    """How a :class:`SafetySetting` scores harm (Vertex AI only; genai's names and values)."""

    HARM_BLOCK_METHOD_UNSPECIFIED = "HARM_BLOCK_METHOD_UNSPECIFIED"
    SEVERITY = "SEVERITY"
    PROBABILITY = "PROBABILITY"


class ThinkingLevel(_CaseInsensitiveEnum):
    """How much a model thinks, as a level (genai's names and values)."""

    THINKING_LEVEL_UNSPECIFIED = "THINKING_LEVEL_UNSPECIFIED"
    MINIMAL = "MINIMAL"
    LOW = "LOW"
    MEDIUM = "MEDIUM"
    HIGH = "HIGH"


class _GenaiModel(BaseModel):
    """genai's model conventions: snake_case fields, camelCase aliases, no unknown field."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid",
                              protected_namespaces=(), arbitrary_types_allowed=True)


class ThinkingConfig(_GenaiModel):
    """A model's built-in thinking.

    Attributes:
        include_thoughts: return the thoughts (as thought parts) when the model has them.
        thinking_budget: thinking tokens; ``0`` turns thinking off, ``-1`` lets the
            model decide.
        thinking_level: a level instead of a budget (newer Gemini models).

    Each adapter maps these onto its provider's reasoning setting (docs/models.md).
    """

    include_thoughts: bool | None = None
    thinking_budget: int | None = None
    thinking_level: ThinkingLevel | None = None


class SafetySetting(_GenaiModel):
    """Block ``category`` from ``threshold`` on (Gemini and Vertex AI only).

    Attributes:
        category: the harm category.
        threshold: from which probability to block.
        method: how harm is scored (Vertex AI only).
    """

    category: HarmCategory | None = None
    threshold: HarmBlockThreshold | None = None
    method: HarmBlockMethod | None = None


class GenerateContentConfig(_GenaiModel):
    """Generation settings of a model call: genai's ``GenerateContentConfig``, field for field.

    Give it to an agent as ``Agent(generate_content_config=...)``. Every adapter maps
    the fields its provider has (docs/models.md "Generation config"); a field a
    provider has no equivalent for is left out of that provider's request, with one
    debug log line per field and adapter. The fields ADK samples use are typed;
    genai's others are accepted and carried as given (``Any``: genai's nested
    types, or dicts of their fields).

    As in ADK, an agent refuses ``tools`` (use ``Agent(tools=...)``),
    ``system_instruction`` (``Agent(instruction=...)``) and ``response_schema``
    (the agent's output schema) here.
    """

    temperature: float | None = None
    top_p: float | None = None
    top_k: float | None = None
    candidate_count: int | None = None
    max_output_tokens: int | None = None
    stop_sequences: list[str] | None = None
    response_logprobs: bool | None = None
    logprobs: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    seed: int | None = None
    response_mime_type: str | None = None
    response_schema: Any = None  # a JSON schema dict or a pydantic model class
    response_json_schema: Any = None  # raw JSON schema
    safety_settings: list[SafetySetting] | None = None
    thinking_config: ThinkingConfig | None = None
    labels: dict[str, str] | None = None
    cached_content: str | None = None
    response_modalities: list[str] | None = None
    audio_timestamp: bool | None = None
    enable_enhanced_civic_answers: bool | None = None
    system_instruction: Any = None  # refused by an agent, as in ADK
    tools: Any = None  # refused by an agent, as in ADK
    # genai's other fields, carried as given (raw JSON or genai-shaped objects):
    http_options: Any = None
    should_return_http_response: bool | None = None
    routing_config: Any = None
    model_selection_config: Any = None
    tool_config: Any = None
    media_resolution: Any = None
    speech_config: Any = None
    automatic_function_calling: Any = None
    image_config: Any = None
    model_armor_config: Any = None
    service_tier: Any = None
    audio_transcription_config: Any = None

    def given(self) -> dict[str, Any]:
        """The fields set to something other than ``None``, by name, in declaration order."""
        return {name: value for name in type(self).model_fields
                if (value := getattr(self, name)) is not None}
