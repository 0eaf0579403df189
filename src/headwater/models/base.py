"""The model interface: ``BaseLlm`` (docs/architecture.md).

``LlmRequest`` and ``LlmResponse`` live in their own modules and are
re-exported here, where ADK users look for them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator

from .connection import BaseLlmConnection, EmulatedLlmConnection
from .llm_request import LlmRequest as LlmRequest
from .llm_response import LlmResponse as LlmResponse


class BaseLlm(ABC):
    """A model adapter.

    Subclasses implement :meth:`generate_content`. The stream they return holds
    provider resources (an HTTP response): callers consume it under
    ``contextlib.aclosing`` so that ``break``, errors and cancellation close it.
    """

    model: str
    provider: str = ""
    """The provider's name (``openai``, ``anthropic``, ``gemini``), for messages and traces."""

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
            return EmulatedLlmConnection(self, request)
        raise NotImplementedError(
            f"model {self.model!r} ({type(self).__name__}) does not support live (BIDI) "
            "sessions; use run_async with StreamingMode.NONE or SSE"
        )

    @property
    def supports_live(self) -> bool:
        """Whether :meth:`connect` opens a live connection (native or emulated).

        Asked without opening anything, e.g. before a live run transfers to an
        agent on this model.
        """
        return self.live_emulation or type(self).connect is not BaseLlm.connect

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r})"
