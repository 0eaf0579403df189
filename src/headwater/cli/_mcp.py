"""``headwater mcp path/to/agent.py``: the file's agent as an MCP tool, over stdio.

For desktop MCP clients, IDEs and the MCP Inspector: the client starts this
command and speaks MCP on its stdin and stdout, so nothing else is written to
stdout (the log goes to stderr). The agent is served the way the gateway serves
it (:mod:`headwater.gateway.mcp_server`), each call a run in the session store,
as the one local user of dev mode.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path
from typing import Any

from ..agents.base import BaseAgent
from ..agents.toolsets import open_toolsets
from ._common import DEMO_USER
from ._run import load_agent, on_model
from ._store import open_store, probe


def mcp_command(args: Any) -> int:  # argparse.Namespace
    """Serve the file's agent over stdio until the client closes stdin."""
    agent = load_agent(Path(args.path))
    if args.model:
        on_model(agent, args.model)
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING,
                        format="headwater mcp: %(message)s")
    asyncio.run(serve_stdio(agent, args.db))
    return 0


async def serve_stdio(agent: BaseAgent, db: str | None) -> None:
    """Serve ``agent`` on this process's stdin and stdout until the client closes them.

    Raises:
        CommandError: the store cannot be used.
        McpUnavailableError: an MCP server the agent uses cannot be started or reached.
    """
    from mcp.server.stdio import stdio_server

    from ..core.settings import get_settings
    from ..gateway.core import Gateway
    from ..gateway.mcp_server import agent_server
    from ..gateway.runs.runlog import InMemoryRunLog

    settings = get_settings()
    service, shown = open_store(db)
    gateway = Gateway([agent], service, None, settings, InMemoryRunLog(settings=settings),
                      owns_service=True)
    try:
        await probe(service, shown)
        await open_toolsets(agent)  # an MCP server that cannot start: one line, then exit 2

        async def local_user(ctx: Any) -> str:
            return DEMO_USER

        server = agent_server(gateway, local_user)
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
    finally:
        await gateway.runs.aclose()
        await gateway.close_tools()
        await service.close()
