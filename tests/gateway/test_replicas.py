"""Two gateway replicas on one Redis and one SQLite file, each under uvicorn on loopback:
a run on A is followed, resumed, shown and cancelled through B; stream caps count both."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from headwater import Agent, tool
from headwater.gateway import StaticTokenAuth, create_app
from headwater.settings import Settings
from headwater.testing import ScriptedModel

from .conftest import Serve
from .stores import new_database_url
from .test_gateway import A, B, follow, new_session, post_run
from .test_runlog import drop_keys

pytestmark = pytest.mark.redis

AUTH = StaticTokenAuth({"token-a": "alice", "token-b": "bob"})


class Replicas:
    """Two apps (replicas A and B) sharing a Redis prefix and a SQLite file."""

    def __init__(self, a: httpx.AsyncClient, b: httpx.AsyncClient, apps: list[Any]) -> None:
        self.a = a
        self.b = b
        self.apps = apps


@pytest.fixture
async def replicas_for(redis_url: str, serve: Serve) -> AsyncIterator[Any]:
    """``await replicas_for(make_agent, **settings)``: two replicas of the agent
    ``make_agent()`` builds (one per replica, as two processes would)."""
    import uuid

    prefix = f"hwtest:{uuid.uuid4().hex}:"
    clients: list[httpx.AsyncClient] = []

    async def make(make_agent: Any, **overrides: Any) -> Replicas:
        values: dict[str, Any] = {
            "redis_url": redis_url, "redis_key_prefix": prefix,
            "database_url": new_database_url(),
            "heartbeat_interval": 1.0, "send_timeout": 5.0, "session_lock_timeout": 0,
            "shutdown_grace": 2.0, "detached_ttl": 30.0, **overrides}
        apps = [create_app(make_agent(), auth=AUTH, settings=Settings(**values))
                for _ in range(2)]
        for app in apps:  # lifespan on: each replica closes its Redis clients at the end
            clients.append(httpx.AsyncClient(base_url=await serve(app, lifespan="on"),
                                             timeout=20))
        return Replicas(clients[-2], clients[-1], apps)

    made: list[Replicas] = []

    async def make_and_keep(make_agent: Any, **overrides: Any) -> Replicas:
        made.append(await make(make_agent, **overrides))
        return made[-1]

    yield make_and_keep
    for client in clients:
        await client.aclose()
    for app in (app for replicas in made for app in replicas.apps):
        gateway = app.state.gateway  # stop what still runs before its keys go
        gateway.begin_shutdown()
        for _ in range(500):
            if all(run.ended for run in gateway.runs.runs.values()):
                break
            await asyncio.sleep(0.01)
    await drop_keys(redis_url, prefix)


def chatty(words: int = 40) -> Agent:
    lookup = tool(name="lookupOrder")(_lookup)
    model = ScriptedModel()
    for _ in range(4):  # a run: a tool call, then a reply word by word
        model.call("lookupOrder", {"order_id": "1"}).reply(*[f"w{i} " for i in range(words)],
                                                           delay=0.01)
    return Agent(name="support", model=model, tools=[lookup])


def _lookup(order_id: str) -> dict[str, str]:
    """Look up an order.

    Args:
        order_id: the order number.
    """
    return {"status": "shipped", "order": order_id}


class Gate:
    """A tool that holds its run until the test lets go (both replicas share it); its
    model calls the tool and answers ``turns`` times."""

    def __init__(self, turns: int = 1) -> None:
        self.holding = asyncio.Event()  # the tool is running
        self.held = asyncio.Event()  # the test lets it return
        self.turns = turns

    def agent(self) -> Agent:
        async def hold(order_id: str) -> str:
            """Hold until the test lets go.

            Args:
                order_id: the order.
            """
            self.holding.set()
            await self.held.wait()
            return "released"

        model = ScriptedModel()
        for _ in range(self.turns):
            model.call("hold", {"order_id": "1"}).reply("after the hold")
        return Agent(name="support", model=model, tools=[tool(hold)])


def _strip(frame: tuple[int, str, dict[str, Any]]) -> tuple[int, str, str]:
    """A frame without what differs between two runs (call ids, request ids)."""
    number, kind, data = frame
    data = dict(data)
    data.pop("request_id", None)
    data.pop("id", None)
    for key in ("calls", "results"):
        if key in data:
            data[key] = [{k: v for k, v in c.items() if k != "id"} for c in data[key]]
    return number, kind, json.dumps(data, sort_keys=True)


async def test_a_run_on_a_is_resumed_through_b_frame_for_frame(replicas_for: Any) -> None:
    replicas = await replicas_for(chatty)
    whole = await post_run(replicas.a, await new_session(replicas.a),
                           {"message": "go", "resumable": True})
    assert whole.frames[-1][1] == "done"
    total = len(whole.frames)
    cut = total // 3
    sid = await new_session(replicas.a)
    head = await post_run(replicas.a, sid, {"message": "go", "resumable": True},
                          stop_after=cut)  # the client drops mid-run
    run_id = head.headers["x-run-id"]
    assert run_id in replicas.apps[0].state.gateway.runs.runs  # it runs on A
    assert run_id not in replicas.apps[1].state.gateway.runs.runs
    # several followers: two through B, one through A, all from the same frame
    tails = await asyncio.gather(follow(replicas.b, run_id, cut), follow(replicas.b, run_id, cut),
                                 follow(replicas.a, run_id, cut))
    for tail in tails:
        assert tail.status == 200
        joined = head.frames + tail.frames
        assert [_strip(f) for f in joined] == [_strip(f) for f in whole.frames]
        assert sum(t in ("done", "error") for _, t, _ in joined) == 1
    from_start = await follow(replicas.b, run_id, None)
    assert [_strip(f) for f in from_start.frames] == [_strip(f) for f in whole.frames]
    done = await replicas.b.get(f"/runs/{run_id}/stream",
                                headers={**A, "Last-Event-ID": str(total)})
    assert done.status_code == 204
    # the session's history is the same from both replicas
    history = [(await c.get(f"/sessions/{sid}/events", headers=A)).json()["items"]
               for c in (replicas.a, replicas.b)]
    assert history[0] == history[1] and len(history[0]) >= 4


async def test_b_shows_and_cancels_a_run_that_runs_on_a(replicas_for: Any) -> None:
    gate = Gate()
    replicas = await replicas_for(gate.agent)
    sid = await new_session(replicas.a)
    running = asyncio.ensure_future(post_run(replicas.a, sid, {"message": "go"}))
    try:
        await asyncio.wait_for(gate.holding.wait(), 10)
        run_id = next(iter(replicas.apps[0].state.gateway.runs.runs))
        shown = (await replicas.b.get(f"/sessions/{sid}", headers=A)).json()
        assert shown["active_run"] == run_id
        listed = (await replicas.b.get("/sessions", headers=A)).json()["items"]
        assert [s["active_run"] for s in listed if s["id"] == sid] == [run_id]
        busy = await replicas.b.post(f"/sessions/{sid}/runs", json={"message": "too"},
                                     headers=A)  # one run per session, across replicas
        assert busy.status_code == 409 and busy.json()["error"]["code"] == "session_busy"
        cancelled = await replicas.b.post(f"/runs/{run_id}/cancel", headers=A)
        assert cancelled.status_code == 200
        assert cancelled.json() == {"id": run_id, "status": "cancelled"}
        got = await asyncio.wait_for(running, 10)
    finally:
        gate.held.set()
    assert [t for _, t, _ in got.frames] == ["tool_call", "error"]
    assert got.frames[-1][2]["code"] == "cancelled"
    assert (await replicas.b.get(f"/sessions/{sid}", headers=A)).json()["active_run"] is None
    items = (await replicas.b.get(f"/sessions/{sid}/events", headers=A)).json()["items"]
    assert items[-1]["error"]["code"] == "cancelled"
    again = await replicas.b.post(f"/runs/{run_id}/cancel", headers=A)  # ended: says so
    assert again.json() == {"id": run_id, "status": "cancelled"}


async def test_another_users_run_is_404_on_b_like_a_missing_one(replicas_for: Any) -> None:
    gate = Gate()
    replicas = await replicas_for(gate.agent)
    sid = await new_session(replicas.a)
    running = asyncio.ensure_future(post_run(replicas.a, sid, {"message": "go",
                                                               "resumable": True}))
    try:
        await asyncio.wait_for(gate.holding.wait(), 10)
        run_id = next(iter(replicas.apps[0].state.gateway.runs.runs))
        missing = "0" * len(run_id)
        for method, path in (("GET", "/runs/{}/stream"), ("POST", "/runs/{}/cancel")):
            theirs = await replicas.b.request(method, path.format(run_id), headers=B)
            nobody = await replicas.b.request(method, path.format(missing), headers=B)
            assert theirs.status_code == nobody.status_code == 404
            assert _without_request_id(theirs) == _without_request_id(nobody)
        assert (await replicas.b.get(f"/sessions/{sid}", headers=B)).status_code == 404
        assert run_id in replicas.apps[0].state.gateway.runs.runs  # still running
    finally:
        gate.held.set()
    got = await asyncio.wait_for(running, 10)
    assert got.frames[-1][1] == "done"


def _without_request_id(response: httpx.Response) -> tuple[bytes, list[tuple[str, str]]]:
    request_id = response.headers["x-request-id"]
    headers = sorted((k, v) for k, v in response.headers.items()
                     if k not in ("x-request-id", "date"))
    return response.content.replace(request_id.encode(), b""), headers


async def test_the_stream_cap_counts_both_replicas(replicas_for: Any) -> None:
    gate = Gate()
    replicas = await replicas_for(gate.agent, max_streams_per_user=2)
    sid = await new_session(replicas.a)
    opened: list[httpx.Response] = []
    async with replicas.a.stream("POST", f"/sessions/{sid}/runs", headers=A,
                                 json={"message": "go", "resumable": True}) as first:
        try:
            assert first.status_code == 200  # stream 1, on A
            run_id = first.headers["x-run-id"]
            await asyncio.wait_for(gate.holding.wait(), 10)
            async with replicas.b.stream("GET", f"/runs/{run_id}/stream",
                                         headers=A) as second:
                assert second.status_code == 200  # stream 2, on B
                opened.append(second)
                for client in (replicas.a, replicas.b):  # a third, anywhere: refused
                    third = await client.get(f"/runs/{run_id}/stream", headers=A)
                    assert third.status_code == 429
                    assert third.json()["error"]["code"] == "too_many_streams"
                other = await new_session(replicas.b)
                refused = await replicas.b.post(f"/sessions/{other}/runs", headers=A,
                                                json={"message": "more"})
                assert refused.status_code == 429
                bob = await replicas.b.get("/sessions", headers=B)  # bob's count is his own
                assert bob.status_code == 200
                gate.held.set()
                await second.aread()
            await first.aread()
        finally:
            gate.held.set()
    # both streams ended: the count is back to zero on both replicas
    for client in (replicas.a, replicas.b):
        for _ in range(100):
            ok = await client.get(f"/runs/{run_id}/stream", headers=A)
            if ok.status_code != 429:
                break
            await asyncio.sleep(0.05)  # the other replica's release is in flight
        assert ok.status_code in (200, 204)


async def test_a_run_followed_only_through_b_outlives_its_detached_ttl_on_a(
        replicas_for: Any) -> None:
    gate = Gate()
    replicas = await replicas_for(gate.agent, detached_ttl=0.3, redis_liveness_ttl=3.0)
    gateway_a = replicas.apps[0].state.gateway
    sid = await new_session(replicas.a)
    head = await post_run(replicas.a, sid, {"message": "go", "resumable": True}, stop_after=1)
    run_id = head.headers["x-run-id"]
    try:
        async with replicas.b.stream("GET", f"/runs/{run_id}/stream", headers=A,
                                     params={"last_event_id": "1"}) as tail:
            assert tail.status_code == 200
            run = gateway_a.runs.runs[run_id]
            for _ in range(200):  # A's own follower has left: its detach timer runs
                if run.followers == 0 and run.detached is not None:
                    break
                await asyncio.sleep(0.01)
            for _ in range(3):  # the timer fires, sees B's follower, and waits again
                await asyncio.sleep(0.5)
                assert not run.ended and run.stop_reason is None
            gate.held.set()
            body = (await tail.aread()).decode()
        assert "event: done" in body and "detached_ttl" not in body
    finally:
        gate.held.set()
    # nobody follows anywhere: the next run is stopped after detached_ttl, as on one replica
    gate2 = Gate()
    replicas2 = await replicas_for(gate2.agent, detached_ttl=0.3)
    sid2 = await new_session(replicas2.a)
    head2 = await post_run(replicas2.a, sid2, {"message": "go", "resumable": True},
                           stop_after=1)
    try:
        for _ in range(500):
            shown = (await replicas2.b.get(f"/sessions/{sid2}", headers=A)).json()
            if shown["active_run"] is None:
                break
            await asyncio.sleep(0.02)
        assert shown["active_run"] is None
    finally:
        gate2.held.set()
    tail2 = await follow(replicas2.b, head2.headers["x-run-id"], 1)
    assert [t for _, t, _ in tail2.frames] == ["error"]
    assert tail2.frames[-1][2]["code"] == "cancelled"


async def test_the_run_rate_counts_both_replicas(replicas_for: Any) -> None:
    replicas = await replicas_for(chatty, max_runs_per_user=2, run_rate_window=86400)
    sid = await new_session(replicas.a)
    assert (await post_run(replicas.a, sid, {"message": "go"})).frames[-1][1] == "done"
    assert (await post_run(replicas.b, sid, {"message": "go"})).frames[-1][1] == "done"
    for client in (replicas.a, replicas.b):
        refused = await client.post(f"/sessions/{sid}/runs", json={"message": "go"}, headers=A)
        assert refused.status_code == 429 and refused.json()["error"]["code"] == "rate_limited"
        assert int(refused.headers["retry-after"]) >= 1
