"""P1: one tool turn through a stdio MCP server against the same tool in process (issue 28).

- ``in_process_ms_per_turn`` / ``mcp_ms_per_turn``: the median wall time of one turn
  (``create_session`` + ``run_async`` consumed: the model calls ``echo``, then answers
  "ok"), in memory, the tool an async ``FunctionTool`` or the same function served by
  benchmarks/mcp_echo_server.py over stdio through ``McpToolset``.
- ``overhead_ms_per_call``: the paired median of (MCP − in process) over rounds that
  alternate a block of each, so the other tenants' load falls on both alike.
- ``overhead_cpu_ms_per_call``: CPU time (this process's, and the server's as it
  reports it) per MCP turn minus this process's per in-process turn: what a call
  costs the machine, whatever else runs on it.
- ``sdk_call_ms``: the median wall time of the same call made with the SDK's client
  alone (``client.call_tool``, to a server of its own): the SDK and the server's
  share of the overhead; ``headwater_ms_per_call`` is the overhead less it.
- ``bare_overhead_ms_per_call``: the overhead against ``mcp_echo_server.py --bare``
  (echo answered by a loop over stdin, no SDK in the server): what a call costs on
  the client's side and the pipe, whatever server answers it.
- ``cancel_seen_ms``: from closing a run whose call is in flight on the server to the
  server's cancelled handler running (median; wall clocks of one machine).
- ``crash_error_ms``: from the server exiting mid-call to the call's error result in
  the run (median).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
from contextlib import aclosing
from pathlib import Path
from typing import Any

from mcp import Client, StdioServerParameters

from headwater import Agent, RunConfig, Runner, StreamingMode, tool
from headwater.agents.toolsets import open_toolsets
from headwater.testing import ScriptedModel
from headwater.tools.context import ToolContext
from headwater.tools.mcp import McpToolset

HERE = Path(__file__).resolve().parent
SERVER = str(HERE / "mcp_echo_server.py")
SSE = RunConfig(streaming_mode=StreamingMode.SSE)
Figures = dict[str, float]


@tool
async def echo(value: str) -> dict[str, str]:
    """Say the value back."""
    return {"echo": value}


def _turns() -> ScriptedModel:
    return ScriptedModel(repeat=True).call("echo", {"value": "x"}).reply("ok")


async def _turn(runner: Runner) -> None:
    session = await runner.create_session(user_id="u")
    async with aclosing(runner.run_async(user_id="u", session_id=session.id,
                                         new_message="echo x", run_config=SSE)) as stream:
        async for _ in stream:
            pass


async def _block(runner: Runner, turns: int) -> tuple[float, float]:
    """Wall and CPU seconds per turn over ``turns`` turns."""
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(turns):
        await _turn(runner)
    return ((time.perf_counter() - wall) / turns, (time.process_time() - cpu) / turns)


async def _sdk_block(client: Client, calls: int) -> float:
    """Wall seconds per ``echo`` call made with the SDK's client alone."""
    started = time.perf_counter()
    for _ in range(calls):
        await client.call_tool("echo", {"value": "x"})
    return (time.perf_counter() - started) / calls


_CONTEXT = ToolContext(function_call_id="usage", tool_name="usage", invocation_id="bench",
                       agent_name="bench", app_name="b", user_id="u", session_id="s",
                       session_state={})


async def _server_cpu(toolset: McpToolset) -> float:
    """The server's CPU seconds so far (its ``usage`` tool, called through the toolset)."""
    [usage] = [t for t in toolset.listed() or () if t.name == "usage"]
    async for event in usage.stream({}, _CONTEXT):
        if event.type == "done":
            return float(event.response["result"])
    raise RuntimeError("usage gave no result")


async def _turn_figures(rounds: int, block: int, warmup: int) -> Figures:
    toolset = McpToolset(command=[sys.executable, SERVER])
    bare = McpToolset(command=[sys.executable, SERVER, "--bare"])
    runners = {"local": Runner(agent=Agent(name="local", model=_turns(), tools=[echo]),
                               app_name="b"),
               "remote": Runner(agent=Agent(name="remote", model=_turns(), tools=[toolset]),
                                app_name="b"),
               "bare": Runner(agent=Agent(name="bare", model=_turns(), tools=[bare]),
                              app_name="b")}
    walls: dict[str, list[float]] = {name: [] for name in (*runners, "sdk")}
    cpus: dict[str, list[float]] = {"local": [], "remote": []}
    try:
        async with Client(StdioServerParameters(command=sys.executable, args=[SERVER])) as sdk:
            await _rounds(runners, toolset, sdk, walls, cpus, rounds, block, warmup)
    finally:
        for runner in runners.values():
            await runner.aclose()
    return _summary(walls, cpus)


