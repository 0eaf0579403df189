"""``WS /live/{session_id}`` over real uvicorn with a real WebSocket client (``websockets``)."""

from __future__ import annotations

import asyncio
import base64
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import TypeAdapter
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from headwater import Agent, Content, ToolContext, tool
from headwater.gateway import StaticTokenAuth, create_app
from headwater.gateway.sse import FRAME_TYPES
from headwater.models import LlmRequest
from headwater.settings import Settings
from headwater.testing import ScriptedCall, ScriptedModel, ScriptedTurn, wait_until
from headwater.tools.approval import approval_response

from .stores import new_service

Serve = Callable[[Any], Awaitable[str]]
A = {"Authorization": "Bearer token-a"}
AUTH = StaticTokenAuth({"token-a": "alice", "token-b": "bob"})
Msg = dict[str, Any]  # a JSON message off the socket


@tool
async def ticker(tool_context: ToolContext) -> AsyncIterator[int]:
    """Counts upwards, one number every 50 ms, until stopped."""
    n = 0
    while True:
        n += 1
        yield n
        await tool_context.clock.sleep(0.05)


def responder(request: LlmRequest) -> ScriptedTurn:
    """The live model: reacts to the last thing it was told."""
    last = request.contents[-1]
    text = last.text
    if last.function_responses:
        name = last.function_responses[0].name
        return ScriptedTurn(text=["Stopped."] if name == "stop_streaming" else ["Watching."])
    if text == "watch":
        return ScriptedTurn(calls=[ScriptedCall("ticker", {}, id="t-1")])
    if text == "stop":
        return ScriptedTurn(calls=[ScriptedCall("stop_streaming", {"function_name": "ticker"},
                                                id="stop-1")])
    if text.startswith("Function"):
        return ScriptedTurn(text=["ok"])
    if text == "tell me a long story":
        return ScriptedTurn(text=[f"word{i} " for i in range(60)], delay=0.03)
    return ScriptedTurn(text=["Hello ", "from ", "headwater."])


def settings(**overrides: Any) -> Settings:
    base: dict[str, Any] = {"session_lock_timeout": 0, "send_timeout": 2.0,
                            "shutdown_grace": 2.0, "ws_auth_timeout": 2.0}
    return Settings(**{**base, **overrides})


class Server:
    """An app under uvicorn with helpers for sessions and sockets."""

    def __init__(self, base: str, app: Any, client: httpx.AsyncClient) -> None:
        self.base = base
        self.app = app
        self.http = client

    def url(self, sid: str) -> str:
        return self.base.replace("http://", "ws://", 1) + f"/live/{sid}"

    async def session(self, headers: dict[str, str] = A) -> str:
        response = await self.http.post("/sessions", json={}, headers=headers)
        assert response.status_code == 201, response.text
        sid: str = response.json()["id"]
        return sid

    async def history(self, sid: str, headers: dict[str, str] = A) -> list[Msg]:
        response = await self.http.get(f"/sessions/{sid}/events", headers=headers)
        assert response.status_code == 200, response.text
        items: list[Msg] = response.json()["items"]
        return items


@pytest.fixture
async def server_for(serve: Serve) -> AsyncIterator[Callable[..., Awaitable[Server]]]:
    clients: list[httpx.AsyncClient] = []

    async def make(auth: Any = AUTH, tools: list[Any] | None = None,
                   **overrides: Any) -> Server:
        model = ScriptedModel(responder=responder)
        agent = Agent(name="voice", model=model, tools=tools or [])
        app = create_app(agent, session_service=new_service(), auth=auth,
                         settings=settings(**overrides))
        base = await serve(app)
        client = httpx.AsyncClient(base_url=base, timeout=10)
        clients.append(client)
        return Server(base, app, client)

    yield make
    for client in clients:
        await client.aclose()


async def recv(ws: ClientConnection, within: float = 5.0) -> Msg:
    message = json.loads(await asyncio.wait_for(ws.recv(), within))
    assert isinstance(message, dict)
    return message


