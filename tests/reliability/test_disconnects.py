"""A client that goes away, at five points of a run, with a FIN or a RST.

After each, within ``DISCONNECT_FREED`` (1 s) of the hang-up: the provider's
connection of the run is closed, the tool's child process is gone, the run is
recorded ``cancelled``, and the server's counters are back at their baseline. Then
a frozen client (stops reading): dropped, its queued bytes bounded, while three
normal clients keep their pace.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

import httpx
import pytest

from headwater.testing import FakeProvider, Scenario, wait_until

from .conftest import (
    DISCONNECT_FREED,
    POLL_TIMEOUT,
    Raw,
    Served,
    Spawn,
    alive,
    eventually,
    history,
    new_session,
    request_bytes,
    settle,
    start_run,
    tool_calls,
    trickled,
    warm,
)

pytestmark = [pytest.mark.reliability, pytest.mark.slow]
logger = logging.getLogger(__name__)

WORDS = [f"w{i} " for i in range(200)]


async def _body(served: Served, provider: FakeProvider, sid: str) -> Raw:
    """Half a request body sent: no run starts."""
    raw = await Raw.open(served.port)
    whole = request_bytes("POST", f"/sessions/{sid}/runs", {"message": "x" * 200})
    await raw.send(whole[:-100])
    await asyncio.sleep(0)  # the bytes are sent; the server is reading the body
    return raw


async def _waiting(served: Served, provider: FakeProvider, sid: str) -> Raw:
    """The model asked, nothing back yet."""
    provider.enqueue(trickled(WORDS, every=0.05, first=60))
    before = len(provider.requests)
    raw = await start_run(served.port, sid, "wait")
    await wait_until(lambda: len(provider.requests) > before, timeout=10, interval=0.01,
                     message="the model call to reach the provider")
    return raw


async def _streaming(served: Served, provider: FakeProvider, sid: str) -> Raw:
    provider.enqueue(trickled(WORDS, every=0.05))
    raw = await start_run(served.port, sid, "talk")
    await raw.read_until(lambda r: r.types.count("delta") >= 3)
    assert not raw.eof, raw.types
    return raw


async def _tool(served: Served, provider: FakeProvider, sid: str) -> Raw:
    call = f"call_hold_{sid[-6:]}"
    provider.enqueue(tool_calls(("hold", {"seconds": 60}, call)))  # no second call: cancelled
    raw = await start_run(served.port, sid, "hold")
    await wait_until(lambda: call in served.tool_pids(), timeout=10, interval=0.01,
                     message="the hold tool to start its child")
    return raw


async def _after_tool(served: Served, provider: FakeProvider, sid: str) -> Raw:
    call = f"call_quick_{sid[-6:]}"
    provider.enqueue(tool_calls(("hold", {"seconds": 0}, call)), trickled(WORDS, every=0.05))
    raw = await start_run(served.port, sid, "hold briefly")
    await raw.read_until(lambda r: "tool_result" in r.types and r.types.count("delta") >= 2)
    assert not raw.eof and "tool_result" in raw.types, raw.types
    return raw


def cancelled(client: httpx.AsyncClient, sid: str) -> Callable[[], Awaitable[bool]]:
    """Whether the session's last record is the run's ``cancelled`` error."""
    async def check() -> bool:
        items = await history(client, sid)
        return bool(items) and (items[-1].get("error") or {}).get("code") == "cancelled"
    return check


def gone(pids: list[int]) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return not any(alive(pid) for pid in pids)
    return check


def connections_at(served: Served, most: int) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return int((await served.stats())["connections"]) <= most
    return check


POINTS: dict[str, Callable[[Served, FakeProvider, str], Awaitable[Raw]]] = {
    "body": _body, "waiting": _waiting, "streaming": _streaming, "tool": _tool,
    "after_tool": _after_tool}
STREAMING = {"waiting", "streaming", "after_tool"}


@pytest.mark.parametrize("how", ["fin", "rst"])
async def test_a_disconnect_at_each_point_frees_everything(
        server: Served, provider: FakeProvider, how: str) -> None:
    async with server.client() as client:
        baseline = await warm(server, provider)
        assert baseline["active_runs"] == 0 and baseline["tool_processes"] == 0
        took: dict[str, dict[str, float]] = {}  # point: what held, seconds after the hang-up
        for point, reach in POINTS.items():
            assert provider.pending == 0, point
            sid = await new_session(client)
            pids_before = set(server.tool_pids())
            raw = await reach(server, provider, sid)
            calls = len(provider.requests)
            left = time.monotonic()
            raw.fin() if how == "fin" else raw.rst()

            seen: dict[str, float] = {}
            if point in STREAMING:  # the model call in progress: its connection closes
                index = provider.requests[-1].connection
                closed = await provider.wait_closed(index, timeout=POLL_TIMEOUT)
                assert closed.closed_at is not None, point
                seen["upstream"] = closed.closed_at
            children = [pid for call, pid in server.tool_pids().items() if call not in pids_before]
            if children:
                seen["child"] = await eventually(gone(children), f"{point}: {children} to go")
            if point != "body":
                seen["cancelled"] = await eventually(cancelled(client, sid),
                                                     f"{point}: the run recorded cancelled")
            seen["counters"] = await settle(server, baseline)
            took[point] = {what: round(at - left, 3) for what, at in seen.items()}

            assert len(provider.requests) == calls, f"{point}: the model was called after"
            items = await history(client, sid)
            if point == "body":
                assert items == [], point  # no run: nothing stored
            else:
                assert not any(i.get("partial") for i in items), point
        logger.info("%s: seconds from the hang-up to each check holding: %s", how, took)
        late = {p: t for p, t in took.items() if max(t.values()) > DISCONNECT_FREED}
        assert not late, f"past {DISCONNECT_FREED} s: {late} (all: {took})"
        assert "Traceback" not in server.text()


async def test_a_frozen_client_is_dropped_while_others_keep_their_pace(
        spawn: Spawn, provider: FakeProvider) -> None:
    """One client stops reading a fast, long answer; three read a paced one."""
    # the answer (6 MB) is above the kernel's buffers, and max_output_chars let it through
    server = await spawn(env={"HEADWATER_MAX_OUTPUT_CHARS": "20000000"})
    big = ["x" * 2000] * 3000  # 6 MB of text, as fast as the provider can send it
    async with server.client() as client:
        baseline = await warm(server, provider)
        frozen_sid = await new_session(client)
        provider.enqueue(Scenario(body=[*trickled(big, every=0).body]))
        frozen = await Raw.open(server.port, rcvbuf=4096)
        await frozen.send(request_bytes("POST", f"/sessions/{frozen_sid}/runs",
                                        {"message": "flood"}))
        # it never reads again; the three others read every frame as it comes
        sids = [await new_session(client) for _ in range(3)]
        paced = [f"p{i} " for i in range(40)]
        provider.enqueue(*(trickled(paced, every=0.1) for _ in sids))
        normal = [await start_run(server.port, sid, "paced") for sid in sids]
        started = time.monotonic()
        queued: list[int] = []

        async def watch() -> None:
            while True:
                queued.append((await server.stats())["queued_bytes"])
                await asyncio.sleep(0.2)

        watcher = asyncio.create_task(watch())
        try:
            await asyncio.gather(*(r.read_until(lambda r: r.eof or "done" in r.types, within=30)
                                   for r in normal))
        finally:
            watcher.cancel()
        took = time.monotonic() - started
        for r in normal:
            assert r.types.count("delta") == 40 and r.types[-2:] == ["message", "done"]
        # 40 words 0.1 s apart: 4 s of pace; a frozen neighbour must not stall them
        assert took < 4 + 10, took
        # the run does not wait for its reader; the frozen connection is dropped after
        # send_timeout (2 s) once the kernel's buffers are full
        await settle(server, baseline)
        for r in normal:
            r.fin()
        # established: the stats request's and this test's client (keep-alive), no other
        await eventually(connections_at(server, 2), "the frozen client to be dropped")
        items = await history(client, frozen_sid)
        assert not any(i.get("partial") for i in items)
        assert items[-1].get("error") is None and len(items[-1]["text"]) == 6_000_000
        # what the kernel held for it is bounded by socket buffers, not by the 6 MB answer
        assert max(queued) < 4 << 20, max(queued)
        frozen.rst()
