"""POST /vercel/{agent} through the Vercel AI SDK's own client (``ai``, pinned in tests/js).

Each test serves a ``ScriptedModel`` agent under real uvicorn and runs
tests/js/vercel_client.mjs: ``DefaultChatTransport`` parses and validates the
chunks, ``readUIMessageStream`` and ``AbstractChat`` (the engine of ``useChat``)
rebuild the UI messages, and the test checks what they rebuilt.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from headwater import Agent, ToolStreamEvent, tool
from headwater.errors import ModelHTTPError
from headwater.gateway import StaticTokenAuth, create_app
from headwater.gateway.sse import encode_frame
from headwater.gateway.vercel import UIMessageEncoder
from headwater.settings import Settings
from headwater.testing import ScriptedModel, ScriptedTurn, wait_until
from headwater.tools import args_sha256
from headwater.tools.mcp import McpToolset

from .conftest import JS, MCP_TEST_SERVER, require_node
from .stores import new_service

Serve = Callable[[Any], Awaitable[str]]
CLIENT = JS / "vercel_client.mjs"
AUTH = StaticTokenAuth({"token-a": "alice", "token-b": "bob"})
A = {"Authorization": "Bearer token-a"}
SECRET = "upstream said: sk-secret-123 is invalid"


@pytest.fixture
def node() -> None:
    """Skip without node or the pinned npm packages; in CI (``CI`` set), fail instead."""
    require_node("ai")


async def run_client(base: str, mode: str, chat_id: str, text: str, *flags: str,
                     agent: str = "ops") -> dict[str, Any]:
    """Run vercel_client.mjs against ``base`` and answer its JSON summary."""
    process = await asyncio.create_subprocess_exec(
        "node", str(CLIENT), mode, f"{base}/vercel/{agent}", chat_id, text, *flags,
        cwd=JS, env={**os.environ, "HEADWATER_TOKEN": "token-a"},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(), 40)
    assert process.returncode == 0, err.decode()
    result: dict[str, Any] = json.loads(out)
    return result


async def deploy(env: str) -> AsyncIterator[ToolStreamEvent]:
    """Deploy.

    Args:
        env: where to.
    """
    for step in ("building", "pushing", "switching"):
        await asyncio.sleep(0.01)
        yield ToolStreamEvent(type="part_delta", index=0, delta=f"{step} {env}; ")
    yield ToolStreamEvent(type="done", response={"deployed": env})


@tool(name="drop_table", description="Drop a table.", requires_approval=True)
def drop_table(table: str) -> dict[str, str]:
    """Drop a table.

    Args:
        table: its name.
    """
    return {"dropped": table}


def app_for(model: ScriptedModel, settings: Settings | None = None, **tool_options: Any) -> Any:
    deploy_tool = tool(name="deploy", streaming=True, **tool_options)(deploy)
    agent = Agent(name="ops", model=model, tools=[deploy_tool, drop_table])
    return create_app(agent, session_service=new_service(), auth=AUTH,
                      settings=settings)


def texts(message: dict[str, Any]) -> list[str]:
    return [p["text"] for p in message["parts"] if p["type"] == "text"]


@pytest.mark.slow
async def test_streamed_text_arrives_once(node: None, serve: Serve) -> None:
    model = (ScriptedModel()
             .add(ScriptedTurn(thoughts=["The user ", "greets."], text=["Hel", "lo, ", "Alice."]))
             .reply("Hello, ", "again."))
    base = await serve(app_for(model))

    streamed = await run_client(base, "stream", "chat-s", "hi")
    assert streamed["errors"] == []
    assert streamed["chunks"][:2] == ["start", "start-step"]
    assert streamed["chunks"][-2:] == ["finish-step", "finish"]
    message = streamed["messages"]
    assert message["role"] == "assistant"
    assert texts(message) == ["Hello, Alice."]
    assert [p["text"] for p in message["parts"] if p["type"] == "reasoning"] == [
        "The user greets."]
    assert message["metadata"]["usage"].keys() == {"inputTokens", "outputTokens",
                                                   "totalTokens"}

    chat = await run_client(base, "chat", "chat-c", "hi again")
    [turn] = chat["turns"]
    assert (turn["status"], turn["error"]) == ("ready", None)
    user, assistant = turn["messages"]
    assert (user["role"], texts(user)) == ("user", ["hi again"])
    assert (assistant["role"], texts(assistant)) == ("assistant", ["Hello, again."])
    assert all(p["state"] == "done" for p in assistant["parts"] if p["type"] == "text")


@pytest.mark.slow
async def test_tool_progress_then_the_result(node: None, serve: Serve) -> None:
    model = (ScriptedModel()
             .call("deploy", {"env": "prod"}, call_id="c1").reply("Deployed to prod.")
             .call("deploy", {"env": "prod"}, call_id="c2").reply("Deployed to prod."))
    base = await serve(app_for(model, expose_result=True))

    for mode, chat_id in (("stream", "chat-s"), ("chat", "chat-c")):
        result = await run_client(base, mode, chat_id, "deploy to prod")
        message = result["messages"] if mode == "stream" else result["turns"][0]["messages"][-1]
        [part] = [p for p in message["parts"] if p["type"] == "tool-deploy"]
        assert part["state"] == "output-available"
        assert part["input"] == {"env": "prod"}
        assert part["output"] == {"deployed": "prod"}
        assert not part.get("preliminary")
        assert texts(message) == ["Deployed to prod."]
        seen = [t for t in result["tools"] if t["state"] == "output-available"]
        assert [t["preliminary"] for t in seen] == [True, True, True, False]
        assert seen[-2]["output"]["text"] == "building prod; pushing prod; switching prod; "
        assert [p["type"] for p in message["parts"]].count("step-start") == 2


@pytest.mark.slow
async def test_an_mcp_servers_progress_is_the_preliminary_output(node: None, serve: Serve
                                                                 ) -> None:
    toolset = McpToolset(command=[sys.executable, MCP_TEST_SERVER])
    model = (ScriptedModel().call("slow", {"steps": 2, "pause": 0.01}, call_id="m1")
             .reply("Counted."))
    agent = Agent(name="ops", model=model, tools=[toolset])
    base = await serve(create_app(agent, session_service=new_service(), auth=AUTH))
    try:
        result = await run_client(base, "stream", "chat-m", "count")
    finally:
        await toolset.aclose()
    early = [t["output"] for t in result["tools"] if t["state"] == "output-available"
             and t["preliminary"]]
    assert [(o["type"], o["progress"], o["total"], o["message"]) for o in early] == [
        ("progress", 1, 2, "step 1 of 2"), ("progress", 2, 2, "step 2 of 2")]


@pytest.mark.slow
async def test_tool_results_are_summaries_unless_exposed(node: None, serve: Serve) -> None:
    model = ScriptedModel().call("deploy", {"env": "prod"}, call_id="c1").reply("Done.")
    base = await serve(app_for(model))
    result = await run_client(base, "stream", "chat-s", "deploy")
    [part] = [p for p in result["messages"]["parts"] if p["type"] == "tool-deploy"]
    assert part["input"] == {}
    assert part["output"] == {"status": "ok", "size": len('{"deployed":"prod"}')}


@pytest.mark.slow
async def test_approval_pending_then_answered_continues(node: None, serve: Serve) -> None:
    model = ScriptedModel()
    for call_id in ("d1", "d2"):
        model.call("drop_table", {"table": "users"}, call_id=call_id)
        model.reply("Dropped ", "the table.")
    base = await serve(app_for(model))

    for chat_id, call_id, flags in (("chat-a", "d1", ()), ("chat-b", "d2", ("--last-only",))):
        result = await run_client(base, "chat", chat_id, "drop users", "--approve", *flags)
        check_approval_turns(result["turns"], call_id)
    assert len(model.requests) == 4


def check_approval_turns(turns: list[dict[str, Any]], call_id: str) -> None:
    first, second = turns
    assert (first["status"], first["error"]) == ("ready", None)
    [part] = [p for p in first["messages"][-1]["parts"] if p["type"] == "tool-drop_table"]
    assert part["state"] == "approval-requested"
    assert part["approval"]["id"] == call_id
    assert part["input"] == {"table": "users"}  # what the approver is asked about
    assert part["approval"]["descriptor"] == {"display": 'drop_table(table="users")',
                                              "args_sha256": args_sha256({"table": "users"})}
    assert texts(first["messages"][-1]) == []

    assert (second["status"], second["error"]) == ("ready", None)
    user, assistant = second["messages"]  # the run went on in the same assistant message
    assert user["role"] == "user"
    [part] = [p for p in assistant["parts"] if p["type"] == "tool-drop_table"]
    assert part["state"] == "output-available"
    assert part["approval"]["approved"] is True
    assert part["output"]["status"] == "ok"  # the call ran once approved
    assert texts(assistant) == ["Dropped the table."]


@pytest.mark.slow
async def test_model_error_surfaces_its_code_only(node: None, serve: Serve) -> None:
    failure = ModelHTTPError(SECRET, status_code=400, retryable=False)
    model = (ScriptedModel().add(ScriptedTurn(text=["partial "], raise_error=failure,
                                              raise_after=1))
             .add(ScriptedTurn(raise_error=failure)))
    base = await serve(app_for(model))

    streamed = await run_client(base, "stream", "chat-s", "hi")
    [error] = streamed["errors"]
    assert error.startswith("provider_rejected: The model provider refused the request.")
    assert "secret" not in json.dumps(streamed)
    # the streamed part is closed before the error; the step and the message end after it
    assert streamed["chunks"][-4:] == ["text-end", "error", "finish-step", "finish"]

    chat = await run_client(base, "chat", "chat-c", "hi")
    [turn] = chat["turns"]
    assert turn["status"] == "error"
    assert turn["error"].startswith("provider_rejected: ")
    assert "secret" not in json.dumps(chat)


# -- the request side, over plain HTTP ---------------------------------------------------------


def chat_body(chat_id: str, *messages: dict[str, Any]) -> dict[str, Any]:
    return {"id": chat_id, "messages": list(messages), "trigger": "submit-message"}


def user(text: str) -> dict[str, Any]:
    return {"id": "u1", "role": "user", "parts": [{"type": "text", "text": text}]}


async def test_headers_envelope_errors_and_sessions(client_for: Any) -> None:
    model = ScriptedModel().reply("One.").reply("Two.")
    client = await client_for(app_for(model))

    response = await client.post("/vercel/ops", json=chat_body("c1", user("hi")), headers=A)
    assert response.status_code == 200
    assert response.headers["x-vercel-ai-ui-message-stream"] == "v1"
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.text.endswith("data: [DONE]\n\n")

    # the chat id is the caller's session: the typed API sees the same run
    events = (await client.get("/sessions/c1/events", headers=A)).json()["items"]
    assert [e["text"] for e in events] == ["hi", "One."]
    # another user's chat with the same id is a new session of theirs, not alice's
    other = await client.post("/vercel/ops", json=chat_body("c1", user("yo")),
                              headers={"Authorization": "Bearer token-b"})
    assert other.status_code == 200
    assert len((await client.get("/sessions/c1/events", headers=A)).json()["items"]) == 2

    missing = await client.post("/vercel/nobody", json=chat_body("c2", user("hi")), headers=A)
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "not_found"
    unauthorized = await client.post("/vercel/ops", json=chat_body("c2", user("hi")))
    assert unauthorized.status_code == 401
    regenerate = await client.post("/vercel/ops", headers=A, json={
        **chat_body("c1", user("hi")), "trigger": "regenerate-message"})
    assert regenerate.status_code == 400
    nothing = await client.post("/vercel/ops", headers=A, json=chat_body(
        "c1", {"id": "a1", "role": "assistant", "parts": [{"type": "text", "text": "x"}]}))
    assert (nothing.status_code, nothing.json()["error"]["code"]) == (400, "invalid_request")


async def test_long_running_output_from_the_client_continues(client_for: Any) -> None:
    @tool(name="ask_human", long_running=True)
    def ask_human(question: str) -> dict[str, str]:
        """Ask a human.

        Args:
            question: what to ask.
        """
        return {"status": "asked"}

    model = ScriptedModel().call("ask_human", {"question": "ok?"}, call_id="h1").reply("Thanks.")
    app = create_app(Agent(name="ops", model=model, tools=[ask_human]),
                     session_service=new_service(), auth=AUTH)
    client = await client_for(app)
    first = await client.post("/vercel/ops", json=chat_body("c1", user("ask")), headers=A)
    chunks = chunks_of(first.text)
    assert {"type": "tool-input-available", "toolCallId": "h1", "toolName": "ask_human",
            "input": {}, "providerMetadata": {"headwater": {"author": "ops"}}} in chunks
    assert chunks[-1] == {"type": "finish", "finishReason": "tool-calls",
                          "messageMetadata": chunks[-1]["messageMetadata"]}

    answer = {"id": "a1", "role": "assistant", "parts": [
        {"type": "step-start"},
        {"type": "tool-ask_human", "toolCallId": "h1", "state": "output-available",
         "input": {}, "output": {"answer": "yes"}}]}
    second = await client.post("/vercel/ops", json=chat_body("c1", user("ask"), answer),
                               headers=A)
    chunks = chunks_of(second.text)
    assert chunks[0] == {"type": "start", "messageId": "a1"}
    assert not any(c["type"].startswith("tool-output") for c in chunks)  # not echoed back
    assert [c["delta"] for c in chunks if c["type"] == "text-delta"] == ["Thanks."]
    [request] = model.requests[1:]
    given = [r.response for c in request.contents for r in c.function_responses]
    assert given == [{"answer": "yes"}]  # the client's output replaced the ticket


def chunks_of(text: str) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in text.split("\n\n") if line.startswith("data: {")]


async def test_a_denied_approval_ends_in_output_denied(client_for: Any) -> None:
    model = (ScriptedModel().call("drop_table", {"table": "users"}, call_id="d1")
             .reply("I did not drop it."))
    client = await client_for(app_for(model))
    first = await client.post("/vercel/ops", json=chat_body("c1", user("drop")), headers=A)
    chunks = chunks_of(first.text)
    asked = chunks.index({"type": "tool-approval-request", "approvalId": "d1", "toolCallId": "d1",
                          "approvalDescriptor": {"display": 'drop_table(table="users")',
                                                 "args_sha256": args_sha256({"table": "users"})}})
    # the part's input becomes what is asked about (tool_call sent {}: not exposed)
    assert chunks[asked - 1] == {"type": "tool-input-available", "toolCallId": "d1",
                                 "toolName": "drop_table", "input": {"table": "users"},
                                 "providerMetadata": {"headwater": {"author": "ops"}}}
    answer = {"id": "a1", "role": "assistant", "parts": [
        {"type": "tool-drop_table", "toolCallId": "d1", "state": "approval-responded",
         "input": {}, "approval": {"id": "d1", "approved": False, "reason": "not today"}}]}
    second = await client.post("/vercel/ops", json=chat_body("c1", user("drop"), answer),
                               headers=A)
    chunks = chunks_of(second.text)
    assert {"type": "tool-output-denied", "toolCallId": "d1"} in chunks
    assert [c["delta"] for c in chunks if c["type"] == "text-delta"] == ["I did not drop it."]
    again = await client.post("/vercel/ops", json=chat_body("c1", user("drop"), answer),
                              headers=A)  # the same answer again: nothing is pending
    assert (again.status_code, again.json()["error"]["code"]) == (400, "invalid_request")


async def test_an_answer_after_a_later_message_is_refused_as_superseded(
        client_for: Any) -> None:
    model = (ScriptedModel().call("drop_table", {"table": "users"}, call_id="d1")
             .reply("Something else, then."))
    client = await client_for(app_for(model))
    await client.post("/vercel/ops", json=chat_body("c1", user("drop")), headers=A)
    other = await client.post("/vercel/ops", json=chat_body("c1", user("something else")),
                              headers=A)
    assert [c["delta"] for c in chunks_of(other.text) if c["type"] == "text-delta"] == [
        "Something else, then."]
    answer = {"id": "a1", "role": "assistant", "parts": [
        {"type": "tool-drop_table", "toolCallId": "d1", "state": "approval-responded",
         "input": {"table": "users"}, "approval": {"id": "d1", "approved": True}}]}
    late = await client.post("/vercel/ops", json=chat_body("c1", user("drop"), answer),
                             headers=A)
    assert late.status_code == 400
    error = late.json()["error"]
    assert error["code"] == "invalid_request"
    assert "call 'd1' (drop_table) was superseded" in error["message"]


async def test_same_limits_and_cancellation_as_the_typed_runs(client_for: Any) -> None:
    model = ScriptedModel().reply(*[f"w{i} " for i in range(1000)], delay=0.01).reply("next")
    app = app_for(model, Settings(session_lock_timeout=0, send_timeout=2.0))
    client = await client_for(app)
    runs = app.state.gateway.runs.runs
    async with client.stream("POST", "/vercel/ops", json=chat_body("c1", user("go")),
                             headers=A) as response:
        lines = response.aiter_lines()  # held: a dropped iterator's finalizer hangs up early
        async for line in lines:
            if "text-delta" in line:
                break
        busy = await client.post("/vercel/ops", json=chat_body("c1", user("x")), headers=A)
        assert (busy.status_code, busy.json()["error"]["code"]) == (409, "session_busy")
    # leaving the block hangs up mid-answer
    await wait_until(lambda: model.streams[0].closed_early, timeout=2.0)
    await wait_until(lambda: all(r.ended for r in runs.values()), timeout=2.0)
    again = await client.post("/vercel/ops", json=chat_body("c1", user("again")), headers=A)
    assert [c["delta"] for c in chunks_of(again.text) if c["type"] == "text-delta"] == ["next"]


def test_the_message_never_resends_streamed_text() -> None:
    encoder = UIMessageEncoder("m1")
    frames = [("delta", {"author": "a", "text": "Hel"}),
              ("reasoning", {"author": "a", "text": "?"}),  # closes the text part
              ("message", {"author": "a", "id": "e1", "text": "Hel", "final": False}),
              ("message", {"author": "a", "id": "e2", "text": "Whole.", "final": True}),
              ("done", {"usage": {"input_tokens": 3, "output_tokens": 4}})]
    body = b"".join(encoder.render(encode_frame(i, kind, data))
                    for i, (kind, data) in enumerate(frames, 1))
    assert body.endswith(b"data: [DONE]\n\n")
    chunks = chunks_of(body.decode())
    assert [c["delta"] for c in chunks if c["type"] == "text-delta"] == ["Hel", "Whole."]
    assert [c["type"] for c in chunks] == [
        "start-step", "text-start", "text-delta", "text-end", "reasoning-start",
        "reasoning-delta", "reasoning-end",
        "finish-step", "start-step", "text-start", "text-delta", "text-end",
        "finish-step", "finish"]
    assert chunks[-1]["messageMetadata"] == {"usage": {"inputTokens": 3, "outputTokens": 4,
                                                       "totalTokens": 7}}
