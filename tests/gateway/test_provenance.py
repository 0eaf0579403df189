"""Provenance on the wire, over real HTTP: every frame of a multi-agent run says which agent
made it (``author``) and where (``branch``); the transfer shows; drafts keyed by author
(seed 004's reducer) rebuild each agent's message exactly once; AG-UI and the Vercel AI SDK
clients (tests/js) attribute each agent's message."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from headwater import Agent, AgentTool, ParallelAgent, ToolStreamEvent, tool
from headwater.errors import ProviderTruncated
from headwater.gateway import create_app
from headwater.gateway.frames import above, outer_call_id
from headwater.models.scripted import ScriptedTurn
from headwater.sessions.ledger import call_branch
from headwater.testing import ScriptedModel
from headwater.testing.sse import aiter_sse

from .conftest import require_node
from .stores import new_service
from .test_agui import agui, of_role, types
from .test_gateway import AUTH, A, new_session, post_run, settings
from .test_vercel import run_client

Frames = list[tuple[int, str, dict[str, Any]]]


@pytest.fixture
def node() -> str:
    """``node`` with the pinned AG-UI client (skips without it; fails in CI)."""
    return require_node("@ag-ui/client")


@pytest.fixture
def ai_sdk() -> None:
    """``node`` with the pinned Vercel AI SDK (skips without it; fails in CI)."""
    require_node("ai")
ANSWER = ("Your invoice ", "is ", "paid.")


def shop(coordinator: ScriptedModel | None = None, billing: ScriptedModel | None = None
         ) -> Agent:
    """A coordinator that transfers to billing, which streams its answer."""
    coordinator = coordinator or ScriptedModel().call(
        "transfer_to_agent", {"agent_name": "billing"}, call_id="t1")
    billing = billing or ScriptedModel().reply(*ANSWER).reply("Anything ", "else?")
    return Agent(name="coordinator", model=coordinator, instruction="Route the user.",
                 sub_agents=[Agent(name="billing", model=billing, description="Invoices."),
                             Agent(name="support", model=ScriptedModel(),
                                   description="Product help.")])


def research(delay: float = 0.002, broken: bool = False) -> ParallelAgent:
    """A parallel agent of two streaming searchers (``papers`` fails after a piece when
    ``broken``)."""
    pieces = ("Web ", "says ", "yes.")
    web = Agent(name="web", model=ScriptedModel().reply(*pieces, delay=delay)
                .reply(*pieces, delay=delay))
    turn = (ScriptedTurn(text=("Pap", "ers"), raise_error=ProviderTruncated("cut"),
                         raise_after=1, delay=delay) if broken
            else ScriptedTurn(text=("Papers ", "say ", "no."), delay=delay))
    return ParallelAgent(name="research",
                         sub_agents=[web, Agent(name="papers",
                                                model=ScriptedModel([turn, turn]))])


def reduce_by_author(frames: Frames) -> dict[tuple[str, str | None], list[str]]:
    """Seed 004's reducer keyed by author (and branch): a ``delta`` appends to its draft, a
    ``message`` replaces it; ``tool_call``, ``error`` and ``done`` clear the drafts. Answers,
    per (author, branch), the text each message frame replaced its draft with — checking
    that the draft was exactly that text."""
    drafts: dict[tuple[str, str | None], str] = {}
    shown: dict[tuple[str, str | None], list[str]] = {}
    for _, kind, data in frames:
        if kind in ("delta", "message"):
            key = (data["author"], data.get("branch"))
            if kind == "delta":
                drafts[key] = drafts.get(key, "") + data["text"]
            else:
                assert drafts.pop(key, data["text"]) == data["text"], (key, data)
                shown.setdefault(key, []).append(data["text"])
        elif kind in ("tool_call", "error", "done"):
            assert not any(k[0] == data.get("author") for k in drafts)  # no half sentence
            if kind != "tool_call":
                drafts.clear()
    assert drafts == {}
    return shown


def one_terminal(frames: Frames) -> None:
    assert [i for i, _, _ in frames] == list(range(1, len(frames) + 1))
    assert [t for _, t, _ in frames if t in ("done", "error")] == [frames[-1][1]]


# -- the typed frames ----------------------------------------------------------------------------


async def test_a_transfer_carries_the_call_the_transfer_and_billings_answer(
        client_for: Any) -> None:
    app = create_app(shop(), session_service=new_service(), auth=AUTH,
                     settings=settings())
    client = await client_for(app)
    sid = await new_session(client)
    got = await post_run(client, sid, {"message": "Is my invoice paid?"})
    one_terminal(got.frames)
    assert [(t, d.get("author")) for _, t, d in got.frames] == [
        ("tool_call", "coordinator"), ("tool_result", "coordinator"),
        ("agent_transfer", "coordinator"),
        ("delta", "billing"), ("delta", "billing"), ("delta", "billing"),
        ("message", "billing"), ("done", None)]
    call, result, transfer = (d for _, _, d in got.frames[:3])
    # The built-in transfer is shown raw: whom the conversation went to is no secret.
    assert call == {"author": "coordinator", "names": ["transfer_to_agent"],
                    "calls": [{"id": "t1", "name": "transfer_to_agent",
                               "args": {"agent_name": "billing"}}]}
    assert result["results"] == [{"id": "t1", "name": "transfer_to_agent", "status": "ok",
                                  "size": len('{"result":null}'),
                                  "response": {"result": None}}]
    assert transfer == {"author": "coordinator", "to": "billing", "call_id": "t1"}
    assert all("branch" not in d for _, _, d in got.frames)  # the main line
    final = got.frames[-2][2]
    assert final["final"] is True and final["text"] == "".join(ANSWER)
    assert reduce_by_author(got.frames) == {("billing", None): ["".join(ANSWER)]}

    # History: each item's author; the result says where the conversation went.
    items = (await client.get(f"/sessions/{sid}/events", headers=A)).json()["items"]
    assert [(i["author"], i.get("transfer_to")) for i in items] == [
        ("user", None), ("coordinator", None), ("coordinator", "billing"), ("billing", None)]
    assert items[1]["calls"] == call["calls"] and items[3]["id"] == final["id"]

    # The next user turn goes to billing.
    again = await post_run(client, sid, {"message": "Thanks!"})
    one_terminal(again.frames)
    assert {d["author"] for _, t, d in again.frames if t != "done"} == {"billing"}
    assert reduce_by_author(again.frames) == {("billing", None): ["Anything else?"]}


async def test_a_transfer_frame_leaves_only_after_its_result_is_stored(client_for: Any) -> None:
    service = new_service()
    app = create_app(shop(billing=ScriptedModel().reply(*ANSWER, delay=0.02)),
                     session_service=service, auth=AUTH, settings=settings())
    client = await client_for(app)
    sid = await new_session(client)
    checked = []
    async with client.stream("POST", f"/sessions/{sid}/runs", json={"message": "paid?"},
                             headers=A) as response:
        async for message in aiter_sse(response.aiter_bytes()):
            data = json.loads(message.data)
            if message.event not in ("tool_call", "tool_result", "agent_transfer", "message"):
                continue
            items = (await client.get(f"/sessions/{sid}/events", headers=A)).json()["items"]
            if message.event == "agent_transfer":
                assert any(i.get("transfer_to") == data["to"] for i in items)
            elif message.event == "message":
                assert any(i["id"] == data["id"] and i["author"] == data["author"]
                           for i in items)
            else:
                key = "calls" if message.event == "tool_call" else "results"
                assert any(i.get(key) == data[key] and i["author"] == data["author"]
                           for i in items)
            checked.append(message.event)
    assert checked == ["tool_call", "tool_result", "agent_transfer", "message"]


async def test_parallel_drafts_rebuilt_by_author_and_branch_equal_each_final(
        client_for: Any) -> None:
    app = create_app(research(), session_service=new_service(), auth=AUTH,
                     settings=settings())
    client = await client_for(app)
    sid = await new_session(client)
    for mode in ("sse", "none"):
        got = await post_run(client, sid, {"message": "Is it so?", "streaming_mode": mode})
        one_terminal(got.frames)
        assert got.frames[-1][1] == "done"
        for _, kind, data in got.frames[:-1]:
            assert data["branch"] == f"research.{data['author']}", (kind, data)
        deltas = [d for _, t, d in got.frames if t == "delta"]
        assert {d["author"] for d in deltas} == ({"web", "papers"} if mode == "sse" else set())
        assert reduce_by_author(got.frames) == {
            ("web", "research.web"): ["Web says yes."],
            ("papers", "research.papers"): ["Papers say no."]}
    items = (await client.get(f"/sessions/{sid}/events", headers=A)).json()["items"]
    assert sorted((i["author"], i.get("branch"), i["text"]) for i in items
                  if i["author"] != "user") == [
        ("papers", "research.papers", "Papers say no."),
        ("papers", "research.papers", "Papers say no."),
        ("web", "research.web", "Web says yes."), ("web", "research.web", "Web says yes.")]


async def test_a_failing_branch_is_an_agent_error_and_the_other_branch_goes_on(
        client_for: Any) -> None:
    app = create_app(research(broken=True), session_service=new_service(),
                     auth=AUTH, settings=settings())
    client = await client_for(app)
    sid = await new_session(client)
    got = await post_run(client, sid, {"message": "Is it so?"})
    one_terminal(got.frames)
    errors = [d for _, t, d in got.frames if t == "agent_error"]
    assert errors == [{"author": "papers", "branch": "research.papers",
                       "code": "provider_truncated", "retryable": False}]
    assert [(d["author"], d["text"]) for _, t, d in got.frames if t == "message"] == [
        ("web", "Web says yes.")]
    # No agent went on past the failed branch: the run ends with its error.
    assert got.frames[-1][1:] == ("error", {"code": "provider_truncated", "retryable": False,
                                            "request_id": got.frames[-1][2]["request_id"]})


def test_the_outer_call_follows_from_the_branch() -> None:
    assert outer_call_id(None) is None
    assert outer_call_id("research.web") is None
    assert outer_call_id(call_branch(None, "writer", "c1")) == "c1"
    assert outer_call_id("writer:c1.research.web") == "c1"
    assert outer_call_id(call_branch("p.a.writer:c1", "helper", "c2")) == "c2"
    assert above(None, "p.a") and above("p", "p.a") and above("p.a", "p.a.x:c1")
    assert not above("p.a", "p.a") and not above("p.a", "p.ab") and not above("p.b", "p.a")
    assert not above(None, None)


# -- AG-UI and the Vercel AI SDK -----------------------------------------------------------------


async def test_agui_gives_one_named_message_per_agent_message_and_the_transfer(
        node: str, serve: Any) -> None:
    app = create_app(shop(), session_service=new_service(), auth=AUTH,
                     settings=settings())
    base = await serve(app)
    report = await agui(node, f"{base}/ag-ui/coordinator",
                        [{"message": "Is my invoice paid?"}, {"message": "Thanks!"}])
    first, second = report["runs"]
    assert first["failure"] is None and second["failure"] is None
    starts = [e for e in first["events"] if e["type"] == "TEXT_MESSAGE_START"]
    assert [(e["name"], e["role"]) for e in starts] == [("billing", "assistant")]
    [custom] = [e for e in first["events"] if e["type"] == "CUSTOM"]
    assert custom["name"] == "agent_transfer"
    assert custom["value"] == {"author": "coordinator", "to": "billing", "call_id": "t1"}
    [call] = [e for e in first["events"] if e["type"] == "TOOL_CALL_ARGS"]
    assert json.loads(call["delta"]) == {"agent_name": "billing"}
    answers = [(m.get("name"), m["content"]) for m in of_role(report, "assistant")
               if m.get("content")]
    assert answers == [("billing", "".join(ANSWER)), ("billing", "Anything else?")]


async def test_agui_gives_each_parallel_branch_its_subagent(node: str, serve: Any) -> None:
    app = create_app(research(), session_service=new_service(), auth=AUTH,
                     settings=settings())
    base = await serve(app)
    report = await agui(node, f"{base}/ag-ui/research", [{"message": "Is it so?"}])
    [run] = report["runs"]
    assert run["failure"] is None and run["outcome"] == "success"
    started = {e["name"]: e["subagentRunId"] for e in run["events"]
               if e["type"] == "SUBAGENT_STARTED"}
    assert set(started) == {"web", "papers"} and len(set(started.values())) == 2
    finished = [e["subagentRunId"] for e in run["events"] if e["type"] == "SUBAGENT_FINISHED"]
    assert sorted(finished) == sorted(started.values())
    assert types(run)[-1] == "RUN_FINISHED"
    messages = {m["name"]: m for m in of_role(report, "assistant")}
    assert {name: m["content"] for name, m in messages.items()} == {
        "web": "Web says yes.", "papers": "Papers say no."}
    assert {name: m["subagentRunId"] for name, m in messages.items()} == started


async def test_vercel_gives_each_agent_its_part_with_the_author_recoverable(
        ai_sdk: None, serve: Any) -> None:
    app = create_app(shop(), session_service=new_service(), auth=AUTH,
                     settings=settings())
    base = await serve(app)
    streamed = await run_client(base, "stream", "chat-t", "Is my invoice paid?",
                                agent="coordinator")
    assert streamed["errors"] == []
    parts = streamed["messages"]["parts"]
    # The documented rule: a text part's agent is providerMetadata.headwater.author; a tool
    # part's is callProviderMetadata.headwater.author.
    texts = [(p["providerMetadata"]["headwater"]["author"], p["text"]) for p in parts
             if p["type"] == "text"]
    assert texts == [("billing", "".join(ANSWER))]
    [call] = [p for p in parts if p["type"] == "tool-transfer_to_agent"]
    assert call["callProviderMetadata"]["headwater"] == {"author": "coordinator"}
    assert call["input"] == {"agent_name": "billing"}
    [transfer] = [p for p in parts if p["type"] == "data-agent-transfer"]
    assert transfer["data"] == {"author": "coordinator", "to": "billing", "call_id": "t1"}


async def test_vercel_keeps_parallel_agents_apart(ai_sdk: None, serve: Any) -> None:
    app = create_app(research(), session_service=new_service(), auth=AUTH,
                     settings=settings())
    base = await serve(app)
    streamed = await run_client(base, "stream", "chat-p", "Is it so?", agent="research")
    assert streamed["errors"] == []
    texts = sorted((p["providerMetadata"]["headwater"]["author"],
                    p["providerMetadata"]["headwater"]["branch"], p["text"])
                   for p in streamed["messages"]["parts"] if p["type"] == "text")
    assert texts == [("papers", "research.papers", "Papers say no."),
                     ("web", "research.web", "Web says yes.")]


# An agent used as a tool (AgentTool) runs on a branch naming the outer call; the frames a
# gateway gives for it, replayed by a loopback server through the AG-UI encoder, must be
# what the real client accepts: a subagent tied to the call, ended by the call's result.
NESTED = [
    ("tool_call", {"author": "writer", "names": ["research"],
                   "calls": [{"id": "c1", "name": "research"}]}),
    ("delta", {"author": "researcher", "branch": "writer:c1", "text": "Looking. "}),
    ("message", {"author": "researcher", "branch": "writer:c1", "id": "r1",
                 "text": "Looking. ", "final": False}),
    ("tool_call", {"author": "researcher", "branch": "writer:c1", "names": ["search"],
                   "calls": [{"id": "c2", "name": "search"}]}),
    ("tool_progress", {"author": "researcher", "branch": "writer:c1", "call_id": "c2",
                       "name": "search", "type": "part_delta", "index": 0, "delta": "1/2"}),
    ("tool_result", {"author": "researcher", "branch": "writer:c1", "count": 1,
                     "results": [{"id": "c2", "name": "search", "status": "ok", "size": 2}]}),
    ("delta", {"author": "researcher", "branch": "writer:c1", "text": "Found it."}),
    ("message", {"author": "researcher", "branch": "writer:c1", "id": "r2",
                 "text": "Found it.", "final": True}),
    ("tool_result", {"author": "writer", "count": 1,
                     "results": [{"id": "c1", "name": "research", "status": "ok", "size": 9}]}),
    ("delta", {"author": "writer", "text": "Done."}),
    ("message", {"author": "writer", "id": "w1", "text": "Done.", "final": True}),
    ("done", {"usage": {"input_tokens": 0, "output_tokens": 0}}),
]


async def test_agui_ties_an_inner_agent_to_the_outer_call(node: str, serve: Any) -> None:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    from headwater.gateway.agui import AguiEncoder
    from headwater.gateway.sse import encode_frame

    async def replay(request: Request) -> Response:
        body = await request.json()
        encoder = AguiEncoder(body["threadId"], body["runId"], "inv")
        out = encoder.started() + b"".join(
            encoder.render(encode_frame(n, kind, data)) for n, (kind, data) in
            enumerate(NESTED, 1))
        return Response(out, media_type="text/event-stream")

    base = await serve(Starlette(routes=[Route("/ag-ui/writer", replay, methods=["POST"])]))
    report = await agui(node, f"{base}/ag-ui/writer", [{"message": "Write it up."}])
    [run] = report["runs"]
    assert run["failure"] is None and run["outcome"] == "success"
    events = run["events"]
    [started] = [e for e in events if e["type"] == "SUBAGENT_STARTED"]
    assert started["name"] == "researcher" and started["parentToolCallId"] == "c1"
    inner = started["subagentRunId"]
    kinds = [e["type"] for e in events]
    finished = kinds.index("SUBAGENT_FINISHED")
    assert events[finished]["subagentRunId"] == inner
    assert events[finished - 1]["type"] == "TOOL_CALL_RESULT"
    assert events[finished - 1]["toolCallId"] == "c1"
    assert all(e.get("subagentRunId") == inner
               for e in events[kinds.index("SUBAGENT_STARTED") + 1:finished - 1])
    named = [(m.get("name"), m.get("subagentRunId"), m["content"])
             for m in of_role(report, "assistant") if m.get("content")]
    assert named == [("researcher", inner, "Looking. "), ("researcher", inner, "Found it."),
                     ("writer", None, "Done.")]


# -- an agent used as a tool, end to end ---------------------------------------------------------


@tool(streaming=True)
async def search(query: str) -> AsyncIterator[ToolStreamEvent]:
    """Search the archive."""
    yield ToolStreamEvent("part_delta", delta=f"looking for {query}…")
    yield ToolStreamEvent("done", response={"hits": 3})


def delegating() -> Agent:
    """A coordinator whose tool is a researcher agent that streams, searches, answers."""
    inner = (ScriptedModel().call("search", {"query": "tides"}, call_id="s1",
                                  text=("Let me ", "look."))
             .reply("Found ", "3 papers."))
    outer = (ScriptedModel().call("researcher", {"request": "papers on tides"}, call_id="c1")
             .reply("The researcher found ", "3 papers."))
    researcher = Agent(name="researcher", model=inner, description="Finds things.",
                       tools=[search])
    return Agent(name="coordinator", model=outer, tools=[AgentTool(researcher)])


async def test_an_inner_agents_frames_name_the_outer_call_and_rebuild_exactly(
        client_for: Any) -> None:
    app = create_app(delegating(), session_service=new_service(), auth=AUTH,
                     settings=settings())
    client = await client_for(app)
    sid = await new_session(client)
    got = await post_run(client, sid, {"message": "Find papers on tides"})
    one_terminal(got.frames)
    assert got.frames[-1][1] == "done"
    shape = [(t, d.get("author"), outer_call_id(d.get("branch"))) for _, t, d in got.frames
             if t != "delta"]
    assert shape == [
        ("tool_call", "coordinator", None),
        ("message", "researcher", "c1"), ("tool_call", "researcher", "c1"),
        ("tool_progress", "researcher", "c1"), ("tool_result", "researcher", "c1"),
        ("message", "researcher", "c1"),
        ("tool_result", "coordinator", None),
        ("message", "coordinator", None), ("done", None, None)]
    assert reduce_by_author(got.frames) == {
        ("researcher", "coordinator:c1"): ["Let me look.", "Found 3 papers."],
        ("coordinator", None): ["The researcher found 3 papers."]}
    items = (await client.get(f"/sessions/{sid}/events", headers=A)).json()["items"]
    assert [(i["author"], outer_call_id(i.get("branch"))) for i in items] == [
        ("user", None), ("coordinator", None), ("user", "c1"), ("researcher", "c1"),
        ("researcher", "c1"), ("researcher", "c1"), ("coordinator", None),
        ("coordinator", None)]


async def test_agui_and_vercel_clients_nest_an_inner_agent_under_its_call(
        node: str, ai_sdk: None, serve: Any) -> None:
    base = await serve(create_app(delegating(), session_service=new_service(),
                                  auth=AUTH, settings=settings()))
    report = await agui(node, f"{base}/ag-ui/coordinator", [{"message": "Find papers"}])
    [run] = report["runs"]
    assert run["failure"] is None and run["outcome"] == "success"
    [started] = [e for e in run["events"] if e["type"] == "SUBAGENT_STARTED"]
    assert (started["name"], started["parentToolCallId"]) == ("researcher", "c1")
    named = [(m.get("name"), m.get("subagentRunId"), m["content"])
             for m in of_role(report, "assistant") if m.get("content")]
    inner = started["subagentRunId"]
    assert named == [("researcher", inner, "Let me look."), ("researcher", inner,
                                                            "Found 3 papers."),
                     ("coordinator", None, "The researcher found 3 papers.")]

    base = await serve(create_app(delegating(), session_service=new_service(),
                                  auth=AUTH, settings=settings()))
    streamed = await run_client(base, "stream", "chat-n", "Find papers", agent="coordinator")
    assert streamed["errors"] == []
    parts = streamed["messages"]["parts"]
    texts = [(p["providerMetadata"]["headwater"]["author"],
              outer_call_id(p["providerMetadata"]["headwater"].get("branch")), p["text"])
             for p in parts if p["type"] == "text"]
    assert texts == [("researcher", "c1", "Let me look."), ("researcher", "c1",
                                                            "Found 3 papers."),
                     ("coordinator", None, "The researcher found 3 papers.")]
    [search_part] = [p for p in parts if p["type"] == "tool-search"]
    assert search_part["callProviderMetadata"]["headwater"] == {"author": "researcher",
                                                                "branch": "coordinator:c1"}


def failing_delegate() -> Agent:
    inner = ScriptedModel([ScriptedTurn(text=("Pa", "rt"), raise_error=ProviderTruncated("cut"),
                                        raise_after=1)])
    outer = ScriptedModel().call("researcher", {"request": "x"}, call_id="c1").reply("Sorry.")
    return Agent(name="coordinator", model=outer,
                 tools=[AgentTool(Agent(name="researcher", model=inner))])


async def test_an_inner_agents_error_is_its_own_and_the_caller_goes_on_to_done(
        client_for: Any) -> None:
    app = create_app(failing_delegate(), session_service=new_service(), auth=AUTH,
                     settings=settings())
    client = await client_for(app)
    got = await post_run(client, await new_session(client), {"message": "go"})
    one_terminal(got.frames)
    assert [(t, d.get("author")) for _, t, d in got.frames if t != "delta"] == [
        ("tool_call", "coordinator"), ("agent_error", "researcher"),
        ("tool_result", "coordinator"), ("message", "coordinator"), ("done", None)]
    [error] = [d for _, t, d in got.frames if t == "agent_error"]
    assert error == {"author": "researcher", "branch": "coordinator:c1",
                     "code": "provider_truncated", "retryable": False}


async def test_agui_reports_an_inner_agents_error_as_its_subagents(node: str, serve: Any
                                                                  ) -> None:
    base = await serve(create_app(failing_delegate(), session_service=new_service(),
                                  auth=AUTH, settings=settings()))
    report = await agui(node, f"{base}/ag-ui/coordinator", [{"message": "go"}])
    [run] = report["runs"]
    assert run["failure"] is None and run["outcome"] == "success"
    lifecycle = [(e["type"], e.get("code")) for e in run["events"]
                 if e["type"].startswith("SUBAGENT_")]
    assert lifecycle == [("SUBAGENT_STARTED", None), ("SUBAGENT_ERROR", "provider_truncated")]


# -- the live WebSocket: the same frames ---------------------------------------------------------


async def test_a_live_transfer_over_the_websocket_shows_the_handover_and_billings_turn(
        serve: Any) -> None:
    from websockets.asyncio.client import connect

    from .test_websocket import of_type, ready, send, until

    app = create_app(shop(), session_service=new_service(), auth=AUTH,
                     settings=settings())
    base = await serve(app)
    async with httpx.AsyncClient(base_url=base, timeout=10) as client:
        sid = await new_session(client)
        seen: list[dict[str, Any]] = []
        url = base.replace("http://", "ws://", 1) + f"/live/{sid}"
        async with connect(url, subprotocols=["bearer", "token-a"]) as ws:  # type: ignore[list-item]
            await ready(ws)
            await send(ws, {"type": "content", "text": "Is my invoice paid?"})
            await until(ws, lambda m: m["type"] == "turn_complete"
                        and m["data"]["author"] == "billing", seen, within=20)
            await send(ws, {"type": "close"})
            await until(ws, lambda m: m["type"] in ("done", "error") and m["id"] is not None,
                        seen, within=20)
    frames = [(m["type"], m["data"].get("author")) for m in seen
              if m["id"] is not None and m["type"] != "turn_complete"]
    assert frames[:3] == [("tool_call", "coordinator"), ("tool_result", "coordinator"),
                          ("agent_transfer", "coordinator")]
    assert of_type(seen, "tool_call")[0]["data"]["calls"][0]["args"] == {
        "agent_name": "billing"}
    assert of_type(seen, "agent_transfer")[0]["data"]["to"] == "billing"
    assert {a for t, a in frames[3:] if t != "done"} == {"billing"}
    assert [m["data"]["text"] for m in of_type(seen, "message")] == ["".join(ANSWER)]
    assert frames[-1] == ("done", None)
