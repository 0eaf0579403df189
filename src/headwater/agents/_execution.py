"""Executing the function calls of one model aggregate.

Calls run concurrently (bounded by ``Settings.max_parallel_tools``); each gets
exactly one result, and every failure — unknown tool, invalid arguments, an
exception, a timeout, a budget — becomes an error result the model sees.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from pydantic_core import to_jsonable_python

from ..events import EventActions
from ..tools.context import ToolContext
from ..tools.function_tool import BaseTool, ToolArgumentsError
from ..types import FunctionCall, FunctionResponse
from .invocation import InvocationContext

logger = logging.getLogger("headwater.tools")
security_logger = logging.getLogger("headwater.security")

BeforeToolCallback = Callable[..., "dict[str, Any] | Awaitable[dict[str, Any] | None] | None"]
AfterToolCallback = Callable[..., "dict[str, Any] | Awaitable[dict[str, Any] | None] | None"]


def error_result(code: str, message: str) -> dict[str, Any]:
    """The shape of every error result a model sees."""
    return {"error": message, "code": code}


async def maybe_await(value: Any) -> Any:
    """Await ``value`` if it is awaitable (callbacks may be sync or async)."""
    if inspect.isawaitable(value):
        return await value
    return value


class ToolExecutor:
    """Runs the calls of one aggregate for one agent."""

    def __init__(
        self,
        *,
        agent_name: str,
        tools: dict[str, BaseTool],
        before: Sequence[BeforeToolCallback],
        after: Sequence[AfterToolCallback],
    ) -> None:
        self.agent_name = agent_name
        self.tools = tools
        self.before = before
        self.after = after

    async def execute(
        self, ctx: InvocationContext, calls: Sequence[FunctionCall]
    ) -> tuple[list[FunctionResponse], EventActions]:
        """Run every call; results come back in call order with the merged actions.

        Cancellation cancels every running call and waits for them to finish
        their cleanup before re-raising.
        """
        actions = EventActions()
        if len(calls) == 1:
            response, call_actions = await self._run_one(ctx, calls[0])
            actions.merge(call_actions)
            return [response], actions
        limit = asyncio.Semaphore(ctx.settings.max_parallel_tools)

        async def bounded(call: FunctionCall) -> tuple[FunctionResponse, EventActions]:
            async with limit:
                return await self._run_one(ctx, call)

        tasks = [asyncio.create_task(bounded(call)) for call in calls]
        try:
            outcomes = await asyncio.gather(*tasks)
        except BaseException:
            for task in tasks:
                task.cancel()
            await asyncio.wait(tasks)
            raise
        responses = []
        for response, call_actions in outcomes:
            responses.append(response)
            actions.merge(call_actions)
        return responses, actions

    async def _run_one(
        self, ctx: InvocationContext, call: FunctionCall
    ) -> tuple[FunctionResponse, EventActions]:
        tool_context = ToolContext(
            function_call_id=call.id, tool_name=call.name, invocation_id=ctx.invocation_id,
            agent_name=self.agent_name, app_name=ctx.app_name, user_id=ctx.session.user_id,
            session_id=ctx.session.id, session_state=ctx.session.state,
        )
        result = await self._result(ctx, call, tool_context)
        return (
            FunctionResponse(id=call.id, name=call.name, response=_bounded(result, ctx)),
            tool_context.actions,
        )

    async def _result(
        self, ctx: InvocationContext, call: FunctionCall, tool_context: ToolContext
    ) -> dict[str, Any]:
        tool = self.tools.get(call.name)
        if tool is None:
            security_logger.warning(
                "refused call %s to tool %r, which agent %r does not have",
                call.id, call.name, self.agent_name,
            )
            return error_result("unknown_tool", f"there is no tool named {call.name!r}")
        limit = ctx.run_config.max_tool_calls
        if limit is not None and ctx.stats.tool_calls >= limit:
            return error_result("budget_exceeded",
                                f"the run's budget of {limit} tool calls is spent; not executed")
        ctx.stats.tool_calls += 1
        for callback in self.before:
            override = await maybe_await(callback(tool=tool, args=call.args,
                                                  tool_context=tool_context))
            if override is not None:
                return _as_object(override)
        result = await self._invoke(ctx, tool, call, tool_context)
        for callback in self.after:
            override = await maybe_await(callback(tool=tool, args=call.args,
                                                  tool_context=tool_context, tool_response=result))
            if override is not None:
                return _as_object(override)
        return result

    async def _invoke(
        self, ctx: InvocationContext, tool: BaseTool, call: FunctionCall,
        tool_context: ToolContext,
    ) -> dict[str, Any]:
        timeout = tool.timeout if tool.timeout is not None else ctx.settings.tool_timeout
        try:
            async with asyncio.timeout(timeout) as scope:
                return _as_object(await tool.run(call.args, tool_context))
        except ToolArgumentsError as exc:
            return error_result("invalid_arguments", str(exc))
        except TimeoutError as exc:
            if scope.expired():
                return error_result("timeout", f"{tool.name} did not finish within {timeout:g} s")
            return _failure(tool, call, exc)
        except Exception as exc:  # a tool's failure is a result for the model, not a crash
            return _failure(tool, call, exc)


def _failure(tool: BaseTool, call: FunctionCall, exc: Exception) -> dict[str, Any]:
    logger.warning("tool %s (call %s) raised %s", tool.name, call.id, type(exc).__name__,
                   exc_info=exc)
    return error_result("tool_error", f"{type(exc).__name__}: {exc}")


def _as_object(value: Any) -> dict[str, Any]:
    jsonable = to_jsonable_python(value, fallback=repr)
    return jsonable if isinstance(jsonable, dict) else {"result": jsonable}


def _bounded(result: dict[str, Any], ctx: InvocationContext) -> dict[str, Any]:
    limit = ctx.settings.max_result_bytes
    encoded = json.dumps(result, ensure_ascii=False)
    if len(encoded) <= limit:
        return result
    marker = f"… [truncated: {len(encoded)} characters, limit {limit}]"
    return {"result": encoded[: limit - len(marker)] + marker, "truncated": True}
