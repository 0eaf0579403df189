"""``AgentTool``: an agent used as a tool, streaming into the outer run (docs/multi-agent.md).

As in ADK Python, the tool is declared with the agent's name and description
and one ``request: str`` parameter; the agent's final text is the call's one
result (``{"result": text}``). Unlike ADK's, the inner run is not a black box:
the executor drives the agent inside the current run (``TreeRun.drive``) on
the call's branch (``"<calling agent>:<call id>"``, under the caller's branch
if it has one), and every event of it — deltas, tool calls and results, tool
progress, the final answer — reaches the caller's stream as it happens,
authored by the inner agents. Its non-partial events are committed by the
run's one recorder under that branch (persist, then yield), and the ledger's
visibility rule keeps them out of every other agent's requests: the calling
model sees the call's result and nothing else of the inner run.
"""

from __future__ import annotations

from typing import Any

from ..core.errors import UserError
from ..core.types import ToolDeclaration
from ..tools.context import ToolContext
from ..tools.function_tool import BaseTool
from ..tools.options import ToolOptions
from .base import BaseAgent


class AgentTool(BaseTool):
    """An agent a model calls as a tool.

    Args:
        agent: the agent (any kind) the call runs; its name is the tool's name and
            its description the tool's description. It runs within the caller's
            run: its model calls count toward ``max_llm_calls``, it sees only the
            request it was given (and its own turns), and closing the run closes it.
        skip_summarization: the call's result ends the calling agent's turn as its
            final response (ADK's flag): the calling model is not asked again.
        timeout: seconds the whole inner run may take (``None``: the run's
            ``Settings.tool_timeout``).

    Raises:
        UserError: ``agent`` is not an agent.
    """

    def __init__(self, agent: BaseAgent, skip_summarization: bool = False, *,
                 timeout: float | None = None) -> None:
        if not isinstance(agent, BaseAgent):
            raise UserError(f"AgentTool takes an agent (Agent, SequentialAgent, ...), "
                            f"not {agent!r}")
        self.agent = agent
        self.name = agent.name
        self.description = agent.description
        self.skip_summarization = skip_summarization
        self.options = ToolOptions(timeout=timeout)
        self._declaration = ToolDeclaration(
            name=self.name, description=self.description,
            parameters={"type": "object", "required": ["request"],
                        "properties": {"request": {"type": "string"}}})

    def declaration(self) -> ToolDeclaration:
        return self._declaration

    async def run(self, args: dict[str, Any], context: ToolContext) -> Any:
        """Never called: the run's tool executor drives the agent itself.

        Raises:
            UserError: always (an ``AgentTool`` runs only inside a run).
        """
        raise UserError(f"AgentTool {self.name!r} runs its agent inside a run: give it to an "
                        "Agent's tools and run that agent with headwater.Runner")

    def __repr__(self) -> str:
        return f"AgentTool({self.agent!r})"
