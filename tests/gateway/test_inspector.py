"""The run inspector's traces over real HTTP (docs/inspector.md): ``GET /runs/{id}/trace``
for a run with a tool call, a transfer, a parallel agent and a live run; the owner rules;
payloads only when ``inspect_payloads`` is on, and never a secret; ``inspect_runs``
bounds; a trace written by one replica read from another (Redis)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from typing import Annotated, Any

import httpx
import pytest
from pydantic import Field
from websockets.asyncio.client import connect

from headwater import Agent, AgentTool, ParallelAgent, tool
from headwater.events import ToolStreamEvent
from headwater.gateway import StaticTokenAuth, create_app
from headwater.settings import Settings
from headwater.testing import ScriptedModel
from headwater.types import Usage

from .conftest import Serve
from .stores import new_database_url, new_service
from .test_gateway import A, B, new_session, post_run
from .test_runlog import drop_keys

AUTH = StaticTokenAuth({"token-a": "alice", "token-b": "bob"})
TOKEN_TEXT = "Bearer abcdefghijklmnop123456"


def settings(**overrides: Any) -> Settings:
    return Settings(**{"session_lock_timeout": 0, "heartbeat_interval": 5.0, **overrides})


def lookup_order(order_id: str) -> dict[str, str]:
    """Look up an order.

    Args:
        order_id: the order.
    """
    return {"status": "shipped", "order_id": order_id}


def unlock(account: str, pin: Annotated[str, Field(json_schema_extra={"writeOnly": True})]
           ) -> str:
    """Unlock an account with its PIN (a secret argument: ``writeOnly``).

    Args:
        account: the account.
        pin: its PIN.
    """
    return f"unlocked {account}"


def support(model: ScriptedModel) -> Agent:
    return Agent(name="support", model=model, tools=[lookup_order, unlock],
                 instruction="You help with orders.")


def order_model() -> ScriptedModel:
    return (ScriptedModel(model="scripted-orders")
            .call("lookup_order", {"order_id": "A-17"}, call_id="c1",
                  usage=Usage(input_tokens=30, output_tokens=5, total_tokens=35))
            .reply("It ", "shipped.", usage=Usage(input_tokens=44, output_tokens=3,
                                                   total_tokens=47)))


async def trace_of(client: httpx.AsyncClient, run_id: str, headers: dict[str, str] = A,
                   **params: Any) -> dict[str, Any]:
    response = await client.get(f"/runs/{run_id}/trace", headers=headers, params=params)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def run_and_trace(client: httpx.AsyncClient, body: dict[str, Any],
                        headers: dict[str, str] = A, **params: Any
                        ) -> tuple[str, dict[str, Any], list[str]]:
    sid = await new_session(client, headers)
    received = await post_run(client, sid, body, headers)
    assert received.status == 200
    run_id = received.headers["x-run-id"]
    return run_id, await trace_of(client, run_id, headers, **params), \
        [t for _, t, _ in received.frames]


def check_tree(spans: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Every span's parent came before it and holds it in time; the first is the root."""
    by_id = {span["id"]: span for span in spans}
    assert spans[0]["parent_id"] is None and spans[0]["kind"] == "agent"
    assert spans[0]["start"] == 0
    for span in spans:
        assert span["end"] is not None and span["start"] <= span["end"], span
        if span["parent_id"] is None:
            assert span is spans[0]
            continue
        parent = by_id[span["parent_id"]]
        assert parent["id"] < span["id"]
        assert parent["start"] <= span["start"] and span["end"] <= parent["end"], (parent, span)
    starts = [span["start"] for span in spans]
    assert starts == sorted(starts)  # kept in the order they started
    return by_id


def shape(spans: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(s["id"], s["parent_id"], s["kind"], s["name"], s["branch"]) for s in spans]


# -- the trace of each kind of run ------------------------------------------------------------


