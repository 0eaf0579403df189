"""Gateway runs beyond the worked example, over real HTTP: approvals, long-running
completions, error frames, several agents, pages, the OpenAPI schema and run logs."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import httpx
import pytest

from headwater import Agent, tool
from headwater.errors import ModelHTTPError, RunNotFound
from headwater.gateway import StaticTokenAuth, create_app
from headwater.models.scripted import ScriptedTurn
from headwater.settings import Settings
from headwater.testing import ScriptedModel, wait_until
from headwater.tools import args_sha256

from .stores import new_service
from .test_gateway import A, new_session, post_run

AUTH = StaticTokenAuth({"token-a": "alice", "token-b": "bob"})
deployed: list[str] = []


@tool(requires_approval=True)
def deploy(env: str) -> str:
    """Deploy the service.

    Args:
        env: where to.
    """
    deployed.append(env)
    return f"deployed to {env}"


@tool(long_running=True)
def start_export(table: str) -> dict[str, str]:
    """Start an export job.

    Args:
        table: the table.
    """
    return {"ticket": f"job-{table}"}


def quick(**overrides: Any) -> Settings:
    return Settings(**{"session_lock_timeout": 0, "heartbeat_interval": 5.0, **overrides})


async def test_a_run_that_needs_approval_pauses_then_an_answer_continues_it(
        client_for: Any) -> None:
    deployed.clear()
    model = ScriptedModel().call("deploy", {"env": "prod"}, call_id="d1").reply("Deployed.")
    app = create_app(Agent(name="ops", model=model, tools=[deploy]), auth=AUTH,
                     session_service=new_service(), settings=quick())
    client = await client_for(app)
    sid = await new_session(client)
    paused = await post_run(client, sid, {"message": "deploy to prod"})
    assert [t for _, t, _ in paused.frames] == ["tool_call", "approval_required", "done"]
    request = paused.frames[1][2]
    # The approver (the session's owner) sees what is asked; other frames keep args hidden.
    assert request == {"author": "ops", "call_id": "d1", "name": "deploy",
                       "args_sha256": args_sha256({"env": "prod"}),
                       "display": 'deploy(env="prod")', "args": {"env": "prod"}}
    assert paused.frames[0][2]["calls"] == [{"id": "d1", "name": "deploy"}]
    assert deployed == []
    wrong = await client.post(f"/sessions/{sid}/runs", headers=A, json={
        "approvals": [{"call_id": "d1", "approved": True, "args_sha256": "0" * 64}]})
    assert wrong.status_code == 400 and wrong.json()["error"]["code"] == "invalid_request"
    answered = await post_run(client, sid, {"approvals": [
        {"call_id": "d1", "approved": True, "args_sha256": request["args_sha256"]}]})
    assert [t for _, t, _ in answered.frames] == ["tool_result", "delta", "message", "done"]
    assert deployed == ["prod"]
    items = (await client.get(f"/sessions/{sid}/events", headers=A)).json()["items"]
    assert any(i.get("approvals_requested") for i in items)
    assert any(i.get("approval_decisions") == [{"call_id": "d1", "approved": True,
                                                "reason": None}] for i in items)


@tool(requires_approval=True, approval_summary="ship {version} to {env}")
def ship(version: str, env: str = "staging") -> str:
    """Ship a version.

    Args:
        version: which.
        env: where to.
    """
    deployed.append(f"{version}@{env}")
    return "shipped"


async def test_a_summarised_approval_left_behind_by_a_message_is_superseded(
        client_for: Any) -> None:
    deployed.clear()
    model = ScriptedModel().call("ship", {"version": "2"}, call_id="s1").reply("Not shipped.")
    app = create_app(Agent(name="ops", model=model, tools=[ship]), auth=AUTH,
                     session_service=new_service(), settings=quick())
    client = await client_for(app)
    sid = await new_session(client)
    paused = await post_run(client, sid, {"message": "ship 2"})
    asked = {"call_id": "s1", "name": "ship", "args_sha256": args_sha256({"version": "2"}),
             "display": "ship 2 to staging"}  # the summary stands for the arguments
    assert paused.frames[1][2] == {"author": "ops", **asked}
    items = (await client.get(f"/sessions/{sid}/events", headers=A)).json()["items"]
    assert [i["approvals_requested"] for i in items if "approvals_requested" in i] == [[asked]]

    later = await post_run(client, sid, {"message": "never mind"})
    assert [t for _, t, _ in later.frames] == ["delta", "message", "done"]
    items = (await client.get(f"/sessions/{sid}/events", headers=A)).json()["items"]
    results = [r for i in items for r in i.get("results", [])]
    assert [(r["id"], r["status"], r.get("code")) for r in results] == [
        ("s1", "error", "superseded")]
    assert [i["text"] for i in items if i["author"] == "user"][-1] == "never mind"
    late = await client.post(f"/sessions/{sid}/runs", headers=A, json={
        "approvals": [{"call_id": "s1", "approved": True,
                       "args_sha256": asked["args_sha256"]}]})
    assert late.status_code == 400
    error = late.json()["error"]
    assert error["code"] == "invalid_request"
    assert "call 's1' (ship) was superseded: a later message was sent" in error["message"]
    assert deployed == []


async def test_a_long_running_call_is_completed_with_function_responses(
        client_for: Any) -> None:
    model = (ScriptedModel().call("start_export", {"table": "orders"}, call_id="x1")
             .reply("The export has 42 rows."))
    app = create_app(Agent(name="bot", model=model, tools=[start_export]), auth=AUTH,
                     session_service=new_service(), settings=quick())
    client = await client_for(app)
    sid = await new_session(client)
    first = await post_run(client, sid, {"message": "export orders"})
    assert [t for _, t, _ in first.frames] == ["tool_call", "tool_result", "done"]  # pending
    done = await post_run(client, sid, {"function_responses": [
        {"id": "x1", "name": "start_export", "response": {"rows": 42}}]})
    assert done.frames[-2][2]["text"] == "The export has 42 rows."
    assert model.requests[-1].contents[2].function_responses[0].response == {"rows": 42}
    unknown = await client.post(f"/sessions/{sid}/runs", headers=A, json={
        "function_responses": [{"id": "nope", "name": "start_export", "response": {}}]})
    assert unknown.status_code == 400


async def test_a_provider_failure_ends_with_one_error_frame_and_no_provider_text(
        client_for: Any) -> None:
    failure = ModelHTTPError("upstream said: secret-key-123 is invalid", status_code=401,
                             retryable=False)
    model = ScriptedModel().add(ScriptedTurn(raise_error=failure))
    app = create_app(Agent(name="bot", model=model), auth=AUTH,
                     session_service=new_service(), settings=quick())
    client = await client_for(app)
    sid = await new_session(client)
    got = await post_run(client, sid, {"message": "hi"})
    assert [t for _, t, _ in got.frames] == ["error"]
    items = (await client.get(f"/sessions/{sid}/events", headers=A)).json()["items"]
    assert [i.get("error", {}).get("code") for i in items] == [None, error_code(got)]
    error = got.frames[0][2]
    assert set(error) == {"code", "retryable", "request_id"}
    assert error["code"].startswith("provider_") and error["retryable"] is False
    assert b"secret-key-123" not in got.raw and b"upstream" not in got.raw


def error_code(got: Any) -> str:
    """The code of a stream's terminal error frame."""
    code: str = got.frames[-1][2]["code"]
    return code


