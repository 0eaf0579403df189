"""``Agent``: the configuration of an LLM agent — a model, an instruction, tools, callbacks.

An agent holds no run state and runs nothing itself: the runner drives it
through the step engine (``headwater.agents.flow``), in every mode. With
sub-agents it is the root of a tree (``headwater.agents.base``) and may hand
the conversation over with ``transfer_to_agent`` (docs/multi-agent.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, TypeVar

from ..errors import UserError
from ..models.base import BaseLlm
from ..models.registry import check_model, get_model
from ..tools.function_tool import BaseTool, ToolLike, as_tool
from ..tools.middleware import ToolMiddleware
from .base import BaseAgent, check_name
from .callbacks import (
    AfterModelCallback,
    AfterToolCallback,
    BeforeModelCallback,
    BeforeToolCallback,
    InstructionProvider,
)

_C = TypeVar("_C")


def _as_tuple(callbacks: _C | Sequence[_C] | None) -> tuple[_C, ...]:
    if callbacks is None:
        return ()
    if isinstance(callbacks, Sequence):
        return tuple(callbacks)
    return (callbacks,)


class Agent(BaseAgent):
    """An LLM agent's configuration.

    Args:
        name: identifier, unique in its tree; the author of the agent's events.
        model: a model object, or a model string (``"openai:gpt-4o-mini"``,
            ``"demo"``; ``headwater.models.registry``): its shape and provider are
            checked when the agent is built, the model is built on first use (so
            a missing API key is reported then). Required: ``None`` is refused.
        instruction: the system instruction, or a (sync or async) callable of
            the :class:`~headwater.context.CallbackContext` returning it. In a
            string, ``{key}`` is filled from session state (``{key?}``: empty
            when the state has no such key); a callable's text is left as is.
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
        sub_agents: agents this one may transfer to (and that may transfer
            back); each becomes its child.
        output_key: a state key the agent's final answer text is saved under
            (with the answer's event, atomically).
        disallow_transfer_to_parent: the model is not offered its parent.
        disallow_transfer_to_peers: the model is not offered its parent's
            other sub-agents.

    Each callback argument also takes a list, tried in order until one returns
    something. Their shapes are the ``Protocol``s of ``headwater.agents.callbacks``.

    Raises:
        UserError: a bad name, a ``model`` that is not a model (the message names
            the agent and what a model may be), two tools with one name, a tool whose
            signature cannot be described, or a tree that breaks a rule of
            :class:`~headwater.agents.base.BaseAgent` (one parent, unique names).
    """

    def __init__(
        self,
        *,
        name: str,
        model: str | BaseLlm | None = None,
        instruction: str | InstructionProvider = "",
        description: str = "",
        tools: Sequence[ToolLike] = (),
        before_model_callback: BeforeModelCallback | Sequence[BeforeModelCallback] | None = None,
        after_model_callback: AfterModelCallback | Sequence[AfterModelCallback] | None = None,
        before_tool_callback: BeforeToolCallback | Sequence[BeforeToolCallback] | None = None,
        after_tool_callback: AfterToolCallback | Sequence[AfterToolCallback] | None = None,
        generate_config: dict[str, Any] | None = None,
        tool_middleware: Sequence[ToolMiddleware] = (),
        sub_agents: Sequence[BaseAgent] = (),
        output_key: str | None = None,
        disallow_transfer_to_parent: bool = False,
        disallow_transfer_to_peers: bool = False,
    ) -> None:
        self._model = check_model(model, agent=check_name(name))
        self.instruction = instruction
        self.output_key = output_key
        self.disallow_transfer_to_parent = disallow_transfer_to_parent
        self.disallow_transfer_to_peers = disallow_transfer_to_peers
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
        # Last: the sub-agents become this agent's only once everything else is valid.
        super().__init__(name=name, description=description, sub_agents=sub_agents)

    @property
    def model(self) -> BaseLlm:
        """The resolved model (a model string is resolved once, on first use)."""
        if not isinstance(self._model, BaseLlm):
            self._model = get_model(self._model)
        return self._model

    @model.setter
    def model(self, model: str | BaseLlm) -> None:
        self._model = check_model(model, agent=self.name)

    def __repr__(self) -> str:
        return f"Agent(name={self.name!r}, model={self._model!r})"
