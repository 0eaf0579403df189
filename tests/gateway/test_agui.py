"""``POST /ag-ui/{agent}`` read by the real AG-UI client (tests/js/agui_client.mjs).

A real uvicorn server on loopback serves ScriptedModel agents; the Node script
runs ``HttpAgent.runAgent`` from ``@ag-ui/client`` 1.0.0 (pinned in
tests/js/package-lock.json), so the client's own SSE parser, schema
enforcement, event-order verifier and message builder judge the stream. The
script reports the events the client accepted, the messages it rebuilt and any
warning it printed (a stripped field, a dropped event): every test asserts
there were none.

Without ``node`` or ``tests/js/node_modules`` these tests skip, and fail in CI
(``CI`` set): run ``cd tests/js && npm ci``.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest

from headwater import Agent, ToolStreamEvent, tool
from headwater.errors import ERROR_MESSAGES, ModelHTTPError
from headwater.gateway import StaticTokenAuth, create_app
from headwater.sessions import BaseSessionService
from headwater.settings import Settings
from headwater.testing import ScriptedModel, ScriptedTurn, aiter_sse, wait_until
from headwater.tools import args_sha256
from headwater.tools.mcp import McpToolset

from .conftest import JS, MCP_TEST_SERVER, require_node
from .stores import new_service

Serve = Callable[[Any], Awaitable[str]]
CLIENT = JS / "agui_client.mjs"
AUTH = StaticTokenAuth({"token-a": "alice", "token-b": "bob"})
HEADERS = {"Authorization": "Bearer token-a"}
ran: list[str] = []


@pytest.fixture
def node() -> str:
    """The ``node`` executable; skips without it (or the npm packages), fails in CI."""
    return require_node("@ag-ui/client")


@pytest.fixture(autouse=True)
def reset() -> None:
    ran.clear()


@pytest.fixture
async def server(serve: Serve) -> AsyncIterator[Callable[..., Awaitable[str]]]:
    """``base = await server(agent_or_agents)``: the gateway under uvicorn, with AUTH."""

    async def start(agents: Any, service: BaseSessionService | None = None,
                    **bounds: Any) -> str:
        settings = Settings(**{"heartbeat_interval": 5.0, "send_timeout": 2.0,
                               "session_lock_timeout": 0, "shutdown_grace": 2.0, **bounds})
        app = create_app(agents, session_service=service or new_service(),
                         auth=AUTH, settings=settings)
        return await serve(app)

    yield start


async def agui(node: str, url: str, runs: list[dict[str, Any]], *, token: str = "token-a",
               thread_id: str = "thread-1") -> dict[str, Any]:
    """Run the Node client's plan against ``url``; its JSON report."""
    plan = {"url": url, "token": token, "threadId": thread_id, "runs": runs}
    process = await asyncio.create_subprocess_exec(
        node, str(CLIENT), json.dumps(plan), cwd=JS,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 0, err.decode()
    report: dict[str, Any] = json.loads(out)
    assert report["warnings"] == []  # nothing stripped or dropped: the events conform
    return report


def types(run: dict[str, Any]) -> list[str]:
    return [event["type"] for event in run["events"]]


def of_role(report: dict[str, Any], role: str) -> list[dict[str, Any]]:
    return [m for m in report["messages"] if m["role"] == role]


# -- tools ---------------------------------------------------------------------------------------


async def _deploy(env: str) -> AsyncIterator[ToolStreamEvent]:
    ran.append(env)
    yield ToolStreamEvent(type="part_delta", delta=f"deploying to {env}…")
    yield ToolStreamEvent(type="part_delta", delta="health checks green")
    yield ToolStreamEvent(type="done", response="deployed")


def deploy_tool(**options: Any) -> Any:
    return tool(name="deploy", description="Deploy with progress.", streaming=True,
                **options)(_deploy)


def deploy_agent(**options: Any) -> Agent:
    model = (ScriptedModel().call("deploy", {"env": "prod"}, call_id="d1")
             .reply("Deployed ", "to prod."))
    return Agent(name="ops", model=model, tools=[deploy_tool(**options)])


# -- (1) streamed text ---------------------------------------------------------------------------


async def test_streamed_text_is_one_assistant_message_with_the_text_once(
        node: str, server: Any) -> None:
    model = ScriptedModel().reply("Hello ", "from ", "headwater.", thoughts=["Greet", " them."])
    service = new_service()
    base = await server(Agent(name="bot", model=model), service)
    report = await agui(node, f"{base}/ag-ui/bot", [{"message": "hi"}])
    [run] = report["runs"]
    assert run["failure"] is None and run["runErrors"] == []
    assert types(run) == [
        "RUN_STARTED",
        "REASONING_START", "REASONING_MESSAGE_START", "REASONING_MESSAGE_CONTENT",
        "REASONING_MESSAGE_CONTENT", "REASONING_MESSAGE_END", "REASONING_END",
        "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END", "RUN_FINISHED"]
    [answer] = of_role(report, "assistant")
    assert answer["content"] == "Hello from headwater."
    assert [m["content"] for m in of_role(report, "reasoning")] == ["Greet them."]
    assert run["outcome"] == "success"
    assert run["usage"] == [{"inputTokens": 0, "outputTokens": 0, "totalTokens": 0}]
    # threadId is the session: created for the caller, holding the stored turn.
    session = await service.get_session(app_name="bot", user_id="alice", session_id="thread-1")
    assert session is not None
    assert [e.content.text for e in session.events if e.content] == [
        "hi", "Hello from headwater."]


async def test_without_deltas_the_message_frame_gives_start_content_end(
        node: str, server: Any) -> None:
    base = await server(Agent(name="bot", model=ScriptedModel().reply("All ", "at once.")))
    report = await agui(node, f"{base}/ag-ui/bot",
                        [{"message": "hi", "forwardedProps": {"streaming_mode": "none"}}])
    [run] = report["runs"]
    assert types(run) == ["RUN_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT",
                          "TEXT_MESSAGE_END", "RUN_FINISHED"]
    assert [m["content"] for m in of_role(report, "assistant")] == ["All at once."]


async def test_heartbeat_comments_between_events_are_ignored_by_the_client(
        node: str, server: Any) -> None:
    model = ScriptedModel().reply("slow ", "answer", delay=0.3)
    base = await server(Agent(name="bot", model=model), heartbeat_interval=0.05)
    report = await agui(node, f"{base}/ag-ui/bot", [{"message": "hi"}])
    assert report["runs"][0]["outcome"] == "success"
    assert [m["content"] for m in of_role(report, "assistant")] == ["slow answer"]


async def test_a_second_run_continues_the_thread(node: str, server: Any) -> None:
    model = ScriptedModel().reply("One.").reply("Two.")
    base = await server(Agent(name="bot", model=model))
    report = await agui(node, f"{base}/ag-ui/bot", [{"message": "a"}, {"message": "b"}])
    assert [m["content"] for m in report["messages"]] == ["a", "One.", "b", "Two."]
    # The server keeps the history: the second model call saw the first turn.
    assert [c.role for c in model.requests[1].contents] == ["user", "model", "user"]


# -- (2) a tool call with progress ---------------------------------------------------------------


async def test_a_tool_call_with_progress_and_its_result(node: str, server: Any) -> None:
    base = await server(deploy_agent())
    report = await agui(node, f"{base}/ag-ui/ops", [{"message": "deploy"}])
    [run] = report["runs"]
    assert run["failure"] is None and run["outcome"] == "success"
    assert types(run) == [
        "RUN_STARTED", "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END",
        "ACTIVITY_SNAPSHOT", "ACTIVITY_DELTA", "TOOL_CALL_RESULT",
        "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END", "RUN_FINISHED"]
    call_message, answer = of_role(report, "assistant")
    [call] = call_message["toolCalls"]
    assert (call["id"], call["function"]) == ("d1", {"name": "deploy", "arguments": "{}"})
    [result] = of_role(report, "tool")
    assert result["toolCallId"] == "d1"
    assert json.loads(result["content"]) == {"id": "d1", "name": "deploy", "status": "ok",
                                             "size": 21}  # a summary: no payload
    [activity] = of_role(report, "activity")
    assert activity["activityType"] == "TOOL_PROGRESS"
    assert activity["content"]["toolCallId"] == "d1"
    assert [e["delta"] for e in activity["content"]["events"]] == [
        "deploying to prod…", "health checks green"]
    assert answer["content"] == "Deployed to prod."
    assert ran == ["prod"]


@pytest.mark.slow
async def test_an_mcp_servers_progress_is_the_calls_activity(node: str, server: Any) -> None:
    toolset = McpToolset(command=[sys.executable, MCP_TEST_SERVER])
    model = (ScriptedModel().call("slow", {"steps": 2, "pause": 0.01}, call_id="m1")
             .reply("Counted."))
    base = await server(Agent(name="ops", model=model, tools=[toolset]))
    try:
        report = await agui(node, f"{base}/ag-ui/ops", [{"message": "count"}])
    finally:
        await toolset.aclose()
    [activity] = of_role(report, "activity")
    assert [(e["type"], e["progress"], e["total"], e["message"])
            for e in activity["content"]["events"]] == [
        ("progress", 1, 2, "step 1 of 2"), ("progress", 2, 2, "step 2 of 2")]


async def test_expose_result_sends_the_arguments_and_the_response(
        node: str, server: Any) -> None:
    base = await server(deploy_agent(expose_result=True))
    report = await agui(node, f"{base}/ag-ui/ops", [{"message": "deploy"}])
    [call] = of_role(report, "assistant")[0]["toolCalls"]
    assert json.loads(call["function"]["arguments"]) == {"env": "prod"}
    [result] = of_role(report, "tool")
    assert json.loads(result["content"]) == {"result": "deployed"}


async def test_text_before_a_call_carries_the_call(node: str, server: Any) -> None:
    model = (ScriptedModel().call("deploy", {"env": "prod"}, call_id="d1", text=["On it."])
             .reply("Done."))
    base = await server(Agent(name="ops", model=model, tools=[deploy_tool()]))
    report = await agui(node, f"{base}/ag-ui/ops", [{"message": "deploy"}])
    first, second = of_role(report, "assistant")
    assert first["content"] == "On it." and [c["id"] for c in first["toolCalls"]] == ["d1"]
    assert second["content"] == "Done."


# -- (3) an approval -----------------------------------------------------------------------------


async def test_an_approval_pauses_as_an_interrupt_and_the_resume_continues(
        node: str, server: Any) -> None:
    base = await server(deploy_agent(requires_approval=True))
    report = await agui(node, f"{base}/ag-ui/ops",
                        [{"message": "deploy"}, {"resume": "approve"}])
    paused, resumed = report["runs"]
    assert paused["outcome"] == "interrupt" and paused["pendingInterrupts"] == ["d1"]
    [interrupt] = paused["interrupts"]
    assert (interrupt["id"], interrupt["reason"], interrupt["toolCallId"]) == (
        "d1", "tool_call", "d1")
    assert interrupt["responseSchema"]["required"] == ["approved"]
    # The approver reads the call with its arguments (the tool gives no summary).
    assert interrupt["message"] == 'Approve deploy(env="prod")?'
    assert interrupt["metadata"] == {"toolName": "deploy", "args_sha256": args_sha256(
        {"env": "prod"}), "display": 'deploy(env="prod")', "args": {"env": "prod"}}
    [start] = [e for e in paused["events"] if e["type"] == "TOOL_CALL_ARGS"]
    assert start["delta"] == "{}"  # the call itself keeps its arguments hidden
    assert "TOOL_CALL_RESULT" not in types(paused)
    assert resumed["failure"] is None and resumed["outcome"] == "success"
    assert resumed["pendingInterrupts"] == []
    assert "TOOL_CALL_START" not in types(resumed)  # the call is not sent twice
    assert ran == ["prod"]
    [result] = of_role(report, "tool")
    assert result["toolCallId"] == "d1" and json.loads(result["content"])["status"] == "ok"
    assert of_role(report, "assistant")[-1]["content"] == "Deployed to prod."


async def test_the_interrupt_is_pending_until_answered_and_a_denial_runs_nothing(
        node: str, server: Any) -> None:
    model = ScriptedModel().call("deploy", {"env": "prod"}, call_id="d1").reply("Not deployed.")
    base = await server(Agent(name="ops", model=model,
                              tools=[deploy_tool(requires_approval=True)]))
    report = await agui(node, f"{base}/ag-ui/ops",
                        [{"message": "deploy"}, {"message": "and?"}, {"resume": "deny"}])
    paused, refused, denied = report["runs"]
    assert paused["pendingInterrupts"] == ["d1"]
    # The client itself refuses new input while an interrupt is open (AG-UI 1.0 rule).
    assert "pending interrupt" in refused["failure"]["message"] and refused["events"] == []
    assert denied["outcome"] == "success" and ran == []
    assert model.requests[1].contents[-1].function_responses[0].response["code"] == "denied"


async def test_a_summarised_interrupt_and_a_resume_after_a_new_message_is_refused(
        node: str, server: Any) -> None:
    model = ScriptedModel().call("deploy", {"env": "prod"}, call_id="d1").reply("Other things.")
    summarised = deploy_tool(requires_approval=True, approval_summary="deploy to {env}")
    base = await server(Agent(name="ops", model=model, tools=[summarised]))
    report = await agui(node, f"{base}/ag-ui/ops", [{"message": "deploy"}])
    [interrupt] = report["runs"][0]["interrupts"]
    assert interrupt["message"] == "Approve deploy to prod?"
    assert interrupt["metadata"] == {"toolName": "deploy", "display": "deploy to prod",
                                     "args_sha256": args_sha256({"env": "prod"})}
    # Another client of the thread (one that holds no interrupt) sends a message: the
    # approval is superseded, and the first client's late resume is refused, saying so.
    other = await agui(node, f"{base}/ag-ui/ops", [{"message": "something else"}])
    assert of_role(other, "assistant")[-1]["content"] == "Other things."
    async with httpx.AsyncClient(base_url=base, headers=HEADERS, timeout=10) as client:
        late = await client.post("/ag-ui/ops", json={
            "threadId": "thread-1", "runId": "r9", "messages": [],
            "resume": [{"interruptId": "d1", "status": "resolved",
                        "payload": {"approved": True}}]})
    assert late.status_code == 400
    assert "call 'd1' (deploy) was superseded" in late.json()["error"]["message"]
    assert ran == []


# -- (4) a model error ---------------------------------------------------------------------------


async def test_a_model_error_is_run_error_with_its_code_and_no_raw_text(
        node: str, server: Any) -> None:
    failure = ModelHTTPError("upstream said: secret-key-123 is invalid", status_code=401,
                             retryable=False)
    model = ScriptedModel().add(ScriptedTurn(text=["Partial "], raise_error=failure,
                                             raise_after=1))
    base = await server(Agent(name="bot", model=model))
    report = await agui(node, f"{base}/ag-ui/bot", [{"message": "hi"}])
    [run] = report["runs"]
    [error] = run["runErrors"]
    assert error["code"] == "provider_rejected"
    assert error["message"] == ERROR_MESSAGES["provider_rejected"]
    assert types(run)[0] == "RUN_STARTED" and types(run)[-1] == "RUN_ERROR"
    assert run["outcome"] is None
    assert "secret-key-123" not in json.dumps(report)


# -- the HTTP answers before any event -----------------------------------------------------------


async def test_an_unknown_agent_is_a_404_envelope(node: str, server: Any) -> None:
    base = await server(Agent(name="bot", model=ScriptedModel()))
    report = await agui(node, f"{base}/ag-ui/nobody", [{"message": "hi"}])
    [run] = report["runs"]
    assert run["failure"]["status"] == 404
    assert run["failure"]["payload"]["error"]["code"] == "not_found"


async def test_no_token_is_401_and_threads_are_per_user(node: str, server: Any) -> None:
    model = ScriptedModel().reply("For alice.").reply("For bob.")
    service = new_service()
    base = await server(Agent(name="bot", model=model), service)
    report = await agui(node, f"{base}/ag-ui/bot", [{"message": "hi"}], token="")
    assert report["runs"][0]["failure"]["status"] == 401
    await agui(node, f"{base}/ag-ui/bot", [{"message": "alice here"}])
    await agui(node, f"{base}/ag-ui/bot", [{"message": "bob here"}], token="token-b")
    # The same threadId is a separate session per user: bob's model call saw only his turn.
    assert [c.text for c in model.requests[1].contents] == ["bob here"]
    for user in ("alice", "bob"):
        assert await service.get_session(app_name="bot", user_id=user,
                                         session_id="thread-1") is not None


async def test_malformed_inputs_answer_400_or_422(server: Any) -> None:
    base = await server(deploy_agent(requires_approval=True))
    headers = {"Authorization": "Bearer token-a"}
    user = {"id": "u1", "role": "user", "content": "deploy"}
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=10) as client:
        missing = await client.post("/ag-ui/ops", json={"runId": "r", "messages": []})
        assert missing.status_code == 422
        assert missing.json()["error"]["code"] == "invalid_request"
        assistant_last = await client.post("/ag-ui/ops", json={
            "threadId": "t", "runId": "r",
            "messages": [user, {"id": "a1", "role": "assistant", "content": "x"}]})
        assert assistant_last.status_code == 400
        unanswered = await client.post("/ag-ui/ops", json={
            "threadId": "t", "runId": "r", "messages": [user],
            "resume": [{"interruptId": "d1", "status": "resolved", "payload": {}}]})
        assert unanswered.status_code == 400
        never_asked = await client.post("/ag-ui/ops", json={
            "threadId": "t", "runId": "r", "messages": [user],
            "resume": [{"interruptId": "nope", "status": "resolved",
                        "payload": {"approved": True}}]})
        assert never_asked.status_code == 400  # the runner refuses: no approval is pending
    assert ran == []


