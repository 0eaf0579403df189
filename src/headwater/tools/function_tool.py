"""Tools: ``BaseTool``, ``FunctionTool`` (any plain function) and the ``@tool`` decorator."""

from __future__ import annotations

import functools
import inspect
import json
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable
from typing import Any, overload

from pydantic import ValidationError

from ..core.errors import ToolArgumentsError, UserError
from ..core.live_request_queue import LiveRequestQueue
from ..core.types import ToolDeclaration
from ..models.llm_request import LlmRequest
from ._schema import inspect_function, json_schema
from .approval import render_summary
from .context import ToolContext
from .options import ToolOptions, options_for, template_fields
from .threads import run_sync


class BaseTool(ABC):
    """Something a model can call.

    A subclass sets ``name`` and ``description`` and implements
    :meth:`declaration` and :meth:`run`; it gets default :class:`ToolOptions`
    (``kind="call"``) unless it sets ``options``.

    Attributes:
        name: the name the model calls it by.
        description: what the model is told it does.
        options: how it is run (kind, timeout, approval, live-stream bounds, …);
            the one place the runner reads them from.
        declares_function: whether the model is offered it (its
            :meth:`declaration`); ``False`` for a tool that only processes
            requests (``ExampleTool``).
    """

    name: str
    description: str
    options: ToolOptions = ToolOptions()
    declares_function: bool = True

    async def process_llm_request(self, *, tool_context: ToolContext,  # noqa: B027
                                  llm_request: LlmRequest) -> None:
        """Change each model request of the agent that has this tool (ADK's hook), before
        it leaves: after its instructions are built (and its planner's), before the
        before-model callbacks.

        The default does nothing; a tool that overrides it is asked on every request
        (the others never are). ``tool_context`` is a ``ToolContext`` (as ADK's) sharing
        the step's callback context's actions: state written there is stored with the
        model's answer.
        """

    @property
    def is_long_running(self) -> bool:
        """``options.long_running`` (ADK's name)."""
        return self.options.long_running

    @property
    def processes_requests(self) -> bool:
        """Whether this tool overrides :meth:`process_llm_request`."""
        return type(self).process_llm_request is not BaseTool.process_llm_request

    @property
    def consumes_input_stream(self) -> bool:
        """Whether a call receives the live input stream (a ``LiveRequestQueue`` parameter)."""
        return False

    @abstractmethod
    def declaration(self) -> ToolDeclaration:
        """The declaration sent to the model."""

    @abstractmethod
    async def run(self, args: dict[str, Any], context: ToolContext) -> Any:
        """Execute one call.

        Raises:
            ToolArgumentsError: ``args`` do not match the schema (nothing ran).
            Exception: whatever the tool raises; the runner turns it into an
                error result the model sees.
        """

    def stream(self, args: dict[str, Any], context: ToolContext) -> AsyncIterator[Any]:
        """Start a streaming call (kind ``"progress"`` or ``"live"``): its values.

        Raises:
            ToolArgumentsError: ``args`` do not match the schema (nothing ran).
        """
        raise UserError(f"tool {self.name!r} does not stream")

    def cached(self, args: dict[str, Any]) -> tuple[bool, Any]:
        """``(True, result)`` when a cached result for ``args`` exists."""
        return False, None

    def remember(self, args: dict[str, Any], result: Any) -> None:  # noqa: B027 - optional hook
        """Offer a result to the tool's cache (a no-op without ``cache=True``)."""

    def summarize_approval(self, args: dict[str, Any]) -> str | None:  # args: raw JSON
        """The line an approver of a call with ``args`` is shown instead of the arguments:
        ``options.approval_summary`` made from them, or ``None`` (none, or it failed)."""
        return render_summary(self.name, self.options.approval_summary, args)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, kind={self.options.kind!r})"