async def until(ws: ClientConnection, done: Callable[[Msg], bool], seen: list[Msg],
                within: float = 5.0) -> Msg:
    """Receive into ``seen`` until a message satisfies ``done``; answer that message."""
    async with asyncio.timeout(within):
        while True:
            message = await recv(ws)
            seen.append(message)
            if done(message):
                return message


async def closed(ws: ClientConnection, within: float = 5.0) -> tuple[int | None, str | None]:
    """Drain the socket until the server closes it; answer the close code and reason."""
    async with asyncio.timeout(within):
        with pytest.raises(ConnectionClosed):
            while True:
                await ws.recv()
    return ws.close_code, ws.close_reason


def send(ws: ClientConnection, message: Msg) -> Awaitable[None]:
    return ws.send(json.dumps(message))


def of_type(seen: list[Msg], type: str) -> list[Msg]:
    return [m for m in seen if m["type"] == type and m["id"] is not None]


async def ready(ws: ClientConnection) -> Msg:
    message = await recv(ws)
    assert message["type"] == "ready" and message["id"] is None, message
    return message


# -- a turn --------------------------------------------------------------------------------------


async def test_text_in_streams_deltas_then_one_message_and_turn_complete(
        server_for: Any) -> None:
    server = await server_for(auth=None)  # dev mode: no token needed
    sid = await server.session({})
    async with connect(server.url(sid)) as ws:
        hello = await ready(ws)
        await send(ws, {"type": "content", "text": "hi"})
        seen: list[Msg] = []
        await until(ws, lambda m: m["type"] == "turn_complete", seen)
        await send(ws, {"type": "close"})
        await until(ws, lambda m: m["type"] in ("done", "error"), seen)
        code, _ = await closed(ws)
    assert [m["type"] for m in seen] == ["delta", "delta", "delta", "message", "turn_complete",
                                         "done"]
    assert [m["id"] for m in seen] == [1, 2, 3, 4, 5, 6]  # the run's frame ids, contiguous
    deltas = "".join(m["data"]["text"] for m in of_type(seen, "delta"))
    (message,) = of_type(seen, "message")
    assert message["data"]["text"] == deltas == "Hello from headwater."
    assert message["data"]["final"] is True and "interrupted" not in message["data"]
    assert seen[4]["data"] == {"author": "voice", "interrupted": False}
    assert code == 1000
    history = await server.history(sid, {})
    assert [(h["author"], h["text"]) for h in history] == [("user", "hi"),
                                                           ("voice", "Hello from headwater.")]
    assert history[1]["id"] == message["data"]["id"]
    assert hello["data"]["session_id"] == sid and hello["data"]["agent"] == "voice"


async def test_content_may_be_content_json(server_for: Any) -> None:
    server = await server_for()
    sid = await server.session()
    async with connect(server.url(sid), subprotocols=["bearer", "token-a"]) as ws:  # type: ignore[list-item]
        assert ws.subprotocol == "bearer"
        await ready(ws)
        await send(ws, {"type": "content",
                        "content": {"role": "user", "parts": [{"text": "hi"}]}})
        seen: list[Msg] = []
        message = await until(ws, lambda m: m["type"] == "message", seen)
    assert message["data"]["text"] == "Hello from headwater."


# -- live streaming tools ------------------------------------------------------------------------


