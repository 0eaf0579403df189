"""The model interface: requests, responses and ``BaseLlm`` (DESIGN.md §3)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import ErrorCode
from ..types import Content, ToolDeclaration, Usage

if TYPE_CHECKING:
    from .connection import BaseLlmConnection


@dataclass(slots=True)
class LlmRequest:
    """Everything one model call needs, built from persisted history.

    Attributes:
        model: the model name the adapter should ask for.
        system_instruction: the agent's instruction, if any.
        contents: the conversation, oldest first; never holds a partial.
        tools: declarations of the tools the model may call.
        config: provider generation settings (temperature, max tokens, …).
    """

    model: str = ""
    system_instruction: str | None = None
    contents: list[Content] = field(default_factory=list)
    tools: list[ToolDeclaration] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)  # raw provider options


@dataclass(slots=True)
class LlmResponse:
    """One item a model yields: a partial delta or the one aggregate of a call.

    The contract (checked by ``headwater.testing.check_stream_contract``): zero
    or more partials, then exactly one non-partial; partial texts concatenate to
    the final text; only the final carries function calls and usage.
    """

    content: Content | None = None
    partial: bool = False
    finish_reason: str | None = None
    usage: Usage | None = None
    error_code: ErrorCode | None = None
    error_message: str | None = None
    turn_complete: bool = False
    interrupted: bool = False


class BaseLlm(ABC):
    """A model adapter.

    Subclasses implement :meth:`generate_content`. The stream they return holds
    provider resources (an HTTP response): callers consume it under
    ``contextlib.aclosing`` so that ``break``, errors and cancellation close it.
    """

    model: str

    def __init__(self, model: str) -> None:
        self.model = model

    @abstractmethod
    def generate_content(
        self, request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        """Run one model call.

        Args:
            request: the request; not modified.
            stream: ``True`` for partials then one aggregate; ``False`` for one
                aggregate only.

        Raises:
            ModelError: transport failures (``ProviderTruncated`` after the
                first chunk, ``ModelHTTPError`` before it, …). In-band provider
                errors are a final response with ``error_code`` instead.
        """

    live_emulation: bool = False
    """Whether :meth:`connect` may emulate a live session over streamed calls."""

    def connect(self, request: LlmRequest) -> BaseLlmConnection:
        """Open a live (BIDI) connection.

        Models that only stream (``live_emulation = True``) get an
        :class:`~headwater.models.connection.EmulatedLlmConnection`; a model with a
        native live API overrides this.

        Raises:
            NotImplementedError: this model has no live connection.
        """
        if self.live_emulation:
            from .connection import EmulatedLlmConnection

            return EmulatedLlmConnection(self, request)
        raise NotImplementedError(
            f"model {self.model!r} ({type(self).__name__}) does not support live (BIDI) "
            "sessions; use run_async with StreamingMode.NONE or SSE"
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r})"
