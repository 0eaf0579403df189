"""The gateway over real HTTP (uvicorn on loopback): frames, history, auth, limits, runs."""

from __future__ import annotations

import asyncio
import json
import random
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx

from headwater import Agent, tool
from headwater.gateway import StaticTokenAuth, create_app
from headwater.settings import Settings
from headwater.testing import ScriptedModel
from headwater.testing.sse import aiter_sse

from .stores import new_service

Serve = Callable[[Any], Awaitable[str]]
A = {"Authorization": "Bearer token-a"}
B = {"Authorization": "Bearer token-b"}
AUTH = StaticTokenAuth({"token-a": "alice", "token-b": "bob"})


@dataclass
class Received:
    status: int
    headers: httpx.Headers
    frames: list[tuple[int, str, dict[str, Any]]]
    raw: bytes


def lookup_order(order_id: str) -> dict[str, str]:
    """Look up an order.

    Args:
        order_id: the order number.
    """
    return {"status": "shipped", "shipped_on": "30 September", "secret": "card 4242"}


def support_model(delay: float = 0.0) -> ScriptedModel:
    return (ScriptedModel()
            .call("lookupOrder", {"order_id": "1042"})
            .reply("Order 1042 shipped ", "on 30 September and ", "is due Monday.",
                   delay=delay))


def support_agent(model: ScriptedModel, **tool_options: Any) -> Agent:
    lookup = tool(name="lookupOrder", **tool_options)(lookup_order)
    return Agent(name="support", model=model, tools=[lookup])


def settings(**overrides: Any) -> Settings:
    base: dict[str, Any] = {"heartbeat_interval": 5.0, "send_timeout": 2.0,
                            "session_lock_timeout": 0, "shutdown_grace": 2.0}
    return Settings(**{**base, **overrides})


async def post_run(client: httpx.AsyncClient, sid: str, body: dict[str, Any],
                   headers: dict[str, str] = A, *, stop_after: int | None = None) -> Received:
    """POST a run and read its frames (all, or ``stop_after`` then hang up)."""
    frames: list[tuple[int, str, dict[str, Any]]] = []
    raw: list[bytes] = []
    async with client.stream("POST", f"/sessions/{sid}/runs", json=body,
                             headers=headers) as response:
        if response.status_code != 200:
            return Received(response.status_code, response.headers, [],
                            await response.aread())
        async for message in aiter_sse(_tee(response.aiter_bytes(), raw.append)):
            frames.append((int(message.id), message.event, json.loads(message.data)))
            if stop_after is not None and len(frames) >= stop_after:
                break
    return Received(response.status_code, response.headers, frames, b"".join(raw))


async def follow(client: httpx.AsyncClient, run_id: str, after: int | None,
                 headers: dict[str, str] = A) -> Received:
    extra = {} if after is None else {"Last-Event-ID": str(after)}
    frames: list[tuple[int, str, dict[str, Any]]] = []
    async with client.stream("GET", f"/runs/{run_id}/stream",
                             headers={**headers, **extra}) as response:
        if response.status_code != 200:
            return Received(response.status_code, response.headers, [],
                            await response.aread())
        async for message in aiter_sse(response.aiter_bytes()):
            frames.append((int(message.id), message.event, json.loads(message.data)))
    return Received(response.status_code, response.headers, frames, b"")


async def _tee(chunks: AsyncIterator[bytes], sink: Callable[[bytes], None]
               ) -> AsyncIterator[bytes]:
    async for chunk in chunks:
        sink(chunk)
        yield chunk


async def new_session(client: httpx.AsyncClient, headers: dict[str, str] = A) -> str:
    response = await client.post("/sessions", json={}, headers=headers)
    assert response.status_code == 201, response.text
    sid: str = response.json()["id"]
    return sid


# -- the worked example --------------------------------------------------------------------------


