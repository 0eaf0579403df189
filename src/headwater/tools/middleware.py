"""Tool middleware: an ordered chain of async wrappers around each tool call.

A middleware sees exactly one final value per call, streaming or not: the
progress of a streaming tool goes to the caller beside the chain, and the
innermost terminal drains the stream down to its ``done`` response.

Example::

    async def timing(invocation: ToolInvocation, call_next: CallNext) -> Any:
        started = time.monotonic()
        try:
            return await call_next(invocation)
        finally:
            log.info("%s took %.3f s", invocation.tool.name, time.monotonic() - started)
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from .context import ToolContext
from .function_tool import BaseTool


@dataclass(frozen=True, slots=True)
class ToolInvocation:
    """One call on its way to a tool.

    Attributes:
        tool: the tool.
        args: the model's arguments (a middleware may pass changed ones on with
            ``dataclasses.replace``; they are validated by the tool).
        tool_context: the call's context.
    """

    tool: BaseTool
    args: dict[str, Any]  # raw JSON object
    tool_context: ToolContext

    @property
    def call_id(self) -> str:
        """The function call's id."""
        return self.tool_context.function_call_id

    def with_args(self, args: dict[str, Any]) -> ToolInvocation:
        """The same invocation with other arguments."""
        return replace(self, args=args)


CallNext = Callable[[ToolInvocation], Awaitable[Any]]
ToolMiddleware = Callable[[ToolInvocation, CallNext], Awaitable[Any]]


def chain(middleware: Sequence[ToolMiddleware], terminal: CallNext) -> CallNext:
    """Wrap ``terminal`` so the first middleware is the outermost."""
    call = terminal
    for layer in reversed(middleware):
        call = _bind(layer, call)
    return call


def _bind(layer: ToolMiddleware, call_next: CallNext) -> CallNext:
    async def call(invocation: ToolInvocation) -> Any:
        return await layer(invocation, call_next)

    return call