async def test_a_content_message_and_a_second_agent(client_for: Any) -> None:
    first = Agent(name="first", model=ScriptedModel().reply("from first"))
    second = Agent(name="second", model=ScriptedModel().reply("from ", "second"))
    app = create_app([first, second], auth=AUTH, session_service=new_service(),
                     settings=quick())
    client = await client_for(app)
    created = await client.post("/sessions", json={"agent": "second", "state": {"k": 1}},
                                headers=A)
    assert created.status_code == 201
    session = created.json()
    assert session["agent"] == "second" and session["state"] == {"k": 1}
    assert session["created_at"] > 0 and session["updated_at"] >= session["created_at"]
    got = await post_run(client, session["id"], {"message": {
        "role": "user", "parts": [{"text": "hello"}]}})
    assert got.frames[-2][2] | {"id": ""} == {"author": "second", "id": "",
                                                "text": "from second", "final": True}
    missing = await client.post("/sessions", json={"agent": "third"}, headers=A)
    assert missing.status_code == 404
    assert (await client.get(f"/sessions/{session['id']}", headers=A)).json()["agent"] == "second"


async def test_sessions_and_events_are_paginated_and_delete_works(client_for: Any) -> None:
    model = ScriptedModel(responder=lambda request: ScriptedTurn(text=["ok"]))
    app = create_app(Agent(name="bot", model=model), auth=AUTH,
                     session_service=new_service(), settings=quick())
    client = await client_for(app)
    sids = [await new_session(client) for _ in range(5)]
    seen: list[str] = []
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = (await client.get("/sessions", params=params, headers=A)).json()
        seen += [s["id"] for s in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert sorted(seen) == sorted(sids) and seen[0] == sids[-1]  # newest first
    for text in ("one", "two", "three"):
        await post_run(client, sids[0], {"message": text})
    items: list[dict[str, Any]] = []
    cursor = None
    while True:
        params = {"limit": 4, **({"cursor": cursor} if cursor else {})}
        page = (await client.get(f"/sessions/{sids[0]}/events", params=params,
                                 headers=A)).json()
        items += page["items"]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert [i["text"] for i in items] == ["one", "ok", "two", "ok", "three", "ok"]
    assert (await client.delete(f"/sessions/{sids[0]}", headers=A)).status_code == 204
    assert (await client.get(f"/sessions/{sids[0]}", headers=A)).status_code == 404
    assert (await client.get("/sessions", params={"cursor": "x"}, headers=A)).status_code == 422


async def test_a_sessions_title_is_its_first_message_cut_and_null_before_one(
        client_for: Any, tmp_path: Path) -> None:
    model = ScriptedModel(responder=lambda request: ScriptedTurn(text=["ok"]))
    service = new_service("sqlite")
    app = create_app(Agent(name="bot", model=model), auth=AUTH, session_service=service,
                     settings=quick(session_title_chars=12))
    client = await client_for(app)
    try:
        short, long, empty = [await new_session(client) for _ in range(3)]
        assert (await client.get(f"/sessions/{short}", headers=A)).json()["title"] is None
        await post_run(client, short, {"message": "  Where is\n order 1042? "})
        await post_run(client, short, {"message": "And 1043?"})  # the first one names it
        await post_run(client, long, {"message": "Tell me a very long story"})
        listed = {s["id"]: s["title"] for s in
                  (await client.get("/sessions", headers=A)).json()["items"]}
        assert listed == {short: "Where is or…", long: "Tell me a v…", empty: None}
        one = (await client.get(f"/sessions/{short}", headers=A)).json()
        assert one["title"] == "Where is or…"  # the same, one session at a time
        assert len(one["title"]) == 12
        created = await client.post("/sessions", json={}, headers=A)
        assert created.json()["title"] is None
    finally:
        await service.close()


async def test_the_openapi_schema_names_the_typed_models(client_for: Any) -> None:
    app = create_app(Agent(name="bot", model=ScriptedModel()), auth=AUTH,
                     session_service=new_service(), settings=quick())
    client = await client_for(app)
    schema = (await client.get("/openapi.json")).json()
    paths = schema["paths"]
    for path in ("/sessions", "/sessions/{session_id}", "/sessions/{session_id}/events",
                 "/sessions/{session_id}/runs", "/runs/{run_id}/stream",
                 "/runs/{run_id}/cancel", "/healthz"):
        assert path in paths, path
    components = schema["components"]["schemas"]
    for name in ("RunRequest", "SessionOut", "SessionList", "EventList", "ErrorBody",
                 "ApprovalAnswer", "FunctionResponseIn"):
        assert name in components, name
    run = paths["/sessions/{session_id}/runs"]["post"]
    assert "text/event-stream" in run["responses"]["200"]["content"]
    assert (await client.get("/healthz")).json() == {"status": "ok"}


async def test_one_log_line_per_run_end_without_message_text(
        client_for: Any, caplog: pytest.LogCaptureFixture) -> None:
    app = create_app(Agent(name="bot", model=ScriptedModel().reply("the secret answer")),
                     auth=AUTH, session_service=new_service(), settings=quick())
    client = await client_for(app)
    sid = await new_session(client)
    with caplog.at_level(logging.INFO, logger="headwater.gateway"):
        got = await post_run(client, sid, {"message": "my private question"})
    ends = [r for r in caplog.records if getattr(r, "run", None) == got.headers["x-run-id"]]
    assert len(ends) == 1
    end: Any = ends[0]
    assert (end.user, end.session, end.status, end.frames) == ("alice", sid, "done", 3)
    assert end.duration_ms >= 0
    logged = "\n".join(r.getMessage() + json.dumps(r.__dict__, default=str)
                       for r in caplog.records)
    assert "private question" not in logged and "secret answer" not in logged


def broken_callback(**_: Any) -> None:
    raise RuntimeError("the callback's own words")


@pytest.mark.parametrize(("agent", "kind", "words"), [
    (Agent(name="bot", model=ScriptedModel()), "UserError", "no scripted turn left"),
    (Agent(name="bot", model=ScriptedModel().reply("x"), before_model_callback=broken_callback),
     "RuntimeError", "the callback's own words"),
])
async def test_an_internal_failure_is_logged_whole_and_the_client_gets_the_code(
        client_for: Any, caplog: pytest.LogCaptureFixture, agent: Agent, kind: str,
        words: str) -> None:
    app = create_app(agent, auth=AUTH, session_service=new_service(),
                     settings=quick())
    client = await client_for(app)
    sid = await new_session(client)
    with caplog.at_level(logging.INFO, logger="headwater.gateway"):
        got = await post_run(client, sid, {"message": "hi"})
    assert got.frames[-1][1:] == ("error", {"code": "internal", "retryable": False,
                                            "request_id": got.frames[-1][2]["request_id"]})
    assert words not in got.raw.decode() and kind not in got.raw.decode()
    [failed] = [r for r in caplog.records if "failed (internal)" in r.getMessage()]
    assert failed.levelno == logging.ERROR and failed.exc_info is not None
    assert f"{kind}: " in failed.getMessage() and words in failed.getMessage()


async def test_thoughts_stream_as_reasoning_frames_never_as_deltas(client_for: Any) -> None:
    model = ScriptedModel().add(ScriptedTurn(thoughts=["let me ", "think"], text=["Answer."]))
    app = create_app(Agent(name="bot", model=model), auth=AUTH,
                     session_service=new_service(), settings=quick())
    client = await client_for(app)
    got = await post_run(client, await new_session(client), {"message": "hi"})
    kinds = [t for _, t, _ in got.frames]
    assert kinds == ["reasoning", "reasoning", "delta", "message", "done"]
    assert "".join(d["text"] for _, t, d in got.frames if t == "reasoning") == "let me think"
    assert got.frames[3][2]["text"] == "Answer."


async def test_the_app_tunes_the_collector_while_it_runs_and_puts_it_back() -> None:
    import gc

    before = gc.get_threshold()
    app = create_app(Agent(name="bot", model=ScriptedModel()), auth=AUTH,
                     session_service=new_service(),
                     settings=quick(gc_thresholds=(12_345, 11, 999)))
    async with app.router.lifespan_context(app):
        assert gc.get_threshold() == (12_345, 11, 999)
        assert gc.get_freeze_count() > 0  # startup objects are out of the full passes
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


async def test_runs_past_max_runs_per_user_are_rate_limited(client_for: Any) -> None:
    model = ScriptedModel()
    for i in range(3):
        model.reply(f"answer {i}")
    app = create_app(Agent(name="bot", model=model), auth=AUTH,
                     session_service=new_service(),
                     settings=quick(max_runs_per_user=2, run_rate_window=86400))
    client = await client_for(app)
    sid = await new_session(client)
    for _ in range(2):
        assert (await post_run(client, sid, {"message": "hi"})).frames[-1][1] == "done"
    refused = await client.post(f"/sessions/{sid}/runs", json={"message": "hi"}, headers=A)
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "rate_limited"
    assert 1 <= int(refused.headers["retry-after"]) <= 86400
    bob = await new_session(client, {"Authorization": "Bearer token-b"})  # his own count
    got = await post_run(client, bob, {"message": "hi"}, {"Authorization": "Bearer token-b"})
    assert got.frames[-1][1] == "done"


async def test_a_forgotten_run_leaves_the_log_and_the_apps_end_leaves_no_task_behind() -> None:
    model = ScriptedModel()
    model.reply("hi")
    app = create_app(Agent(name="bot", model=model), auth=AUTH, session_service=new_service(),
                     settings=quick(run_retention=0))
    gateway = app.state.gateway
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
            sid = await new_session(client)
            ran = await post_run(client, sid, {"message": "hello"})
            assert [kind for _, kind, _ in ran.frames][-1] == "done"
            run_id = ran.headers["x-run-id"]
            # run_retention 0: the run is forgotten at its end, by a step of the run manager
            await wait_until(lambda: run_id not in gateway.runs.runs, timeout=10)
            await wait_until(lambda: len(gateway.runs.tasks) == 0, timeout=10)
            with pytest.raises(RunNotFound):
                await gateway.runs.log.last_id(run_id)
    assert gateway.runs.tasks.closed and len(gateway.runs.tasks) == 0
    ours = ("run ", "forget run ", "sse stall watch", "read frames", "watch for a disconnect")
    assert [t for t in asyncio.all_tasks() if t.get_name().startswith(ours)] == []