async def test_a_run_with_a_tool_call_is_its_agent_two_model_calls_and_the_tool(
        client_for: Any) -> None:
    app = create_app(support(order_model()), auth=AUTH, session_service=new_service(),
                     settings=settings())
    client = await client_for(app)
    run_id, trace, frames = await run_and_trace(client, {"message": "where is A-17?"})
    assert frames[-1] == "done"
    assert trace["run_id"] == run_id and trace["ended"] is True and trace["dropped"] == 0
    spans = trace["spans"]
    check_tree(spans)
    assert shape(spans) == [(1, None, "agent", "support", None),
                            (2, 1, "model", "scripted-orders", None),
                            (3, 1, "tool", "lookup_order", None),
                            (4, 1, "model", "scripted-orders", None)]
    first, tool_span, second = spans[1]["attributes"], spans[2]["attributes"], \
        spans[3]["attributes"]
    assert first["input_tokens"] == 30 and first["output_tokens"] == 5
    assert "time_to_first_chunk" in first and first["model"] == "scripted-orders"
    assert second["input_tokens"] == 44 and second["finish_reason"] == "stop"
    assert tool_span == {"tool": "lookup_order", "call_id": "c1", "status": "ok"}
    assert spans[0]["attributes"]["input_tokens"] == 74
    assert spans[1]["end"] <= spans[2]["start"] and spans[2]["end"] <= spans[3]["start"]
    assert all("payload" not in s for s in spans)  # with auth: payloads are off


async def test_a_transfer_is_a_span_under_its_source_and_the_target_runs_under_it(
        client_for: Any) -> None:
    billing = Agent(name="billing", model=ScriptedModel(model="m-billing").reply("Paid."))
    coordinator = Agent(name="coordinator", sub_agents=[billing], model=ScriptedModel(
        model="m-coord").call("transfer_to_agent", {"agent_name": "billing"}, call_id="t1"))
    app = create_app(coordinator, auth=AUTH, session_service=new_service(),
                     settings=settings())
    client = await client_for(app)
    _, trace, _ = await run_and_trace(client, {"message": "refund me"})
    spans = trace["spans"]
    check_tree(spans)
    assert shape(spans) == [(1, None, "agent", "coordinator", None),
                            (2, 1, "model", "m-coord", None),
                            (3, 1, "tool", "transfer_to_agent", None),
                            (4, 1, "transfer", "coordinator → billing", None),
                            (5, 4, "agent", "billing", None),
                            (6, 5, "model", "m-billing", None)]
    assert spans[3]["attributes"] == {"from": "coordinator", "to": "billing"}
    assert spans[5]["agent"] == "billing"


async def test_a_parallel_agent_s_branches_are_side_by_side_under_it(client_for: Any) -> None:
    def researcher(name: str, words: int) -> Agent:
        return Agent(name=name, model=ScriptedModel(model=f"m-{name}").reply(
            *(f"w{i} " for i in range(words)), delay=0.01))

    root = ParallelAgent(name="research", sub_agents=[researcher("flights", 4),
                                                      researcher("hotels", 4)])
    app = create_app(root, auth=AUTH, session_service=new_service(), settings=settings())
    client = await client_for(app)
    _, trace, _ = await run_and_trace(client, {"message": "plan a trip"})
    spans = trace["spans"]
    by_id = check_tree(spans)
    agents = {s["name"]: s for s in spans if s["kind"] == "agent" and s["parent_id"] == 1}
    assert set(agents) == {"flights", "hotels"}
    assert agents["flights"]["branch"] == "research.flights"
    assert agents["hotels"]["branch"] == "research.hotels"
    models = [s for s in spans if s["kind"] == "model"]
    assert sorted(by_id[m["parent_id"]]["name"] for m in models) == ["flights", "hotels"]
    assert all(m["branch"] == by_id[m["parent_id"]]["branch"] for m in models)
    flights, hotels = (next(m for m in models if m["agent"] == n) for n in ("flights", "hotels"))
    assert flights["start"] < hotels["end"] and hotels["start"] < flights["end"]  # side by side


