"""Tools: ``BaseTool``, ``FunctionTool`` (any plain function) and the ``@tool`` decorator."""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable
from typing import Any, Literal, TypedDict, Unpack, overload

from pydantic import ValidationError

from ..errors import ToolArgumentsError, UserError
from ..live_request_queue import LiveRequestQueue
from ..types import ToolDeclaration
from ._schema import inspect_function, json_schema
from .context import ToolContext

ResponseFormat = Literal["content", "content_and_artifact"]
CacheFunction = Callable[[dict[str, Any], Any], bool]


class BaseTool(ABC):
    """Something a model can call.

    Attributes:
        name: the name the model calls it by.
        description: what the model is told it does.
        timeout: seconds a call may take (``None``: the run's default).
        streaming: an async generator whose events before ``done`` are progress
            for the caller; only the ``done`` response reaches the model.
        requires_approval: the run stops before the call until a human answers.
        long_running: the call answers at once with a ticket; the result comes
            later as a function response with the same call id.
        return_direct: the result ends the run as its final response.
        response_format: ``"content_and_artifact"``: the tool returns
            ``(content, artifact)``; the model sees the content, the artifact is
            stored in the artifact service.
        idempotent: safe to re-run after a crash (never re-run automatically
            otherwise).
        expose_result: the gateway may forward arguments and results raw.
        live_streaming: in ``run_live``, an async generator whose every value
            is told to the model (``Function <name> returned: <value>``).
        max_lifetime, max_emissions, min_interval: bounds of a live stream
            (seconds, count, seconds between emissions with the latest winning).
    """

    name: str
    description: str
    timeout: float | None = None
    streaming: bool = False
    live_streaming: bool = False
    max_lifetime: float | None = None
    max_emissions: int | None = None
    min_interval: float | None = None
    requires_approval: bool = False
    long_running: bool = False
    return_direct: bool = False
    response_format: ResponseFormat = "content"
    idempotent: bool = False
    expose_result: bool = False

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
        """Start a streaming call (``streaming`` tools only): its events, then ``done``.

        Raises:
            ToolArgumentsError: ``args`` do not match the schema (nothing ran).
        """
        raise UserError(f"tool {self.name!r} does not stream")

    def cached(self, args: dict[str, Any]) -> tuple[bool, Any]:
        """``(True, result)`` when a cached result for ``args`` exists."""
        return False, None

    def remember(self, args: dict[str, Any], result: Any) -> None:  # noqa: B027 - optional hook
        """Offer a result to the tool's cache (a no-op without ``cache=True``)."""