# -- the same runs as the typed endpoint: cancellation -------------------------------------------


async def _events_of(response: httpx.Response, stop_after: int | None = None
                     ) -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = []
    async for message in aiter_sse(response.aiter_bytes()):
        got.append(json.loads(message.data))
        if stop_after is not None and len(got) >= stop_after:
            break
    return got


async def test_a_disconnect_cancels_the_run(serve: Serve) -> None:
    model = ScriptedModel().reply(*[f"w{i} " for i in range(200)], delay=0.01).reply("next")
    app = create_app(Agent(name="bot", model=model), auth=AUTH,
                     session_service=new_service())
    runs = app.state.gateway.runs.runs
    body = {"threadId": "t", "runId": "r1", "messages": [
        {"id": "u1", "role": "user", "content": "go"}]}
    async with httpx.AsyncClient(base_url=await serve(app), headers=HEADERS,
                                 timeout=10) as client:
        async with client.stream("POST", "/ag-ui/bot", json=body) as response:
            head = await _events_of(response, stop_after=3)
        assert [e["type"] for e in head] == [
            "RUN_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT"]
        await wait_until(lambda: model.streams[0].closed_early, timeout=2.0)
        await wait_until(lambda: all(r.status == "cancelled" for r in runs.values()),
                         timeout=2.0)
        body["messages"].append({"id": "u2", "role": "user", "content": "again"})
        async with client.stream("POST", "/ag-ui/bot", json=body) as response:
            again = await _events_of(response)
    assert again[-1]["type"] == "RUN_FINISHED"
    assert "".join(e.get("delta", "") for e in again) == "next"


