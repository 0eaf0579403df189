"""The process under signals: ``kill -9`` mid-stream and a restart on the same database;
SIGTERM and SIGINT with 50 SSE streams and 5 live WebSockets open."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import time
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection

from gateway.live_sockets import live_socket, socket_to_end
from headwater.testing import FakeProvider

from .conftest import (
    CANARY_TOKEN,
    A,
    Raw,
    Spawn,
    endless,
    history,
    integrity,
    new_sessions,
    start_run,
    text,
    tool_calls,
)

pytestmark = [pytest.mark.reliability, pytest.mark.slow, pytest.mark.timeout(240)]
logger = logging.getLogger(__name__)

# The kill test's session_lease_ttl. A run renews its lease every third of it, so a dead
# run's lease outlives the kill by more than half of it: a new turn done before then took
# the lease over at once (its holder provably dead) instead of waiting for it to expire.
LEASE_TTL = 90.0
EXIT_MARGIN = 5.0  # interpreter teardown after uvicorn returns, on a loaded machine
SIGNAL_GRACE = 20  # the signal test's shutdown grace: its streams end on the signal, long before


def ids_in(item: dict[str, Any]) -> str:
    return json.dumps(item)


async def test_kill_9_with_ten_sessions_streaming_loses_no_frame_a_client_saw(
        spawn: Spawn, provider: FakeProvider) -> None:
    lease = {"HEADWATER_SESSION_LEASE_TTL": str(LEASE_TTL)}
    server = await spawn(env=lease)
    async with server.client() as client:
        sids = await new_sessions(client, 10)
        raws: list[Raw] = []
        for i, sid in enumerate(sids):  # each: a tool call (stored events), then a long answer
            provider.enqueue(tool_calls(("effect", {"key": f"k{i}"}, f"call_fx_{i}")),
                             endless(f"w{i} ", every=0.05))
            raw = await start_run(server.port, sid, f"go {i}")
            await raw.read_until(lambda r: r.types.count("delta") >= 3, within=60)
            assert "tool_result" in raw.types and not raw.eof, raw.types
            raws.append(raw)
    killed = time.monotonic()
    server.process.send_signal(signal.SIGKILL)
    assert await server.wait_exit(10) == -signal.SIGKILL
    for raw in raws:  # whatever was in flight arrives; then the socket ends
        await raw.read_until(lambda r: False, within=10)
    effects = server.effects()
    assert sorted(c for c, _, _ in effects) == sorted(f"call_fx_{i}" for i in range(10))

    database = server.folder / "sessions.db"
    assert integrity(database) == "ok"
    again = await spawn(port=server.port, env=lease)  # the same database, the same address
    ready = time.monotonic()  # /healthz answered: from here each session takes a new turn
    async with again.client(timeout=60) as client:
        # at once (each lease's holder is provably dead), all ten sessions together
        provider.enqueue(*(text("again") for _ in sids))

        async def new_turn(sid: str) -> float:
            response = await client.post(f"/sessions/{sid}/runs", json={"message": "again"},
                                         headers=A)
            assert response.status_code == 200, response.text
            assert "event: done" in response.text, response.text
            return time.monotonic()

        done = await asyncio.gather(*(new_turn(sid) for sid in sids))
        logger.info("seconds from the restart being ready to each new turn done: %s",
                    [round(t - ready, 3) for t in done])
        # before the dead runs' leases could have expired: taken over at once, not waited out
        assert max(done) - killed < LEASE_TTL / 2, [round(t - killed, 3) for t in done]
        for sid, raw in zip(sids, raws, strict=True):
            items = await history(client, sid)
            assert not any(i.get("partial") for i in items), items
            stored = "\n".join(ids_in(i) for i in items)
            for frame in raw.frames:  # every stored-kind frame the client saw is in history
                if frame.event in ("tool_call", "tool_result"):
                    data = json.loads(frame.data)
                    for call in data.get("calls") or data["results"]:
                        assert call["id"] in stored, (frame, items)
                elif frame.event == "message":
                    assert json.loads(frame.data)["id"] in stored, (frame, items)
    assert sorted(c for c, _, _ in again.effects()) == sorted(c for c, _, _ in effects)
    assert integrity(database) == "ok"


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 0), (signal.SIGINT, 130)])
async def test_a_signal_with_50_streams_and_5_websockets_ends_each_then_exits(
        spawn: Spawn, provider: FakeProvider, sig: signal.Signals, code: int) -> None:
    server = await spawn(env={"HEADWATER_SHUTDOWN_GRACE": str(SIGNAL_GRACE)})
    # endless answers: every stream is still going at the signal, however slow the setup
    provider.enqueue(*(endless("w ", every=0.1) for _ in range(55)))
    async with server.client() as client:
        sids = await new_sessions(client, 55)
        sockets = await asyncio.gather(*(live_socket(server.base_url, sid, A)
                                         for sid in sids[:5]))
        shown = await asyncio.gather(*(first_delta(socket) for socket in sockets))
        raws = await asyncio.gather(*(start_run(server.port, sid, "go") for sid in sids[5:]))
        await asyncio.gather(*(r.read_until(lambda r: "delta" in r.types, within=60)
                               for r in raws))
        sent = time.monotonic()
        server.process.send_signal(sig)
        # each ends on the signal, not when the grace runs out (the log says which)
        endings = await asyncio.gather(*(socket_to_end(s, within=SIGNAL_GRACE) for s in sockets))
        await asyncio.gather(*(r.read_until(lambda r: False, within=SIGNAL_GRACE) for r in raws))
    for socket, messages in zip(sockets, endings, strict=True):
        assert messages and messages[-1]["type"] == "error", messages[-3:]
        assert messages[-1]["data"]["code"] == "server_shutdown"
        assert socket.close_code == 1001, (socket.close_code, socket.close_reason)
    for raw in raws:
        assert raw.eof and raw.types[-1] == "error", raw.types[-3:]
        assert json.loads(raw.frames[-1].data)["code"] == "server_shutdown"
        assert sum(t in ("error", "done") for t in raw.types) == 1
    within = max(1.0, sent + SIGNAL_GRACE + EXIT_MARGIN - time.monotonic())
    assert await server.wait_exit(within) == code, server.text()
    log = server.text()
    assert "Traceback" not in log and "timeout graceful shutdown exceeded" not in log
    assert CANARY_TOKEN not in log
    assert integrity(server.folder / "sessions.db") == "ok"
    # what each client was shown (the server may have produced more: docs/event-contract.md)
    shown += ["".join(json.loads(f.data)["text"] for f in raw.frames if f.event == "delta")
              for raw in raws]
    shown[:5] = [first + "".join(m["data"]["text"] for m in messages if m["type"] == "delta")
                 for first, messages in zip(shown[:5], endings, strict=True)]
    again = await spawn(port=server.port)
    async with again.client() as client:
        for sid, seen in zip(sids, shown, strict=True):  # the stop is recorded after the text
            items = await history(client, sid)
            assert not any(i.get("partial") for i in items), items
            assert [i["author"] for i in items] == ["user", "bot", "bot"], items
            kept = items[1]
            assert kept.get("interrupted") is True, items
            assert seen and kept["text"].startswith(seen), (seen, items)
            assert items[-1].get("error", {}).get("code") == "server_shutdown", items


async def first_delta(socket: ClientConnection) -> str:
    """Start a live turn; the text of the messages up to its first delta."""
    await socket.send(json.dumps({"type": "content", "text": "go"}))
    async with asyncio.timeout(60):
        while (message := json.loads(await socket.recv()))["type"] != "delta":
            pass
    text: str = message["data"]["text"]
    return text