class FunctionTool(BaseTool):
    """A plain function (sync or async) as a tool.

    Its name comes from the function, its description and argument docs from
    the Google-style docstring, its JSON schema from the type hints. A
    parameter annotated ``ToolContext`` is injected and hidden from the model.
    Sync functions run in a worker thread, off the event loop.

    Raises:
        UserError: at construction, when the signature cannot be described.
    """

    def __init__(
        self,
        func: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        timeout: float | None = None,
        streaming: bool | None = None,
        requires_approval: bool = False,
        cache: bool = False,
        cache_function: CacheFunction | None = None,
        response_format: ResponseFormat = "content",
        return_direct: bool = False,
        long_running: bool = False,
        idempotent: bool = False,
        expose_result: bool = False,
        max_lifetime: float | None = None,
        max_emissions: int | None = None,
        min_interval: float | None = None,
    ) -> None:
        if not callable(func):
            raise UserError(f"a tool must be a function, got {func!r}")
        self.func = func
        self.name = name or getattr(func, "__name__", "") or type(func).__name__
        is_generator = inspect.isasyncgenfunction(func)
        self.streaming = is_generator if streaming is None else streaming
        # An async generator not declared streaming=True is a live streaming tool in
        # run_live (its values feed the model); declared ones stream progress only.
        self.live_streaming = is_generator and streaming is None
        _check_flags(self.name, self.streaming, is_generator, cache, cache_function,
                     response_format, return_direct, long_running)
        self.max_lifetime = max_lifetime
        self.max_emissions = max_emissions
        self.min_interval = min_interval
        signature = inspect_function(func, self.name, hidden_types=(LiveRequestQueue,))
        self._input_params = tuple(signature.hidden)
        if self._input_params and not is_generator:
            raise UserError(
                f"tool {self.name!r} declares a LiveRequestQueue parameter "
                f"({', '.join(self._input_params)}) but is not an async generator: only a "
                "streaming tool can consume the live input stream")
        self.description = description if description is not None else signature.description
        self.timeout = timeout
        self.requires_approval = requires_approval
        self.cache = cache
        self.cache_function = cache_function
        self.response_format = response_format
        self.return_direct = return_direct
        self.long_running = long_running
        self.idempotent = idempotent
        self.expose_result = expose_result
        self._cache: dict[str, Any] = {}
        self._args_model = signature.args_model
        self._context_param = signature.context_param
        self._field_names = tuple(self._args_model.model_fields)
        self._is_async = inspect.iscoroutinefunction(func)
        self._declaration = ToolDeclaration(
            name=self.name, description=self.description,
            parameters=json_schema(self._args_model),
        )
        functools.update_wrapper(self, func)

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
        if self.streaming:
            raise UserError(f"tool {self.name!r} streams: call stream(), not run()")
        if self._is_async:
            return await self.func(**kwargs)
        result = await asyncio.to_thread(self.func, **kwargs)
        if inspect.isawaitable(result):
            result = await result
        return result

    def stream(self, args: dict[str, Any], context: ToolContext) -> AsyncIterator[Any]:
        kwargs = self.bind_arguments(args, context)
        generator: AsyncIterator[Any] = self.func(**kwargs)
        return generator

    def cached(self, args: dict[str, Any]) -> tuple[bool, Any]:
        if not self.cache:
            return False, None
        key = _cache_key(args)
        return (True, self._cache[key]) if key in self._cache else (False, None)

    def remember(self, args: dict[str, Any], result: Any) -> None:
        if self.cache and (self.cache_function is None or self.cache_function(args, result)):
            self._cache[_cache_key(args)] = result

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the underlying function directly (handy in tests)."""
        return self.func(*args, **kwargs)

    def __repr__(self) -> str:
        return f"FunctionTool({self.name!r})"


def _cache_key(args: dict[str, Any]) -> str:  # raw JSON object
    return json.dumps(args, sort_keys=True, separators=(",", ":"), default=repr)


def _check_flags(name: str, streaming: bool, is_generator: bool, cache: bool,
                 cache_function: CacheFunction | None, response_format: str,
                 return_direct: bool, long_running: bool) -> None:
    """Refuse incoherent flag combinations when the tool is built (seed 001's table)."""
    def refuse(why: str) -> None:
        raise ValueError(f"tool {name!r}: {why}")

    if response_format not in ("content", "content_and_artifact"):
        refuse(f"response_format must be 'content' or 'content_and_artifact', "
               f"not {response_format!r}")
    if cache_function is not None and not cache:
        refuse("cache_function is only consulted with cache=True")
    if streaming and not is_generator:
        refuse("streaming=True needs an async generator function (async def … yield)")
    if not streaming and is_generator:
        refuse("an async generator function is a streaming tool; do not pass streaming=False")
    if not streaming:
        return
    if cache:
        refuse("streaming=True cannot combine with cache=True: a cache stores a single "
               "value, not a stream")
    if cache_function is not None:
        refuse("streaming=True cannot combine with cache_function: it is only consulted "
               "with cache=True, which a stream cannot use")
    if response_format == "content_and_artifact":
        refuse("streaming=True cannot combine with response_format='content_and_artifact': "
               "the artifact channel needs the full payload")
    if return_direct:
        refuse("streaming=True cannot combine with return_direct=True: return-direct "
               "semantics do not apply to a streaming intermediary")
    if long_running:
        refuse("streaming=True cannot combine with long_running=True: a long-running tool "
               "answers with a ticket at once")


ToolLike = BaseTool | Callable[..., Any]


class ToolOptions(TypedDict, total=False):
    """The keyword options of :class:`FunctionTool` (and so of :func:`tool`)."""

    name: str | None
    description: str | None
    timeout: float | None
    streaming: bool | None
    requires_approval: bool
    cache: bool
    cache_function: CacheFunction | None
    response_format: ResponseFormat
    return_direct: bool
    long_running: bool
    idempotent: bool
    expose_result: bool
    max_lifetime: float | None
    max_emissions: int | None
    min_interval: float | None


def as_tool(obj: ToolLike) -> BaseTool:
    """A tool from a tool or a plain function."""
    return obj if isinstance(obj, BaseTool) else FunctionTool(obj)


@overload
def tool(func: Callable[..., Any], /) -> FunctionTool: ...
@overload
def tool(**options: Unpack[ToolOptions]) -> Callable[[Callable[..., Any]], FunctionTool]: ...
def tool(
    func: Callable[..., Any] | None = None,
    /,
    **options: Unpack[ToolOptions],
) -> FunctionTool | Callable[[Callable[..., Any]], FunctionTool]:
    """Turn a function into a :class:`FunctionTool`; usable bare or with options.

    The options are :class:`FunctionTool`'s; incoherent ones raise ``ValueError``
    here, when the tool is built.

    Example::

        @tool(streaming=True, requires_approval=True)
        async def deploy(env: str) -> AsyncIterator[ToolStreamEvent]:
            "Deploy with progress."
            yield ToolStreamEvent(type="part_delta", delta=f"deploying to {env}…")
            yield ToolStreamEvent(type="done", response="deployed")
    """
    def wrap(f: Callable[..., Any]) -> FunctionTool:
        return FunctionTool(f, **options)

    return wrap(func) if func is not None else wrap