async def test_a_live_run_has_a_model_span_per_turn(serve: Serve) -> None:
    model = ScriptedModel(model="m-live").reply("Hello.").reply("Again.")
    app = create_app(Agent(name="voice", model=model), auth=AUTH,
                     session_service=new_service(), settings=settings())
    base = await serve(app)
    async with httpx.AsyncClient(base_url=base, timeout=10) as client:
        sid = await new_session(client)
        url = base.replace("http://", "ws://", 1) + f"/live/{sid}"
        async with connect(url, additional_headers=A) as ws:
            ready = json.loads(await ws.recv())
            run_id = ready["data"]["run_id"]
            for text in ("hi", "again"):
                await ws.send(json.dumps({"type": "content", "text": text}))
                while json.loads(await ws.recv())["type"] != "turn_complete":
                    pass
            going = await trace_of(client, run_id)  # while it runs: what it has so far
            assert going["ended"] is False and going["spans"][0]["end"] is None
            await ws.send(json.dumps({"type": "close"}))
            while json.loads(await ws.recv())["type"] not in ("done", "error"):
                pass
        for _ in range(200):
            trace = await trace_of(client, run_id)
            if trace["ended"]:
                break
            await asyncio.sleep(0.01)
    spans = trace["spans"]
    check_tree(spans)
    assert shape(spans) == [(1, None, "agent", "voice", None),
                            (2, 1, "model", "m-live", None),
                            (3, 1, "model", "m-live", None)]


# -- who may read it, and what it holds -----------------------------------------------------------


async def test_only_the_run_s_owner_reads_its_trace(client_for: Any) -> None:
    app = create_app(support(order_model()), auth=AUTH, session_service=new_service(),
                     settings=settings())
    client = await client_for(app)
    run_id, _, _ = await run_and_trace(client, {"message": "where is A-17?"})
    for headers, path in ((B, f"/runs/{run_id}/trace"), (A, "/runs/inv-nope/trace")):
        response = await client.get(path, headers=headers)
        assert response.status_code == 404
        error = response.json()["error"]
        assert (error["code"], error["message"]) == ("not_found", "run not found")
    assert (await client.get(f"/runs/{run_id}/trace")).status_code == 401


async def test_payloads_are_recorded_in_dev_mode_without_a_secret(client_for: Any) -> None:
    model = (ScriptedModel(model="m")
             .call("unlock", {"account": "acct-9", "pin": "4921"}, call_id="u1")
             .reply(f"Done; your header was {TOKEN_TEXT}."))
    app = create_app(support(model), session_service=new_service(),
                     settings=settings())  # no auth: dev mode
    client = await client_for(app)
    _, trace, _ = await run_and_trace(client, {"message": "unlock acct-9, pin 4921"}, {},
                                      payloads=1)
    assert trace["payloads"] is True
    first, tool_span, second = trace["spans"][1:]
    request = first["payload"]["request"]
    assert request["system_instruction"].startswith("You help with orders.")
    assert request["contents"][-1] == {"role": "user", "parts": [
        {"type": "text", "content": "unlock acct-9, pin 4921"}]}
    assert {t["name"] for t in request["tools"]} == {"lookup_order", "unlock"}
    assert first["payload"]["response"]["parts"][0] == {
        "type": "tool_call", "id": "u1", "name": "unlock",
        "arguments": {"account": "acct-9", "pin": "[redacted]"}}
    assert tool_span["payload"]["arguments"] == {"account": "acct-9", "pin": "[redacted]"}
    assert tool_span["payload"]["result"] == {"result": "unlocked acct-9"}
    call = second["payload"]["request"]["contents"][-2]["parts"][0]
    assert call["arguments"]["pin"] == "[redacted]"
    answer = second["payload"]["response"]["parts"][0]["content"]
    assert "abcdefghijklmnop123456" not in answer and "[redacted]" in answer
    text = json.dumps(trace)
    assert "4921\"" not in text.replace("pin 4921", "")  # only the user's own words hold it