async def test_the_worked_example_gives_its_seven_frames_and_four_stored_events(
        client_for: Any) -> None:
    service = new_service()
    app = create_app(support_agent(support_model()), session_service=service, auth=AUTH,
                     settings=settings())
    client = await client_for(app)
    sid = await new_session(client)
    got = await post_run(client, sid, {"message": "Where is order 1042?"})
    assert got.status == 200
    assert got.headers["content-type"].startswith("text/event-stream")
    assert got.headers["cache-control"] == "no-store"
    assert got.headers["x-accel-buffering"] == "no"
    assert "gzip" not in got.headers.get("content-encoding", "")
    run_id = got.headers["x-run-id"]
    assert [(i, t) for i, t, _ in got.frames] == [
        (1, "tool_call"), (2, "tool_result"), (3, "delta"), (4, "delta"), (5, "delta"),
        (6, "message"), (7, "done")]
    frames = [d for _, _, d in got.frames]
    call_id = frames[0]["calls"][0]["id"]
    assert frames[0] == {"author": "support", "names": ["lookupOrder"],
                         "calls": [{"id": call_id, "name": "lookupOrder"}]}
    assert frames[1]["author"] == "support"
    result = frames[1]["results"][0]
    assert frames[1]["count"] == 1 and result["id"] == call_id and result["status"] == "ok"
    assert set(result) == {"id", "name", "status", "size"} and result["size"] > 0
    assert [f["text"] for f in frames[2:5]] == [
        "Order 1042 shipped ", "on 30 September and ", "is due Monday."]
    assert all(f["author"] == "support" for f in frames[2:6])
    message = frames[5]
    assert message["text"] == "Order 1042 shipped on 30 September and is due Monday."
    assert message["final"] is True
    assert set(frames[6]) == {"usage"} and set(frames[6]["usage"]) == {"input_tokens",
                                                                        "output_tokens"}
    assert b"card 4242" not in got.raw and "card 4242" not in json.dumps(frames)  # no payload

    history = await client.get(f"/sessions/{sid}/events", headers=A)
    assert history.status_code == 200
    items = history.json()["items"]
    assert [i["author"] for i in items] == ["user", "support", "support", "support"]
    assert items[0]["text"] == "Where is order 1042?"
    assert items[1]["calls"] == [{"id": call_id, "name": "lookupOrder"}]
    assert items[2]["results"][0]["status"] == "ok" and "response" not in items[2]["results"][0]
    assert items[3]["id"] == message["id"] and items[3]["text"] == message["text"]
    assert "card 4242" not in history.text  # (a timestamp may hold 4242)
    session = await service.get_session(app_name="support", user_id="alice", session_id=sid)
    assert session is not None and not any(e.partial for e in session.events)
    assert all(e.invocation_id == run_id for e in session.events)


async def test_expose_result_forwards_arguments_and_results(client_for: Any) -> None:
    app = create_app(support_agent(support_model(), expose_result=True), auth=AUTH,
                     session_service=new_service(), settings=settings())
    client = await client_for(app)
    got = await post_run(client, await new_session(client), {"message": "order 1042?"})
    call, result = got.frames[0][2], got.frames[1][2]
    assert call["calls"][0]["args"] == {"order_id": "1042"}
    assert result["results"][0]["response"]["secret"] == "card 4242"


async def test_streaming_mode_none_sends_no_deltas(client_for: Any) -> None:
    app = create_app(support_agent(support_model()), auth=AUTH,
                     session_service=new_service(), settings=settings())
    client = await client_for(app)
    got = await post_run(client, await new_session(client),
                         {"message": "order 1042?", "streaming_mode": "none"})
    assert [t for _, t, _ in got.frames] == ["tool_call", "tool_result", "message", "done"]


async def test_model_text_cannot_inject_a_frame(client_for: Any) -> None:
    evil = "a\n\nid: 99\nevent: done\ndata: {}\n\r\u2028\x00\r\nb"
    model = ScriptedModel().reply(evil, "tail")
    app = create_app(Agent(name="bot", model=model), auth=AUTH,
                     session_service=new_service(), settings=settings())
    client = await client_for(app)
    got = await post_run(client, await new_session(client), {"message": "hi"})
    assert [t for _, t, _ in got.frames] == ["delta", "delta", "message", "done"]
    assert got.frames[0][2]["text"] == evil
    assert got.frames[2][2]["text"] == evil + "tail"


# -- auth and isolation --------------------------------------------------------------------------


async def test_no_token_or_a_bad_one_is_401_with_a_bearer_challenge(client_for: Any) -> None:
    app = create_app(support_agent(support_model()), auth=AUTH,
                     session_service=new_service(), settings=settings())
    client = await client_for(app)
    for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic eDp5"}):
        response = await client.get("/sessions", headers=headers)
        assert response.status_code == 401
        assert response.headers["www-authenticate"].startswith("Bearer")
        assert response.json()["error"]["code"] == "unauthorized"


