"""Plain functions as tools: names, schemas from hints, docs from docstrings."""

from __future__ import annotations

from enum import Enum
from typing import Literal

import pytest
from pydantic import BaseModel

from headwater import FunctionTool, ToolContext, tool
from headwater.errors import UserError
from headwater.tools import ToolArgumentsError


class Priority(Enum):
    LOW = "low"
    HIGH = "high"


class Address(BaseModel):
    street: str
    city: str


def create_ticket(title: str, priority: Priority, tags: list[str] | None = None,
                  ship_to: Address | None = None, mode: Literal["fast", "slow"] = "fast",
                  tool_context: ToolContext | None = None) -> str:
    """Open a support ticket.

    Longer explanation that the model also reads.

    Args:
        title: one line that says what is wrong.
        priority: how urgent it is; HIGH pages someone
            at night.
        tags: free-form labels.

    Returns:
        The ticket id.
    """
    return "T-1"


def test_schema_from_hints_and_docstring() -> None:
    t = FunctionTool(create_ticket)
    decl = t.declaration()
    assert decl.name == "create_ticket"
    assert decl.description == (
        "Open a support ticket.\n\nLonger explanation that the model also reads.")
    props = decl.parameters["properties"]
    assert set(props) == {"title", "priority", "tags", "ship_to", "mode"}
    assert props["title"] == {"type": "string", "description": "one line that says what is wrong."}
    assert props["priority"]["description"] == "how urgent it is; HIGH pages someone at night."
    assert props["mode"]["enum"] == ["fast", "slow"]
    assert decl.parameters["required"] == ["title", "priority"]
    assert "Address" in str(decl.parameters["$defs"])
    assert "tool_context" not in str(decl.parameters)


def test_tool_context_annotation_is_injected_whatever_its_name() -> None:
    def f(x: int, ctx: ToolContext) -> int:
        return x

    assert list(FunctionTool(f).declaration().parameters["properties"]) == ["x"]


def test_validation_coerces_and_rejects() -> None:
    t = FunctionTool(create_ticket)
    ctx = ToolContext(function_call_id="c", tool_name="create_ticket", invocation_id="i",
                      agent_name="a", app_name="app", user_id="u", session_id="s",
                      session_state={})
    kwargs = t.bind_arguments({"title": "x", "priority": "high",
                               "ship_to": {"street": "1 Main", "city": "Oslo"}}, ctx)
    assert kwargs["priority"] is Priority.HIGH
    assert isinstance(kwargs["ship_to"], Address)
    assert kwargs["tool_context"] is ctx
    with pytest.raises(ToolArgumentsError, match="priority"):
        t.bind_arguments({"title": "x", "priority": "urgent"}, ctx)
    with pytest.raises(ToolArgumentsError, match="surprise: Extra inputs"):
        t.bind_arguments({"title": "x", "priority": "low", "surprise": 1}, ctx)


def test_decorator_bare_and_with_options() -> None:
    @tool
    async def ping() -> str:
        """Answer pong."""
        return "pong"

    @tool(name="renamed", description="Custom.", timeout=3)
    def original(a: int) -> int:
        return a

    assert isinstance(ping, FunctionTool) and ping.declaration().description == "Answer pong."
    assert original.name == "renamed" and original.options.timeout == 3
    assert original(2) == 2


def test_undescribable_signatures_are_clear_errors() -> None:
    def star(*args: int) -> None: ...

    with pytest.raises(UserError, match=r"\*args"):
        FunctionTool(star)
    with pytest.raises(UserError, match="function"):
        FunctionTool(42)  # type: ignore[arg-type]


def test_every_tool_option_is_a_keyword_of_tool_and_function_tool() -> None:
    """Option names are written once (ToolOptions); both spellings accept every one."""
    from dataclasses import fields

    from headwater.tools import ToolOptions

    def answer() -> str:
        return "x"

    for field in fields(ToolOptions):
        value = getattr(ToolOptions(), field.name)
        assert getattr(FunctionTool(answer, **{field.name: value}).options, field.name) == value
        assert getattr(tool(**{field.name: value})(answer).options, field.name) == value
