"""The indexer (issue 28): an agent whose tools come from an MCP server, with progress.

Its one toolset is ``McpToolset`` over the stdio server of
:mod:`headwater.examples.index_server` (started with ``python -m``, this
interpreter, this headwater), whose ``index_docs`` reports each page it indexes:
the page, ``headwater chat`` and ``--json`` show a bar that fills with the
server's message beside it, and a Stop cancels the call on the server. Run it::

    python -m headwater.examples.indexer ["Index the docs"]

Needs the MCP SDK (``pip install "headwater[mcp]"``).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path

from ..agents.agent import Agent
from ..models.base import BaseLlm
from ..tools.mcp import McpToolset
from ._console import example_model, parse_args, run_turns, step_pause

PROMPT = "Index the docs"
DESCRIPTION = ("Indexes headwater's docs for search with index_docs, a tool of an MCP server "
               "that reports its progress page by page.")
INSTRUCTION = "Index the documentation with index_docs when asked, then say what was indexed."
SERVER = "headwater.examples.index_server"


def server_toolset() -> McpToolset:
    """The index server's tools: this interpreter runs ``python -m`` the server from this
    headwater (its directory on ``PYTHONPATH``), at this process's demo pace."""
    source = Path(__file__).resolve().parents[2]
    pace = step_pause() / 10
    return McpToolset(command=[sys.executable, "-m", SERVER],
                      env={"PYTHONPATH": str(source), "HEADWATER_DEMO_WORD_DELAY": f"{pace:g}"})


def build_agent(model: str | BaseLlm) -> Agent:
    """The ``indexer`` agent on ``model``."""
    return Agent(name="indexer", model=model, tools=[server_toolset()],
                 instruction=INSTRUCTION, description=DESCRIPTION)


def main(argv: Sequence[str] | None = None) -> int:
    """Ask the indexer once and print the streamed answer (with the tool's progress)."""
    args = parse_args("indexer", "Ask the indexer to index the docs.", PROMPT, argv)
    return asyncio.run(run_turns(build_agent(example_model()), args.message, sys.stdout))


if __name__ == "__main__":
    sys.exit(main())