async def test_another_users_ids_answer_404_exactly_like_missing_ones(client_for: Any) -> None:
    model = support_model(delay=0.02)
    app = create_app(support_agent(model), auth=AUTH, session_service=new_service(),
                     settings=settings(detached_ttl=30))
    client = await client_for(app)
    sid = await new_session(client)
    first = await post_run(client, sid, {"message": "Where is order 1042?", "resumable": True})
    run_id = first.headers["x-run-id"]
    call_id = first.frames[0][2]["calls"][0]["id"]

    def shape(response: httpx.Response) -> tuple[int, str]:
        body = response.json()
        body["error"]["request_id"] = "-"
        return response.status_code, json.dumps(body, sort_keys=True)

    routes = [
        ("GET", "/sessions/{sid}", None), ("GET", "/sessions/{sid}/events", None),
        ("DELETE", "/sessions/{sid}", None),
        ("POST", "/sessions/{sid}/runs", {"message": "hi"}),
        ("POST", "/sessions/{sid}/runs", {"approvals": [{"call_id": call_id,
                                                         "approved": True}]}),
        ("GET", "/runs/{run}/stream", None), ("POST", "/runs/{run}/cancel", None),
    ]
    for method, path, body in routes:
        theirs = await client.request(method, path.format(sid=sid, run=run_id), json=body,
                                      headers=B)
        missing = await client.request(method, path.format(sid="missing0", run="inv-missing"),
                                       json=body, headers=B)
        assert shape(theirs) == shape(missing), (method, path)
        assert theirs.status_code == 404
        body = theirs.text.replace(theirs.json()["error"]["request_id"], "-")  # random hex
        for secret in ("1042", "shipped", "lookupOrder", call_id):
            assert secret not in body
    listed = await client.get("/sessions", headers=B)
    assert listed.status_code == 200 and listed.json()["items"] == []
    mine = await client.get("/sessions", headers=A)
    assert [s["id"] for s in mine.json()["items"]] == [sid]


# -- limits --------------------------------------------------------------------------------------


async def test_a_second_run_on_a_busy_session_is_409(client_for: Any) -> None:
    model = ScriptedModel().reply(*[f"w{i} " for i in range(40)], delay=0.02).reply("second")
    app = create_app(Agent(name="bot", model=model), auth=AUTH,
                     session_service=new_service(), settings=settings())
    client = await client_for(app)
    sid = await new_session(client)
    first = asyncio.ensure_future(post_run(client, sid, {"message": "long"}))
    await _until(lambda: bool(model.requests))
    busy = await client.post(f"/sessions/{sid}/runs", json={"message": "again"}, headers=A)
    assert busy.status_code == 409 and busy.json()["error"]["code"] == "session_busy"
    # The session says which run is going on in it (the page decides from it whether a
    # last question without an answer may still get one).
    running = (await client.get(f"/sessions/{sid}", headers=A)).json()["active_run"]
    assert running and (await client.get("/sessions", headers=A)).json()["items"][0][
        "active_run"] == running
    assert (await client.get(f"/sessions/{sid}", headers=B)).status_code == 404  # alice's
    done = await first
    assert done.frames[-1][1] == "done"
    assert done.headers["x-run-id"] == running
    assert (await client.get(f"/sessions/{sid}", headers=A)).json()["active_run"] is None
    assert (await client.get("/sessions", headers=A)).json()["items"][0]["active_run"] is None
    again = await post_run(client, sid, {"message": "again"})
    assert again.frames[-1][1] == "done" and again.frames[-2][2]["text"] == "second"


async def test_too_many_streams_is_429_with_retry_after(client_for: Any) -> None:
    model = ScriptedModel().reply(*[f"w{i} " for i in range(40)], delay=0.02)
    app = create_app(Agent(name="bot", model=model), auth=AUTH,
                     session_service=new_service(),
                     settings=settings(max_streams_per_user=1))
    client = await client_for(app)
    first = asyncio.ensure_future(post_run(client, await new_session(client), {"message": "x"}))
    await _until(lambda: bool(model.requests))
    other = await new_session(client)
    refused = await client.post(f"/sessions/{other}/runs", json={"message": "y"}, headers=A)
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "too_many_streams"
    assert refused.headers["retry-after"]
    bob = await new_session(client, B)  # the limit is per user
    assert (await post_run(client, bob, {"message": "z"}, B)).status == 200
    await first


