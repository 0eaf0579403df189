"""Tool declarations from plain functions: name, docstring, JSON schema (pydantic)."""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, create_model

from ..core.errors import UserError
from .context import ToolContext

_SECTION = re.compile(
    r"^\s*(Args|Arguments|Parameters|Returns|Yields|Raises|Examples?|Notes?)\s*:\s*$")
_ARG_LINE = re.compile(r"^\s*(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


@dataclass(slots=True)
class Signature:
    """What a function exposes to a model, and how to call it back."""

    description: str
    args_model: type[BaseModel]
    context_param: str | None
    """Name of the parameter that receives the ``ToolContext``, if any."""
    hidden: dict[str, Any]
    """Other injected parameters (by name → annotation), hidden from the model."""


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into its description and per-argument docs."""
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    description: list[str] = []
    args: dict[str, str] = {}
    section: str | None = None
    current: str | None = None
    for line in lines:
        heading = _SECTION.match(line)
        if heading:
            section, current = heading.group(1), None
            continue
        if section is None:
            description.append(line)
        elif section in ("Args", "Arguments", "Parameters"):
            match = _ARG_LINE.match(line)
            if match and (len(line) - len(line.lstrip())) <= 4:
                current = match.group(1).lstrip("*")
                args[current] = match.group(2).strip()
            elif current and line.strip():
                args[current] = f"{args[current]} {line.strip()}".strip()
    return "\n".join(description).strip(), args


def inspect_function(
    func: Callable[..., Any], name: str, hidden_types: tuple[type, ...] = ()
) -> Signature:
    """Build the argument model of ``func``.

    Parameters annotated ``ToolContext`` (or one of ``hidden_types``) are
    injected by the runner and left out of the schema.

    Raises:
        UserError: ``*args``/``**kwargs`` or an annotation pydantic cannot describe.
    """
    description, arg_docs = parse_docstring(inspect.getdoc(func))
    try:
        hints = typing.get_type_hints(func, include_extras=True)
    except (NameError, TypeError) as exc:
        raise UserError(f"tool {name!r}: cannot resolve type hints ({exc})") from exc
    fields: dict[str, Any] = {}
    context_param: str | None = None
    hidden: dict[str, Any] = {}
    for param in inspect.signature(func).parameters.values():
        annotation = hints.get(param.name, Any)
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise UserError(
                f"tool {name!r}: *{param.name} cannot be described to a model; "
                "declare each argument explicitly"
            )
        if _is_context(annotation):
            context_param = param.name
            continue
        if isinstance(annotation, type) and issubclass(annotation, hidden_types):
            hidden[param.name] = annotation
            continue
        default = ... if param.default is param.empty else param.default
        fields[param.name] = (annotation, Field(default, description=arg_docs.get(param.name)))
    try:
        model = create_model(
            f"{name}_arguments",
            __config__=ConfigDict(extra="forbid", arbitrary_types_allowed=False),
            **fields,
        )
        model.model_json_schema()
    except Exception as exc:  # pydantic raises several types for undescribable hints
        raise UserError(f"tool {name!r}: argument types cannot be described ({exc})") from exc
    return Signature(description=description, args_model=model, context_param=context_param,
                     hidden=hidden)


def _is_context(annotation: Any) -> bool:
    """``ToolContext``, ``ToolContext | None`` or ``Annotated[ToolContext, …]``."""
    if annotation is ToolContext:
        return True
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _is_context(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return ToolContext in typing.get_args(annotation)
    return False


def json_schema(args_model: type[BaseModel]) -> dict[str, Any]:
    """The model-facing JSON schema of an argument model (titles dropped)."""
    schema = args_model.model_json_schema()
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        if isinstance(prop, dict):
            prop.pop("title", None)
    schema.setdefault("properties", {})
    return schema