async def test_payloads_are_not_recorded_with_auth_or_when_turned_off(client_for: Any) -> None:
    for auth, overrides in ((AUTH, {}), (None, {"inspect_payloads": False})):
        app = create_app(support(order_model()), auth=auth, session_service=new_service(),
                         settings=settings(**overrides))
        client = await client_for(app)
        headers = A if auth is not None else {}
        _, trace, _ = await run_and_trace(client, {"message": "where is A-17?"}, headers,
                                          payloads=1)
        assert trace["payloads"] is False
        assert all("payload" not in s for s in trace["spans"])
        assert "A-17" not in json.dumps(trace)
    app = create_app(support(order_model()), auth=AUTH, session_service=new_service(),
                     settings=settings(inspect_payloads=True))
    client = await client_for(app)
    _, trace, _ = await run_and_trace(client, {"message": "where is A-17?"}, payloads=1)
    assert trace["spans"][2]["payload"]["arguments"] == {"order_id": "A-17"}
    run_id = trace["run_id"]
    plain = await trace_of(client, run_id)  # without ?payloads=1: none
    assert all("payload" not in s for s in plain["spans"])


async def test_the_last_inspect_runs_runs_of_a_session_are_kept(client_for: Any) -> None:
    model = ScriptedModel(model="m").reply("one").reply("two").reply("three")
    app = create_app(Agent(name="a", model=model), auth=AUTH, session_service=new_service(),
                     settings=settings(inspect_runs=2))
    client = await client_for(app)
    sid = await new_session(client)
    ids = []
    for text in ("1", "2", "3"):
        received = await post_run(client, sid, {"message": text})
        ids.append(received.headers["x-run-id"])
    codes = [(await client.get(f"/runs/{i}/trace", headers=A)).status_code for i in ids]
    assert codes == [404, 200, 200]


async def test_no_trace_is_recorded_when_inspect_runs_is_0(client_for: Any) -> None:
    app = create_app(support(order_model()), auth=AUTH, session_service=new_service(),
                     settings=settings(inspect_runs=0))
    client = await client_for(app)
    sid = await new_session(client)
    received = await post_run(client, sid, {"message": "where is A-17?"})
    response = await client.get(f"/runs/{received.headers['x-run-id']}/trace", headers=A)
    assert response.status_code == 404
    assert app.state.gateway.traces.new_record() is None


@pytest.mark.redis
async def test_any_replica_answers_an_ended_run_s_trace(redis_url: str, serve: Serve) -> None:
    prefix = f"hwtest:{uuid.uuid4().hex}:"
    values: dict[str, Any] = {"redis_url": redis_url, "redis_key_prefix": prefix,
                              "database_url": new_database_url(), "session_lock_timeout": 0,
                              "heartbeat_interval": 1.0, "inspect_runs": 1}
    apps = [create_app(support(order_model()), auth=AUTH, settings=Settings(**values))
            for _ in range(2)]
    clients = [httpx.AsyncClient(base_url=await serve(app, lifespan="on"), timeout=20)
               for app in apps]
    try:
        run_id, here, _ = await run_and_trace(clients[0], {"message": "where is A-17?"})
        there: dict[str, Any] = {}
        for _ in range(300):  # written once the run has ended
            response = await clients[1].get(f"/runs/{run_id}/trace", headers=A)
            if response.status_code == 200:
                there = response.json()
                break
            await asyncio.sleep(0.01)
        assert there["spans"] == here["spans"]
        assert (await clients[1].get(f"/runs/{run_id}/trace", headers=B)).status_code == 404
    finally:
        for client in clients:
            await client.aclose()
        await drop_keys(redis_url, prefix)


