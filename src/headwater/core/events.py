"""The event contract (docs/event-contract.md): the one stream every run yields.

Partial events (text deltas, tool progress) are for the screen only; non-partial
events are the record, persisted before the caller sees them.
"""

from __future__ import annotations

import itertools
import json
import os
import time
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final, Literal, cast

from pydantic import TypeAdapter

from .errors import ErrorCode
from .types import Content, FunctionCall, FunctionResponse, Usage

_ID_PREFIX = os.urandom(6).hex()
_ID_COUNTER = itertools.count(1)
_EVENT_ID_PREFIX = f"e-{_ID_PREFIX}-"


def new_id(prefix: str = "e") -> str:
    """A process-unique, cheap identifier (random per process, then a counter)."""
    if prefix == "e":
        return _EVENT_ID_PREFIX + str(next(_ID_COUNTER))
    return f"{prefix}-{_ID_PREFIX}-{next(_ID_COUNTER):x}"


def random_id(prefix: str) -> str:
    """An unguessable identifier: ``prefix``, a dash, then 96 random bits (24 hex digits).

    For ids that name something a caller may ask for (a run), so that knowing
    one tells nothing about another's.
    """
    return f"{prefix}-{os.urandom(12).hex()}"  # what secrets.token_hex does


@dataclass(slots=True)
class ToolStreamEvent:
    """What a progress-streaming tool yields.

    Everything before ``done`` is progress for the caller only; the ``done``
    event's ``response`` is the one result the model sees.

    A ``part_*`` event carries text (``delta``); a ``progress`` event says how
    far the call is: ``progress`` (a number that grows), ``total`` (when known)
    and ``message`` (a line to show beside it). An MCP server's
    ``notifications/progress`` for a call is such an event
    (``headwater.tools.mcp``); a tool of your own may yield them too.
    """

    type: Literal["part_start", "part_delta", "part_end", "progress", "done"]
    index: int | None = None
    delta: str | None = None
    response: Any = None  # raw tool value; only the ``done`` event's reaches the model
    progress: float | None = None
    total: float | None = None
    message: str | None = None

    @property
    def line(self) -> str:
        """What a terminal shows of it: :func:`progress_line` of its fields."""
        return progress_line(self.delta, self.progress, self.total, self.message)


def progress_line(delta: str | None, progress: float | None = None, total: float | None = None,
                  message: str | None = None) -> str:
    """One line for a piece of tool progress: its text, or its measure (``2/5``; ``2``
    without a total) then its message: ``2/5 indexing docs/tools.md``."""
    if progress is None:
        return message or delta or ""
    measure = f"{progress:g}/{total:g}" if total else f"{progress:g}"
    return f"{measure} {message}" if message else measure


@dataclass(slots=True)
class ToolProgress:
    """The payload of a partial tool-progress event.

    Attributes:
        call_id: the function call this progress belongs to.
        tool_name: the tool's name.
        event: the tool's own :class:`ToolStreamEvent`.
        sequence: per-call sequence number, from 1.
        coalesced: how many earlier progress events this one replaced (bounds).
    """

    call_id: str
    tool_name: str
    event: ToolStreamEvent
    sequence: int = 1
    coalesced: int = 0


@dataclass(slots=True)
class ApprovalRequest:
    """A tool call waiting for a human decision.

    ``args_sha256`` is the SHA-256 of the canonical JSON of the arguments; an
    answer must quote it, so an answer for different arguments is refused.
    ``summary`` is the tool's ``approval_summary`` for these arguments (one line,
    made when the approval was asked and stored with it), or ``None``.
    :attr:`display` is what every approval surface shows the approver.
    """

    call_id: str
    tool_name: str
    args: dict[str, Any]  # raw JSON object
    args_sha256: str
    summary: str | None = None

    @property
    def display(self) -> str:
        """The line an approver is shown: the tool's summary, else the call with its
        arguments, ``deploy(version="2", environment="staging")`` (:func:`call_line`)."""
        return self.summary if self.summary is not None else call_line(self.tool_name,
                                                                       self.args)


def call_line(name: str, args: dict[str, Any]) -> str:  # args: raw JSON object
    """A call as one line: its name, then each argument as ``key=<JSON value>``."""
    shown = ", ".join(f"{key}={json.dumps(value, ensure_ascii=False, default=repr)}"
                      for key, value in args.items())
    return f"{name}({shown})"


@dataclass(slots=True)
class ApprovalDecision:
    """A human's answer to an :class:`ApprovalRequest`, as recorded in the session.

    ``args_sha256`` binds the answer to the arguments that were shown; ``None``
    means "whatever is pending for this call".
    """

    call_id: str
    approved: bool
    reason: str | None = None
    args_sha256: str | None = None


@dataclass(slots=True)
class EventActions:
    """Side effects an event carries; applied atomically with the event."""

    state_delta: dict[str, Any] = field(default_factory=dict)  # raw JSON values
    artifact_delta: dict[str, int] = field(default_factory=dict)
    transfer_to_agent: str | None = None
    escalate: bool = False
    skip_summarization: bool = False
    end_invocation: bool = False
    requested_approvals: list[ApprovalRequest] = field(default_factory=list)
    approval_decisions: list[ApprovalDecision] = field(default_factory=list)

    def merge(self, other: EventActions) -> None:
        """Fold another event's actions into this one (later values win)."""
        self.state_delta.update(other.state_delta)
        self.artifact_delta.update(other.artifact_delta)
        self.transfer_to_agent = other.transfer_to_agent or self.transfer_to_agent
        self.escalate = self.escalate or other.escalate
        self.skip_summarization = self.skip_summarization or other.skip_summarization
        self.end_invocation = self.end_invocation or other.end_invocation
        self.requested_approvals.extend(other.requested_approvals)
        self.approval_decisions.extend(other.approval_decisions)


