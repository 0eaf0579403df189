"""An MCP server (the official SDK's ``MCPServer``) whose slow tool reports its progress.

``index_docs`` indexes headwater's documentation page by page: before each page
it sends ``notifications/progress`` (``progress`` of ``total`` pages, and which
page) and pauses one demo step (ten words of ``Settings.demo_word_delay``). A
cancel from the client stops it at once; it says so on stderr. Run it over
stdio, as an MCP client starts it::

    python -m headwater.examples.index_server

The demo's ``indexer`` agent (:mod:`headwater.examples.indexer`) gets its tools
from it through ``McpToolset``.
"""

from __future__ import annotations

import sys
from typing import TypedDict

import anyio
from mcp.server.mcpserver import Context, MCPServer

from ..core.settings import get_settings

PAGES = (
    ("README.md", 2210), ("docs/architecture.md", 3904), ("docs/event-contract.md", 2875),
    ("docs/frame-protocol.md", 6120), ("docs/tools.md", 3411), ("docs/multi-agent.md", 2650),
    ("docs/mcp.md", 1840), ("docs/deployment.md", 2290),
)
"""The pages it indexes, with their words."""

server = MCPServer("headwater-docs-index", log_level="WARNING",
                   instructions="Indexes headwater's documentation for search.")


class Index(TypedDict):
    """What ``index_docs`` answers."""

    pages: int
    words: int
    indexed: list[str]


@server.tool()
async def index_docs(ctx: Context) -> Index:
    """Index headwater's documentation for search, page by page (slow: it reports progress)."""
    step = get_settings().demo_word_delay * 10
    done: list[str] = []
    try:
        for number, (page, _) in enumerate(PAGES, start=1):
            await ctx.report_progress(number - 1, len(PAGES), f"indexing {page}")
            await anyio.sleep(step)
            done.append(page)
        await ctx.report_progress(len(PAGES), len(PAGES), "index written")
    except anyio.get_cancelled_exc_class():
        print(f"index_docs cancelled after {len(done)} of {len(PAGES)} pages",
              file=sys.stderr, flush=True)
        raise
    return Index(pages=len(done), words=sum(words for _, words in PAGES), indexed=done)


def main() -> None:
    """Serve over stdio until the client closes stdin."""
    server.run()


if __name__ == "__main__":
    main()
