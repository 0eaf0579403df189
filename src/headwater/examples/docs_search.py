"""The docs search (seed 001): ``search_docs`` reports its progress as it goes.

A progress tool (``@tool(streaming=True)``): each ``part_delta`` it yields is a
progress event for the caller (the page draws a bar from "2/5"); its one
``done`` response is the result the model sees. Run it::

    python -m headwater.examples.docs_search ["Search the docs for streaming"]
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Sequence

from ..agents.agent import Agent
from ..core.events import ToolStreamEvent
from ..models.base import BaseLlm
from ..tools.context import ToolContext
from ..tools.function_tool import tool
from ._console import example_model, parse_args, run_turns, step_pause

PROMPT = "Search the docs for streaming"
DESCRIPTION = "Questions about headwater, answered from its docs with search_docs."
INSTRUCTION = "Answer questions about headwater; search the docs first."
DOCS = (
    ("Streaming events", "docs/event-contract.md"),
    ("Streaming over HTTP: the frame protocol", "docs/frame-protocol.md"),
    ("Live streaming tools", "docs/architecture.md"),
    ("Approval gates", "docs/architecture.md"),
    ("Session stores", "docs/architecture.md"),
)


@tool(streaming=True)
async def search_docs(query: str,
                      tool_context: ToolContext) -> AsyncIterator[ToolStreamEvent]:
    """Search the documentation; reports its progress as it goes.

    Args:
        query: words to look for.
    """
    words = query.lower().split()
    hits: list[dict[str, str]] = []
    for index, (title, path) in enumerate(DOCS, start=1):
        await tool_context.clock.sleep(step_pause())
        if any(word in title.lower() for word in words):
            hits.append({"title": title, "path": path})
        yield ToolStreamEvent(type="part_delta", index=0,
                              delta=f"{index}/{len(DOCS)} searched {path}")
    yield ToolStreamEvent(type="done", response={"query": query, "results": hits})


def build_agent(model: str | BaseLlm) -> Agent:
    """The ``docs`` agent on ``model``."""
    return Agent(name="docs", model=model, tools=[search_docs], instruction=INSTRUCTION,
                 description=DESCRIPTION)


def main(argv: Sequence[str] | None = None) -> int:
    """Search once and print the progress and the streamed answer."""
    args = parse_args("docs_search", "Search headwater's docs, with progress.", PROMPT, argv)
    return asyncio.run(run_turns(build_agent(example_model()), args.message, sys.stdout))


if __name__ == "__main__":
    sys.exit(main())
