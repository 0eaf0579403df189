"""The gateway's bounds on what one user may ask (issue 23, holes 6-8), over real HTTP.

Run and session ids are unguessable; a ``Last-Event-ID`` past a run's last
frame is refused; a user's requests are rate limited across the app; a message
past ``max_message_chars`` is refused on every surface that takes one, with
nothing stored and no model call.
"""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
from websockets.asyncio.client import connect

from headwater import Agent
from headwater.gateway import StaticTokenAuth, create_app
from headwater.settings import Settings
from headwater.testing import ScriptedModel, ScriptedTurn

from .stores import new_service

A = {"Authorization": "Bearer token-a"}
B = {"Authorization": "Bearer token-b"}
AUTH = StaticTokenAuth({"token-a": "alice", "token-b": "bob"})
HEX96 = re.compile(r"[0-9a-f]{24,}")


def settings(**overrides: Any) -> Settings:
    base: dict[str, Any] = {"heartbeat_interval": 5.0, "send_timeout": 2.0,
                            "session_lock_timeout": 0, "shutdown_grace": 2.0}
    return Settings(**{**base, **overrides})


async def new_session(client: httpx.AsyncClient, headers: dict[str, str] = A) -> str:
    response = await client.post("/sessions", json={}, headers=headers)
    assert response.status_code == 201, response.text
    sid: str = response.json()["id"]
    return sid


def random_part(run_id: str) -> str:
    """The id's random hex, which must carry at least 96 bits (24 hex digits)."""
    prefix, _, rest = run_id.partition("-")
    assert prefix and HEX96.fullmatch(rest), run_id
    return rest


# -- hole 7: ids are random ----------------------------------------------------------------------


async def test_run_and_session_ids_are_random_with_at_least_96_bits(client_for: Any,
                                                                     serve: Any) -> None:
    model = ScriptedModel(responder=lambda request: ScriptedTurn(text=["ok"]))
    app = create_app(Agent(name="bot", model=model), session_service=new_service(),
                     auth=AUTH, settings=settings())
    client = await client_for(app)
    sids = [await new_session(client) for _ in range(3)]
    for sid in sids:
        assert re.fullmatch(r"[0-9a-f]{32}", sid), sid  # a uuid4: 122 random bits
    run_ids = []
    for sid in sids:
        async with client.stream("POST", f"/sessions/{sid}/runs", json={"message": "hi"},
                                 headers=A) as response:
            assert response.status_code == 200
            run_ids.append(response.headers["x-run-id"])
            await response.aread()
    url = str(client.base_url).replace("http://", "ws://") + f"/live/{sids[0]}"
    async with connect(url, additional_headers=A) as socket:
        ready = json.loads(await socket.recv())
        assert ready["type"] == "ready"
        run_ids.append(ready["data"]["run_id"])
    randoms = [random_part(run_id) for run_id in run_ids]
    assert len(set(randoms)) == len(randoms)
    # no shared per-process prefix: the ids of one process differ from their first digits
    assert len({r[:8] for r in randoms}) == len(randoms)
    stored = await app.state.gateway.service.get_session(app_name="bot", user_id="alice",
                                                         session_id=sids[0])
    assert {e.invocation_id for e in stored.events} == {run_ids[0]}


# -- hole 6: Last-Event-ID past the run --------------------------------------------------------


async def test_a_last_event_id_past_a_running_runs_last_frame_is_400(client_for: Any) -> None:
    model = ScriptedModel().reply(*[f"w{i} " for i in range(200)], delay=0.05)
    app = create_app(Agent(name="bot", model=model), session_service=new_service(),
                     auth=AUTH, settings=settings())
    client = await client_for(app)
    sid = await new_session(client)
    async with client.stream("POST", f"/sessions/{sid}/runs",
                             json={"message": "go", "resumable": True}, headers=A) as response:
        run_id = response.headers["x-run-id"]
        chunks = response.aiter_bytes()
        await anext(chunks)  # the run has begun
        answer = await client.get(f"/runs/{run_id}/stream",
                                  headers={**A, "Last-Event-ID": "100000"})
        assert answer.status_code == 400, answer.text
        error = answer.json()["error"]
        assert error["code"] == "invalid_request" and "last frame" in error["message"]
        # a reached id still resumes
        async with client.stream("GET", f"/runs/{run_id}/stream",
                                 headers={**A, "Last-Event-ID": "1"}) as resumed:
            assert resumed.status_code == 200
            first = await anext(resumed.aiter_lines())
            assert first == "id: 2"
        await client.post(f"/runs/{run_id}/cancel", headers=A)
    ended = await client.get(f"/runs/{run_id}/stream", headers={**A, "Last-Event-ID": "100000"})
    assert ended.status_code == 400


