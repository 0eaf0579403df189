"""Tools: ``BaseTool``, ``FunctionTool`` (any plain function) and the ``@tool`` decorator."""

from __future__ import annotations

import asyncio
import functools
import inspect
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, overload

from pydantic import ValidationError

from ..errors import ToolError, UserError
from ..types import ToolDeclaration
from ._schema import inspect_function, json_schema
from .context import ToolContext


class ToolArgumentsError(ToolError):
    """The model's arguments do not match the tool's schema."""


class BaseTool(ABC):
    """Something a model can call.

    Attributes:
        name: the name the model calls it by.
        description: what the model is told it does.
        timeout: seconds a call may take (``None``: the run's default).
    """

    name: str
    description: str
    timeout: float | None = None

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
    ) -> None:
        if not callable(func):
            raise UserError(f"a tool must be a function, got {func!r}")
        self.func = func
        self.name = name or getattr(func, "__name__", "") or type(func).__name__
        signature = inspect_function(func, self.name)
        self.description = description if description is not None else signature.description
        self.timeout = timeout
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
        return kwargs

    async def run(self, args: dict[str, Any], context: ToolContext) -> Any:
        kwargs = self.bind_arguments(args, context)
        if self._is_async:
            return await self.func(**kwargs)
        result = await asyncio.to_thread(self.func, **kwargs)
        if inspect.isawaitable(result):
            result = await result
        return result

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the underlying function directly (handy in tests)."""
        return self.func(*args, **kwargs)

    def __repr__(self) -> str:
        return f"FunctionTool({self.name!r})"


ToolLike = BaseTool | Callable[..., Any]


def as_tool(obj: ToolLike) -> BaseTool:
    """A tool from a tool or a plain function."""
    return obj if isinstance(obj, BaseTool) else FunctionTool(obj)


@overload
def tool(func: Callable[..., Any], /) -> FunctionTool: ...
@overload
def tool(
    *, name: str | None = None, description: str | None = None, timeout: float | None = None
) -> Callable[[Callable[..., Any]], FunctionTool]: ...
def tool(
    func: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
) -> FunctionTool | Callable[[Callable[..., Any]], FunctionTool]:
    """Turn a function into a :class:`FunctionTool`; usable bare or with options.

    Example::

        @tool(timeout=5)
        async def lookup_order(order_id: str) -> dict[str, str]:
            "Find an order by id."
    """
    def wrap(f: Callable[..., Any]) -> FunctionTool:
        return FunctionTool(f, name=name, description=description, timeout=timeout)

    return wrap(func) if func is not None else wrap