@dataclass(slots=True, kw_only=True)
class Event:
    """One item of a run's stream.

    Attributes:
        id: unique id of the event.
        invocation_id: the run that produced it.
        author: ``"user"`` or the name of the agent.
        branch: agent path (and tool call) the event came from.
        timestamp: seconds since the epoch.
        content: role and parts; ``None`` for pure error or control events.
        partial: ``True`` for screen-only events; never persisted.
        turn_complete: live mode: the model finished its turn.
        interrupted: the turn was cut short (live barge-in or explicit stop).
        error_code: one of the fixed error codes, when the event reports an error.
        error_message: a human-readable message (never raw provider text).
        finish_reason: why the model stopped (``"stop"``, ``"length"``, …).
        usage: token usage, on model aggregates only.
        long_running_tool_ids: calls still pending after this event.
        tool_progress: for partial tool-progress events.
        actions: state delta and control actions.
    """

    id: str = field(default_factory=new_id)
    invocation_id: str = ""
    author: str = ""
    branch: str | None = None
    timestamp: float = field(default_factory=time.time)
    content: Content | None = None
    partial: bool = False
    turn_complete: bool = False
    interrupted: bool = False
    error_code: ErrorCode | None = None
    error_message: str | None = None
    finish_reason: str | None = None
    usage: Usage | None = None
    long_running_tool_ids: list[str] = field(default_factory=list)
    tool_progress: ToolProgress | None = None
    actions: EventActions = field(default_factory=EventActions)

    @property
    def text(self) -> str:
        """The answer text of this event (thoughts excluded), or ``""``."""
        return self.content.text if self.content is not None else ""

    @property
    def function_calls(self) -> list[FunctionCall]:
        """The function calls this event carries."""
        return self.content.function_calls if self.content is not None else []

    @property
    def function_responses(self) -> list[FunctionResponse]:
        """The function responses this event carries."""
        return self.content.function_responses if self.content is not None else []

    def is_final_response(self) -> bool:
        """Whether this event ends its author's answer (docs/event-contract.md).

        True when ``skip_summarization`` is set or a long-running tool call is
        pending; otherwise only for an event that is not partial and carries no
        function calls and no function responses. (headwater has no
        code-execution parts, so the "trailing code-execution result" clause of
        ADK never applies.)
        """
        if self.actions.skip_summarization or self.long_running_tool_ids:
            return True
        if self.partial:
            return False
        content = self.content
        if content is None:
            return True
        for part in content.parts:
            if part.function_call is not None or part.function_response is not None:
                return False
        return True


def _no_actions() -> EventActions:
    """The shared, read-only empty actions of partial events (mutating them raises)."""
    actions = object.__new__(EventActions)
    for name, value in (("state_delta", MappingProxyType({})),
                        ("artifact_delta", MappingProxyType({})), ("transfer_to_agent", None),
                        ("escalate", False), ("skip_summarization", False),
                        ("end_invocation", False), ("requested_approvals", ()),
                        ("approval_decisions", ())):
        object.__setattr__(actions, name, value)
    return actions


NO_ACTIONS: Final[EventActions] = _no_actions()
"""The ``actions`` of every partial event: empty, and read-only (partials carry no actions)."""
_NO_IDS: Final[list[str]] = cast("list[str]", ())
_new_event = object.__new__
_now = time.time
_ID_SLOT: Any = Event.__dict__["id"]  # the slot that holds an Event's id


class PartialEvent(Event):
    """A partial (screen-only) event as the per-chunk path makes it (:func:`partial_event`).

    An :class:`Event` in every respect (``isinstance(e, Event)``, the same
    fields, ``partial`` true) but one: its ``id`` is made when it is first read,
    not when the event is built. A partial's id is rarely read (it is never
    stored), and making one costs about a tenth of a streamed chunk.
    """

    __slots__ = ()

    @property
    def id(self) -> str:
        try:
            value: str = _ID_SLOT.__get__(self, Event)
        except AttributeError:  # first read: made now
            value = _EVENT_ID_PREFIX + str(next(_ID_COUNTER))
            _ID_SLOT.__set__(self, value)
        return value

    @id.setter
    def id(self, value: str) -> None:
        _ID_SLOT.__set__(self, value)


def partial_event(invocation_id: str, author: str, content: Content | None,
                  branch: str | None = None, *, tool_progress: ToolProgress | None = None
                  ) -> Event:
    """A partial (screen-only) event, built for the per-chunk path.

    The same as ``Event(..., partial=True)`` except that its ``actions`` and
    ``long_running_tool_ids`` are shared read-only empties (a partial event is
    never persisted and carries no actions) and that it is a
    :class:`PartialEvent`, whose id is made when first read. About three times
    cheaper than the dataclass constructor, which matters once per streamed chunk.
    """
    event: Event = _new_event(PartialEvent)
    event.invocation_id = invocation_id
    event.author = author
    event.branch = branch
    event.timestamp = _now()
    event.content = content
    event.partial = True
    event.turn_complete = False
    event.interrupted = False
    event.error_code = None
    event.error_message = None
    event.finish_reason = None
    event.usage = None
    event.long_running_tool_ids = _NO_IDS
    event.tool_progress = tool_progress
    event.actions = NO_ACTIONS
    return event


_EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)


def event_to_json(event: Event) -> bytes:
    """Serialise an event (blobs as base64)."""
    return _EVENT_ADAPTER.dump_json(event, exclude_defaults=True)


def event_from_json(data: str | bytes) -> Event:
    """Parse an event serialised by :func:`event_to_json`."""
    return _EVENT_ADAPTER.validate_json(data)