async def _rounds(runners: dict[str, Runner], toolset: McpToolset, sdk: Client,
                  walls: dict[str, list[float]], cpus: dict[str, list[float]], rounds: int,
                  block: int, warmup: int) -> None:
    """Alternate a block of turns of each runner (and of SDK calls), ``rounds`` times."""
    for runner in runners.values():
        await open_toolsets(runner.agent)
        await _block(runner, warmup)
    for _ in range(rounds):
        for name, runner in runners.items():
            server_before = await _server_cpu(toolset) if name == "remote" else 0.0
            wall, cpu = await _block(runner, block)
            if name == "remote":  # the server's CPU too, less the usage call itself
                cpu += (await _server_cpu(toolset) - server_before) / block
            walls[name].append(wall)
            if name in cpus:
                cpus[name].append(cpu)
        walls["sdk"].append(await _sdk_block(sdk, block))


def _summary(walls: dict[str, list[float]], cpus: dict[str, list[float]]) -> Figures:
    """The figures from each round's per-turn seconds (paired medians of differences)."""
    def paired(a: list[float], b: list[float]) -> float:
        return statistics.median(x - y for x, y in zip(a, b, strict=True)) * 1000

    overhead = [r - lo for r, lo in zip(walls["remote"], walls["local"], strict=True)]
    return {"in_process_ms_per_turn": statistics.median(walls["local"]) * 1000,
            "mcp_ms_per_turn": statistics.median(walls["remote"]) * 1000,
            "overhead_ms_per_call": paired(walls["remote"], walls["local"]),
            "overhead_cpu_ms_per_call": paired(cpus["remote"], cpus["local"]),
            "sdk_call_ms": statistics.median(walls["sdk"]) * 1000,
            "headwater_ms_per_call": paired(overhead, walls["sdk"]),
            "bare_overhead_ms_per_call": paired(walls["bare"], walls["local"])}


def _marks(path: Path, what: str) -> list[float]:
    """The times the server wrote ``what`` (``start``, ``cancel``, ``crash``) at."""
    if not path.exists():
        return []
    return [float(line.split()[1]) for line in path.read_text().splitlines()
            if line.startswith(what + " ")]


async def _until(predicate: Any, within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("the MCP server did not say")
        await asyncio.sleep(0.001)


async def _cancel_and_crash(samples: int) -> Figures:
    cancels: list[float] = []
    crashes: list[float] = []
    with tempfile.TemporaryDirectory() as scratch:
        mark = Path(scratch) / "marks"
        env = {"HW_BENCH_MARK": str(mark)}
        waiting = Agent(name="w", model=ScriptedModel(repeat=True).call("wait"),
                        tools=[McpToolset(command=[sys.executable, SERVER], env=env)])
        crasher = Agent(name="c", model=ScriptedModel(repeat=True).call("crash").reply("x"),
                        tools=[McpToolset(command=[sys.executable, SERVER], env=env)])
        async with Runner(agent=waiting, app_name="b") as runner:
            await open_toolsets(waiting)
            for _ in range(samples):
                cancels.append(await _cancel_once(runner, mark))
        async with Runner(agent=crasher, app_name="b") as runner:
            await open_toolsets(crasher)
            for _ in range(samples):
                crashes.append(await _crash_once(runner, mark))
    return {"cancel_seen_ms": statistics.median(cancels) * 1000,
            "crash_error_ms": statistics.median(crashes) * 1000}


async def _cancel_once(runner: Runner, mark: Path) -> float:
    """Stop a run (cancel its task, as the gateway's Stop does) once its call waits on the
    server; the seconds until the server's handler saw the cancel."""
    started, cancelled = len(_marks(mark, "start")), len(_marks(mark, "cancel"))
    task = asyncio.ensure_future(_turn(runner))
    try:
        await _until(lambda: len(_marks(mark, "start")) > started)
        stopped = time.time()
        task.cancel()
        await asyncio.wait({task})
        await _until(lambda: len(_marks(mark, "cancel")) > cancelled)
    finally:
        task.cancel()
    return _marks(mark, "cancel")[-1] - stopped


async def _crash_once(runner: Runner, mark: Path) -> float:
    """The seconds from the server's exit mid-call to the call's error result."""
    crashed = len(_marks(mark, "crash"))
    session = await runner.create_session(user_id="u")
    async with aclosing(runner.run_async(user_id="u", session_id=session.id,
                                         new_message="crash", run_config=SSE)) as stream:
        async for event in stream:  # to its end: the model's answer follows the result
            if event.function_responses:
                answered = time.time()
    await _until(lambda: len(_marks(mark, "crash")) > crashed)
    return answered - _marks(mark, "crash")[-1]


def p1(rounds: int, block: int, warmup: int, samples: int) -> Figures:
    """The P1 figures (see the module's docstring)."""
    figures = asyncio.run(_turn_figures(rounds, block, warmup))
    figures.update(asyncio.run(_cancel_and_crash(samples)))
    return figures


if __name__ == "__main__":
    os.environ.setdefault("HEADWATER_DEMO_WORD_DELAY", "0")
    for key, value in p1(20, 50, 20, 10).items():
        print(f"{key:<28}{value:10.3f}")
