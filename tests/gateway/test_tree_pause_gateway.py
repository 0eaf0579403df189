"""A pause inside a tree over the gateway (issue 30): the typed frames, the AG-UI client and
the Vercel AI SDK client, over real HTTP.

A release agent calls a deployer agent as a tool; the deployer's ``deploy`` needs
approval. The first run ends with ``approval_required`` authored by ``deployer`` on
the branch ``release:c1`` (the outer call ``c1``), then ``done``; the answer (the
next run's ``approvals``, AG-UI's ``resume``, Vercel's approval response) resumes
the deployer, whose final text is the outer call's result, and the release agent
answers.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from headwater import Agent, AgentTool, ParallelAgent, SequentialAgent, tool
from headwater.gateway import create_app
from headwater.gateway.frames import outer_call_id
from headwater.models import LlmRequest
from headwater.models.scripted import ScriptedCall, ScriptedTurn
from headwater.settings import Settings
from headwater.testing import ScriptedModel

from . import stores
from .conftest import require_node
from .stores import new_service
from .test_agui import agui, of_role
from .test_gateway import AUTH, A, new_session, post_run, settings
from .test_replicas import replicas_for
from .test_vercel import run_client

__all__ = ["replicas_for"]  # a fixture, used by name

DEPLOYED: list[str] = []


@tool(requires_approval=True, approval_summary="deploy {version}")
def deploy(version: str) -> dict[str, str]:
    """Deploy a version."""
    DEPLOYED.append(version)
    return {"deployed": version}


@pytest.fixture(autouse=True)
def _clear() -> None:
    DEPLOYED.clear()


def answers(call: ScriptedCall, *text: str) -> ScriptedModel:
    """A model that makes ``call``, then says ``text`` once a result is in: it decides
    from the request, so a new process (a restart, another replica) answers the same."""

    def respond(request: LlmRequest) -> ScriptedTurn:
        last = request.contents[-1]
        return ScriptedTurn(text=text) if last.function_responses else ScriptedTurn(
            calls=(call,))

    return ScriptedModel(responder=respond)


def release(name: str = "release") -> Agent:
    inner = answers(ScriptedCall("deploy", {"version": "2"}, id="d1"), "Deployed 2.")
    outer = answers(ScriptedCall("deployer", {"request": "ship 2"}, id="c1"), "Released ", "2.")
    deployer = Agent(name="deployer", model=inner, description="Deploys.", tools=[deploy])
    return Agent(name=name, model=outer, tools=[AgentTool(deployer)])


def kinds(frames: list[tuple[int, str, dict[str, Any]]]) -> list[tuple[str, Any, Any]]:
    return [(t, d.get("author"), outer_call_id(d.get("branch"))) for _, t, d in frames
            if t != "delta"]


async def test_typed_frames_pause_on_the_inner_agent_and_the_answer_resumes_it(
        client_for: Any) -> None:
    client = await client_for(create_app(release(), session_service=new_service(), auth=AUTH,
                                         settings=settings()))
    sid = await new_session(client)
    paused = await post_run(client, sid, {"message": "release 2"})
    assert paused.status == 200
    assert kinds(paused.frames) == [
        ("tool_call", "release", None), ("tool_call", "deployer", "c1"),
        ("approval_required", "deployer", "c1"), ("done", None, None)]
    [asked] = [d for _, t, d in paused.frames if t == "approval_required"]
    assert asked["branch"] == "release:c1" and asked["display"] == "deploy 2"
    assert DEPLOYED == []

    # the history holds the pause: the outer call without a result, the inner request
    items = (await client.get(f"/sessions/{sid}/events", headers=A)).json()["items"]
    assert [(i["author"], outer_call_id(i.get("branch"))) for i in items] == [
        ("user", None), ("release", None), ("user", "c1"), ("deployer", "c1"),
        ("deployer", "c1"), ("release", None)]

    resumed = await post_run(client, sid, {"approvals": [
        {"call_id": "d1", "approved": True, "args_sha256": asked["args_sha256"]}]})
    assert resumed.status == 200
    assert kinds(resumed.frames) == [
        ("tool_result", "deployer", "c1"), ("message", "deployer", "c1"),
        ("tool_result", "release", None), ("message", "release", None), ("done", None, None)]
    assert DEPLOYED == ["2"]
    [final] = [d for _, t, d in resumed.frames if t == "message" and d["author"] == "release"]
    assert final["text"] == "Released 2."

    again = await post_run(client, sid, {"approvals": [{"call_id": "d1", "approved": True}]})
    assert again.status == 400  # answered already: refused as any stale answer


async def test_two_parallel_pauses_answered_one_by_one_over_http(client_for: Any) -> None:
    def one(name: str, version: str) -> Agent:
        model = ScriptedModel().call("deploy", {"version": version}, call_id=f"d{version}")
        return Agent(name=name, model=model.reply(f"{name} done"), tools=[deploy])

    after = Agent(name="summary", model=ScriptedModel().reply("both shipped"))
    root = SequentialAgent(name="pipeline", sub_agents=[
        ParallelAgent(name="fan", sub_agents=[one("east", "1"), one("west", "2")]), after])
    client = await client_for(create_app(root, session_service=new_service(), auth=AUTH,
                                         settings=settings()))
    sid = await new_session(client)
    paused = await post_run(client, sid, {"message": "ship"})
    asked = sorted((d["author"], d["branch"], d["call_id"]) for _, t, d in paused.frames
                   if t == "approval_required")
    assert asked == [("east", "fan.east", "d1"), ("west", "fan.west", "d2")]
    first = await post_run(client, sid, {"approvals": [{"call_id": "d1", "approved": True}]})
    assert [t for _, t, _ in first.frames if t != "delta"] == [
        "tool_result", "message", "done"]
    second = await post_run(client, sid, {"approvals": [{"call_id": "d2", "approved": False}]})
    assert [(t, d.get("author")) for _, t, d in second.frames if t != "delta"] == [
        ("tool_result", "west"), ("message", "west"), ("message", "summary"), ("done", None)]
    assert DEPLOYED == ["1"]


async def test_agui_interrupt_from_an_inner_agent_and_its_resume(serve: Any) -> None:
    node = require_node("@ag-ui/client")
    assert node
    base = await serve(create_app(release(), session_service=new_service(), auth=AUTH,
                                  settings=settings()))
    report = await agui(node, f"{base}/ag-ui/release",
                        [{"message": "release 2"}, {"resume": "approve"}])
    paused, resumed = report["runs"]
    assert paused["outcome"] == "interrupt" and paused["pendingInterrupts"] == ["d1"]
    [interrupt] = paused["interrupts"]
    assert interrupt["message"] == "Approve deploy 2?"
    assert resumed["failure"] is None and resumed["outcome"] == "success"
    assert DEPLOYED == ["2"]
    assert of_role(report, "assistant")[-1]["content"] == "Released 2."
    results = {m["toolCallId"]: json.loads(m["content"]) for m in of_role(report, "tool")}
    assert results["d1"]["status"] == "ok" and results["c1"]["status"] == "ok"


async def test_agui_cancelled_interrupt_is_a_denial_the_inner_agent_answers(serve: Any) -> None:
    node = require_node("@ag-ui/client")
    base = await serve(create_app(release(), session_service=new_service(), auth=AUTH,
                                  settings=settings()))
    report = await agui(node, f"{base}/ag-ui/release",
                        [{"message": "release 2"}, {"resume": "deny"}])
    paused, denied = report["runs"]
    assert paused["pendingInterrupts"] == ["d1"]
    assert denied["failure"] is None and denied["outcome"] == "success"
    assert DEPLOYED == []
    results = {m["toolCallId"]: json.loads(m["content"]) for m in of_role(report, "tool")}
    assert results["d1"]["status"] == "error"


async def test_vercel_approval_of_an_inner_call(serve: Any) -> None:
    require_node("ai")
    base = await serve(create_app(release(), session_service=new_service(), auth=AUTH,
                                  settings=settings()))
    result = await run_client(base, "chat", "chat-r", "release 2", "--approve",
                              agent="release")
    first, second = result["turns"]
    assert (first["status"], first["error"]) == ("ready", None)
    [part] = [p for p in first["messages"][-1]["parts"] if p["type"] == "tool-deploy"]
    assert part["state"] == "approval-requested" and part["approval"]["id"] == "d1"
    assert part["callProviderMetadata"]["headwater"] == {"author": "deployer",
                                                         "branch": "release:c1"}
    assert (second["status"], second["error"]) == ("ready", None)
    assistant = second["messages"][-1]
    texts = [p["text"] for p in assistant["parts"] if p["type"] == "text"]
    assert texts[-1] == "Released 2."
    assert DEPLOYED == ["2"]


# -- a restart in between, and another replica -----------------------------------------------


def gateway_settings(database_url: str, **overrides: Any) -> Settings:
    return Settings(**{"database_url": database_url, "heartbeat_interval": 5.0,
                       "send_timeout": 2.0, "session_lock_timeout": 0, "shutdown_grace": 2.0,
                       **overrides})


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
async def test_the_pause_outlives_a_restart(store: str, request: pytest.FixtureRequest,
                                            serve: Any) -> None:
    """Paused on one server, which stops; answered on a new one on the same database."""
    if store == "postgres":
        request.getfixturevalue("postgres_url")  # skips locally, fails in CI, when unset
        assert stores.current is not None
        url = stores.current.postgres_url()
    else:
        url = f"sqlite+aiosqlite:///{request.getfixturevalue('tmp_path') / 'pause.db'}"
    first = create_app(release(), auth=AUTH, settings=gateway_settings(url))
    async with httpx.AsyncClient(base_url=await serve(first, lifespan="on"),
                                 timeout=20) as client:
        sid = await new_session(client)
        paused = await post_run(client, sid, {"message": "release 2"})
        [asked] = [d for _, t, d in paused.frames if t == "approval_required"]
    first.state.gateway.begin_shutdown()
    second = create_app(release(), auth=AUTH, settings=gateway_settings(url))
    async with httpx.AsyncClient(base_url=await serve(second, lifespan="on"),
                                 timeout=20) as client:
        resumed = await post_run(client, sid, {"approvals": [
            {"call_id": asked["call_id"], "approved": True}]})
        assert kinds(resumed.frames)[-3:] == [
            ("tool_result", "release", None), ("message", "release", None),
            ("done", None, None)]
        items = (await client.get(f"/sessions/{sid}/events", headers=A)).json()["items"]
    calls = [c["id"] for i in items for c in i.get("calls", [])]
    results = [r["id"] for i in items for r in i.get("results", [])]
    assert sorted(calls) == sorted(results) == ["c1", "d1"]  # every call answered once
    assert DEPLOYED == ["2"]


@pytest.mark.redis
async def test_paused_on_one_replica_answered_on_the_other(replicas_for: Any) -> None:
    replicas = await replicas_for(release)
    sid = await new_session(replicas.a)
    paused = await post_run(replicas.a, sid, {"message": "release 2"})
    assert ("approval_required", "deployer", "c1") in kinds(paused.frames)
    resumed = await post_run(replicas.b, sid, {"approvals": [
        {"call_id": "d1", "approved": True}]})
    assert kinds(resumed.frames) == [
        ("tool_result", "deployer", "c1"), ("message", "deployer", "c1"),
        ("tool_result", "release", None), ("message", "release", None), ("done", None, None)]
    assert DEPLOYED == ["2"]
