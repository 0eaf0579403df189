"""``BaseToolset``: tools an agent gets from elsewhere, known once the toolset is listed.

A toolset goes in an agent's ``tools=[…]`` beside plain tools. Its tools are
not known when the agent is built: an MCP server (``headwater.tools.mcp``) says
what it offers only once it runs. The agent asks for them when a run needs them
(:attr:`headwater.Agent.tools`), and whoever starts runs on an event loop opens
the toolset first (``await toolset.open()``; the gateway, ``headwater run``,
``headwater chat`` and ``headwater mcp`` do it for every toolset of their
agents), so that asking never waits. A toolset that nobody opened is listed
when a run first asks, on a thread of its own: the run waits for it (docs/mcp.md).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection

from .function_tool import BaseTool


class BaseToolset(ABC):
    """A set of tools listed from elsewhere; it may hold a connection, closed by :meth:`aclose`.

    Attributes:
        version: grows each time the listing changes (an agent rebuilds its
            tools then); 0 before the first listing.
    """

    version: int = 0

    @abstractmethod
    async def open(self) -> None:
        """List the tools (connecting first when needed); at once when they are listed.

        Raises:
            McpUnavailableError (or another ``HeadwaterError``): the tools could
                not be listed; the message says where they come from.
        """

    @abstractmethod
    def listed(self) -> tuple[BaseTool, ...] | None:
        """The tools as last listed, or ``None`` before the first listing; no I/O."""

    @abstractmethod
    def list_now(self) -> tuple[BaseTool, ...]:
        """The tools, listed first (blocking the calling thread) when they never were.

        Raises:
            as :meth:`open`.
        """

    def declared_names(self) -> Collection[str] | None:
        """The names its tools will have, when known without listing (a filter that names
        them), else ``None``: an agent refuses a clash with them when it is built."""
        return None

    @abstractmethod
    async def aclose(self) -> None:
        """Close what the toolset holds (a connection, a server process); it may be
        opened again by the next use. Idempotent."""
