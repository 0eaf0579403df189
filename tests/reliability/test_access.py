"""Another user's ids over every route (read from the OpenAPI schema, plus the live
WebSocket): answered exactly as a missing id is, and nothing of the owner's changes.
Then the canary scan: the secrets appear in no frame, no answer, no log line at DEBUG
and nowhere in the database."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from headwater.testing import FakeProvider

from .conftest import (
    CANARY_KEY,
    CANARY_TOKEN,
    A,
    B,
    Served,
    canaries_in,
    database_dump,
    history,
    new_session,
    start_run,
    text,
    tool_calls,
    trickled,
)

pytestmark = [pytest.mark.reliability, pytest.mark.slow]

MISSING_SESSION = "s-" + "0" * 24
MISSING_RUN = "r-" + "0" * 24
MARK = "alice-only-7c1"  # alice's message: it must reach nothing of bob's


def body_for(path: str, method: str, sid: str) -> dict[str, Any] | None:
    if path.endswith("/runs"):
        return {"message": "hello"}
    if path.startswith("/ag-ui/"):
        return {"threadId": sid, "runId": "r1", "messages": [
            {"id": "m1", "role": "user", "content": "hello"}], "tools": [], "context": [],
            "state": {}, "forwardedProps": {}}
    if path.startswith("/vercel/"):
        return {"id": sid, "messages": [{"id": "m1", "role": "user",
                                         "parts": [{"type": "text", "text": "hello"}]}]}
    return {} if method == "post" else None


async def ws_answer(served: Served, sid: str) -> tuple[str, Any]:
    """What bob's ``WS /live/{sid}`` gets: refused (and how), or its first message's type."""
    url = served.base_url.replace("http://", "ws://", 1) + f"/live/{sid}"
    try:
        async with connect(url, additional_headers=B, open_timeout=10) as socket:
            first = json.loads(await socket.recv())
            return "message", (first["type"], first.get("data", {}).get("code"))
    except InvalidStatus as refused:
        return "refused", refused.response.status_code
    except ConnectionClosed as closed:
        return "closed", closed.rcvd.code if closed.rcvd else None


def shape(response: httpx.Response) -> tuple[int, Any]:
    """The answer minus what differs per request (its request id)."""
    try:
        body = response.json()
    except ValueError:
        return response.status_code, response.text
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        body["error"].pop("request_id", None)
    return response.status_code, body


async def test_another_user_s_ids_are_missing_ids_on_every_route(
        server: Served, provider: FakeProvider) -> None:
    async with server.client() as client:
        schema = (await client.get("/openapi.json")).json()
        sid = await new_session(client)
        provider.enqueue(trickled([f"w{i} " for i in range(600)], every=0.05))
        owner = await start_run(server.port, sid, MARK, resumable=True)
        run_id = owner.header("x-run-id")
        assert run_id
        await owner.read_until(lambda r: "delta" in r.types)
        before = await history(client, sid)
        requests = len(provider.requests)

        checked = []
        for path, item in schema["paths"].items():
            if "{" not in path and not path.startswith(("/ag-ui/", "/vercel/")):
                continue
            for method in item:
                def url(session: str, run: str, path: str = path) -> str:
                    return (path.replace("{session_id}", session).replace("{run_id}", run)
                            .replace("{agent}", "bot"))
                answers = []
                for session, run in ((sid, run_id), (MISSING_SESSION, MISSING_RUN)):
                    body = body_for(path, method, session)
                    response = await client.request(method.upper(), url(session, run), headers=B,
                                                    **({"json": body} if body is not None else {}))
                    answers.append(shape(response))
                theirs, missing = answers
                if path.startswith(("/ag-ui/", "/vercel/")):
                    # an unknown thread id is a new session of the caller's own, so is
                    # another's: sessions are per user (bob's holds none of alice's)
                    assert theirs[0] == missing[0], (path, theirs, missing)
                else:
                    assert theirs == missing, (method, path, theirs, missing)
                    assert theirs[0] in (404, 204), (method, path, theirs)
                checked.append(f"{method.upper()} {path}")
        other = await ws_answer(server, MISSING_SESSION)
        assert await ws_answer(server, sid) == other, other
        checked.append("WS /live/{session_id}")
        assert len(checked) >= 9, checked

        # bob's sessions are bob's (AG-UI and Vercel made him one under that id: ids are
        # per user); alice's session, run and history are as they were
        for listed in (await client.get("/sessions", headers=B)).json()["items"]:
            for item in await history(client, listed["id"], headers=B):
                assert MARK not in str(item) and "w0 " not in str(item), item
        assert (await client.get(f"/sessions/{sid}", headers=A)).status_code == 200
        await owner.read_until(lambda r: r.types.count("delta") >= 5)
        assert not owner.eof and "error" not in owner.types
        assert (await history(client, sid))[:len(before)] == before
        for request in provider.requests[requests:]:  # bob's own runs: none of alice's words
            assert MARK not in request.body.decode(), request.body
        assert (await client.post(f"/runs/{run_id}/cancel", headers=A)).status_code in (200, 202,
                                                                                        204)
        await owner.read_until(lambda r: False, within=10)
        assert owner.types[-1] == "error"


async def test_the_canaries_show_nowhere_but_the_tool_payloads(
        server: Served, provider: FakeProvider) -> None:
    """The token and the provider key are the canaries; a tool may carry a user's
    data (here: the key as an argument), which the database keeps, and nothing else."""
    seen: list[str] = []
    async with server.client() as client:
        sid = await new_session(client)
        provider.enqueue(tool_calls(("effect", {"key": CANARY_KEY}, "call_canary")),
                         text("all ", "done"))
        raw = await start_run(server.port, sid, "record it")
        await raw.read_until(lambda r: False, within=15)
        assert raw.types[-1] == "done", raw.types
        seen += canaries_in("frames", b"".join(f.data.encode() for f in raw.frames))
        for response in (await client.get(f"/sessions/{sid}/x", headers=A),
                         await client.get("/sessions", headers={"Authorization": "Bearer nope"}),
                         await client.post(f"/sessions/{sid}/runs", headers=A, content=b"{"),
                         await client.get(f"/runs/r-1/stream?token={CANARY_TOKEN}", headers=A),
                         await client.get(f"/sessions/{sid}/events", headers=A)):
            seen += canaries_in(f"answer {response.request.url.path}", response.text)
            seen += canaries_in("answer headers", str(response.headers))
        url = server.base_url.replace("http://", "ws://", 1) + f"/live/{sid}"
        async with connect(url, subprotocols=["bearer", CANARY_TOKEN],  # type: ignore[list-item]
                           open_timeout=10) as socket:
            seen += canaries_in("ws", await socket.recv())
    seen += canaries_in("log at DEBUG", server.text())
    # the database: the tool's arguments may hold it (a user's data); nothing else may
    dump = database_dump(server.folder / "sessions.db")
    payloads = [line for line in dump.splitlines() if CANARY_KEY in line]
    for line in payloads:
        assert "call_canary" in line, line  # the tool call or its result, not anything else
    seen += canaries_in("database", re.sub(r".*call_canary.*", "", dump))
    assert seen == []
    assert payloads  # the scan did see the database (the payload is there)
