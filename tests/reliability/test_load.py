"""Many runs leaving at random points: three rounds of ``RUNS`` concurrent runs, then
``CHURN`` seconds of runs coming and going. After each: every run terminal, the
counters back at baseline within ``CHURN_SETTLED`` (2 s) of the last client leaving,
memory flat once the ended runs' retention has passed, and no ERROR in the log."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from pathlib import Path

import pytest

from headwater.testing import FakeProvider

from .conftest import (
    CHURN_SETTLED,
    Raw,
    Served,
    Spawn,
    eventually,
    history,
    new_sessions,
    request_bytes,
    settle,
    trickled,
    warm,
)

# the timeout guards against a hang, not a slow machine: on a busy two-core one this test
# takes about three minutes (its own clients, provider and server share the cores)
pytestmark = [pytest.mark.reliability, pytest.mark.slow, pytest.mark.timeout(600)]
logger = logging.getLogger(__name__)

RUNS = 500  # the number: concurrent runs per round
CHURN = 15.0  # seconds of churn after the rounds
WORDS = [f"w{i} " for i in range(30)]
WAYS = ("before_head", "fin_early", "rst_early", "fin_late", "rst_late", "to_the_end")


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


async def one_run(served: Served, sid: str, way: str, *, when_free: bool = False) -> str:
    """One run, left as ``way`` says; what the client last saw.

    ``when_free``: a 409 ``session_busy`` (the session's last run, which this test's
    client has left, is still ending on the server: on a busy machine that can take
    longer than ``session_lock_timeout``) is tried again after its ``Retry-After``, as a
    client would; anything else must be the run.
    """
    deadline = time.monotonic() + 60
    while True:
        raw = await Raw.open(served.port)
        await raw.send(request_bytes("POST", f"/sessions/{sid}/runs", {"message": way}))
        if not when_free or way == "before_head":
            break
        await raw.read_until(lambda r: bool(r.head), within=120)
        if raw.status != 409:  # a message's only 409 is session_busy
            break
        assert time.monotonic() < deadline, f"session {sid} still busy after 60 s"
        raw.fin()
        await asyncio.sleep(float(raw.header("retry-after") or 1))
    if way == "before_head":
        await asyncio.sleep(random.uniform(0, 0.3))
        raw.rst()
        return way
    want = random.randint(1, 20) if way != "to_the_end" else 10_000
    await raw.read_until(lambda r: r.types.count("delta") >= want, within=120)
    assert raw.status == 200 and raw.types.count("delta") >= min(want, len(WORDS)), (
        raw.head, raw.types[-3:])
    if way.startswith("fin"):
        raw.fin()
    elif way.startswith("rst"):
        raw.rst()
    else:
        assert raw.types[-1] == "done", raw.types[-3:]
        raw.fin()
    return way


async def round_of(served: Served, provider: FakeProvider, sids: list[str]) -> None:
    provider.enqueue(*(trickled(WORDS, every=0.03) for _ in sids))
    ways = [random.choice(WAYS) for _ in sids]
    await asyncio.gather(*(one_run(served, sid, way) for sid, way in zip(sids, ways,
                                                                       strict=True)))


async def all_terminal(served: Served, sids: list[str]) -> None:
    """Every session's last record ends a run: a final answer or an error."""
    async with served.client(timeout=60) as client:
        for sid in sids:
            items = await history(client, sid)
            assert not any(i.get("partial") for i in items)
            if items:  # a run left before its head may have stored nothing
                last = items[-1]
                assert last.get("error") or last.get("final") or last.get("interrupted"), last


async def test_runs_leaving_at_random_points_leave_nothing_behind(
        spawn: Spawn, provider: FakeProvider) -> None:
    random.seed(23)
    # header_timeout is not under test here (test_inputs tests it): with 500 runs streaming,
    # this process (their clients and their provider) may take seconds between opening a
    # connection and sending its request on a busy machine
    server = await spawn(env={"HEADWATER_RUN_RETENTION": "1", "HEADWATER_MAX_PARALLEL_TOOLS": "8",
                              "HEADWATER_HEADER_TIMEOUT": "60"})
    baseline = await warm(server, provider)
    async with server.client(timeout=60) as client:
        sids = await new_sessions(client, RUNS)
    rss: list[int] = []
    took: list[float] = []  # seconds from the last client leaving to the counters at baseline
    for _ in range(3):
        await round_of(server, provider, sids)
        left = time.monotonic()
        took.append(await settle(server, baseline) - left)
        # the ended runs are forgotten after run_retention (1 s): then memory is measured
        await eventually(lambda: stats_zero(server, "runs"), "ended runs forgotten")
        rss.append(rss_kib(server.process.pid))
        # (a run left before its model call leaves its scenario queued: a later one takes it)
    await all_terminal(server, sids)

    # churn: runs start and leave continuously for CHURN seconds
    end = time.monotonic() + CHURN
    busy: set[str] = set()
    pending: set[asyncio.Task[str]] = set()

    async def churn_one(sid: str) -> str:
        try:
            provider.enqueue(trickled(WORDS, every=0.03))
            return await one_run(server, sid, random.choice(WAYS), when_free=True)
        finally:
            busy.discard(sid)

    while time.monotonic() < end:
        free = [s for s in sids[:100] if s not in busy]
        if free and len(pending) < 100:
            sid = random.choice(free)
            busy.add(sid)
            pending.add(asyncio.create_task(churn_one(sid)))
        for task in [t for t in pending if t.done()]:
            task.result()  # a client's failed check fails the test
            pending.discard(task)
        await asyncio.sleep(0.01)
    await asyncio.gather(*pending)
    left = time.monotonic()
    took.append(await settle(server, baseline) - left)
    await eventually(lambda: stats_zero(server, "runs"), "ended runs forgotten")
    rss.append(rss_kib(server.process.pid))
    await all_terminal(server, sids[:100])

    logger.info("seconds from the last client leaving to the counters at baseline "
             "(three rounds, then the churn): %s", [round(t, 3) for t in took])
    assert max(took) <= CHURN_SETTLED, f"counters at baseline past {CHURN_SETTLED} s: {took}"
    # memory flat: after the first round it grows by no more than a few allocator pages
    assert max(rss[1:]) - rss[0] < 64 * 1024, rss
    log = server.text()
    errors = [line for line in log.splitlines() if line.startswith("ERROR") or "Traceback" in line]
    assert errors == [], errors[:5]


async def stats_zero(served: Served, key: str) -> bool:
    return int((await served.stats())[key]) == 0
