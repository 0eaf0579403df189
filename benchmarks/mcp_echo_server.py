"""Benchmark P1's stdio MCP server (benchmarks/mcp_turns.py): the SDK's low-level ``Server``.

Tools: ``echo(value)`` (the benchmark's tool, the same function the in-process
turn calls), ``usage()`` (this process's CPU seconds, user + system), ``wait()``
(writes ``start <time.time()>`` to ``$HW_BENCH_MARK``, never answers, and writes
``cancel <time>`` when cancelled) and ``crash()`` (writes ``crash <time>``, then
exits mid-call).

    python benchmarks/mcp_echo_server.py          # the SDK's low-level server
    python benchmarks/mcp_echo_server.py --bare   # echo alone, JSON-RPC by hand: the floor

``--bare`` answers ``initialize``, ``tools/list`` and ``tools/call`` of ``echo`` with a
loop over stdin and nothing else (``server/discover`` is "method not found", so the
client falls back to the 2025 handshake): what is left of a call's cost is the
client's and the pipe's.
"""

from __future__ import annotations

import os
import time
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

_OBJECT = {"type": "object", "properties": {"value": {"type": "string"}}}
TOOLS = [types.Tool(name=name, description=f"The benchmark's {name}.", input_schema=_OBJECT)
         for name in ("echo", "usage", "wait", "crash")]


async def echo(value: str) -> dict[str, str]:
    """The benchmark's tool: its argument back (what S2's ``echo`` does)."""
    return {"echo": value}


def mark(what: str) -> None:
    with open(os.environ["HW_BENCH_MARK"], "a", encoding="utf-8") as out:
        out.write(f"{what} {time.time()}\n")


async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
    return types.ListToolsResult(tools=TOOLS)


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    if params.name == "echo":
        value = await echo(str((params.arguments or {}).get("value", "")))
        return types.CallToolResult(content=[types.TextContent(text=value["echo"])],
                                    structured_content=value)
    if params.name == "usage":
        cpu = os.times()
        return types.CallToolResult(content=[types.TextContent(text=f"{cpu.user + cpu.system}")])
    if params.name == "wait":
        mark("start")
        try:
            await anyio.sleep(3600)
        except anyio.get_cancelled_exc_class():
            mark("cancel")
            raise
    mark("crash")
    os._exit(3)


server = Server("bench", on_list_tools=list_tools, on_call_tool=call_tool)


async def main() -> None:
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def bare() -> None:
    """``echo`` over stdio with no SDK: one JSON-RPC line in, one out."""
    import json
    import sys

    tools = [tool.model_dump(by_alias=True, exclude_none=True) for tool in TOOLS[:1]]
    for line in sys.stdin:
        message = json.loads(line)
        if "id" not in message:
            continue  # a notification
        method, params = message["method"], message.get("params") or {}
        if method == "initialize":
            result: dict[str, Any] = {
                "protocolVersion": params.get("protocolVersion", "2025-11-25"),
                "capabilities": {"tools": {}}, "serverInfo": {"name": "bare", "version": "1"}}
        elif method == "tools/list":
            result = {"tools": tools}
        elif method == "tools/call":
            value = str((params.get("arguments") or {}).get("value", ""))
            result = {"content": [{"type": "text", "text": value}],
                      "structuredContent": {"echo": value}}
        else:
            reply = {"jsonrpc": "2.0", "id": message["id"],
                     "error": {"code": -32601, "message": f"no method {method}"}}
            print(json.dumps(reply), flush=True)
            continue
        print(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}), flush=True)


if __name__ == "__main__":
    import sys

    if sys.argv[1:] == ["--bare"]:
        bare()
    else:
        anyio.run(main)
