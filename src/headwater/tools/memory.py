"""The memory tools, as ADK's: ``load_memory`` (the model asks) and ``preload_memory``
(the user's message is looked up before every model call).

Both read the runner's memory service through
:meth:`ToolContext.search_memory <headwater.tools.context.ToolContext.search_memory>`
(``Runner(memory_service=…)``; ``InMemoryRunner`` has one); only text parts of
a memory are shown to the model.
"""

from __future__ import annotations

from typing import Any

from ..core.types import ToolDeclaration
from ..models.llm_request import LlmRequest
from .context import ToolContext
from .function_tool import BaseTool, FunctionTool

LOAD_MEMORY_INSTRUCTION = (
    "You have memory. You can use it to answer questions. If any questions need\n"
    "you to look up the memory, you should call load_memory function with a query.")
"""What ``load_memory`` adds to its agent's instruction (ADK's words)."""


async def _load_memory(query: str, tool_context: ToolContext) -> dict[str, Any]:
    """Loads the memory for the current user.

    Args:
        query: The query to load the memory for.
    """
    found = await tool_context.search_memory(query)
    return {"memories": [m.model_dump(mode="json", exclude_none=True) for m in found.memories]}


class LoadMemoryTool(FunctionTool):
    """``load_memory(query)``: the model searches the user's past sessions; it also tells
    the model, in its instruction, that it has a memory."""

    def __init__(self) -> None:
        super().__init__(_load_memory, name="load_memory")

    async def process_llm_request(self, *, tool_context: ToolContext,
                                  llm_request: LlmRequest) -> None:
        llm_request.append_instructions([LOAD_MEMORY_INSTRUCTION])


class PreloadMemoryTool(BaseTool):
    """Not a tool the model calls: before each model call it searches the memory with the
    text of the user's message and adds what it finds to the instruction, inside
    ``<PAST_CONVERSATIONS>`` (ADK's ``PreloadMemoryTool``)."""

    name = "preload_memory"
    description = "preload_memory"
    declares_function = False

    def declaration(self) -> ToolDeclaration:
        return ToolDeclaration(name=self.name, description=self.description,
                               parameters={"type": "object", "properties": {}})

    async def run(self, args: dict[str, Any], context: ToolContext) -> Any:
        raise NotImplementedError("preload_memory is never called: it is not declared")

    async def process_llm_request(self, *, tool_context: ToolContext,
                                  llm_request: LlmRequest) -> None:
        content = tool_context.user_content
        if content is None or not content.parts or not content.parts[0].text:
            return
        found = await tool_context.search_memory(content.parts[0].text)
        lines: list[str] = []
        for memory in found.memories:
            if memory.timestamp:
                lines.append(f"Time: {memory.timestamp}")
            text = " ".join(p.text for p in memory.content.parts if p.text)
            if text:
                lines.append(f"{memory.author}: {text}" if memory.author else text)
        if lines:
            past = "\n".join(lines)
            llm_request.append_instructions([
                "The following content is from your previous conversations with the user.\n"
                "They may be useful for answering the user's current query.\n"
                f"<PAST_CONVERSATIONS>\n{past}\n</PAST_CONVERSATIONS>\n"])


load_memory = LoadMemoryTool()
"""The ``load_memory`` tool (ADK's ``google.adk.tools.load_memory``)."""

preload_memory = PreloadMemoryTool()
"""The ``preload_memory`` tool (ADK's ``google.adk.tools.preload_memory``)."""
