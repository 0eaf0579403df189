"""``Agent``: the configuration of an LLM agent — a model, an instruction, tools, callbacks.

An agent holds no run state and runs nothing itself: the runner drives it
through the step engine (``headwater.agents.flow``), in every mode. With
sub-agents it is the root of a tree (``headwater.agents.base``) and may hand
the conversation over with ``transfer_to_agent`` (docs/multi-agent.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from pydantic import BaseModel

from ..core.errors import UserError
from ..core.genai import GenerateContentConfig
from ..models.base import BaseLlm
from ..models.registry import check_model, get_model
from ..planners import BasePlanner
from ..tools.function_tool import BaseTool, ToolLike, as_tool
from ..tools.middleware import ToolMiddleware
from ..tools.toolset import BaseToolset
from .base import BaseAgent, as_callbacks, check_name
from .callbacks import (
    AfterAgentCallback,
    AfterModelCallback,
    AfterToolCallback,
    BeforeAgentCallback,
    BeforeModelCallback,
    BeforeToolCallback,
    InstructionProvider,
)

_REFUSED_CONFIG = (("tools", "All tools must be set via Agent(tools=...)"),
                   ("system_instruction",
                    "The system instruction must be set via Agent(instruction=...)"),
                   ("response_schema", "The response schema must be set via the agent's "
                                       "output schema"))


def _content_config(config: GenerateContentConfig | Mapping[str, Any] | None, agent: str
                    ) -> GenerateContentConfig | None:
    """``Agent(generate_content_config=...)`` checked as ADK checks it.

    Raises:
        UserError: not a config (or a dict of its fields), or a field ADK refuses there.
    """
    if config is None:
        return None
    if isinstance(config, Mapping):
        config = GenerateContentConfig.model_validate(dict(config))
    if not isinstance(config, GenerateContentConfig):
        raise UserError(f"agent {agent!r}: generate_content_config is a "
                        f"headwater.types.GenerateContentConfig, not {type(config).__name__}")
    for name, what in _REFUSED_CONFIG:
        if getattr(config, name) is not None:
            raise UserError(f"agent {agent!r}: generate_content_config.{name} is refused. "
                            f"{what}.")
    return config


def _checked_planner(planner: BasePlanner | None, agent: str) -> BasePlanner | None:
    """``Agent(planner=...)``, checked.

    Raises:
        UserError: not a ``headwater.planners`` planner.
    """
    if planner is not None and not isinstance(planner, BasePlanner):
        raise UserError(f"agent {agent!r}: planner={planner!r} is not a headwater.planners "
                        "planner (BuiltInPlanner, PlanReActPlanner or a BasePlanner)")
    return planner


def _whose(owner: BaseTool | BaseToolset) -> str:
    """A tool as a clash names it: itself, or the toolset that brings it."""
    return repr(owner) if isinstance(owner, BaseTool) else f"the one {owner!r} brings"


class Agent(BaseAgent):
    """An LLM agent's configuration.

    Args:
        name: identifier, unique in its tree; the author of the agent's events.
        model: a model object, or a model string (``"openai:gpt-4o-mini"``,
            ``"demo"``; ``headwater.models.registry``): its shape and provider are
            checked when the agent is built, the model is built on first use (so
            a missing API key is reported then). ``None``: the model of the
            nearest LLM agent above it in its tree (ADK's ``canonical_model``);
            a runner refuses a tree where an LLM agent has none.
        instruction: the system instruction, or a (sync or async) callable of
            the :class:`~headwater.context.CallbackContext` returning it. In a
            string, ``{key}`` is filled from session state (``{key?}``: empty
            when the state has no such key); a callable's text is left as is.
        global_instruction: on the root agent of a tree: put before the
            instruction of every LLM agent of the tree (ADK's; the same forms as
            ``instruction``). Only the root's is used.
        description: what the agent does (for other agents and UIs).
        tools: tools, plain functions, and toolsets (``McpToolset``: an MCP
            server's tools, listed when the agent first needs them; docs/mcp.md).
        before_model_callback: ``(callback_context=, llm_request=)``; a
            returned ``LlmResponse`` replaces the model call.
        after_model_callback: ``(callback_context=, llm_response=)``; a
            returned ``LlmResponse`` replaces the aggregate.
        before_tool_callback: ``(tool=, args=, tool_context=)``; a returned
            value is the result and the tool does not run (the after-tool
            callbacks still do, as ADK's).
        after_tool_callback: ``(tool=, args=, tool_context=, tool_response=)``,
            ``tool_response`` being the tool's raw return value; a returned value
            replaces it. Results that are not dicts are wrapped
            ``{"result": value}`` after these callbacks (docs/tools.md).
        before_agent_callback, after_agent_callback: around each run of the
            agent (:class:`~headwater.agents.base.BaseAgent`).
        generate_config: provider options passed in ``LlmRequest.config``, as the
            provider's request names them (sent as they are).
        generate_content_config: generation settings under genai's names
            (``headwater.types.GenerateContentConfig``, or a dict of its fields),
            mapped by every adapter onto its provider's fields (docs/models.md
            "Generation config"); ``generate_config`` wins on a clash. As in ADK,
            ``tools``, ``system_instruction`` and ``response_schema`` are refused here.
        planner: a ``headwater.planners`` planner: ``BuiltInPlanner`` (the model's
            thinking, over the config's) or ``PlanReActPlanner`` (planning by
            instruction).
        tool_middleware: async wrappers around every tool call, outermost first;
            each sees exactly one final value per call (see ``headwater.tools.middleware``).
        sub_agents: agents this one may transfer to (and that may transfer
            back); each becomes its child.
        output_key: a state key the agent's final answer text is saved under
            (with the answer's event, atomically).
        output_schema: a pydantic model the final answer must be, as JSON: the
            model is told so, the answer is validated, and ``output_key`` stores
            it as ``model_dump(exclude_none=True)`` (ADK's). An answer that does
            not validate ends the run with an ``output_invalid`` error event
            (the answer text is kept). No tools, no sub-agents; transfers are
            off (ADK's rule).
        disallow_transfer_to_parent: the model is not offered its parent.
        disallow_transfer_to_peers: the model is not offered its parent's
            other sub-agents.

    Each callback argument also takes a list, tried in order until one returns
    something. Their shapes are the ``Protocol``s of ``headwater.agents.callbacks``.

    Raises:
        UserError: a bad name, a ``model`` that is not a model (the message names
            the agent and what a model may be), two tools with one name (a toolset's
            tool clashing with another is refused when the toolset is listed, or here
            when its filter names it), a tool whose signature cannot be described, or
            a refused ``generate_content_config``, a ``planner`` that is not one, or
            a tree that breaks a rule of
            :class:`~headwater.agents.base.BaseAgent` (one parent, unique names).
    """

    def __init__(
        self,
        *,
        name: str,
        model: str | BaseLlm | None = None,
        instruction: str | InstructionProvider = "",
        global_instruction: str | InstructionProvider = "",
        description: str = "",
        tools: Sequence[ToolLike | BaseToolset] = (),
        before_model_callback: BeforeModelCallback | Sequence[BeforeModelCallback] | None = None,
        after_model_callback: AfterModelCallback | Sequence[AfterModelCallback] | None = None,
        before_tool_callback: BeforeToolCallback | Sequence[BeforeToolCallback] | None = None,
        after_tool_callback: AfterToolCallback | Sequence[AfterToolCallback] | None = None,
        generate_config: dict[str, Any] | None = None,
        generate_content_config: GenerateContentConfig | Mapping[str, Any] | None = None,
        planner: BasePlanner | None = None,
        tool_middleware: Sequence[ToolMiddleware] = (),
        sub_agents: Sequence[BaseAgent] = (),
        output_key: str | None = None,
        output_schema: type[BaseModel] | None = None,
        disallow_transfer_to_parent: bool = False,
        disallow_transfer_to_peers: bool = False,
        before_agent_callback: BeforeAgentCallback | Sequence[BeforeAgentCallback] | None = None,
        after_agent_callback: AfterAgentCallback | Sequence[AfterAgentCallback] | None = None,
    ) -> None:
        self._model = None if model is None else check_model(model, agent=check_name(name))
        self.instruction = instruction
        self.global_instruction = global_instruction
        self.output_key = output_key
        self.output_schema = check_output_schema(name, output_schema, tools, sub_agents)
        off = output_schema is not None  # ADK: an output schema turns transfers off
        self.disallow_transfer_to_parent = disallow_transfer_to_parent or off
        self.disallow_transfer_to_peers = disallow_transfer_to_peers or off
        self._entries: tuple[BaseTool | BaseToolset, ...] = tuple(
            t if isinstance(t, BaseToolset) else as_tool(t) for t in tools)
        self.toolsets: tuple[BaseToolset, ...] = tuple(
            t for t in self._entries if isinstance(t, BaseToolset))
        """The agent's toolsets (their tools are in :attr:`tools` once listed)."""
        self._versions: tuple[int, ...] | None = None
        self._tools, self._by_name = self._merged(name)
        self._processors: tuple[tuple[BaseTool, ...], tuple[BaseTool, ...]] = ((), ())
        for toolset in self.toolsets:
            for declared in toolset.declared_names() or ():
                if declared in self._by_name:
                    raise UserError(f"agent {name!r} has two tools named {declared!r}: "
                                    f"{self._by_name[declared]!r} and "
                                    f"{_whose(toolset)}")
        self.before_model_callbacks = as_callbacks(before_model_callback)
        self.after_model_callbacks = as_callbacks(after_model_callback)
        self.before_tool_callbacks = as_callbacks(before_tool_callback)
        self.after_tool_callbacks = as_callbacks(after_tool_callback)
        self.generate_config: Mapping[str, Any] = MappingProxyType(dict(generate_config or {}))
        self.generate_content_config = _content_config(generate_content_config, name)
        self.planner = _checked_planner(planner, name)
        self.tool_middleware: tuple[ToolMiddleware, ...] = tuple(tool_middleware)
        # Last: the sub-agents become this agent's only once everything else is valid.
        super().__init__(name=name, description=description, sub_agents=sub_agents,
                         before_agent_callback=before_agent_callback,
                         after_agent_callback=after_agent_callback)

    @property
    def tools(self) -> tuple[BaseTool, ...]:
        """Every tool of the agent, its toolsets' included; a toolset never listed is listed
        now (blocking; the entry points open toolsets beforehand, docs/mcp.md).

        Raises:
            UserError: a toolset's tool has the name of another tool of the agent (both
                are named).
            McpUnavailableError: a toolset's server could not be started or reached.
        """
        if self.toolsets:
            for toolset in self.toolsets:
                if toolset.listed() is None:
                    toolset.list_now()
            self._refresh()
        return self._tools

    @property
    def request_processors(self) -> tuple[BaseTool, ...]:
        """The tools among :attr:`tools` that process each model request
        (``BaseTool.process_llm_request``), found again only when the tools change."""
        tools = self.tools
        of, processors = self._processors
        if of is not tools:
            processors = tuple(t for t in tools if t.processes_requests)
            self._processors = (tools, processors)
        return processors

    @property
    def tools_by_name(self) -> Mapping[str, BaseTool]:
        """:attr:`tools` by name."""
        if self.toolsets:
            self.tools  # noqa: B018 - lists and merges the toolsets' tools
        return self._by_name

    @property
    def known_tools(self) -> tuple[BaseTool, ...]:
        """The tools known without listing anything: the agent's own and those of its
        toolsets already listed (no I/O)."""
        self._refresh()
        return self._tools

    def _refresh(self) -> None:
        versions = tuple(toolset.version for toolset in self.toolsets)
        if versions != self._versions:
            self._tools, self._by_name = self._merged(self.name)
            self._versions = versions

    def _merged(self, name: str) -> tuple[tuple[BaseTool, ...], Mapping[str, BaseTool]]:
        """The tools in the order given (a toolset's where it stands), by name.

        Raises:
            UserError: two tools with one name (a toolset's own: both named).
        """
        merged: list[BaseTool] = []
        by_name: dict[str, BaseTool] = {}
        owners: dict[str, BaseTool | BaseToolset] = {}
        for entry in self._entries:
            found = (entry.listed() or ()) if isinstance(entry, BaseToolset) else (entry,)
            for t in found:
                other = owners.get(t.name)
                if other is None:
                    owners[t.name] = entry
                    by_name[t.name] = t
                    merged.append(t)
                elif isinstance(entry, BaseTool) and isinstance(other, BaseTool):
                    raise UserError(f"agent {name!r} has two tools named {t.name!r}")
                else:
                    raise UserError(f"agent {name!r} has two tools named {t.name!r}: "
                                    f"{_whose(other)} and {_whose(entry)}")
        return tuple(merged), MappingProxyType(by_name)

    @property
    def model(self) -> BaseLlm:
        """The resolved model (a model string is resolved once, on first use); without
        one of its own, the nearest LLM agent's above it (ADK's ``canonical_model``).

        Raises:
            UserError: neither the agent nor an LLM agent above it has a model.
        """
        model = self._model
        if model is None:
            return self.model_owner().model
        if not isinstance(model, BaseLlm):
            model = self._model = get_model(model)
        return model

    @model.setter
    def model(self, model: str | BaseLlm) -> None:
        self._model = check_model(model, agent=self.name)

    @property
    def canonical_model(self) -> BaseLlm:
        """:attr:`model` (ADK's name)."""
        return self.model

    def model_owner(self) -> Agent:
        """The agent whose model this one uses: itself, or the nearest LLM agent above it
        that has one.

        Raises:
            UserError: none has a model.
        """
        agent: BaseAgent | None = self
        while agent is not None:
            if isinstance(agent, Agent) and agent._model is not None:
                return agent
            agent = agent.parent_agent
        raise UserError(f"agent {self.name!r} has no model, and no LLM agent above it has "
                        "one: pass model= to it or to an agent above it")

    def __repr__(self) -> str:
        return f"Agent(name={self.name!r}, model={self._model!r})"


def check_output_schema(name: str, schema: object, tools: Sequence[object],
                        sub_agents: Sequence[BaseAgent]) -> type[BaseModel] | None:
    """``schema`` as agent ``name``'s output schema (ADK's rules: no tools, no sub-agents).

    Raises:
        UserError: not a pydantic model class, or with tools or sub-agents.
    """
    if schema is None:
        return None
    if not (isinstance(schema, type) and issubclass(schema, BaseModel)):
        raise UserError(f"agent {name!r}: output_schema must be a pydantic model class, "
                        f"not {schema!r}")
    if tools or sub_agents:
        raise UserError(f"agent {name!r}: output_schema cannot be combined with "
                        f"{'tools' if tools else 'sub_agents'} (as in ADK): the answer is the "
                        "model's JSON text; put the tools on another agent")
    return schema


def check_models(root: BaseAgent) -> None:
    """Every LLM agent of ``root``'s tree has a model, its own or one above it.

    Raises:
        UserError: one has none (named).
    """
    for agent in root.walk():
        if isinstance(agent, Agent):
            agent.model_owner()


LlmAgent = Agent
"""ADK's name for :class:`Agent` (the same class)."""