async def test_bad_run_bodies_are_refused_with_the_envelope(client_for: Any) -> None:
    app = create_app(support_agent(support_model()), auth=AUTH,
                     session_service=new_service(), settings=settings())
    client = await client_for(app)
    sid = await new_session(client)
    for body in ({}, {"message": "x", "approvals": []}, {"message": "  "},
                 {"message": {"role": "user", "parts": "nope"}}, {"message": "x", "extra": 1}):
        response = await client.post(f"/sessions/{sid}/runs", json=body, headers=A)
        assert response.status_code in (400, 422), body
        assert response.json()["error"]["code"] == "invalid_request"
    history = await client.get(f"/sessions/{sid}/events", headers=A)
    assert history.json()["items"] == []  # nothing was stored


# -- stopping runs -------------------------------------------------------------------------------


async def test_cancel_ends_the_stream_with_cancelled_and_seals_history(client_for: Any) -> None:
    started = asyncio.Event()

    async def slow(order_id: str) -> str:
        """Slow lookup.

        Args:
            order_id: the order.
        """
        started.set()
        await asyncio.sleep(30)
        return "never"

    model = ScriptedModel().call("slow", {"order_id": "1"}).reply("after")
    app = create_app(Agent(name="bot", model=model, tools=[slow]), auth=AUTH,
                     session_service=new_service(), settings=settings())
    client = await client_for(app)
    sid = await new_session(client)
    running = asyncio.ensure_future(post_run(client, sid, {"message": "go"}))
    await asyncio.wait_for(started.wait(), 5)
    runs = app.state.gateway.runs.runs
    run_id = next(iter(runs))
    cancelled = await client.post(f"/runs/{run_id}/cancel", headers=A)
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    got = await asyncio.wait_for(running, 5)
    assert [t for _, t, _ in got.frames] == ["tool_call", "error"]
    assert got.frames[-1][2]["code"] == "cancelled" and got.frames[-1][2]["retryable"] is False
    items = (await client.get(f"/sessions/{sid}/events", headers=A)).json()["items"]
    assert items[-2]["results"][0]["status"] == "error"  # the call, sealed
    assert items[-1]["error"]["code"] == "cancelled"  # the run's stop, recorded
    again = await post_run(client, sid, {"message": "next"})
    assert again.frames[-1][1] == "done"


async def test_a_disconnect_cancels_a_run_that_is_not_resumable(client_for: Any) -> None:
    model = ScriptedModel().reply(*[f"w{i} " for i in range(200)], delay=0.01).reply("next")
    app = create_app(Agent(name="bot", model=model), auth=AUTH,
                     session_service=new_service(), settings=settings())
    client = await client_for(app)
    sid = await new_session(client)
    got = await post_run(client, sid, {"message": "go"}, stop_after=3)
    assert len(got.frames) == 3
    await _until(lambda: bool(model.streams) and model.streams[0].closed_early, within=1.0)
    await _until(lambda: not app.state.gateway.runs.runs
                 or all(r.ended for r in app.state.gateway.runs.runs.values()), within=1.0)
    again = await post_run(client, sid, {"message": "again"})
    assert again.status == 200 and again.frames[-2][2]["text"] == "next"


async def test_heartbeats_are_comments_without_ids(client_for: Any) -> None:
    model = ScriptedModel().reply("slow", delay=0.4)
    app = create_app(Agent(name="bot", model=model), auth=AUTH,
                     session_service=new_service(),
                     settings=settings(heartbeat_interval=0.05))
    client = await client_for(app)
    sid = await new_session(client)
    async with client.stream("POST", f"/sessions/{sid}/runs", json={"message": "x"},
                             headers=A) as response:
        raw = b"".join([chunk async for chunk in response.aiter_bytes()])
    assert b"\n:" in b"\n" + raw  # at least one comment line
    messages = [m async for m in aiter_sse(_bytes(raw))]
    assert [m.id for m in messages] == ["1", "2", "3"]


# -- resumable runs ------------------------------------------------------------------------------