async def test_cancel_finishes_the_run_with_the_cancelled_outcome(serve: Serve) -> None:
    model = ScriptedModel().reply(*[f"w{i} " for i in range(200)], delay=0.01)
    app = create_app(Agent(name="bot", model=model), auth=AUTH,
                     session_service=new_service())
    body = {"threadId": "t", "runId": "r1", "messages": [
        {"id": "u1", "role": "user", "content": "go"}]}
    base = await serve(app)
    got: list[dict[str, Any]] = []
    async with (httpx.AsyncClient(base_url=base, headers=HEADERS, timeout=10) as client,
                client.stream("POST", "/ag-ui/bot", json=body) as response):
        async for message in aiter_sse(response.aiter_bytes()):
            got.append(json.loads(message.data))
            if len(got) == 2:  # mid-answer: stop it through the run's id
                run_id = response.headers["x-run-id"]
                cancelled = await client.post(f"/runs/{run_id}/cancel")
                assert cancelled.status_code == 200
    head, rest = got[:2], got[2:]
    assert head[0] == {"type": "RUN_STARTED", "threadId": "t", "runId": "r1"}
    assert [e["type"] for e in rest][-2:] == ["TEXT_MESSAGE_END", "RUN_FINISHED"]
    assert rest[-1]["outcome"] == {"type": "cancelled"}