async def test_a_live_tools_emissions_arrive_as_they_happen_and_stop_on_stop_streaming(
        server_for: Any) -> None:
    server = await server_for(tools=[ticker])
    sid = await server.session()
    seen: list[Msg] = []
    async with connect(server.url(sid), subprotocols=["bearer", "token-a"]) as ws:  # type: ignore[list-item]
        await ready(ws)
        await send(ws, {"type": "content", "text": "watch"})
        # Three emissions reach the client while the stream runs: nothing waits for its end.
        for _ in range(3):
            await until(ws, lambda m: m["type"] == "tool_emission", seen)
        await send(ws, {"type": "content", "text": "stop"})
        await until(ws, lambda m: m["type"] == "message" and m["data"]["text"] == "Stopped.",
                    seen)
        stopped_at = len(seen)
        await asyncio.sleep(0.3)  # six more ticks' worth of time
        await send(ws, {"type": "close"})
        await until(ws, lambda m: m["type"] in ("done", "error"), seen)
    calls = of_type(seen, "tool_call")
    assert [c["data"]["names"] for c in calls[:1]] == [["ticker"]]
    assert "args" not in calls[0]["data"]["calls"][0]  # a tool's arguments stay summaries
    # The built-in stop_streaming shows its arguments (a tool's name), so a page can tell
    # which stream was stopped.
    [stop] = [c["data"]["calls"][0] for c in calls if c["data"]["names"] == ["stop_streaming"]]
    assert stop["args"] == {"function_name": "ticker"}
    emissions = of_type(seen, "tool_emission")
    assert [e["data"]["text"] for e in emissions[:3]] == [
        f"Function ticker returned: {n}" for n in (1, 2, 3)]
    assert all(e["data"]["call_id"] == "t-1" and e["data"]["branch"] == "voice/t-1"
               for e in emissions)
    # The live tool's answer, given at once, is "pending" (its values follow), not "ok";
    # the stop's answer is a result like any other.
    results = {r["name"]: r["status"] for m in of_type(seen, "tool_result")
               for r in m["data"]["results"]}
    assert results == {"ticker": "pending", "stop_streaming": "ok"}
    stop_result = next(i for i, m in enumerate(seen) if m["type"] == "tool_result"
                       and m["data"]["results"][0]["name"] == "stop_streaming")
    assert not [m for m in seen[stop_result:] if m["type"] == "tool_emission"]
    assert not [m for m in seen[stopped_at:] if m["type"] == "tool_emission"]
    assert seen[-1]["type"] == "done"
    history = await server.history(sid)
    assert [r["status"] for h in history for r in h.get("results", ())
            if r["name"] == "ticker"] == ["pending"]  # the history says it too
    told = [h["text"] for h in history if h.get("branch") == "voice/t-1"]
    assert told == [e["data"]["text"] for e in emissions]  # stored as they were shown


# -- barge-in ------------------------------------------------------------------------------------


async def test_barge_in_marks_the_spoken_part_interrupted_on_the_wire_and_in_history(
        server_for: Any) -> None:
    server = await server_for()
    sid = await server.session()
    seen: list[Msg] = []
    async with connect(server.url(sid), subprotocols=["bearer", "token-a"]) as ws:  # type: ignore[list-item]
        await ready(ws)
        await send(ws, {"type": "content", "text": "tell me a long story"})
        for _ in range(3):
            await until(ws, lambda m: m["type"] == "delta", seen)
        await send(ws, {"type": "content", "text": "hi"})
        await until(ws, lambda m: m["type"] == "message"
                    and m["data"]["text"] == "Hello from headwater.", seen)
        await until(ws, lambda m: m["type"] == "turn_complete", seen)
    messages = of_type(seen, "message")
    cut = messages[0]["data"]
    assert cut["interrupted"] is True and cut["final"] is True
    assert cut["text"].startswith("word0 word1 word2 ")
    assert cut["text"] != "".join(f"word{i} " for i in range(60))
    turns = [m["data"] for m in of_type(seen, "turn_complete")]
    assert turns == [{"author": "voice", "interrupted": True},
                     {"author": "voice", "interrupted": False}]
    history = await server.history(sid)
    assert [(h["author"], h["text"], h.get("interrupted", False)) for h in history] == [
        ("user", "tell me a long story", False), ("voice", cut["text"], True),
        ("user", "hi", False), ("voice", "Hello from headwater.", False)]


# -- bad input -----------------------------------------------------------------------------------