# -- hole 8: a per-user rate limit ---------------------------------------------------------------


async def test_a_users_requests_past_the_rate_limit_get_429_and_create_nothing(
        client_for: Any) -> None:
    service = new_service()
    app = create_app(Agent(name="bot", model=ScriptedModel()), session_service=service,
                     auth=AUTH, settings=settings(rate_limit_burst=10,  # one token a 100 s
                                                  rate_limit_per_minute=0.6))
    client = await client_for(app)
    answers = [await client.post("/sessions", json={}, headers=A) for _ in range(30)]
    statuses = [a.status_code for a in answers]
    assert statuses == [201] * 10 + [429] * 20, statuses
    refused = answers[-1]
    assert refused.json()["error"]["code"] == "rate_limited"
    assert int(refused.headers["retry-after"]) >= 1
    assert len(await service.list_sessions(app_name="bot", user_id="alice")) == 10
    # per user: bob still has his whole burst, and alice's other routes are limited too
    assert (await client.post("/sessions", json={}, headers=B)).status_code == 201
    assert (await client.get("/sessions", headers=A)).status_code == 429
    url = str(client.base_url).replace("http://", "ws://") + "/live/anything"
    async with connect(url, additional_headers=A) as socket:
        await socket.wait_closed()
    assert socket.close_code == 1013 and socket.close_reason == "rate_limited"


# -- hole 8: max_message_chars on every surface -------------------------------------------------


async def test_a_message_past_max_message_chars_is_413_on_every_surface_with_nothing_stored(
        client_for: Any) -> None:
    model = ScriptedModel(responder=lambda request: ScriptedTurn(text=["ok"]))
    service = new_service()
    app = create_app(Agent(name="bot", model=model), session_service=service, auth=AUTH,
                     settings=settings(max_message_chars=1000))
    client = await client_for(app)
    sid = await new_session(client)
    long, fits = "x" * 1001, "x" * 1000
    refused = [
        await client.post(f"/sessions/{sid}/runs", json={"message": long}, headers=A),
        await client.post(f"/sessions/{sid}/runs", headers=A, json={
            "message": {"role": "user", "parts": [{"text": fits}, {"text": "y"}]}}),
        await client.post("/ag-ui/bot", headers=A, json={
            "threadId": "thread-1", "runId": "r1",
            "messages": [{"id": "m1", "role": "user", "content": long}]}),
        await client.post("/vercel/bot", headers=A, json={
            "id": "chat-1", "messages": [{"id": "u1", "role": "user",
                                          "parts": [{"type": "text", "text": long}]}]}),
    ]
    for answer in refused:
        assert answer.status_code == 413, answer.text
        error = answer.json()["error"]
        assert error["code"] == "payload_too_large"
        assert error["message"] == "The message is over this server's limit of 1,000 characters."
        assert error["request_id"] == answer.headers["x-request-id"]
    url = str(client.base_url).replace("http://", "ws://") + f"/live/{sid}"
    async with connect(url, additional_headers=A) as socket:
        assert json.loads(await socket.recv())["type"] == "ready"
        await socket.send(json.dumps({"type": "content", "text": long}))
        notice = json.loads(await socket.recv())
        assert notice["id"] is None and notice["type"] == "error"
        assert notice["data"]["code"] == "payload_too_large"
        await socket.send(json.dumps({"type": "content", "text": fits}))  # still open
        frames = [json.loads(await socket.recv()) for _ in range(2)]
        assert [f["type"] for f in frames] == ["delta", "message"]
    assert len(model.requests) == 1  # only the message that fits reached the model
    assert [s.id for s in await service.list_sessions(app_name="bot", user_id="alice")] == [sid]
    stored = await service.get_session(app_name="bot", user_id="alice", session_id=sid)
    assert stored is not None
    assert [e.content.text for e in stored.events if e.author == "user"] == [fits]