class FunctionTool(BaseTool):
    """A plain function (sync or async) as a tool.

    Its name comes from the function, its description and argument docs from
    the Google-style docstring, its JSON schema from the type hints. A
    parameter annotated ``ToolContext`` is injected and hidden from the model.
    Sync functions run in a worker thread, off the event loop.

    Its kind (``options.kind``) is decided here, once: a plain function is
    ``"call"``; an async generator is ``"progress"`` with ``streaming=True`` (or
    ``kind="progress"``) and ``"live"`` without a flag (or ``kind="live"``). A
    ``"live"`` tool's every yielded value is told to the model in ``run_live``;
    in ``run_async`` it runs like a ``"progress"`` tool, its values being
    progress for the caller and its last value (or a ``done`` event's response)
    the one result the model sees.

    Args:
        func: the function.
        name: the name the model calls it by (default: the function's).
        description: what the model is told (default: the docstring).
        options: a :class:`ToolOptions` to start from; its ``kind`` counts as
            declared and must fit the function.
        **keywords: any :class:`ToolOptions` field (``timeout=3``,
            ``kind="live"``, …) overriding ``options``, and ``streaming``:
            ``True`` means ``kind="progress"``, ``False`` means ``kind="call"``.

    Raises:
        UserError: at construction, when the signature cannot be described.
        TypeError: an unknown option name.
        ValueError: incoherent options, or a kind the function cannot be (the
            message says what to pass instead).
    """

    def __init__(
        self,
        func: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        options: ToolOptions | None = None,
        **keywords: Any,
    ) -> None:
        if not callable(func):
            raise UserError(f"a tool must be a function, got {func!r}")
        functools.update_wrapper(self, func)  # first, so the function's attributes never win
        self.func = func
        self.name = name or getattr(func, "__name__", "") or type(func).__name__
        self.options = options_for(func, self.name, options, keywords)
        signature = inspect_function(func, self.name, hidden_types=(LiveRequestQueue,))
        self._input_params = tuple(signature.hidden)
        if self._input_params and self.options.kind == "call":
            raise UserError(
                f"tool {self.name!r} declares a LiveRequestQueue parameter "
                f"({', '.join(self._input_params)}) but is not an async generator: only a "
                "streaming tool can consume the live input stream")
        self.description = description if description is not None else signature.description
        self._cache: dict[str, Any] = {}
        self._args_model = signature.args_model
        self._context_param = signature.context_param
        self._field_names = tuple(self._args_model.model_fields)
        self._is_async = inspect.iscoroutinefunction(func)
        self._declaration = ToolDeclaration(
            name=self.name, description=self.description,
            parameters=json_schema(self._args_model),
        )
        self._defaults = {name: field.get_default(call_default_factory=True)
                          for name, field in self._args_model.model_fields.items()
                          if not field.is_required()}
        self._check_summary_fields()

    def _check_summary_fields(self) -> None:
        """Refuse an ``approval_summary`` template that names no parameter of the tool."""
        summary = self.options.approval_summary
        if not isinstance(summary, str):
            return
        for name in template_fields(summary):
            if name not in self._field_names:
                raise ValueError(
                    f"tool {self.name!r}: approval_summary names {{{name}}}, which is not a "
                    f"parameter of the tool (its parameters: "
                    f"{', '.join(self._field_names) or 'none'})")

    @property
    def consumes_input_stream(self) -> bool:
        return bool(self._input_params)

    def declaration(self) -> ToolDeclaration:
        return self._declaration

    def bind_arguments(self, args: dict[str, Any], context: ToolContext) -> dict[str, Any]:
        """Validate the model's arguments and add the injected ones.

        Raises:
            ToolArgumentsError: the arguments do not match the schema.
        """
        try:
            validated = self._args_model.model_validate(args)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or '(arguments)'}: {err['msg']}"
                for err in exc.errors()
            )
            raise ToolArgumentsError(f"invalid arguments for {self.name}: {problems}") from None
        kwargs = {name: getattr(validated, name) for name in self._field_names}
        if self._context_param is not None:
            kwargs[self._context_param] = context
        for name in self._input_params:
            kwargs[name] = context.input_stream
        return kwargs

    async def run(self, args: dict[str, Any], context: ToolContext) -> Any:
        kwargs = self.bind_arguments(args, context)
        if self.options.kind != "call":
            raise UserError(f"tool {self.name!r} streams: call stream(), not run()")
        if self._is_async:
            return await self.func(**kwargs)
        result = await run_sync(self.name, self.func, **kwargs)
        if inspect.isawaitable(result):
            result = await result
        return result

    def stream(self, args: dict[str, Any], context: ToolContext) -> AsyncIterator[Any]:
        kwargs = self.bind_arguments(args, context)
        generator: AsyncIterator[Any] = self.func(**kwargs)
        return generator

    def cached(self, args: dict[str, Any]) -> tuple[bool, Any]:
        if not self.options.cache:
            return False, None
        key = _cache_key(args)
        return (True, self._cache[key]) if key in self._cache else (False, None)

    def remember(self, args: dict[str, Any], result: Any) -> None:
        keep = self.options.cache_function
        if self.options.cache and (keep is None or keep(args, result)):
            self._cache[_cache_key(args)] = result

    def summarize_approval(self, args: dict[str, Any]) -> str | None:  # args: raw JSON
        """The tool's ``approval_summary`` made from ``args``, each parameter the model left
        out at its default (what the function would be called with)."""
        summary = self.options.approval_summary
        if summary is None:
            return None
        return render_summary(self.name, summary, {**self._defaults, **args})

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the underlying function directly (handy in tests)."""
        return self.func(*args, **kwargs)


def _cache_key(args: dict[str, Any]) -> str:  # raw JSON object
    return json.dumps(args, sort_keys=True, separators=(",", ":"), default=repr)


ToolLike = BaseTool | Callable[..., Any]


def as_tool(obj: ToolLike) -> BaseTool:
    """A tool from a tool or a plain function."""
    return obj if isinstance(obj, BaseTool) else FunctionTool(obj)


@overload
def tool(func: Callable[..., Any], /) -> FunctionTool: ...
@overload
def tool(
    *, name: str | None = None, description: str | None = None,
    options: ToolOptions | None = None, **keywords: Any,
) -> Callable[[Callable[..., Any]], FunctionTool]: ...
def tool(
    func: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    options: ToolOptions | None = None,
    **keywords: Any,
) -> FunctionTool | Callable[[Callable[..., Any]], FunctionTool]:
    """Turn a function into a :class:`FunctionTool`; usable bare or with options.

    Takes :class:`FunctionTool`'s arguments: ``options=ToolOptions(...)`` and/or
    any :class:`ToolOptions` field as a keyword (plus ``streaming=``).

    Raises:
        TypeError: an unknown option name, when the tool is built.
        ValueError: incoherent options, when the tool is built.

    Example::

        @tool(streaming=True, requires_approval=True)
        async def deploy(env: str) -> AsyncIterator[ToolStreamEvent]:
            "Deploy with progress."
            yield ToolStreamEvent(type="part_delta", delta=f"deploying to {env}…")
            yield ToolStreamEvent(type="done", response="deployed")
    """
    def wrap(f: Callable[..., Any]) -> FunctionTool:
        return FunctionTool(f, name=name, description=description, options=options, **keywords)

    return wrap(func) if func is not None else wrap


class LongRunningFunctionTool(FunctionTool):
    """ADK's long-running function tool: a :class:`FunctionTool` with
    ``long_running=True`` and ``after_ticket="ask_model"``.

    The function's return value (``{"status": "pending", ...}``) is the call's
    ticket; the model is asked once more in the same turn with it, and the call's
    id is listed in ``long_running_tool_ids`` of the model's event that made it.
    The real result comes later, as a function response with the same id
    (docs/tools.md, "Long-running calls").

    Args:
        func: the function.
        **keywords: as :class:`FunctionTool` (other options).
    """

    def __init__(self, func: Callable[..., Any], **keywords: Any) -> None:
        keywords.setdefault("long_running", True)
        keywords.setdefault("after_ticket", "ask_model")
        super().__init__(func, **keywords)
