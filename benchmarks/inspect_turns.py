"""I1: what the run inspector's trace costs an S2 turn (issue 31, docs/inspector.md).

An S2 turn (a fresh in-memory session, the model calls a trivial async tool, then
answers in N chunks) run three ways in one interpreter, in rounds that alternate
them (A B C C B A, so drift and the other tenant fall on each alike):

- ``plain``: no trace recorded (the gateway with ``inspect_runs`` 0: the run
  reads one context variable);
- ``traced``: the run starts inside ``telemetry.recording`` with a fresh
  ``TraceRecord`` (what the gateway does for every run), payloads off;
- ``payloads``: the same with payloads on (dev mode's default).

Each figure is the median over rounds of a round's mean ms per turn; the
overheads are the medians of each round's ratio to its own ``plain`` block
(paired), minus one, in per cent. Run by ``benchmarks/run.py --only I1``.
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import time
from collections.abc import Sequence
from contextlib import aclosing

from headwater import Agent, RunConfig, Runner, StreamingMode
from headwater.core.telemetry import recording
from headwater.core.trace_record import TraceRecord
from headwater.sessions import InMemorySessionService
from headwater.testing import ScriptedModel

SSE = RunConfig(streaming_mode=StreamingMode.SSE)
Figures = dict[str, float]
MODES = ("plain", "traced", "payloads")


async def echo(value: int) -> dict[str, int]:
    """Return the value unchanged (the benchmark's trivial tool).

    Args:
        value: any integer.
    """
    return {"value": value}


async def _turn(runner: Runner, mode: str, items: Sequence[str]) -> None:
    session = await runner.session_service.create_session(app_name="bench", user_id="u")
    stream = runner.run_async(user_id="u", session_id=session.id, new_message="go",
                              run_config=SSE)
    if mode == "plain":
        await stream.start()
    else:
        record = TraceRecord(payloads=mode == "payloads")
        with recording(record):
            await stream.start()
    count = 0
    async with aclosing(stream) as events:
        async for _ in events:
            count += 1
    if count != len(items) + 3:
        raise RuntimeError(f"I1: expected {len(items) + 3} events, got {count}")
    if mode != "plain" and not (record.ended and len(record.spans) == 4):
        raise RuntimeError(f"I1: the trace has {len(record.spans)} spans, not 4")


async def _block(runner: Runner, mode: str, turns: int, items: Sequence[str]) -> float:
    gc.collect()
    start = time.perf_counter_ns()
    for _ in range(turns):
        await _turn(runner, mode, items)
    return (time.perf_counter_ns() - start) / turns / 1e6


async def _i1(rounds: int, turns: int, chunks: int, warmup: int) -> Figures:
    items = [f"chunk{n} " for n in range(chunks)]
    model = ScriptedModel(repeat=True).call("echo", {"value": 1}).reply(*items)
    runner = Runner(agent=Agent(name="bench", model=model, tools=[echo]), app_name="bench",
                    session_service=InMemorySessionService())
    for mode in MODES:
        await _block(runner, mode, warmup, items)
    times: dict[str, list[float]] = {mode: [] for mode in MODES}
    for n in range(rounds):
        order = MODES if n % 2 == 0 else tuple(reversed(MODES))
        for mode in order:
            times[mode].append(await _block(runner, mode, turns, items))
    await runner.session_service.close()
    figures: Figures = {f"{mode}_ms_per_turn": statistics.median(times[mode]) for mode in MODES}
    for mode in MODES[1:]:
        ratios = [t / p for t, p in zip(times[mode], times["plain"], strict=True)]
        figures[f"{mode}_overhead_pct"] = (statistics.median(ratios) - 1) * 100
    return figures


def i1(rounds: int, turns: int, chunks: int, warmup: int) -> Figures:
    """The I1 figures (module docstring)."""
    return asyncio.run(_i1(rounds, turns, chunks, warmup))
