"""The hooks of a run's trace, as the agents call them: no-op objects that record nothing.

:class:`RunTrace` (and the :class:`ChatTrace` and :class:`ToolTrace` it starts)
is what an ``InvocationContext`` holds; its methods do nothing here.
:mod:`.telemetry` extends them into OpenTelemetry spans and :mod:`.inspection`
into the run inspector's record; :func:`.telemetry.start_run` picks which a run
gets (docs/observability.md, docs/inspector.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Mapping
from types import TracebackType
from typing import Any, Protocol

from .types import Content, ToolDeclaration, Usage

__all__ = ("NO_CHAT", "NO_TOOL", "NO_TRACE", "ChatTrace", "ModelLike", "RequestLike",
           "ResponseLike", "RunTrace", "ToolTrace", "error_type")


class RequestLike(Protocol):
    """What a chat span reads of an ``LlmRequest``."""

    @property
    def system_instruction(self) -> str | None: ...
    @property
    def contents(self) -> list[Content]: ...
    @property
    def tools(self) -> list[ToolDeclaration]: ...
    @property
    def config(self) -> dict[str, Any]: ...
    @property
    def generate_content_config(self) -> object: ...


class ResponseLike(Protocol):
    """What a chat span reads of an ``LlmResponse``."""

    @property
    def content(self) -> Content | None: ...
    @property
    def finish_reason(self) -> str | None: ...
    @property
    def usage(self) -> Usage | None: ...
    @property
    def error_code(self) -> str | None: ...


class ModelLike(Protocol):
    """What a chat span reads of a model (``BaseLlm``)."""

    @property
    def model(self) -> str: ...
    @property
    def provider(self) -> str: ...


# -- the no-op objects (no API installed), which the recording ones extend ------------------


class ChatTrace:
    """The span of one model call. This base does nothing (tracing is off).

    Attributes:
        recording: whether :meth:`first_chunk` does anything; the flow copies it
            into a local flag, which :meth:`first_chunk` clears.
    """

    __slots__ = ()
    recording = False

    def first_chunk(self) -> bool:
        """Record the time to the first chunk; returns ``False`` (the flag's next value)."""
        return False

    def end(self, response: ResponseLike) -> None:
        """End the span with the call's aggregate (usage, finish reason, error code)."""

    def fail(self, error_type: str) -> None:
        """End the span as failed: ``error.type`` and status ERROR."""


class ToolTrace:
    """The span of one tool call, as a context manager around its execution.

    Inside the block the span is the current one (the tool's own instrumented
    calls nest under it); leaving the block ends it (an exception marks it
    failed). This base does nothing (tracing is off).
    """

    __slots__ = ()

    def __enter__(self) -> ToolTrace:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        return None

    def result(self, result: Mapping[str, Any]) -> None:
        """Record the call's result: an error result (``"error"`` and ``"code"`` keys) sets
        ``error.type`` to its code and status ERROR."""

    def approved(self, asked_at: float | None) -> None:
        """The call runs on a human's approval, asked at ``asked_at`` (seconds since the
        epoch, as event stamps; ``None``: not found): the inspector's approval wait."""


class RunTrace:
    """The span of one run (``invoke_agent``), parent of its chat and tool spans.

    This base does nothing (tracing is off); :func:`start_run` returns a
    recording one when the OpenTelemetry API is installed.
    """

    __slots__ = ()

    def chat(self, agent: str, model: ModelLike, request: RequestLike | None, *,
             stream: bool = True, branch: str | None = None) -> ChatTrace:
        """Start the span of one model call of ``agent`` (ended by the returned object).

        ``request``: what the call was sent (recorded only with capture on);
        ``None`` for a live turn, whose input is the connection's. ``branch``:
        the agent's branch (the inspector's parent and row).
        """
        return NO_CHAT

    def tool(self, agent: str, name: str, call_id: str, args: Mapping[str, Any], *,
             branch: str | None = None) -> ToolTrace:
        """The span of one tool call of ``agent``, started as the returned context manager
        is entered."""
        return NO_TOOL

    def agent(self, name: str, branch: str | None,
              events: AsyncGenerator[Any, None]) -> AsyncGenerator[Any, None]:
        """``events`` (an agent's turn on ``branch``) as one span of the inspector: from its
        first iteration to its close. Untraced: ``events`` itself."""
        return events

    def progress(self, call_id: str, count: int) -> None:
        """A streaming tool call ``call_id`` ended after ``count`` progress events."""

    def transfer(self, source: str, target: str, branch: str | None) -> None:
        """``source`` hands the turn to ``target`` on ``branch`` (the inspector's arrow): the
        target's spans go under it until the source's turn ends."""

    def fail(self, error_type: str) -> None:
        """Mark the run failed (``error.type``); the first failure recorded wins."""

    def end(self, usage: Usage, error_type: str | None = None) -> None:
        """End the run span with the run's usage; ``error_type`` marks it failed. Idempotent."""


NO_CHAT = ChatTrace()
NO_TOOL = ToolTrace()
NO_TRACE = RunTrace()
"""The run trace of a run that is not traced (the default of ``InvocationContext``)."""


def error_type(exc: BaseException) -> str:
    """A low-cardinality name for an exception (``error.type``): ``cancelled`` for a stop,
    a headwater error's wire code (``session_busy``), else the exception's class name."""
    if isinstance(exc, (GeneratorExit, asyncio.CancelledError)):
        return "cancelled"
    code = getattr(exc, "code", None)
    if isinstance(code, str) and code != "internal":
        return code
    return type(exc).__qualname__
