"""The shapes of an agent's callbacks, as ``Protocol``s a type checker holds you to.

Callbacks are called with keyword arguments, may be sync or async, and return
``None`` to let the run go on unchanged. A callback whose parameter names differ
from these (``llm_requests=`` for ``llm_request=``) is refused by mypy where
the agent is built.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, Protocol

from ..core.context import CallbackContext
from ..core.types import Content
from ..models.base import LlmRequest, LlmResponse
from ..tools.context import ToolContext
from ..tools.function_tool import BaseTool

JsonObject = dict[str, Any]  # raw JSON object


class InstructionProvider(Protocol):
    """``(context) -> str``: the system instruction, computed per model call."""

    def __call__(self, context: CallbackContext, /) -> str | Awaitable[str]: ...


class BeforeAgentCallback(Protocol):
    """Runs before an agent's run (any kind); a returned ``Content`` is the agent's reply
    and the agent does not run (its after-agent callbacks neither)."""

    def __call__(self, *, callback_context: CallbackContext
                 ) -> Content | Awaitable[Content | None] | None: ...


class AfterAgentCallback(Protocol):
    """Runs after an agent's run (not after one that ended in an error or ended the
    run); a returned ``Content`` is one more reply of the agent."""

    def __call__(self, *, callback_context: CallbackContext
                 ) -> Content | Awaitable[Content | None] | None: ...


class BeforeModelCallback(Protocol):
    """Runs before a model call; a returned ``LlmResponse`` replaces the call.

    In live runs it runs once, on the request that opens the connection (it may
    change it); a returned response is emitted as the model's first turn.
    """

    def __call__(self, *, callback_context: CallbackContext, llm_request: LlmRequest
                 ) -> LlmResponse | Awaitable[LlmResponse | None] | None: ...


class AfterModelCallback(Protocol):
    """Runs on each model aggregate; a returned ``LlmResponse`` replaces it."""

    def __call__(self, *, callback_context: CallbackContext, llm_response: LlmResponse
                 ) -> LlmResponse | Awaitable[LlmResponse | None] | None: ...


class BeforeToolCallback(Protocol):
    """Runs before a tool call; a returned dict is the result and the tool does not run."""

    def __call__(self, *, tool: BaseTool, args: JsonObject, tool_context: ToolContext
                 ) -> JsonObject | Awaitable[JsonObject | None] | None: ...


class AfterToolCallback(Protocol):
    """Runs after a tool call with the tool's raw return value (ADK's: a ``str``
    stays a ``str``; an error is the error result); a returned value (not ``None``)
    replaces it. A value that is not a dict is wrapped ``{"result": value}`` after."""

    def __call__(self, *, tool: BaseTool, args: JsonObject, tool_context: ToolContext,
                 tool_response: Any) -> Any:
        ...