async def test_another_replica_shows_a_run_while_it_runs(redis_url: str, serve: Serve) -> None:
    """A live run on A: B answers its trace as of A's last snapshot, ``ended`` false."""
    prefix = f"hwtest:{uuid.uuid4().hex}:"
    values: dict[str, Any] = {"redis_url": redis_url, "redis_key_prefix": prefix,
                              "database_url": new_database_url(), "session_lock_timeout": 0,
                              "heartbeat_interval": 1.0, "inspect_live_interval": 0.05}
    model = ScriptedModel(model="m-live").reply("Hello.")
    apps = [create_app(Agent(name="voice", model=model), auth=AUTH, settings=Settings(**values))
            for _ in range(2)]
    bases = [await serve(app, lifespan="on") for app in apps]
    clients = [httpx.AsyncClient(base_url=base, timeout=20) for base in bases]
    try:
        sid = await new_session(clients[0])
        url = bases[0].replace("http://", "ws://", 1) + f"/live/{sid}"
        async with connect(url, additional_headers=A) as ws:
            run_id = json.loads(await ws.recv())["data"]["run_id"]
            await ws.send(json.dumps({"type": "content", "text": "hi"}))
            while json.loads(await ws.recv())["type"] != "turn_complete":
                pass
            there: dict[str, Any] = {}
            for _ in range(300):  # A's next snapshot
                response = await clients[1].get(f"/runs/{run_id}/trace", headers=A)
                if response.status_code == 200:
                    there = response.json()
                    if any(s["kind"] == "model" for s in there["spans"]):
                        break
                await asyncio.sleep(0.01)
            assert there["ended"] is False
            assert [(s["kind"], s["name"]) for s in there["spans"]] == [
                ("agent", "voice"), ("model", "m-live")]
            assert (await clients[1].get(f"/runs/{run_id}/trace",
                                         headers=B)).status_code == 404
            await ws.send(json.dumps({"type": "close"}))
            while json.loads(await ws.recv())["type"] not in ("done", "error"):
                pass
        for _ in range(300):  # then the ended trace replaces the snapshot
            ended = (await clients[1].get(f"/runs/{run_id}/trace", headers=A)).json()
            if ended["ended"]:
                break
            await asyncio.sleep(0.01)
        assert ended["ended"] is True
    finally:
        for client in clients:
            await client.aclose()
        await drop_keys(redis_url, prefix)


@tool(requires_approval=True)
async def deploy(env: str) -> AsyncIterator[ToolStreamEvent]:
    """Deploy the service, in steps.

    Args:
        env: where to.
    """
    for step in ("build", "push", "switch"):
        yield ToolStreamEvent("part_delta", delta=step)
    yield ToolStreamEvent("done", response=f"deployed to {env}")


async def test_a_tool_span_counts_its_progress_and_the_wait_for_its_approval(
        client_for: Any) -> None:
    model = ScriptedModel(model="m").call("deploy", {"env": "prod"}, call_id="d1").reply("Done.")
    app = create_app(Agent(name="ops", model=model, tools=[deploy]), auth=AUTH,
                     session_service=new_service(), settings=settings())
    client = await client_for(app)
    sid = await new_session(client)
    paused = await post_run(client, sid, {"message": "deploy to prod"})
    asked = next(d for _, t, d in paused.frames if t == "approval_required")
    first = await trace_of(client, paused.headers["x-run-id"])
    assert [s["kind"] for s in first["spans"]] == ["agent", "model"]  # asked: nothing ran
    await asyncio.sleep(0.05)
    answered = await post_run(client, sid, {"approvals": [
        {"call_id": "d1", "approved": True, "args_sha256": asked["args_sha256"]}]})
    trace = await trace_of(client, answered.headers["x-run-id"])
    check_tree(trace["spans"])
    (span,) = [s for s in trace["spans"] if s["kind"] == "tool"]
    assert span["attributes"]["progress"] == 3 and span["attributes"]["status"] == "ok"
    assert 0.05 <= span["attributes"]["approval_wait"] < 10


async def test_an_agent_used_as_a_tool_runs_under_its_call(client_for: Any) -> None:
    writer = Agent(name="writer", model=ScriptedModel(model="m-writer").reply("A haiku."))
    editor = Agent(name="editor", tools=[AgentTool(writer)], model=ScriptedModel(
        model="m-editor").call("writer", {"request": "a haiku"}, call_id="w1").reply("Here."))
    app = create_app(editor, auth=AUTH, session_service=new_service(), settings=settings())
    client = await client_for(app)
    _, trace, _ = await run_and_trace(client, {"message": "write me a haiku"})
    spans = trace["spans"]
    check_tree(spans)
    assert shape(spans) == [(1, None, "agent", "editor", None),
                            (2, 1, "model", "m-editor", None),
                            (3, 1, "tool", "writer", None),
                            (4, 3, "agent", "writer", "editor:w1"),
                            (5, 4, "model", "m-writer", "editor:w1"),
                            (6, 1, "model", "m-editor", None)]
