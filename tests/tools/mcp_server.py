"""A real MCP server, built with the official SDK, that the MCP tests talk to.

    python tests/tools/mcp_server.py stdio        # over stdin/stdout
    python tests/tools/mcp_server.py http [PORT]  # Streamable HTTP on 127.0.0.1 (0: a free port)

Over HTTP it prints ``PORT <n>`` once it listens. ``HW_MCP_MARK`` names a file
where a tool writes one line when the server sees its call cancelled
(``cancelled <tool>``) and when it starts (``started <tool>``).
"""

from __future__ import annotations

import base64
import os
import sys
from typing import Annotated, TypedDict

import anyio
import mcp_types as types
from mcp.server.mcpserver import Context, Elicit, ElicitationResult, MCPServer, Resolve, Sample
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel

server = MCPServer("test-server", log_level="WARNING")

PIXEL = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==")
"""A 1x1 PNG."""


def mark(line: str) -> None:
    path = os.environ.get("HW_MCP_MARK")
    if path:
        with open(path, "a", encoding="utf-8") as out:
            out.write(line + "\n")


@server.tool(structured_output=False)
def echo(text: str) -> str:
    """Say the text back."""
    return text


@server.tool()
def pid() -> int:
    """The server's process id."""
    return os.getpid()


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


class Weather(TypedDict):
    city: str
    celsius: float


@server.tool()
def weather(city: str) -> Weather:
    """The weather in a city, as an object."""
    return Weather(city=city, celsius=21.5)


@server.tool(structured_output=False)
async def slow(steps: int, ctx: Context, pause: float = 0.2) -> str:
    """Count to steps, reporting progress at each step."""
    mark("started slow")
    try:
        for step in range(1, steps + 1):
            await ctx.report_progress(step, steps, f"step {step} of {steps}")
            await anyio.sleep(pause)
    except anyio.get_cancelled_exc_class():
        mark("cancelled slow")
        raise
    return f"counted to {steps}"


@server.tool(structured_output=False)
async def hang() -> str:
    """Never answer."""
    mark("started hang")
    try:
        await anyio.sleep(3600)
    except anyio.get_cancelled_exc_class():
        mark("cancelled hang")
        raise
    return "never"


@server.tool(structured_output=False)
def fail() -> str:
    """Always fail."""
    raise ToolError("the disk is full")


@server.tool(structured_output=False)
async def crash(ctx: Context) -> str:
    """Exit the server in the middle of the call."""
    await ctx.report_progress(1, 2, "about to crash")
    await anyio.sleep(0.1)
    os._exit(3)


@server.tool(structured_output=False)
def picture() -> list[types.ContentBlock]:
    """A picture and a caption."""
    return [types.TextContent(text="a single pixel"),
            types.ImageContent(data=base64.b64encode(PIXEL).decode(), mime_type="image/png")]


@server.tool(structured_output=False)
def document() -> list[types.ContentBlock]:
    """A document, embedded, and a link to another."""
    return [types.EmbeddedResource(resource=types.TextResourceContents(
                uri="file:///notes.txt", mime_type="text/plain", text="remember the milk")),
            types.ResourceLink(uri="file:///big.csv", name="big.csv", mime_type="text/csv")]


class Name(BaseModel):
    name: str


def ask_name() -> Elicit[Name]:
    return Elicit("What is your name?", Name)


@server.tool(structured_output=False)
def ask(answer: Annotated[ElicitationResult[Name], Resolve(ask_name)]) -> str:
    """Ask the user for their name."""
    return f"elicitation {answer.action}: {getattr(answer, 'data', None)}"


def haiku() -> Sample:
    return Sample([types.SamplingMessage(role="user", content=types.TextContent(text="a haiku"))],
                  max_tokens=20)


@server.tool(structured_output=False)
def sample(poem: Annotated[types.CreateMessageResult, Resolve(haiku)]) -> str:
    """Ask the client's model for a haiku."""
    return f"sampling answered: {poem.content}"


def serve_http(port: int) -> None:
    import uvicorn

    app = server.streamable_http_app(host="127.0.0.1")
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
    uv = uvicorn.Server(config)

    async def main() -> None:
        config.load()
        uv.lifespan = config.lifespan_class(config)
        await uv.startup()  # listens, then says where
        print(f"PORT {uv.servers[0].sockets[0].getsockname()[1]}", flush=True)
        await uv.main_loop()
        await uv.shutdown()

    anyio.run(main)


if __name__ == "__main__":
    if sys.argv[1:2] == ["http"]:
        serve_http(int(sys.argv[2]) if len(sys.argv) > 2 else 0)
    else:
        server.run()
