"""Content types shared by every layer: content, parts, function calls, usage.

They are plain slotted dataclasses: cheap to build on the per-chunk path and
serialised by pydantic (``TypeAdapter``) where they are persisted. They take the
arguments ADK's ``google.genai.types`` take (``Part.from_text(text=...)``,
``UserContent("hi")``), and the generation settings of genai (``GenerateContentConfig``
and its parts, defined in :mod:`headwater.genai`) are re-exported here, so
``from headwater import types`` replaces ``from google.genai import types``
(docs/models.md "Generation config").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from pydantic import ConfigDict, TypeAdapter

from .genai import GenerateContentConfig as GenerateContentConfig
from .genai import HarmBlockMethod as HarmBlockMethod
from .genai import HarmBlockThreshold as HarmBlockThreshold
from .genai import HarmCategory as HarmCategory
from .genai import SafetySetting as SafetySetting
from .genai import ThinkingConfig as ThinkingConfig
from .genai import ThinkingLevel as ThinkingLevel

Role = Literal["user", "model", "system"]

_BYTES_AS_BASE64 = ConfigDict(ser_json_bytes="base64", val_json_bytes="base64")


_ADAPTERS: dict[str, TypeAdapter[Any]] = {}


def _adapter(cls: type[Any]) -> TypeAdapter[Any]:
    adapter = _ADAPTERS.get(cls.__qualname__)
    if adapter is None:
        adapter = _ADAPTERS[cls.__qualname__] = TypeAdapter(cls)
    return adapter


class _Dumps:
    """genai's ``model_dump`` / ``model_dump_json`` on headwater's dataclasses (ADK samples
    print ``event.content.model_dump(exclude_none=True)``); pydantic serialises them."""

    __slots__ = ()

    def model_dump(self, *, mode: Literal["python", "json"] = "python",
                   exclude_none: bool = False) -> dict[str, Any]:
        """The fields as a dict (``mode="json"``: JSON-safe values, bytes as base64)."""
        dumped: dict[str, Any] = _adapter(type(self)).dump_python(
            self, mode=mode, exclude_none=exclude_none)
        return dumped

    def model_dump_json(self, *, exclude_none: bool = False) -> str:
        """The fields as a JSON string."""
        return _adapter(type(self)).dump_json(self, exclude_none=exclude_none).decode()



@dataclass(slots=True)
class Blob:
    """Inline binary data (audio, image, …) with its MIME type."""

    __pydantic_config__: ClassVar[ConfigDict] = _BYTES_AS_BASE64

    mime_type: str
    data: bytes


@dataclass(slots=True)
class FunctionCall:
    """A model's request to run a tool.

    Attributes:
        id: the call id, unique within a session; responses refer to it. A call
            built without one (``FunctionCall(name=..., args=...)``, as in genai)
            gets a fresh id when its model event is recorded.
        name: the tool name.
        args: the parsed arguments (raw JSON object).
    """

    id: str = ""
    name: str = ""
    args: dict[str, Any] = field(default_factory=dict)  # raw JSON object


@dataclass(slots=True)
class FunctionResponse:
    """A tool's result for the call with the same ``id``.

    ``response`` is a JSON object; error results carry an ``"error"`` key. ``id``
    must be the call's: a response without one (as genai allows) matches no call.
    """

    id: str = ""
    name: str = ""
    response: dict[str, Any] = field(default_factory=dict)  # raw JSON object


@dataclass(slots=True)
class Part(_Dumps):
    """One part of a content: text (maybe a thought), a call, a response or a blob.

    ``thought_signature`` is the provider's opaque signature of a thought part
    (Anthropic's thinking ``signature``), sent back unchanged in later requests.
    """

    __pydantic_config__: ClassVar[ConfigDict] = _BYTES_AS_BASE64

    text: str | None = None
    thought: bool = False
    thought_signature: str | None = None
    function_call: FunctionCall | None = None
    function_response: FunctionResponse | None = None
    inline_data: Blob | None = None

    @staticmethod
    def from_text(text: str) -> Part:
        """A text part (``Part.from_text(text="hi")``, as in genai)."""
        return Part(text=text)

    @staticmethod
    def from_bytes(*, data: bytes, mime_type: str) -> Part:
        """An inline binary part (an image, audio, a PDF)."""
        return Part(inline_data=Blob(mime_type=mime_type, data=data))

    @staticmethod
    def from_function_call(*, name: str, args: dict[str, Any]) -> Part:
        """A function call part; its id is given when it is recorded (see :class:`FunctionCall`)."""
        return Part(function_call=FunctionCall(name=name, args=args))

    @staticmethod
    def from_function_response(*, name: str, response: dict[str, Any], id: str = "") -> Part:
        """A function response part; ``id`` is the call's (genai leaves it out; a response
        without it matches no call)."""
        return Part(function_response=FunctionResponse(id=id, name=name, response=response))


@dataclass(slots=True)
class Content(_Dumps):
    """A message: a role and its parts."""

    __pydantic_config__: ClassVar[ConfigDict] = _BYTES_AS_BASE64

    role: Role = "user"
    parts: list[Part] = field(default_factory=list)

    @staticmethod
    def from_text(text: str, role: Role = "user") -> Content:
        """A content with one text part."""
        return Content(role=role, parts=[Part(text=text)])

    @property
    def text(self) -> str:
        """The concatenated answer text (thought parts excluded)."""
        return "".join(p.text for p in self.parts if p.text is not None and not p.thought)

    @property
    def thought_text(self) -> str:
        """The concatenated thought text."""
        return "".join(p.text for p in self.parts if p.text is not None and p.thought)

    @property
    def function_calls(self) -> list[FunctionCall]:
        """The function calls among the parts, in order."""
        return [p.function_call for p in self.parts if p.function_call is not None]

    @property
    def function_responses(self) -> list[FunctionResponse]:
        """The function responses among the parts, in order."""
        return [p.function_response for p in self.parts if p.function_response is not None]


PartLike = str | Part
"""What :func:`UserContent` and :func:`ModelContent` take for a part: a part, or its text."""


def _parts(parts: PartLike | Sequence[PartLike]) -> list[Part]:
    items = [parts] if isinstance(parts, str | Part) else list(parts)
    for item in items:
        if not isinstance(item, str | Part):
            raise TypeError(f"a content part is a Part or a str, not {type(item).__name__}")
    return [Part(text=item) if isinstance(item, str) else item for item in items]


def UserContent(parts: PartLike | Sequence[PartLike]) -> Content:  # genai's class name
    """A user content of ``parts``: a part, a text, or a list of them (genai's ``UserContent``).

    Raises:
        TypeError: a part that is neither a :class:`Part` nor a ``str``.
    """
    return Content(role="user", parts=_parts(parts))


def ModelContent(parts: PartLike | Sequence[PartLike]) -> Content:  # genai's class name
    """A model content of ``parts``: a part, a text, or a list of them (genai's ``ModelContent``).

    Raises:
        TypeError: a part that is neither a :class:`Part` nor a ``str``.
    """
    return Content(role="model", parts=_parts(parts))


@dataclass(slots=True)
class Usage:
    """Token usage of one model call (or a total over a run)."""

    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    cached_input_tokens: int = 0
    reasoning_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            total_tokens=self.total_tokens + other.total_tokens,
            cached_input_tokens=self.cached_input_tokens + other.cached_input_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
        )


def as_content(message: str | Content, role: Role = "user") -> Content:
    """Accept a plain string where a content is expected."""
    if isinstance(message, str):
        return Content.from_text(message, role=role)
    return message


@dataclass(slots=True)
class ToolDeclaration:
    """What a model is told about a tool: name, description, JSON schema of the arguments."""

    name: str
    description: str
    parameters: dict[str, Any] = field(default_factory=dict)  # raw JSON schema