async def test_a_resumed_run_gives_exactly_the_frames_of_an_uninterrupted_one(
        client_for: Any) -> None:
    words = [f"w{i} " for i in range(30)]
    model = ScriptedModel()
    for _ in range(4):  # the whole run, then three interrupted ones
        (model.call("lookupOrder", {"order_id": "1"}).reply(*words, delay=0.005)
         .call("lookupOrder", {"order_id": "2"}).reply(*words, delay=0.005))
    app = create_app(support_agent(model), auth=AUTH, session_service=new_service(),
                     settings=settings(detached_ttl=30))
    client = await client_for(app)
    whole = await post_run(client, await new_session(client),
                           {"message": "go", "resumable": True})
    rng = random.Random(7)
    for _ in range(3):
        cut = rng.randrange(1, len(whole.frames))
        sid = await new_session(client)
        head = await post_run(client, sid, {"message": "go", "resumable": True}, stop_after=cut)
        run_id = head.headers["x-run-id"]
        first, second = await asyncio.gather(follow(client, run_id, cut),
                                             follow(client, run_id, cut))
        for tail in (first, second):
            joined = head.frames + tail.frames
            assert [i for i, _, _ in joined] == list(range(1, len(whole.frames) + 1))
            assert [_strip(f) for f in joined] == [_strip(f) for f in whole.frames]
            assert sum(t in ("done", "error") for _, t, _ in joined) == 1
        last = whole.frames[-1][0]
        gone = await client.get(f"/runs/{run_id}/stream",
                                headers={**A, "Last-Event-ID": str(last)})
        assert gone.status_code == 204
    bad = await client.get(f"/runs/{run_id}/stream", headers={**A, "Last-Event-ID": "x1"})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_request"


def _strip(frame: tuple[int, str, dict[str, Any]]) -> tuple[str, str]:
    """A frame without what differs between two runs (ids of calls, events; request ids)."""
    _, kind, data = frame
    data = dict(data)
    for key in ("id", "request_id"):
        data.pop(key, None)
    if "calls" in data:
        data["calls"] = [{k: v for k, v in c.items() if k != "id"} for c in data["calls"]]
    if "results" in data:
        data["results"] = [{k: v for k, v in r.items() if k != "id"} for r in data["results"]]
    return kind, json.dumps(data, sort_keys=True)


async def _bytes(raw: bytes) -> AsyncIterator[bytes]:
    yield raw


async def _until(condition: Callable[[], bool], within: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + within
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.005)


async def test_a_client_that_stops_reading_is_dropped_and_its_run_cancelled(
        client_for: Any, serve: Serve) -> None:
    big = "x" * 65536
    model = ScriptedModel().reply(*[big] * 400, delay=0.001).reply("next")
    app = create_app(Agent(name="bot", model=model), auth=AUTH,
                     session_service=new_service(),
                     settings=settings(send_timeout=0.3))
    client = await client_for(app)
    sid = await new_session(client)
    port = int(str(client.base_url).rsplit(":", 1)[1].rstrip("/"))
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    body = json.dumps({"message": "go"}).encode()
    request = (f"POST /sessions/{sid}/runs HTTP/1.1\r\nHost: x\r\n"
               f"Authorization: Bearer token-a\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(body)}\r\n\r\n").encode() + body
    await asyncio.get_running_loop().sock_sendall(sock, request)
    try:  # never read: the server's buffers fill, its send stalls past send_timeout
        await _until(lambda: bool(model.streams) and model.streams[0].closed_early, within=5.0)
        assert model.streams[0].emitted < 400
        await _until(lambda: all(r.ended for r in app.state.gateway.runs.runs.values()))
        again = await post_run(client, sid, {"message": "again"})
        assert again.status == 200 and again.frames[-2][2]["text"] == "next"
    finally:
        sock.close()


async def test_records_are_stored_before_their_frames_leave(client_for: Any) -> None:
    service = new_service()
    app = create_app(support_agent(support_model(delay=0.05)), session_service=service,
                     auth=AUTH, settings=settings())
    client = await client_for(app)
    sid = await new_session(client)
    checked: list[str] = []
    async with client.stream("POST", f"/sessions/{sid}/runs", json={"message": "1042?"},
                             headers=A) as response:
        async for message in aiter_sse(response.aiter_bytes()):
            data = json.loads(message.data)
            if message.event not in ("tool_call", "tool_result", "message"):
                continue
            items = (await client.get(f"/sessions/{sid}/events", headers=A)).json()["items"]
            # the run may have moved on meanwhile; what the frame shows must be stored
            if message.event == "tool_call":
                assert any(i.get("calls") == data["calls"] for i in items)
            elif message.event == "tool_result":
                assert any(i.get("results") == data["results"] for i in items)
            else:
                assert any(i["id"] == data["id"] and i["text"] == data["text"] for i in items)
            checked.append(message.event)
    assert checked == ["tool_call", "tool_result", "message"]
