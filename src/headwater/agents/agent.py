"""``Agent``: the configuration of an LLM agent — a model, an instruction, tools, callbacks.

An agent holds no run state and runs nothing itself: the runner drives it
through the step engine (``headwater.agents.flow``), in every mode.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, TypeVar

from ..errors import UserError
from ..models.base import BaseLlm
from ..models.registry import get_model
from ..tools.function_tool import BaseTool, ToolLike, as_tool
from ..tools.middleware import ToolMiddleware
from .callbacks import (
    AfterModelCallback,
    AfterToolCallback,
    BeforeModelCallback,
    BeforeToolCallback,
    InstructionProvider,
)

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")
_C = TypeVar("_C")


def _as_tuple(callbacks: _C | Sequence[_C] | None) -> tuple[_C, ...]:
    if callbacks is None:
        return ()
    if isinstance(callbacks, Sequence):
        return tuple(callbacks)
    return (callbacks,)


class Agent:
    """An LLM agent's configuration.

    Args:
        name: identifier; the author of the agent's events.
        model: a model object or a string such as ``"openai:gpt-4o-mini"``,
            resolved on first use.
        instruction: the system instruction, or a (sync or async) callable of
            the :class:`~headwater.context.CallbackContext` returning it.
        description: what the agent does (for other agents and UIs).
        tools: tools or plain functions.
        before_model_callback: ``(callback_context=, llm_request=)``; a
            returned ``LlmResponse`` replaces the model call.
        after_model_callback: ``(callback_context=, llm_response=)``; a
            returned ``LlmResponse`` replaces the aggregate.
        before_tool_callback: ``(tool=, args=, tool_context=)``; a returned
            dict is the result and the tool does not run.
        after_tool_callback: ``(tool=, args=, tool_context=, tool_response=)``;
            a returned dict replaces the result.
        generate_config: provider options passed in ``LlmRequest.config``.
        tool_middleware: async wrappers around every tool call, outermost first;
            each sees exactly one final value per call (see ``headwater.tools.middleware``).

    Each callback argument also takes a list, tried in order until one returns
    something. Their shapes are the ``Protocol``s of ``headwater.agents.callbacks``.

    Raises:
        UserError: a bad name, two tools with one name, or a tool whose
            signature cannot be described.
    """

    def __init__(
        self,
        *,
        name: str,
        model: str | BaseLlm,
        instruction: str | InstructionProvider = "",
        description: str = "",
        tools: Sequence[ToolLike] = (),
        before_model_callback: BeforeModelCallback | Sequence[BeforeModelCallback] | None = None,
        after_model_callback: AfterModelCallback | Sequence[AfterModelCallback] | None = None,
        before_tool_callback: BeforeToolCallback | Sequence[BeforeToolCallback] | None = None,
        after_tool_callback: AfterToolCallback | Sequence[AfterToolCallback] | None = None,
        generate_config: dict[str, Any] | None = None,
        tool_middleware: Sequence[ToolMiddleware] = (),
    ) -> None:
        if not _NAME.match(name) or name == "user":
            raise UserError(f"agent name {name!r} must be an identifier other than 'user'")
        self.name = name
        self._model = model
        self.instruction = instruction
        self.description = description
        self.tools: tuple[BaseTool, ...] = tuple(as_tool(t) for t in tools)
        by_name: dict[str, BaseTool] = {}
        for t in self.tools:
            if t.name in by_name:
                raise UserError(f"agent {name!r} has two tools named {t.name!r}")
            by_name[t.name] = t
        self.tools_by_name: Mapping[str, BaseTool] = MappingProxyType(by_name)
        self.before_model_callbacks = _as_tuple(before_model_callback)
        self.after_model_callbacks = _as_tuple(after_model_callback)
        self.before_tool_callbacks = _as_tuple(before_tool_callback)
        self.after_tool_callbacks = _as_tuple(after_tool_callback)
        self.generate_config: Mapping[str, Any] = MappingProxyType(dict(generate_config or {}))
        self.tool_middleware: tuple[ToolMiddleware, ...] = tuple(tool_middleware)

    @property
    def model(self) -> BaseLlm:
        """The resolved model (a model string is resolved once, on first use)."""
        if not isinstance(self._model, BaseLlm):
            self._model = get_model(self._model)
        return self._model

    @model.setter
    def model(self, model: str | BaseLlm) -> None:
        self._model = model

    def __repr__(self) -> str:
        return f"Agent(name={self.name!r}, model={self._model!r})"