async def test_an_invalid_message_gets_an_error_notice_and_the_socket_stays_open(
        server_for: Any) -> None:
    server = await server_for()
    sid = await server.session()
    async with connect(server.url(sid), subprotocols=["bearer", "token-a"]) as ws:  # type: ignore[list-item]
        await ready(ws)
        notices = []
        for bad in ["{not json", json.dumps({"type": "shout", "text": "hi"}),
                    json.dumps({"type": "content"}),
                    json.dumps({"type": "content", "text": "  "}),
                    json.dumps({"type": "realtime", "data": "!!not base64!!",
                                "mime_type": "audio/pcm"}),
                    json.dumps({"type": "content", "content": {"role": "model",
                                                               "parts": [{"text": "x"}]}})]:
            await ws.send(bad)
            notices.append(await recv(ws))
        await ws.send(b"\x00\x01 binary")
        notices.append(await recv(ws))
        # a well-formed realtime message is taken (this model takes no media: ignored)
        await send(ws, {"type": "realtime", "data": base64.b64encode(b"pcm").decode(),
                        "mime_type": "audio/pcm;rate=16000"})
        await send(ws, {"type": "activity_start"})
        await send(ws, {"type": "activity_end"})
        await send(ws, {"type": "content", "text": "hi"})
        seen: list[Msg] = []
        message = await until(ws, lambda m: m["type"] == "message", seen)
    assert [(n["id"], n["type"], n["data"]["code"]) for n in notices] == [
        (None, "error", "invalid_request")] * 7
    assert all(n["data"]["retryable"] is False and n["data"]["message"] for n in notices)
    assert "!!not base64!!" not in json.dumps(notices)  # values never echoed
    assert message["data"]["text"] == "Hello from headwater."
    assert seen[0]["id"] == 1  # notices take no run frame ids


async def test_too_many_messages_are_dropped_with_rate_limited(server_for: Any) -> None:
    server = await server_for(ws_messages_per_second=2)
    sid = await server.session()
    async with connect(server.url(sid), subprotocols=["bearer", "token-a"]) as ws:  # type: ignore[list-item]
        await ready(ws)
        for _ in range(4):
            await send(ws, {"type": "activity_start"})
        notices = [await recv(ws), await recv(ws)]
        await asyncio.sleep(0.6)  # the bucket refills
        await send(ws, {"type": "content", "text": "hi"})
        seen: list[Msg] = []
        message = await until(ws, lambda m: m["type"] == "message", seen)
    assert [(n["id"], n["data"]["code"], n["data"]["retryable"]) for n in notices] == [
        (None, "rate_limited", True)] * 2
    assert message["data"]["text"] == "Hello from headwater."


async def test_a_message_past_the_bound_closes_with_1009_and_ends_the_run(
        server_for: Any) -> None:
    server = await server_for(ws_max_message_bytes=1024)
    sid = await server.session()
    async with connect(server.url(sid), subprotocols=["bearer", "token-a"]) as ws:  # type: ignore[list-item]
        await ready(ws)
        await send(ws, {"type": "content", "text": "é" * 600})  # 1200 bytes in UTF-8
        code, _ = await closed(ws)
    assert code == 1009
    async with connect(server.url(sid), subprotocols=["bearer", "token-a"]) as ws:  # type: ignore[list-item]
        await ready(ws)  # the run ended: the session takes a new one
    history = await server.history(sid)
    assert history == []  # the big message never reached the run


# -- auth ----------------------------------------------------------------------------------------


async def test_a_token_in_the_first_message_works(server_for: Any) -> None:
    server = await server_for()
    sid = await server.session()
    async with connect(server.url(sid)) as ws:
        await send(ws, {"type": "auth", "token": "token-a"})
        await ready(ws)
        await send(ws, {"type": "content", "text": "hi"})
        seen: list[Msg] = []
        message = await until(ws, lambda m: m["type"] == "message", seen)
    assert message["data"]["text"] == "Hello from headwater."


@pytest.mark.parametrize("how", ["bad_subprotocol", "bad_message", "no_token", "silence"])
async def test_a_missing_or_refused_token_closes_with_1008_before_anything_else(
        server_for: Any, how: str) -> None:
    server = await server_for(ws_auth_timeout=0.3)
    sid = await server.session()
    protocols = ["bearer", "nope"] if how == "bad_subprotocol" else None
    async with connect(server.url(sid), subprotocols=protocols) as ws:  # type: ignore[arg-type]
        if how == "bad_message":
            await send(ws, {"type": "auth", "token": "nope"})
        elif how == "no_token":
            await send(ws, {"type": "content", "text": "hi"})
        with pytest.raises(ConnectionClosed):
            message = await ws.recv()
            pytest.fail(f"the server sent {message!r} before closing")
    assert ws.close_code == 1008
    assert await server.history(sid) == []


