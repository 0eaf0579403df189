"""headwater benchmarks: runner overhead, tool turns, concurrency, first-event latency, adapters,
a multi-agent transfer turn, a tool turn through an MCP server.

    python benchmarks/run.py [--only S1,S2] [--repeat 3] [--small] [--profile S1]

Prints one JSON object on stdout (per scenario: the median of ``--repeat`` runs
and every run's values) and a short table on stderr. What each figure measures
is in benchmarks/README.md. No figure is asserted: the targets are reported
next to the medians, for a human to read.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import datetime
import gc
import json
import os
import platform
import pstats
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import adapters  # benchmarks/adapters.py, beside this file
import hardening  # benchmarks/hardening.py, beside this file
import inspect_turns  # benchmarks/inspect_turns.py, beside this file
import mcp_turns  # benchmarks/mcp_turns.py, beside this file
from common import commit, quantile  # benchmarks/common.py, beside this file
from headwater import Agent, Content, Event, Part, RunConfig, Runner, StreamingMode
from headwater.models.base import BaseLlm, LlmRequest, LlmResponse
from headwater.sessions import BaseSessionService, InMemorySessionService
from headwater.testing import ScriptedModel
from headwater.types import FunctionCall, FunctionResponse

APP = "bench"
USER = "bench-user"
SSE = RunConfig(streaming_mode=StreamingMode.SSE)
HERE = Path(__file__).resolve()

Figures = dict[str, float]


@dataclass(frozen=True, slots=True)
class Sizes:
    """How big each scenario is; ``SMALL`` keeps the harness itself testable in seconds."""

    s1_chunks: int = 5_000
    s1_samples: int = 5
    s2_chunks: int = 50
    s2_turns_memory: int = 200
    s2_turns_sqlite: int = 50
    s2_warmup: int = 20
    s3_sessions: int = 1_000
    s3_chunks: int = 100
    s4_chunks: int = 10
    s4_turns: int = 200
    s4_warmup: int = 20
    a1_chunks: int = 5_000
    a1_samples: int = 5
    a2_bytes: int = 1 << 18
    a2_samples: int = 3
    a3_samples: int = 3
    w1_sessions: int = 50
    w1_turns: int = 20
    w1_long_events: int = 2_000
    s5_turns: int = 200
    s5_window: int = 5
    h1_result_mib: int = 50
    m1_chunks: int = 50
    m1_turns_memory: int = 200
    m1_turns_sqlite: int = 50
    m1_warmup: int = 20
    p1_rounds: int = 20
    p1_block: int = 50
    p1_warmup: int = 20
    p1_samples: int = 10
    i1_rounds: int = 12
    i1_turns: int = 100
    i1_chunks: int = 50
    i1_warmup: int = 20


FULL = Sizes()
SMALL = Sizes(s1_chunks=50, s1_samples=1, s2_chunks=5, s2_turns_memory=5, s2_turns_sqlite=3,
              s2_warmup=1, s3_sessions=5, s3_chunks=10, s4_chunks=3, s4_turns=5, s4_warmup=1,
              a1_chunks=50, a1_samples=1, a2_bytes=1 << 12, a2_samples=1, a3_samples=1,
              w1_sessions=3, w1_turns=2, w1_long_events=8, s5_turns=4, s5_window=1,
              h1_result_mib=1, m1_chunks=5, m1_turns_memory=5, m1_turns_sqlite=3, m1_warmup=1,
              p1_rounds=1, p1_block=2, p1_warmup=1, p1_samples=1, i1_rounds=2, i1_turns=2,
              i1_chunks=5, i1_warmup=1)

TARGETS: dict[str, dict[str, str]] = {
    "S1": {"overhead_us_per_chunk": "< 2"},
    "S2": {"memory_ms_per_turn": "< 0.4", "sqlite_ms_per_turn": "< 1.5"},
    "S3": {"wall_s": "< 3", "peak_rss_mb": "< 300",
           "interleaved_wall_s": "< 3", "interleaved_peak_rss_mb": "< 300"},
    "S4": {"first_partial_ms": "< 0.1", "first_partial_after_gc_ms": "< 1",
           "first_partial_sqlite_ms": "< 1"},
    "W1": {"lock_hold_p99_ms": "< 20", "errors": "0"},
    "S5": {"memory_ratio": "< 1.5", "sqlite_ratio": "< 1.5"},
    "A1": {"ratio_to_floor": "< 2", "one_write_ratio_to_floor": "(reported)"},
    "A2": {"cost_ratio_4x_bytes": "< 8 (4 = linear)"},
    "A3": {"close_seen_ms": "< 100", "httpx_close_seen_ms": "< 100",
           "idle_timeout_overrun_ms": "< 500", "total_deadline_overrun_ms": "< 500",
           "retry_after_1_wait_s": ">= 1"},
    "M1": {"memory_ms_per_turn": "< 1", "sqlite_ms_per_turn": "< 3"},
    "H1": {"loop_stall_ms": "< 50", "getaddrinfo_ms": "< 100",
           "connections_per_20_calls": "1"},
    "I1": {"traced_overhead_pct": "<= 5", "payloads_overhead_pct": "(reported)"},
    "P1": {"overhead_ms_per_call": "<= 2", "cancel_seen_ms": "< 1000",
           "crash_error_ms": "< 2000"},
}

METHODS: dict[str, str] = {
    "I1": ("benchmarks/inspect_turns.py: S2's tool turn in memory, run plain (no trace: "
           "inspect_runs 0), traced (the run inspector's record, payloads off) and with "
           "payloads, in rounds of N turns each that alternate the three (ABCCBA); figures "
           "are the medians over rounds, overheads the median of each round's ratio to its "
           "plain block"),
    "P1": ("benchmarks/mcp_turns.py: a tool turn (the model calls echo, then answers) in "
           "memory, the tool in process or served over stdio through McpToolset by "
           "benchmarks/mcp_echo_server.py (the SDK's low-level Server; --bare: no SDK in the "
           "server); rounds alternate a block of each, overheads are paired medians; CPU = "
           "this process's + the server's; cancel_seen_ms = a run's task cancelled -> the "
           "server's handler cancelled; crash_error_ms = the server's exit -> the call's "
           "error result"),
    "H1": ("benchmarks/hardening.py: loop_stall_ms = the longest gap of a 1 ms ticker while a "
           "tool returns an h1_result_mib MiB result (run_once, in memory); getaddrinfo_ms = "
           "loop.getaddrinfo('localhost') after a turn whose six sync tools hung past a 50 ms "
           "timeout, default executor of 6 threads; connections_per_20_calls = TCP connections "
           "FakeProvider accepted for 20 sequential OpenAIChatModel calls"),
    "A1": ("OpenAI stream of N 4-character text chunks served by a FakeProvider in a child "
           "process, one HTTP chunk per stream chunk as providers send them (one_write_*: "
           "the whole body as one write); floor = httpx aiter_lines over it; adapter = "
           "OpenAIChatModel.generate_content(stream=True) to its aggregate (SSE decode, JSON, "
           "aggregate, one partial per network read); medians of the samples, per chunk"),
    "A2": ("SSEDecoder.feed() one byte at a time over a2_bytes, then 4 * a2_bytes, of "
           "200-byte data events; best of a2_samples each; cost_ratio_4x_bytes = large / "
           "small time (about 4 when linear, 16 when quadratic)"),
    "A3": ("in-process FakeProvider, OpenAI wire format, medians of a3_samples: "
           "close_seen_ms = from breaking off generate_content(stream=True) after its first "
           "partial (the server then stalling) to the server seeing the close; "
           "httpx_close_seen_ms = the same for a bare httpx stream; *_overrun_ms = how long "
           "after model_idle_timeout (0.5 s, a stall) or model_total_timeout (1 s, comments "
           "trickled every 50 ms) ProviderTimeout is raised; retry_after_1_wait_s = server "
           "time between a 429 with Retry-After: 1 and the retried request"),
    "S1": ("one SSE turn of N 4-character chunks, in memory; per run, a warm-up turn then "
           "s1_samples timed turns: the median (and, as *_best, the fastest, which is what "
           "a busy shared machine disturbs least); runner = perf_counter_ns around "
           "run_async() plus consuming every event, so ScriptedModel's StreamAggregator "
           "building the partial LlmResponses (framework work) is INCLUDED, as are the "
           "turn's fixed costs (session copy, user event, request, aggregate) spread over N; "
           "bare = an async generator yielding the same N str objects to `async for`"),
    "M1": ("mean wall time of a 3-agent transfer turn (create_session + run_async consumed to "
           "the end): the root `coordinator` calls transfer_to_agent('billing'), billing calls "
           "transfer_to_agent('refunds'), refunds answers in N chunks (one ScriptedModel "
           "serves the three agents: 3 model calls, 5 stored events and N partials); after "
           "warm-up turns, a fresh session per turn; SQLite = SqlSessionService on a file in "
           "a temp dir (WAL, synchronous=NORMAL)"),
    "S2": ("mean wall time of a turn (create_session + run_async consumed to the end): one "
           "call to a trivial async tool, then an N-chunk SSE answer; after warm-up turns; "
           "SQLite = SqlSessionService on a file in a temp dir (WAL, synchronous=NORMAL)"),
    "S3": ("fresh subprocess per run: asyncio.gather of one SSE turn of N chunks on each of "
           "M in-memory sessions (created before timing); wall_s times the gather; "
           "peak_rss_mb = the child's VmHWM at its end (interpreter included), MiB; "
           "baseline_rss_mb = VmHWM after imports, before the workload; ru_maxrss_mb is "
           "reported too but inherits the parent's RSS across fork+exec on Linux. "
           "max_in_flight = most streams open at once. interleaved_* = same, but the model "
           "yields to the event loop before each chunk, as a socket read would"),
    "W1": ("store write load, no runner: M sessions on one SQLite file (SqlSessionService, a "
           "temp dir, WAL, synchronous=NORMAL), each doing N turns at once with the others "
           "(asyncio.gather over sessions; within a session the turns run in order). A turn = "
           "get_session (incremental), then 4 append_event: user text, model call with a state "
           "delta, function response (a final result: claims its call id), answer. "
           "append_* = wall time of each append_event as its caller sees it (queueing "
           "included); turn_* = the whole turn; lock_hold_* = each write transaction on the "
           "writer thread from BEGIN IMMEDIATE to the end of COMMIT, i.e. how long SQLite's "
           "write lock is held (measured by timing the writer's transaction function); "
           "appends_per_transaction = group-commit batching; errors = exceptions raised. "
           "get_session_long_ms = median get_session of a session of w1_long_events events "
           "on a service that read it before (one event added between reads); *_cold_ms = "
           "the same on a fresh service instance (every event read and parsed)"),
    "S5": ("one session, s5_turns sequential tool turns (a call to a trivial async tool, "
           "then a 3-chunk SSE answer), after a 5-turn warm-up on another session; "
           "turn1_ms = median wall time of the session's first s5_window turns, "
           "turn200_ms = of its last s5_window turns; ratio = turn200 / turn1; in memory "
           "and on a SQLite file in a temp dir"),
    "S4": ("median over turns of perf_counter_ns from calling run_async() to receiving the "
           "first partial event (stream creation + first __anext__), fresh in-memory session "
           "per turn, SSE, after warm-up turns; gc.collect() once before the loop. "
           "first_partial_after_gc_ms: the same with gc.collect() right before every turn, "
           "which leaves CPU caches cold (a pessimistic figure). first_partial_sqlite_ms: the "
           "warm figure with SqlSessionService on a SQLite file in a temp dir (the turn reads "
           "the session and commits the user's message before the model is called)"),
}


# -- shared pieces ------------------------------------------------------------------------


def chunks_of(count: int) -> tuple[str, ...]:
    """``count`` 4-character text pieces: "0000", "0001", …"""
    return tuple(f"{i % 10_000:04d}" for i in range(count))


def make_runner(model: BaseLlm, service: BaseSessionService | None = None,
                tools: Sequence[Callable[..., Any]] = ()) -> Runner:
    agent = Agent(name="bench", model=model, tools=tools)
    return Runner(agent=agent, app_name=APP,
                  session_service=service or InMemorySessionService())


async def new_session(runner: Runner) -> str:
    session = await runner.session_service.create_session(app_name=APP, user_id=USER)
    return session.id


async def drain(runner: Runner, session_id: str) -> int:
    """Run one SSE turn to its end; returns how many events it yielded."""
    count = 0
    stream = runner.run_async(user_id=USER, session_id=session_id, new_message="go",
                              run_config=SSE)
    async with aclosing(stream) as events:
        async for _ in events:
            count += 1
    return count


def expect_events(got: int, want: int, what: str) -> None:
    """A correctness guard (not a timing check): the turn really streamed what it should."""
    if got != want:
        raise RuntimeError(f"{what}: expected {want} events, got {got}")


def elapsed_since(start_ns: int) -> int:
    return time.perf_counter_ns() - start_ns


# -- S1: per-chunk overhead ---------------------------------------------------------------


async def _bare_stream(items: Sequence[str]) -> AsyncIterator[str]:
    for item in items:
        yield item


async def time_bare(items: Sequence[str]) -> int:
    gc.collect()
    start = time.perf_counter_ns()
    async for _ in _bare_stream(items):
        pass
    return elapsed_since(start)


async def time_runner_turn(items: Sequence[str]) -> int:
    runner = make_runner(ScriptedModel().reply(*items))
    session_id = await new_session(runner)
    gc.collect()
    start = time.perf_counter_ns()
    count = await drain(runner, session_id)
    elapsed = elapsed_since(start)
    expect_events(count, len(items) + 1, "S1")
    return elapsed


async def sample_ns(timed: Callable[[], Awaitable[int]], samples: int) -> list[int]:
    """One warm-up call, then ``samples`` timed calls."""
    await timed()
    return [await timed() for _ in range(samples)]


async def _s1(sizes: Sizes) -> Figures:
    items = chunks_of(sizes.s1_chunks)
    bare = await sample_ns(lambda: time_bare(items), sizes.s1_samples)
    full = await sample_ns(lambda: time_runner_turn(items), sizes.s1_samples)
    per_chunk_us = 1e-3 / len(items)
    bare_us = statistics.median(bare) * per_chunk_us
    full_us = statistics.median(full) * per_chunk_us
    return {"bare_us_per_chunk": bare_us,
            "runner_us_per_chunk": full_us,
            "overhead_us_per_chunk": full_us - bare_us,
            "overhead_us_per_chunk_best": (min(full) - min(bare)) * per_chunk_us}


# -- S2: tool turns -----------------------------------------------------------------------


async def echo(value: int) -> dict[str, int]:
    """Return the value unchanged (the benchmark's trivial tool).

    Args:
        value: any integer.
    """
    return {"value": value}


def tool_turn_model(turns: int, items: Sequence[str]) -> ScriptedModel:
    model = ScriptedModel()
    for _ in range(turns):
        model.call("echo", {"value": 1}).reply(*items)
    return model


async def run_tool_turns(runner: Runner, turns: int, items: Sequence[str]) -> None:
    await run_turns(runner, turns, len(items) + 3, "S2")  # call, response, partials, answer


async def run_turns(runner: Runner, turns: int, events: int, what: str) -> None:
    """``turns`` SSE turns, each on a new session, each yielding ``events`` events."""
    for _ in range(turns):
        count = await drain(runner, await new_session(runner))
        expect_events(count, events, what)


async def ms_per_turn(runner: Runner, turns: int, warmup: int,
                      run: Callable[[Runner, int], Awaitable[None]]) -> float:
    """Mean wall time of ``turns`` turns after ``warmup`` ones; closes the runner's store."""
    try:
        await run(runner, warmup)
        gc.collect()
        start = time.perf_counter_ns()
        await run(runner, turns)
        return elapsed_since(start) / turns / 1e6
    finally:
        await runner.session_service.close()


async def in_memory_and_sqlite(measure: Callable[[BaseSessionService, bool], Awaitable[float]]
                               ) -> Figures:
    """``measure(store, in_memory)`` on an in-memory store, then on a SQLite file."""
    from headwater.sessions import SqlSessionService

    memory = await measure(InMemorySessionService(), True)
    with tempfile.TemporaryDirectory(prefix="hw-bench-") as tmp:
        sqlite = await measure(SqlSessionService(f"sqlite+aiosqlite:///{tmp}/sessions.db"), False)
    return {"memory_ms_per_turn": memory, "sqlite_ms_per_turn": sqlite}


async def _s2(sizes: Sizes) -> Figures:
    items = chunks_of(sizes.s2_chunks)

    async def measure(service: BaseSessionService, in_memory: bool) -> float:
        turns = sizes.s2_turns_memory if in_memory else sizes.s2_turns_sqlite
        runner = make_runner(tool_turn_model(turns + sizes.s2_warmup, items), service, [echo])
        return await ms_per_turn(runner, turns, sizes.s2_warmup,
                                 lambda r, n: run_tool_turns(r, n, items))

    return await in_memory_and_sqlite(measure)


# -- S3: many concurrent sessions (run in a child process) --------------------------------


class YieldingModel(BaseLlm):
    """Plays a ScriptedModel but yields to the event loop before each response.

    Without a suspension point the in-memory chain never yields, so gathered
    turns would run one after another; a real provider suspends on every read.
    """

    def __init__(self, inner: ScriptedModel) -> None:
        super().__init__(inner.model)
        self.inner = inner

    async def generate_content(
        self, request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        async with aclosing(self.inner.generate_content(request, stream)) as responses:
            async for response in responses:
                await asyncio.sleep(0)
                yield response


class InFlight:
    """Counts streams open at once, to show whether gathered turns really overlap."""

    def __init__(self) -> None:
        self.now = 0
        self.max = 0

    async def drain(self, runner: Runner, session_id: str) -> int:
        self.now += 1
        self.max = max(self.max, self.now)
        try:
            return await drain(runner, session_id)
        finally:
            self.now -= 1


async def concurrent_turns(sessions: int, chunks: int, interleave: bool) -> Figures:
    items = chunks_of(chunks)
    scripted = ScriptedModel()
    for _ in range(sessions):
        scripted.reply(*items)
    runner = make_runner(YieldingModel(scripted) if interleave else scripted)
    ids = [await new_session(runner) for _ in range(sessions)]
    in_flight = InFlight()
    gc.collect()
    start = time.perf_counter_ns()
    counts = await asyncio.gather(*(in_flight.drain(runner, sid) for sid in ids))
    wall_s = elapsed_since(start) / 1e9
    for count in counts:
        expect_events(count, chunks + 1, "S3")
    return {"wall_s": wall_s, "max_in_flight": float(in_flight.max)}


def ru_maxrss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def peak_rss_mb() -> float:
    """This process's own peak RSS in MiB: ``VmHWM``, else ``ru_maxrss``.

    On Linux ``ru_maxrss`` survives ``exec``: a child reports at least the RSS
    its parent had when it forked, so only ``VmHWM`` is the child's own peak.
    """
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return ru_maxrss_mb()
    found = re.search(r"^VmHWM:\s+(\d+) kB", status, re.MULTILINE)
    return int(found.group(1)) / 1024 if found else ru_maxrss_mb()


def s3_child(sessions: int, chunks: int, interleave: bool) -> Figures:
    """The child's whole job: one S3 workload, then its own peak RSS."""
    baseline = peak_rss_mb()
    figures = asyncio.run(concurrent_turns(sessions, chunks, interleave))
    return {**figures, "peak_rss_mb": peak_rss_mb(), "baseline_rss_mb": baseline,
            "ru_maxrss_mb": ru_maxrss_mb()}


def spawn_s3(sizes: Sizes, interleave: bool) -> Figures:
    command = [sys.executable, str(HERE), "--child", "S3", "--sessions", str(sizes.s3_sessions),
               "--chunks", str(sizes.s3_chunks)]
    if interleave:
        command.append("--interleave")
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    figures: Figures = json.loads(done.stdout)
    return figures


def s3(sizes: Sizes) -> Figures:
    plain = spawn_s3(sizes, interleave=False)
    interleaved = spawn_s3(sizes, interleave=True)
    return {**plain, **{f"interleaved_{k}": v for k, v in interleaved.items()}}


# -- S4: time to first partial ------------------------------------------------------------


async def first_partial_ns(runner: Runner, session_id: str, chunks: int) -> int:
    first = 0
    count = 0
    start = time.perf_counter_ns()
    stream = runner.run_async(user_id=USER, session_id=session_id, new_message="go",
                              run_config=SSE)
    async with aclosing(stream) as events:
        async for event in events:
            if not first and event.partial:
                first = elapsed_since(start)
            count += 1
    expect_events(count, chunks + 1, "S4")
    return first


async def first_partial_samples(sizes: Sizes, collect_each: bool,
                                service: BaseSessionService | None = None) -> list[int]:
    """Warm-up turns, then one sample per turn; ``collect_each``: ``gc.collect()`` before each."""
    items = chunks_of(sizes.s4_chunks)
    total = sizes.s4_warmup + sizes.s4_turns
    model = ScriptedModel()
    for _ in range(total):
        model.reply(*items)
    runner = make_runner(model, service)
    samples: list[int] = []
    gc.collect()
    for turn in range(total):
        session_id = await new_session(runner)
        if collect_each:
            gc.collect()
        sample = await first_partial_ns(runner, session_id, len(items))
        if turn >= sizes.s4_warmup:
            samples.append(sample)
    return samples


async def _s4(sizes: Sizes) -> Figures:
    from headwater.sessions import SqlSessionService

    warm = await first_partial_samples(sizes, collect_each=False)
    after_gc = await first_partial_samples(sizes, collect_each=True)
    with tempfile.TemporaryDirectory(prefix="hw-bench-") as tmp:
        sql = SqlSessionService(f"sqlite+aiosqlite:///{tmp}/sessions.db")
        try:
            on_sqlite = await first_partial_samples(sizes, collect_each=False, service=sql)
        finally:
            await sql.close()
    return {"first_partial_ms": statistics.median(warm) / 1e6,
            "first_partial_p90_ms": statistics.quantiles(warm, n=10)[-1] / 1e6,
            "first_partial_after_gc_ms": statistics.median(after_gc) / 1e6,
            "first_partial_sqlite_ms": statistics.median(on_sqlite) / 1e6}


# -- W1: the SQLite store under concurrent turns -------------------------------------------


def turn_events(turn: int) -> list[Event]:
    """What one tool turn records: the user's text, a call (with a delta), its result, an answer."""
    call_id = f"call-{turn}"
    ask = Event(invocation_id=f"inv-{turn}", author="user",
                content=Content.from_text(f"question {turn}"))
    call = Event(invocation_id=f"inv-{turn}", author="bench", content=Content("model", [
        Part(function_call=FunctionCall(id=call_id, name="echo", args={"value": turn}))]))
    call.actions.state_delta.update({"turn": turn, "last_call": call_id})
    result = Event(invocation_id=f"inv-{turn}", author="bench", content=Content("user", [
        Part(function_response=FunctionResponse(id=call_id, name="echo",
                                                response={"value": turn}))]))
    answer = Event(invocation_id=f"inv-{turn}", author="bench",
                   content=Content.from_text(f"answer {turn} " + "x" * 200, role="model"))
    return [ask, call, result, answer]


class TransactionTimer:
    """Times each write transaction of the SQLite writer thread (benchmark instrumentation).

    Wraps the writer's transaction function, which runs from ``BEGIN IMMEDIATE`` to
    the end of ``COMMIT``: exactly the time SQLite's write lock is held.
    """

    def __init__(self) -> None:
        from headwater.sessions import _sqlite_writer as sqlite_writer

        self.module = sqlite_writer
        self.original = sqlite_writer.Writer._commit
        self.holds_ns: list[int] = []
        self.batch_sizes: list[int] = []

    def __enter__(self) -> TransactionTimer:
        original, holds, sizes = self.original, self.holds_ns, self.batch_sizes

        def timed(writer: Any, batch: list[Any], begun: bool = False) -> Any:
            start = time.perf_counter_ns()
            try:
                return original(writer, batch, begun)
            finally:
                holds.append(time.perf_counter_ns() - start)
                sizes.append(len(batch))

        self.module.Writer._commit = timed  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        self.module.Writer._commit = self.original  # type: ignore[method-assign]


def p(samples: Sequence[int], q: float) -> float:
    """The ``q`` quantile of nanosecond samples, in milliseconds."""
    return quantile(samples, q) / 1e6


async def _w1(sizes: Sizes) -> Figures:
    from headwater.sessions import SqlSessionService

    appends: list[int] = []
    turns: list[int] = []
    errors = 0

    async def session_turns(service: BaseSessionService, session_id: str) -> None:
        nonlocal errors
        for turn in range(sizes.w1_turns):
            start = time.perf_counter_ns()
            try:
                session = await service.get_session(app_name=APP, user_id=USER,
                                                    session_id=session_id)
                assert session is not None
                for event in turn_events(turn):
                    began = time.perf_counter_ns()
                    await service.append_event(session, event)
                    appends.append(elapsed_since(began))
            except Exception:
                errors += 1
            turns.append(elapsed_since(start))

    with tempfile.TemporaryDirectory(prefix="hw-bench-") as tmp:
        service = SqlSessionService(f"sqlite+aiosqlite:///{tmp}/sessions.db")
        try:
            ids = [(await service.create_session(app_name=APP, user_id=USER)).id
                   for _ in range(sizes.w1_sessions)]
            gc.collect()
            with TransactionTimer() as timer:
                start = time.perf_counter_ns()
                await asyncio.gather(*(session_turns(service, sid) for sid in ids))
                wall_s = elapsed_since(start) / 1e9
        finally:
            await service.close()
        long_warm, long_cold = await long_session_reads(tmp, sizes.w1_long_events)
    return {"append_p50_ms": p(appends, 0.5), "append_p99_ms": p(appends, 0.99),
            "turn_p50_ms": p(turns, 0.5), "turn_p99_ms": p(turns, 0.99),
            "lock_hold_p50_ms": p(timer.holds_ns, 0.5),
            "lock_hold_p99_ms": p(timer.holds_ns, 0.99),
            "appends_per_transaction": sum(timer.batch_sizes) / len(timer.batch_sizes),
            "appends_per_s": len(appends) / wall_s, "errors": float(errors),
            "get_session_long_ms": long_warm, "get_session_long_cold_ms": long_cold}


async def long_session_reads(tmp: str, events: int) -> tuple[float, float]:
    """``get_session`` of a session of ``events`` events: warm (one new event each time), cold."""
    from headwater.sessions import SqlSessionService

    url = f"sqlite+aiosqlite:///{tmp}/long.db"
    service = SqlSessionService(url)
    try:
        session = await service.create_session(app_name=APP, user_id=USER)
        for turn in range(events // 4):
            for event in turn_events(turn):
                await service.append_event(session, event)
        warm: list[int] = []
        for turn in range(20):  # a turn: read the session, then add to it
            start = time.perf_counter_ns()
            await service.get_session(app_name=APP, user_id=USER, session_id=session.id)
            warm.append(elapsed_since(start))
            await service.append_event(session, Event(author="user", invocation_id=str(turn)))
    finally:
        await service.close()
    cold: list[int] = []
    for _ in range(3):
        fresh = SqlSessionService(url)  # a new instance: nothing cached
        try:
            start = time.perf_counter_ns()
            await fresh.get_session(app_name=APP, user_id=USER, session_id=session.id)
            cold.append(elapsed_since(start))
        finally:
            await fresh.close()
    return statistics.median(warm) / 1e6, statistics.median(cold) / 1e6


# -- S5: a long session's last turn vs its first ------------------------------------------


async def turn_times(service: BaseSessionService, sizes: Sizes) -> list[int]:
    items = chunks_of(3)
    runner = make_runner(tool_turn_model(sizes.s5_turns + 5, items), service, [echo])
    try:
        await run_tool_turns(runner, 5, items)  # warm-up, on sessions of their own
        session_id = await new_session(runner)
        gc.collect()
        times: list[int] = []
        for _ in range(sizes.s5_turns):
            start = time.perf_counter_ns()
            count = await drain(runner, session_id)
            times.append(elapsed_since(start))
            expect_events(count, len(items) + 3, "S5")
        return times
    finally:
        await service.close()


def first_vs_last(prefix: str, times: Sequence[int], window: int) -> Figures:
    first = statistics.median(times[:window]) / 1e6
    last = statistics.median(times[-window:]) / 1e6
    return {f"{prefix}_turn1_ms": first, f"{prefix}_turn200_ms": last,
            f"{prefix}_ratio": last / first}


async def _s5(sizes: Sizes) -> Figures:
    from headwater.sessions import SqlSessionService

    figures = first_vs_last("memory", await turn_times(InMemorySessionService(), sizes),
                            sizes.s5_window)
    with tempfile.TemporaryDirectory(prefix="hw-bench-") as tmp:
        sql = SqlSessionService(f"sqlite+aiosqlite:///{tmp}/sessions.db")
        figures |= first_vs_last("sqlite", await turn_times(sql, sizes), sizes.s5_window)
    return figures


# -- M1: a 3-agent transfer turn -----------------------------------------------------------


def transfer_tree(model: BaseLlm, service: BaseSessionService) -> Runner:
    """``coordinator`` → ``billing`` → ``refunds``, one model for the three."""
    refunds = Agent(name="refunds", model=model, description="Refunds.")
    billing = Agent(name="billing", model=model, description="Invoices.", sub_agents=[refunds])
    coordinator = Agent(name="coordinator", model=model, sub_agents=[billing])
    return Runner(agent=coordinator, app_name=APP, session_service=service)


def transfer_turn_model(turns: int, items: Sequence[str]) -> ScriptedModel:
    model = ScriptedModel()
    for _ in range(turns):
        model.call("transfer_to_agent", {"agent_name": "billing"})
        model.call("transfer_to_agent", {"agent_name": "refunds"}).reply(*items)
    return model


async def _m1(sizes: Sizes) -> Figures:
    items = chunks_of(sizes.m1_chunks)

    async def measure(service: BaseSessionService, in_memory: bool) -> float:
        turns = sizes.m1_turns_memory if in_memory else sizes.m1_turns_sqlite
        runner = transfer_tree(transfer_turn_model(turns + sizes.m1_warmup, items), service)
        # two calls and their results, the partials, the answer
        return await ms_per_turn(runner, turns, sizes.m1_warmup,
                                 lambda r, n: run_turns(r, n, len(items) + 5, "M1"))

    return await in_memory_and_sqlite(measure)


# -- harness ------------------------------------------------------------------------------

SCENARIOS: dict[str, Callable[[Sizes], Figures]] = {
    "S1": lambda sizes: asyncio.run(_s1(sizes)),
    "S2": lambda sizes: asyncio.run(_s2(sizes)),
    "S3": s3,
    "S4": lambda sizes: asyncio.run(_s4(sizes)),
    "A1": lambda sizes: adapters.a1(sizes.a1_chunks, sizes.a1_samples),
    "A2": lambda sizes: adapters.a2(sizes.a2_bytes, sizes.a2_samples),
    "A3": lambda sizes: adapters.a3(sizes.a3_samples),
    "W1": lambda sizes: asyncio.run(_w1(sizes)),
    "S5": lambda sizes: asyncio.run(_s5(sizes)),
    "H1": lambda sizes: hardening.h1(sizes.h1_result_mib),
    "M1": lambda sizes: asyncio.run(_m1(sizes)),
    "I1": lambda sizes: inspect_turns.i1(sizes.i1_rounds, sizes.i1_turns, sizes.i1_chunks,
                                         sizes.i1_warmup),
    "P1": lambda sizes: mcp_turns.p1(sizes.p1_rounds, sizes.p1_block, sizes.p1_warmup,
                                     sizes.p1_samples),
}


def medians(runs: Sequence[Figures]) -> Figures:
    return {key: statistics.median(run[key] for run in runs) for key in runs[0]}


def measure(name: str, sizes: Sizes, repeat: int) -> dict[str, Any]:
    runs = [SCENARIOS[name](sizes) for _ in range(repeat)]
    return {"median": medians(runs), "runs": runs, "targets": TARGETS[name],
            "method": METHODS[name]}


def collect(names: Sequence[str], sizes: Sizes, repeat: int) -> dict[str, Any]:
    """Run the named scenarios; the JSON-ready report."""
    return {
        "date": datetime.date.today().isoformat(),
        "commit": commit(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "repeat": repeat,
        "sizes": {k: getattr(sizes, k) for k in Sizes.__dataclass_fields__},
        "scenarios": {name: measure(name, sizes, repeat) for name in names},
    }


def table(report: dict[str, Any]) -> str:
    lines = [f"{'scenario':<9}{'figure':<36}{'median':>12}  target"]
    for name, result in report["scenarios"].items():
        for key, value in result["median"].items():
            target = result["targets"].get(key, "")
            lines.append(f"{name:<9}{key:<36}{value:>12.3f}  {target}")
    return "\n".join(lines)


def profile(name: str, sizes: Sizes) -> None:
    """One run of a scenario under cProfile; the top functions by own time on stderr."""
    profiler = cProfile.Profile()
    profiler.runcall(SCENARIOS[name], sizes)
    stats = pstats.Stats(profiler, stream=sys.stderr)
    stats.sort_stats("tottime").print_stats(25)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--only", default=",".join(SCENARIOS), help="e.g. S1,S2")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--small", action="store_true", help="tiny sizes: checks the harness")
    parser.add_argument("--profile", choices=list(SCENARIOS), help="cProfile one run instead")
    parser.add_argument("--child", choices=["S3"], help=argparse.SUPPRESS)
    parser.add_argument("--sessions", type=int, default=FULL.s3_sessions, help=argparse.SUPPRESS)
    parser.add_argument("--chunks", type=int, default=FULL.s3_chunks, help=argparse.SUPPRESS)
    parser.add_argument("--interleave", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    sizes = SMALL if args.small else FULL
    if args.child:
        print(json.dumps(s3_child(args.sessions, args.chunks, args.interleave)))
        return
    if args.profile:
        profile(args.profile, sizes)
        return
    names = [n.strip().upper() for n in args.only.split(",") if n.strip()]
    unknown = sorted(set(names) - set(SCENARIOS))
    if unknown:
        raise SystemExit(f"unknown scenario(s) {unknown}; choose from {list(SCENARIOS)}")
    report = collect(names, sizes, max(1, args.repeat))
    print(json.dumps(report, indent=2))
    print(table(report), file=sys.stderr)


if __name__ == "__main__":
    main()
