"""``InvocationContext``: the state of one run, shared by the runner and the agent flow."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field

from ..artifacts import BaseArtifactService
from ..core.clock import SYSTEM_CLOCK, Clock
from ..core.context import CallbackContext
from ..core.events import ApprovalDecision, Event, EventActions
from ..core.run_config import RunConfig
from ..core.settings import Settings
from ..core.telemetry import NO_TRACE, RunTrace
from ..core.types import Content, FunctionCall, Usage
from ..memory.base import BaseMemoryService
from ..sessions.base import BaseSessionService, Session
from ..sessions.ledger import CallLedger
from .base import BaseAgent


@dataclass(slots=True)
class AgentOutcome:
    """How an agent's run ended, for whatever drove it (a workflow agent above it, the
    call of an agent used as a tool)."""

    stopped: bool = False
    """Its last event was an error, or ended the run (``end_invocation``)."""
    escalated: bool = False
    """It (or an agent under it) made an event with ``escalate``."""
    paused: bool = False
    """It waits for a human (an approval, a long-running result) somewhere in it: its
    run goes on when the answer comes (docs/multi-agent.md, "A pause inside a tree")."""


AgentDriver = Callable[[BaseAgent, str, Content, AgentOutcome], AsyncGenerator[Event, None]]
"""Runs an agent inside the current run: ``(agent, branch, message, outcome)`` → its
events, the message first; ``outcome`` says how it ended (``TreeRun.drive``)."""


@dataclass(slots=True)
class RunStats:
    """What one run has spent so far.

    Attributes:
        llm_calls: model calls started.
        tool_calls: tool calls executed (or refused by a budget).
        usage: token usage summed over the run's model aggregates.
    """

    llm_calls: int = 0
    tool_calls: int = 0
    usage: Usage = field(default_factory=Usage)


@dataclass(slots=True)
class InvocationContext:
    """One run of an agent on a session.

    ``session.events`` is the persisted history and ``ledger`` its calls and
    model-facing conversation: the runner commits each non-partial event and
    updates both before the flow resumes, so the next model request is built
    from exactly what was committed.
    """

    invocation_id: str
    app_name: str
    session: Session
    run_config: RunConfig
    settings: Settings
    stats: RunStats = field(default_factory=RunStats)
    artifact_service: BaseArtifactService | None = None
    """Where ``content_and_artifact`` tools, and tools calling ``ToolContext.save_artifact``
    (an MCP server's blobs), store their artifacts."""
    resume: list[tuple[FunctionCall, ApprovalDecision]] = field(default_factory=list)
    """Calls answered by this run's message: run (approved) or deny before the model."""
    clock: Clock = SYSTEM_CLOCK
    ledger: CallLedger = field(default_factory=CallLedger)
    """The session's calls (what is pending) and the conversation a model sees."""
    branch: str | None = None
    """The branch the agent runs on (``"<parallel>.<sub>"`` under a ``ParallelAgent``);
    every event it makes carries it. An agent's context is a copy of the run's
    (``dataclasses.replace``): session, ledger and stats are shared."""
    trace: RunTrace = NO_TRACE
    """The run's span: parent of its model calls' and tool calls' spans."""
    driver: AgentDriver | None = None
    """How an agent used as a tool (``AgentTool``) runs its agent within this run; the
    runner's ``TreeRun`` sets it."""
    session_service: BaseSessionService | None = None
    """The runner's session store (ADK's samples read it off ``ctx._invocation_context``);
    only the run's recorder writes to it."""
    memory_service: BaseMemoryService | None = None
    """The runner's memory (``ToolContext.search_memory``, ``load_memory``)."""
    user_content: Content | None = None
    """The user's message that started the run (``None`` in a live run)."""

    @property
    def user_id(self) -> str:
        """The session owner."""
        return self.session.user_id

    def callback_context(self, agent_name: str, actions: EventActions | None = None
                         ) -> CallbackContext:
        """A context for callbacks and instruction providers of ``agent_name``."""
        return CallbackContext(
            invocation_id=self.invocation_id, agent_name=agent_name, app_name=self.app_name,
            user_id=self.session.user_id, session_id=self.session.id,
            session_state=self.session.state, actions=actions,
            artifact_service=self.artifact_service, user_content=self.user_content,
            invocation_context=self,
        )