async def test_another_users_session_is_closed_exactly_like_a_missing_one(
        server_for: Any) -> None:
    server = await server_for()
    sid = await server.session()  # alice's
    outcomes = []
    for target in (sid, "no-such-session"):
        async with connect(server.url(target), subprotocols=["bearer", "token-b"]) as ws:  # type: ignore[list-item]
            outcomes.append(await closed(ws))
    assert outcomes[0] == outcomes[1] == (4404, "not_found")


# -- lifetime ------------------------------------------------------------------------------------


def _live_tasks() -> list[asyncio.Task[Any]]:
    """The tasks of live runs (flow, tool streams and their reads, model turns, socket)."""
    names = ("LiveFlow.", "LiveModel.", "LiveStreams.", "_Emitter.", "RunManager._drive",
             "LiveSocket.", "EmulatedLlmConnection.")
    return [t for t in asyncio.all_tasks() if not t.done()
            and getattr(t.get_coro(), "__qualname__", type(t.get_coro()).__name__)
            .startswith(names)]


async def test_closing_the_socket_ends_the_run_and_its_tasks_within_a_second(
        server_for: Any) -> None:
    server = await server_for(tools=[ticker])
    gateway = server.app.state.gateway
    sid = await server.session()
    seen: list[Msg] = []
    async with connect(server.url(sid), subprotocols=["bearer", "token-a"]) as ws:  # type: ignore[list-item]
        run_id = (await ready(ws))["data"]["run_id"]
        async with connect(server.url(sid), subprotocols=["bearer", "token-a"]) as second:  # type: ignore[list-item]
            busy = await closed(second)
        await send(ws, {"type": "content", "text": "watch"})
        await until(ws, lambda m: m["type"] == "tool_emission", seen)
        await send(ws, {"type": "content", "text": "tell me a long story"})
        await until(ws, lambda m: m["type"] == "delta", seen)
        assert _live_tasks()  # the stream, the answer, the pumps
    left = asyncio.get_running_loop().time()
    run = gateway.runs.runs[run_id]
    await wait_until(lambda: not _live_tasks() and run.ended, timeout=1.0,
                     message="the run and its tasks to end")
    assert asyncio.get_running_loop().time() - left < 1.0
    assert busy == (4409, "session_busy")
    assert run.status == "cancelled" and run.stop_reason == "disconnected"
    async with connect(server.url(sid), subprotocols=["bearer", "token-a"]) as ws:  # type: ignore[list-item]
        await ready(ws)  # at once: the lease is free
        await send(ws, {"type": "content", "text": "hi"})
        message = await until(ws, lambda m: m["type"] == "message", [])
    assert message["data"]["text"] == "Hello from headwater."
    history = await server.history(sid)
    calls = {c["id"] for h in history for c in h.get("calls", [])}
    answered = {r["id"] for h in history for r in h.get("results", [])}
    assert calls == answered  # history is sealed: every call has its result


def test_every_frame_type_has_a_row_in_the_protocol_doc() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "frame-protocol.md").read_text()
    section = doc.split("## SSE frames", 1)[1].split("\n## ", 1)[0]
    assert set(re.findall(r"^\| `([a-z_]+)` \|", section, re.MULTILINE)) == FRAME_TYPES


async def test_an_approval_for_no_pending_call_does_not_end_the_live_run(
        server_for: Any) -> None:
    server = await server_for()
    sid = await server.session()
    answer = TypeAdapter(Content).dump_python(approval_response("no-such-call", True),
                                              mode="json")
    async with connect(server.url(sid), subprotocols=["bearer", "token-a"]) as ws:  # type: ignore[list-item]
        await ready(ws)
        await send(ws, {"type": "content", "content": answer})
        await send(ws, {"type": "content", "text": "hi"})
        seen: list[Msg] = []
        message = await until(ws, lambda m: m["type"] in ("message", "error"), seen)
    assert message["type"] == "message", message  # the refused answer was no terminal error
    assert message["data"]["text"] == "Hello from headwater."
