"""``Example`` and ``ExampleTool``: few-shot examples put into an agent's instruction (ADK's).

An ``ExampleTool`` is a tool the model never calls: it declares no function
(``declares_function`` is false) and only processes each request of its agent
(:meth:`BaseTool.process_llm_request`), appending its examples to the system
instruction in ADK's text format (``google.adk.examples.example_util``): an
``<EXAMPLES>`` block, each example's user text, then its output contents — text
as it is, a function call as ``name(key='value', …)`` and a function response
as its fields, each in a fenced block.

As in ADK, the examples are added only when the conversation's latest user
content starts with text (a request answering calls adds none).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, TypeAdapter

from ..core.context import CallbackContext
from ..core.errors import UserError
from ..core.types import Content, ToolDeclaration
from ..models.llm_request import LlmRequest
from .function_tool import BaseTool

_INTRO = ("<EXAMPLES>\nBegin few-shot\nThe following are examples of user queries and"
          " model responses using the available tools.\n\n")
_END = "End few-shot\n<EXAMPLES>"
_FENCE = "```\n"
_FENCE_END = "\n```\n"


class Example(BaseModel):
    """One few-shot example: what the user said, and what the model answered.

    Attributes:
        input: the user's content.
        output: the contents that followed (the model's text, calls, results).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    input: Content
    output: list[Content]


_EXAMPLES: TypeAdapter[list[Example]] = TypeAdapter(list[Example])


def _call_text(name: str, args: dict[str, Any]) -> str:  # args: raw JSON object
    shown = ", ".join(f"{k}='{v}'" if isinstance(v, str) else f"{k}={v}"
                      for k, v in args.items())
    return f"{_FENCE}{name}({shown}){_FENCE_END}"


def examples_text(examples: Sequence[Example]) -> str:
    """The examples as instruction text, in ADK's format (``convert_examples_to_text``)."""
    out: list[str] = [_INTRO]
    for number, example in enumerate(examples, 1):
        out.append(f"EXAMPLE {number}:\nBegin example\n[user]\n")
        texts = [part.text for part in example.input.parts if part.text]
        if texts:
            out.append("\n".join(texts) + "\n")
        previous = None
        for content in example.output:
            role = "[model]\n" if content.role == "model" else "[user]\n"
            if role != previous:
                out.append(role)
            previous = role
            for part in content.parts:
                if part.function_call is not None:
                    out.append(_call_text(part.function_call.name, part.function_call.args))
                elif part.function_response is not None:
                    r = part.function_response
                    shown = {"id": r.id, "name": r.name, "response": r.response}
                    out.append(f"{_FENCE}{shown}{_FENCE_END}")
                elif part.text:
                    out.append(f"{part.text}\n")
        out.append("End example\n\n")
    out.append(_END)
    return "".join(out)


def append_instruction(request: LlmRequest, text: str) -> None:
    """Add ``text`` to the request's system instruction, after a blank line (ADK's
    ``append_instructions``)."""
    current = request.system_instruction
    request.system_instruction = f"{current}\n\n{text}" if current else text


def _latest_user_text(contents: Sequence[Content]) -> str:
    for content in reversed(contents):
        if content.role == "user":
            parts = content.parts
            return parts[0].text or "" if parts else ""
    return ""


class ExampleTool(BaseTool):
    """Few-shot examples for an agent's model (ADK's ``ExampleTool``): put it in the
    agent's ``tools``.

    Args:
        examples: :class:`Example` objects (or dicts of their fields).

    Raises:
        UserError: an example that is not one.
    """

    declares_function = False

    def __init__(self, examples: Sequence[Example | dict[str, Any]]) -> None:
        self.name = "example_tool"
        self.description = "example tool"
        try:
            self.examples: list[Example] = _EXAMPLES.validate_python(list(examples))
        except ValueError as exc:
            raise UserError(f"ExampleTool: examples must be Example(input=Content, "
                            f"output=[Content, ...]): {exc}") from None
        self._text = examples_text(self.examples)

    def declaration(self) -> ToolDeclaration:
        """Not offered to the model (``declares_function`` is false); for completeness."""
        return ToolDeclaration(name=self.name, description=self.description, parameters={})

    async def run(self, args: dict[str, Any], context: Any) -> Any:
        """Never called by a model that was not offered it.

        Raises:
            UserError: always.
        """
        raise UserError("example_tool is not a function: it only adds examples to requests")

    async def process_llm_request(self, *, tool_context: CallbackContext,
                                  llm_request: LlmRequest) -> None:
        """Append the examples to the request's instruction (when the latest user content
        starts with text)."""
        if _latest_user_text(llm_request.contents):
            append_instruction(llm_request, self._text)
