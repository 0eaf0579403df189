"""The documented deployment, started by the test: two ``headwater serve`` replicas on one
PostgreSQL database and one Redis, behind Debian's nginx on deploy/nginx.conf.

Each replica is ``headwater serve deployed_agent:agent --db <postgres> --redis-url
<redis>`` with its tokens in ``HEADWATER_AUTH_TOKENS``, as docs/deployment.md
says; nginx runs the repository's configuration with only its port and
upstream addresses changed. "Through A" and "through B" are requests to one
replica's own port; the rest go through nginx, which spreads them round-robin.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.typing import Subprotocol

from headwater.testing import (
    FakeProvider,
    Scenario,
    Sleep,
    SSEMessage,
    render_openai,
    wait_until,
)

from .deployment import Nginx, Served, need_nginx, serve, start_nginx
from .run_stream import RunStream
from .test_runlog import drop_keys

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis,
              pytest.mark.timeout(240)]

A_TOKEN = {"Authorization": "Bearer token-a"}
LEASE_TTL = 5.0


@dataclass
class Deployment:
    a: Served
    b: Served
    nginx: Nginx
    clients: dict[str, httpx.AsyncClient]

    @property
    def via_a(self) -> httpx.AsyncClient:
        return self.clients["a"]

    @property
    def via_b(self) -> httpx.AsyncClient:
        return self.clients["b"]

    @property
    def via_nginx(self) -> httpx.AsyncClient:
        return self.clients["nginx"]


@pytest.fixture
async def deployment(child_env: dict[str, str], tmp_path: Path, provider: FakeProvider,
                     postgres_url: str, redis_url: str) -> AsyncIterator[Deployment]:
    nginx_binary = need_nginx()
    prefix = f"hwtest:{uuid.uuid4().hex}:"
    env = {k: v for k, v in child_env.items() if not k.startswith("HEADWATER_")}
    env |= {"HW_TEST_PROVIDER_URL": provider.base_url,
            "HEADWATER_AUTH_TOKENS": "token-a=alice",
            "HEADWATER_REDIS_KEY_PREFIX": prefix,
            "HEADWATER_SESSION_LEASE_TTL": str(LEASE_TTL),
            "HEADWATER_REDIS_LIVENESS_TTL": "3",
            "HEADWATER_HEARTBEAT_INTERVAL": "1", "HEADWATER_SHUTDOWN_GRACE": "2",
            "HEADWATER_MODEL_MAX_ATTEMPTS": "1"}
    replicas: list[Served] = []
    nginx: Nginx | None = None
    clients: dict[str, httpx.AsyncClient] = {}
    try:
        for name in ("a", "b"):
            replicas.append(await serve("--db", postgres_url, "--redis-url", redis_url,
                                        "--log-level", "warning", env=env,
                                        log=tmp_path / f"replica-{name}.log"))
        nginx = await start_nginx(nginx_binary, tmp_path / "nginx",
                                  [r.port for r in replicas])
        for name, url in (("a", replicas[0].base_url), ("b", replicas[1].base_url),
                          ("nginx", nginx.base_url)):
            clients[name] = httpx.AsyncClient(base_url=url, timeout=30, headers=A_TOKEN)
        yield Deployment(replicas[0], replicas[1], nginx, clients)
    finally:
        for client in clients.values():
            await client.aclose()
        if nginx is not None:
            nginx.stop()
        for replica in replicas:
            replica.stop()
        await drop_keys(redis_url, prefix)


# -- reading a run's stream ----------------------------------------------------------------------


async def open_stream(client: httpx.AsyncClient, method: str, path: str,
                      **kwargs: Any) -> RunStream:
    response = await client.send(client.build_request(method, path, **kwargs), stream=True)
    return RunStream(response, response.aiter_raw(), within=30.0)


async def new_session(client: httpx.AsyncClient) -> str:
    response = await client.post("/sessions", json={})
    assert response.status_code == 201, response.text
    sid: str = response.json()["id"]
    return sid


def stalled(words: list[str], after: int, seconds: float) -> Scenario:
    """An OpenAI stream of ``words`` that stops for ``seconds`` after the first ``after``."""
    events = render_openai(text=words)
    body: list[bytes | Sleep] = [*events[:1 + after], Sleep(seconds), *events[1 + after:]]
    return Scenario(body=body)


# -- one run per session across the replicas -----------------------------------------------------


async def test_five_concurrent_runs_on_one_session_one_proceeds_four_get_409(
        deployment: Deployment, provider: FakeProvider) -> None:
    provider.enqueue(stalled(["first ", "second"], after=1, seconds=60))
    sid = await new_session(deployment.via_nginx)
    path = f"/sessions/{sid}/runs"
    streams = await asyncio.gather(*(
        open_stream(deployment.via_nginx, "POST", path, json={"message": f"go {i}"})
        for i in range(5)))
    try:
        statuses = sorted(s.response.status_code for s in streams)
        assert statuses == [200, 409, 409, 409, 409], statuses
        for refused in (s for s in streams if s.response.status_code == 409):
            body = await refused.response.aread()
            assert b'"session_busy"' in body, body
        (running,) = (s for s in streams if s.response.status_code == 200)
        # Unbuffered through nginx: the first delta arrives while the model is still stalled.
        await running.read_until(lambda s: "delta" in s.types)
        assert running.types == ["delta"]
        assert len(provider.requests) == 1  # only one run reached the model
    finally:
        for stream in streams:
            await stream.response.aclose()
    # nginx spread the five over both replicas (round-robin), so the 409s came from both.
    def runs() -> list[list[str]]:
        return [line for line in deployment.nginx.access() if line[:2] == ["POST", path]]

    # nginx writes a request's line once it ends (the proceeding one's when its client left).
    await wait_until(lambda: len(runs()) == 5, timeout=30, interval=0.05,
                     message=f"five lines in nginx's access log: {deployment.nginx.access()}")
    upstreams = {line[3] for line in runs()}
    assert upstreams == {f"127.0.0.1:{deployment.a.port}", f"127.0.0.1:{deployment.b.port}"}


# -- a replica dies mid-run ----------------------------------------------------------------------


async def hold_on_a(deployment: Deployment, provider: FakeProvider) -> tuple[str, RunStream]:
    """A new session, and its resumable run on A, whose model calls ``hold`` for 120 s."""
    provider.enqueue(Scenario(body=render_openai(
        tool_calls=[{"name": "hold", "id": "call_hold", "arguments": {"seconds": 120}}],
        finish_reason="tool_calls")))
    sid = await new_session(deployment.via_nginx)
    on_a = await open_stream(deployment.via_a, "POST", f"/sessions/{sid}/runs",
                             json={"message": "hold on", "resumable": True})
    return sid, on_a


async def test_kill_9_of_a_mid_run_the_session_goes_on_on_b(
        deployment: Deployment, provider: FakeProvider) -> None:
    sid, on_a = await hold_on_a(deployment, provider)
    assert on_a.response.status_code == 200
    run_id = on_a.response.headers["x-run-id"]
    await on_a.read_until(lambda s: "tool_call" in s.types)

    os.kill(deployment.a.process.pid, signal.SIGKILL)
    killed = time.monotonic()
    deployment.a.process.wait(10)
    await on_a.response.aclose()

    # The next turn, through nginx: A refuses connections, so nginx takes it to B, which
    # takes the dead holder's lease, gives the dangling call its `interrupted` result and
    # answers.
    provider.enqueue(Scenario(body=render_openai(text=["back ", "again"])))
    again = await open_stream(deployment.via_nginx, "POST", f"/sessions/{sid}/runs",
                              json={"message": "still there?"})
    assert again.response.status_code == 200, await again.response.aread()
    await again.read_to_end()
    assert again.types == ["delta", "delta", "message", "done"]
    assert time.monotonic() - killed < LEASE_TTL + 5

    items = (await deployment.via_b.get(f"/sessions/{sid}/events")).json()["items"]
    assert [(i["invocation_id"] == run_id, i["author"]) for i in items] == [
        (True, "user"), (True, "bot"), (False, "bot"), (False, "user"), (False, "bot")]
    assert items[1]["calls"] == [{"id": "call_hold", "name": "hold"}]
    # The repair, once, before the new turn: the call's result, marked interrupted.
    assert items[2]["interrupted"] is True
    assert [(r["id"], r["status"]) for r in items[2]["results"]] == [("call_hold", "error")]
    assert items[-1]["text"] == "back again"
    # What the model was sent: the call and its interrupted result, then the new message.
    sent = provider.requests[-1].json()["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "user"]
    assert json.loads(sent[2]["content"])["code"] == "interrupted"

    # B does not show the dead run as active (nor the one that ended), nor does its stream
    # claim to go on.
    async def active_run() -> Any:
        return (await deployment.via_b.get(f"/sessions/{sid}")).json()["active_run"]

    found = await active_run()
    while found is not None and time.monotonic() - killed < LEASE_TTL + 5:
        await asyncio.sleep(0.2)  # a dead replica's run ages out of the shared registry
        found = await active_run()
    assert found is None

    # And the session takes a further turn on B.
    provider.enqueue(Scenario(body=render_openai(text=["fine"])))
    last = await deployment.via_b.post(f"/sessions/{sid}/runs", json={"message": "ok"})
    assert last.status_code == 200 and "event: done" in last.text, last.text


# -- WS /live through nginx ----------------------------------------------------------------------


async def test_a_live_websocket_upgrades_through_nginx(deployment: Deployment) -> None:
    sid = await new_session(deployment.via_nginx)
    url = deployment.nginx.base_url.replace("http://", "ws://") + f"/live/{sid}"
    async with connect(url, subprotocols=[Subprotocol("bearer"), Subprotocol("token-a")],
                       open_timeout=30) as socket:
        assert socket.subprotocol == "bearer"
        await socket.send(json.dumps({"type": "close"}))  # no more input: the run ends
        received = []
        async with asyncio.timeout(30):
            async for message in socket:
                received.append(json.loads(message))
                if received[-1]["type"] in ("done", "error"):
                    break
    assert received[-1]["type"] == "done", received


# -- resume, follow and cancel across the replicas (the Redis run log and registry) ---------------


def trickled(words: list[str], every: float) -> Scenario:
    """An OpenAI stream of ``words`` with ``every`` seconds between its SSE events."""
    body: list[bytes | Sleep] = []
    for event in render_openai(text=words):
        body += [event, Sleep(every)]
    return Scenario(body=body)


def comparable(frames: list[SSEMessage]) -> list[tuple[str | None, str, str]]:
    """Frames without what differs between two runs (the stored message's event id)."""
    out = []
    for frame in frames:
        data = json.loads(frame.data)
        data.pop("id", None)
        out.append((frame.id, frame.event, json.dumps(data, sort_keys=True)))
    return out


async def test_a_resumable_run_started_through_a_is_followed_through_b_frame_for_frame(
        deployment: Deployment, provider: FakeProvider) -> None:
    words = [f"w{i} " for i in range(30)]
    # The uninterrupted run, through nginx.
    provider.enqueue(trickled(words, every=0.02))
    whole = await open_stream(deployment.via_nginx, "POST",
                              f"/sessions/{await new_session(deployment.via_nginx)}/runs",
                              json={"message": "go", "resumable": True})
    await whole.read_to_end()
    await whole.response.aclose()
    assert whole.types == ["delta"] * 30 + ["message", "done"]

    # The same run started through A; the client drops after a few frames.
    provider.enqueue(trickled(words, every=0.1))
    sid = await new_session(deployment.via_nginx)
    head = await open_stream(deployment.via_a, "POST", f"/sessions/{sid}/runs",
                             json={"message": "go", "resumable": True})
    run_id = head.response.headers["x-run-id"]
    await head.read_until(lambda s: len(s.frames) >= 5)
    await head.response.aclose()
    last = head.frames[-1].id
    assert last is not None

    # Followed through B from the last frame the client had: exactly the rest.
    tail = await open_stream(deployment.via_b, "GET", f"/runs/{run_id}/stream",
                             headers={"Last-Event-ID": last})
    assert tail.response.status_code == 200
    await tail.read_to_end(within=60)
    await tail.response.aclose()
    assert comparable(head.frames + tail.frames) == comparable(whole.frames)
    done = await deployment.via_b.get(f"/runs/{run_id}/stream",
                                      headers={"Last-Event-ID": whole.frames[-1].id or ""})
    assert done.status_code == 204  # nothing left


async def test_a_cancel_sent_to_b_stops_the_run_on_a(deployment: Deployment,
                                                     provider: FakeProvider) -> None:
    provider.enqueue(stalled(["first ", "second"], after=1, seconds=60),
                     Scenario(body=render_openai(text=["next"])))
    sid = await new_session(deployment.via_nginx)
    on_a = await open_stream(deployment.via_a, "POST", f"/sessions/{sid}/runs",
                             json={"message": "go", "resumable": True})
    run_id = on_a.response.headers["x-run-id"]
    await on_a.read_until(lambda s: "delta" in s.types)
    shown = (await deployment.via_b.get(f"/sessions/{sid}")).json()
    assert shown["active_run"] == run_id  # B shows the run that goes on on A

    cancelled = await deployment.via_b.post(f"/runs/{run_id}/cancel")
    assert cancelled.status_code == 200
    assert cancelled.json() == {"id": run_id, "status": "cancelled"}
    await on_a.read_to_end()
    await on_a.response.aclose()
    assert on_a.types == ["delta", "error"]
    assert json.loads(on_a.frames[-1].data)["code"] == "cancelled"
    await provider.wait_closed(0, timeout=10)  # A stopped the model call

    items = (await deployment.via_b.get(f"/sessions/{sid}/events")).json()["items"]
    assert items[-1]["error"]["code"] == "cancelled"
    assert (await deployment.via_b.get(f"/sessions/{sid}")).json()["active_run"] is None
    again = await deployment.via_b.post(f"/sessions/{sid}/runs", json={"message": "again"})
    assert again.status_code == 200 and "event: done" in again.text, again.text


async def test_a_follower_through_b_of_a_run_whose_replica_died_gets_a_terminal_frame(
        deployment: Deployment, provider: FakeProvider) -> None:
    _, on_a = await hold_on_a(deployment, provider)
    run_id = on_a.response.headers["x-run-id"]
    await on_a.read_until(lambda s: "tool_call" in s.types)
    follower = await open_stream(deployment.via_b, "GET", f"/runs/{run_id}/stream",
                                 headers={"Last-Event-ID": "0"})
    assert follower.response.status_code == 200
    await follower.read_until(lambda s: "tool_call" in s.types)

    os.kill(deployment.a.process.pid, signal.SIGKILL)
    killed = time.monotonic()
    deployment.a.process.wait(10)
    await on_a.response.aclose()
    await follower.read_to_end(within=LEASE_TTL + 30)
    await follower.response.aclose()
    assert follower.types[-1] == "error", follower.types
    assert json.loads(follower.frames[-1].data)["code"] == "server_shutdown"
    assert time.monotonic() - killed < LEASE_TTL + 5
