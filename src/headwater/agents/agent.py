"""``Agent``: a model, an instruction and tools, and the step loop that drives them.

One step: build the request from persisted history → call the model (partials
pass through, the aggregate is held until the stream ends) → yield the
aggregate (the runner persists it before this generator resumes) → run its
function calls → yield their responses. Steps repeat until a final response,
an error, ``end_invocation`` or the run's model-call budget.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncGenerator, Awaitable, Callable, Container, Sequence
from contextlib import aclosing
from typing import Any, TypeVar

from ..context import CallbackContext
from ..errors import ModelError, ModelProtocolViolation, UserError
from ..events import Event, EventActions
from ..live_request_queue import LiveRequestQueue
from ..models.base import BaseLlm, LlmRequest, LlmResponse
from ..models.registry import get_model
from ..run_config import StreamingMode
from ..tools.function_tool import BaseTool, ToolLike, as_tool
from ..tools.middleware import ToolMiddleware
from ..types import Content, FunctionCall, FunctionResponse, Part
from ._execution import (
    AfterToolCallback,
    BeforeToolCallback,
    CallOutcome,
    ToolExecutor,
    error_result,
    maybe_await,
)
from .invocation import InvocationContext

logger = logging.getLogger("headwater.agents")

InstructionProvider = Callable[[CallbackContext], "str | Awaitable[str]"]
BeforeModelCallback = Callable[..., "LlmResponse | Awaitable[LlmResponse | None] | None"]
AfterModelCallback = Callable[..., "LlmResponse | Awaitable[LlmResponse | None] | None"]

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")
_C = TypeVar("_C")


def _as_list(callbacks: _C | Sequence[_C] | None) -> list[_C]:
    if callbacks is None:
        return []
    if isinstance(callbacks, Sequence):
        return list(callbacks)
    return [callbacks]


class Agent:
    """An LLM agent.

    Args:
        name: identifier; the author of the agent's events.
        model: a model object or a string such as ``"openai:gpt-4o-mini"``,
            resolved on first use.
        instruction: the system instruction, or a (sync or async) callable of
            the :class:`CallbackContext` returning it.
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

    Each callback argument also takes a list, tried in order until one
    returns something.

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
        self.tools: list[BaseTool] = [as_tool(t) for t in tools]
        by_name: dict[str, BaseTool] = {}
        for t in self.tools:
            if t.name in by_name:
                raise UserError(f"agent {name!r} has two tools named {t.name!r}")
            by_name[t.name] = t
        self.before_model_callbacks = _as_list(before_model_callback)
        self.after_model_callbacks = _as_list(after_model_callback)
        self.generate_config = dict(generate_config or {})
        self._executor = ToolExecutor(agent_name=name, tools=by_name,
                                      before=_as_list(before_tool_callback),
                                      after=_as_list(after_tool_callback),
                                      middleware=list(tool_middleware))

    @property
    def model(self) -> BaseLlm:
        """The resolved model (a model string is resolved once, on first use)."""
        if not isinstance(self._model, BaseLlm):
            self._model = get_model(self._model)
        return self._model

    def __repr__(self) -> str:
        return f"Agent(name={self.name!r}, model={self._model!r})"

    async def run_async(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        """Run steps until the agent is done; yields partial and non-partial events.

        The caller must persist every non-partial event before resuming this
        generator. Closing the generator closes the model stream and cancels
        running tools.
        """
        if ctx.resume:
            last: Event | None = None
            async with aclosing(self._resume(ctx)) as events:
                async for event in events:
                    yield event
                    last = event
            if last is not None and last.is_final_response():
                return
        while True:
            if ctx.stats.llm_calls >= ctx.run_config.max_llm_calls:
                yield self._error_event(
                    ctx, "budget_exceeded",
                    f"the run reached max_llm_calls={ctx.run_config.max_llm_calls}",
                )
                return
            last = None
            async with aclosing(self._step(ctx)) as events:
                async for event in events:
                    yield event
                    last = event
            if last is None or last.partial or last.error_code is not None:
                return
            if last.actions.end_invocation or last.is_final_response():
                return

    async def run_live(self, ctx: InvocationContext, queue: LiveRequestQueue
                       ) -> AsyncGenerator[Event, None]:
        """Run a live session (see ``headwater.agents._live_run``); events are persisted here."""
        from ._live_run import LiveRun

        async with aclosing(LiveRun(self, ctx, queue).events()) as events:
            async for event in events:
                yield event

    async def _step(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        callback_context = ctx.callback_context(self.name)
        request = await self._build_request(ctx, callback_context)
        aggregate: LlmResponse | None = None
        for callback in self.before_model_callbacks:
            aggregate = await maybe_await(callback(callback_context=callback_context,
                                                   llm_request=request))
            if aggregate is not None:
                break
        if aggregate is None:
            ctx.stats.llm_calls += 1
            try:
                async with aclosing(self._call_model(ctx, request)) as responses:
                    async for item in responses:
                        if isinstance(item, Event):
                            yield item
                        else:
                            aggregate = item
            except ModelError as exc:
                yield self._error_event(ctx, exc.code, str(exc))
                return
        assert aggregate is not None
        for callback in self.after_model_callbacks:
            replaced = await maybe_await(callback(callback_context=callback_context,
                                                  llm_response=aggregate))
            if replaced is not None:
                aggregate = replaced
                break
        if aggregate.usage is not None:
            ctx.stats.usage = ctx.stats.usage + aggregate.usage
        model_event = self._model_event(ctx, aggregate, callback_context.actions)
        yield model_event
        calls = model_event.function_calls
        if not calls or model_event.error_code is not None:
            return
        async with aclosing(self._execute(ctx, calls)) as events:
            async for event in events:
                yield event

    async def _execute(self, ctx: InvocationContext, calls: Sequence[FunctionCall],
                       approved: Container[str] = (),
                       decided: Sequence[CallOutcome] = ()) -> AsyncGenerator[Event, None]:
        """Run calls: their progress, then one event with every result (and pending approvals)."""
        outcomes: list[CallOutcome] = list(decided)
        if calls:
            async with aclosing(self._executor.run(ctx, calls, approved)) as items:
                async for item in items:
                    if isinstance(item, Event):
                        yield item
                    else:
                        outcomes.extend(item)
        yield self._results_event(ctx, outcomes)

    async def _resume(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        """Run the calls a human approved, and deny the others, before the next model call."""
        approved = [call for call, decision in ctx.resume if decision.approved]
        denied = [
            CallOutcome(call, error_result(
                "denied", "A human denied this call" + (f": {d.reason}" if d.reason else ".")))
            for call, d in ctx.resume if not d.approved
        ]
        async with aclosing(self._execute(ctx, approved, {c.id for c in approved},
                                          denied)) as events:
            async for event in events:
                yield event

    def _results_event(self, ctx: InvocationContext, outcomes: Sequence[CallOutcome]) -> Event:
        actions = EventActions()
        parts: list[Part] = []
        pending: list[str] = []
        for outcome in outcomes:
            actions.merge(outcome.actions)
            if outcome.approval is not None:
                actions.requested_approvals.append(outcome.approval)
                pending.append(outcome.call.id)
                continue
            assert outcome.response is not None
            parts.append(Part(function_response=FunctionResponse(
                id=outcome.call.id, name=outcome.call.name, response=outcome.response)))
            if outcome.long_running:
                pending.append(outcome.call.id)
        if any(o.return_direct for o in outcomes):
            actions.skip_summarization = True
        return Event(invocation_id=ctx.invocation_id, author=self.name,
                     content=Content("user", parts) if parts else None,
                     long_running_tool_ids=pending, actions=actions)

    async def _call_model(
        self, ctx: InvocationContext, request: LlmRequest
    ) -> AsyncGenerator[Event | LlmResponse, None]:
        """Forward partial events; yield the aggregate last, once the stream has ended.

        Raises:
            ModelProtocolViolation: the model broke the stream contract.
            ModelError: the adapter failed.
        """
        stream = ctx.run_config.streaming_mode is StreamingMode.SSE
        texts: list[str] = []
        thoughts: list[str] = []
        final: LlmResponse | None = None
        invocation_id, author = ctx.invocation_id, self.name
        async with aclosing(self.model.generate_content(request, stream=stream)) as responses:
            async for response in responses:
                if final is not None:
                    raise ModelProtocolViolation(
                        "multiple_finals", "the model sent a response after its non-partial one")
                if not response.partial:
                    final = response
                    continue
                _check_partial(response, texts, thoughts)
                yield Event(invocation_id=invocation_id, author=author,
                            content=response.content, partial=True)
        if final is None:
            raise ModelProtocolViolation("no_final",
                                         "the stream ended without a non-partial response")
        _check_final(final, texts, thoughts)
        yield final

    async def _build_request(self, ctx: InvocationContext, callback_context: CallbackContext
                             ) -> LlmRequest:
        instruction = self.instruction
        if callable(instruction):
            instruction = await maybe_await(instruction(callback_context))
        return LlmRequest(
            model=self.model.model,
            system_instruction=str(instruction) or None,
            contents=history(ctx),
            tools=[t.declaration() for t in self.tools],
            config=dict(self.generate_config),
        )

    def _model_event(self, ctx: InvocationContext, response: LlmResponse,
                     actions: EventActions) -> Event:
        return Event(
            invocation_id=ctx.invocation_id, author=self.name, content=response.content,
            finish_reason=response.finish_reason, usage=response.usage,
            error_code=response.error_code, error_message=response.error_message,
            turn_complete=response.turn_complete, interrupted=response.interrupted,
            actions=actions,
        )

    def _error_event(self, ctx: InvocationContext, code: Any, message: str) -> Event:
        logger.warning("agent %s: %s: %s", self.name, code, message)
        return Event(invocation_id=ctx.invocation_id, author=self.name, error_code=code,
                     error_message=message)


def _check_partial(response: LlmResponse, texts: list[str], thoughts: list[str]) -> None:
    if response.usage is not None:
        raise ModelProtocolViolation("usage_on_partial", "a partial response carried usage")
    content = response.content
    if content is None:
        return
    for part in content.parts:
        if part.function_call is not None or part.function_response is not None:
            raise ModelProtocolViolation(
                "function_call_on_partial", "a partial response carried a function call")
        if part.text is not None:
            (thoughts if part.thought else texts).append(part.text)


def _check_final(final: LlmResponse, texts: list[str], thoughts: list[str]) -> None:
    content = final.content
    if texts and "".join(texts) != (content.text if content else ""):
        raise ModelProtocolViolation(
            "final_text_mismatch", "the final text is not the concatenation of the partials")
    if thoughts and "".join(thoughts) != (content.thought_text if content else ""):
        raise ModelProtocolViolation(
            "final_text_mismatch",
            "the final thought text is not the concatenation of the partials")


def history(ctx: InvocationContext) -> list[Content]:
    """The conversation a model sees, built from persisted events.

    Events without content (errors, control, approval records) are left out;
    partials are never in a session. Each call's result is placed right after
    the model turn that made it, as providers require: the latest result for
    that call id (a long-running call's final result replaces its ticket), or
    a ``pending`` placeholder while it has none (awaiting approval or still
    running). Function responses travel with role ``user``.
    """
    events = ctx.session.events
    latest: dict[str, FunctionResponse] = {}
    for event in events:
        content = event.content
        if content is not None:
            for part in content.parts:
                if part.function_response is not None:
                    latest[part.function_response.id] = part.function_response
    contents: list[Content] = []
    for event in events:
        content = event.content
        if content is None or not content.parts:
            continue
        calls: list[FunctionCall] = []
        responses = False
        for part in content.parts:
            if part.function_call is not None:
                calls.append(part.function_call)
            elif part.function_response is not None:
                responses = True
        if responses:
            rest = [p for p in content.parts if p.function_response is None]
            if rest:
                contents.append(Content(content.role, rest))
            continue
        contents.append(content)
        if calls:
            contents.append(Content("user", [
                Part(function_response=latest.get(c.id) or _pending(c)) for c in calls]))
    return contents


def _pending(call: FunctionCall) -> FunctionResponse:
    return FunctionResponse(id=call.id, name=call.name, response={
        "status": "pending",
        "detail": "No result yet: the call awaits a human's approval or is still running."})
