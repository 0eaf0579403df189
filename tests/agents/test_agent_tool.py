"""``AgentTool``: an agent used as a tool, its run streaming into the caller's.

The outer agent calls the inner one as a tool; the inner agent streams text and
calls a progress-streaming tool. The caller's stream shows the inner deltas,
calls and progress, authored by the inner agent on the branch
``"<outer agent>:<call id>"``; the outer model's next request holds the call's
result and nothing else of the inner run; the inner aggregates are stored under
the branch (a reload shows them) and stay out of every later outer request.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncGenerator, AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from headwater import (
    Agent,
    AgentTool,
    Event,
    LiveRequestQueue,
    RunConfig,
    Runner,
    SequentialAgent,
    StreamingMode,
    ToolStreamEvent,
    tool,
)
from headwater.agents import AgentTool as AgentToolFromAgents
from headwater.errors import UserError
from headwater.models import BaseLlm, LlmRequest, LlmResponse
from headwater.models.anthropic import AnthropicModel
from headwater.models.openai import OpenAIChatModel
from headwater.sessions import SqlSessionService
from headwater.sessions.ledger import CallLedger, call_branch, visible
from headwater.settings import Settings
from headwater.testing import (
    FakeProvider,
    Scenario,
    ScriptedCall,
    ScriptedModel,
    ScriptedTurn,
    Stall,
    ToolCallSpec,
    render_anthropic,
    render_openai,
)
from headwater.types import Content, FunctionCall, FunctionResponse, Part

from .helpers import NONE, SSE, collect, make, slow_search, stored, texts, tool_names

BRANCH = "coordinator:c1"


@tool(streaming=True)
async def search(query: str) -> AsyncIterator[ToolStreamEvent]:
    """Search the archive."""
    yield ToolStreamEvent("part_delta", delta=f"looking for {query}…")
    yield ToolStreamEvent("part_delta", delta="3 hits")
    yield ToolStreamEvent("done", response={"hits": 3})


def researcher(model: ScriptedModel) -> Agent:
    return Agent(name="researcher", model=model, instruction="You research.",
                 description="Finds things in the archive.", tools=[search])


def inner_script() -> ScriptedModel:
    return (ScriptedModel().call("search", {"query": "tides"}, call_id="s1", text=("Let me ",
                                                                                   "look."))
            .reply("Found ", "3 papers."))


def coordinator(outer: ScriptedModel, inner: ScriptedModel, **kw: object) -> Agent:
    return Agent(name="coordinator", model=outer, instruction="Delegate research.",
                 tools=[AgentTool(researcher(inner), **kw)])  # type: ignore[arg-type]


def outer_script() -> ScriptedModel:
    return (ScriptedModel().call("researcher", {"request": "papers on tides"}, call_id="c1")
            .reply("The researcher found ", "3 papers."))


def calls_have_one_result(history: list[Event]) -> None:
    calls = [c.id for e in history for c in e.function_calls]
    results = [r.id for e in history for r in e.function_responses]
    assert sorted(calls) == sorted(results), (calls, results)
    assert len(set(results)) == len(results)


# -- the declaration -------------------------------------------------------------------------

def test_the_tool_is_declared_as_adk_does_with_the_agent_name_and_one_request() -> None:
    agent_tool = AgentTool(researcher(ScriptedModel()))
    declaration = agent_tool.declaration()
    assert (declaration.name, declaration.description) == ("researcher",
                                                          "Finds things in the archive.")
    assert declaration.parameters == {"type": "object", "required": ["request"],
                                      "properties": {"request": {"type": "string"}}}
    assert AgentToolFromAgents is AgentTool
    with pytest.raises(UserError, match="takes an agent"):
        AgentTool("researcher")  # type: ignore[arg-type]


def test_call_branches_are_a_world_of_their_own_in_the_ledger() -> None:
    assert call_branch(None, "coordinator", "c1") == "coordinator:c1"
    assert call_branch("p.a", "a", "c1") == "p.a.a:c1"
    # Hidden from the main line and from other branches; seen from inside only.
    assert not visible(None, "coordinator:c1")
    assert not visible("p.a", "p.a.a:c1")
    assert visible("coordinator:c1", "coordinator:c1")
    assert visible("coordinator:c1.p.x", "coordinator:c1")
    assert not visible("coordinator:c1.p.x", "coordinator:c1.p.y")
    # An agent on a call's branch sees nothing above the call.
    assert not visible("coordinator:c1", None)
    assert not visible("p.a.a:c1", "p.a")
    assert not visible("p.a.a:c1", "p")
    # ADK's rule elsewhere is unchanged.
    assert visible(None, "p.a") and visible("p.a", None) and visible("p.a", "p")
    assert not visible("p.a", "p.b") and not visible("p.ab", "p.a")


# -- the stream, the requests, the history -----------------------------------------------------

async def test_the_inner_run_streams_into_the_outer_and_the_parent_model_sees_only_the_result(
        tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'agent-tool.db'}"
    outer, inner = outer_script(), inner_script()
    runner, sid = await make(coordinator(outer, inner), SqlSessionService(url))
    events = await collect(runner, sid, "Find papers on tides", SSE)

    # The outer caller sees the inner run as it happens, authored by the inner agent on
    # the branch that names the outer call.
    inner_events = [e for e in events if e.author == "researcher"]
    assert inner_events and all(e.branch == BRANCH for e in inner_events)
    deltas = [e.content.text for e in inner_events if e.partial and e.content is not None]
    assert deltas == ["Let me ", "look.", "Found ", "3 papers."]
    progress = [e for e in inner_events if e.tool_progress is not None]
    assert [p.tool_progress.event.delta for p in progress] == [  # type: ignore[union-attr]
        "looking for tides…", "3 hits"]
    assert all(p.partial and p.tool_progress.call_id == "s1" for p in progress)  # type: ignore[union-attr]
    (inner_call,) = [e for e in inner_events if e.function_calls]
    assert not inner_call.partial and inner_call.function_calls[0].name == "search"
    # In order: the outer call, the inner run, the call's result, the outer answer.
    kinds = [(e.author, e.branch, "delta" if e.partial and e.tool_progress is None else
              "progress" if e.partial else "call" if e.function_calls else
              "result" if e.function_responses else "final")
             for e in events if not (e.partial and e.author == "coordinator")]
    assert kinds == [
        ("coordinator", None, "call"),
        ("user", BRANCH, "final"),  # what the inner agent was asked
        ("researcher", BRANCH, "delta"), ("researcher", BRANCH, "delta"),
        ("researcher", BRANCH, "call"),
        ("researcher", BRANCH, "progress"), ("researcher", BRANCH, "progress"),
        ("researcher", BRANCH, "result"),
        ("researcher", BRANCH, "delta"), ("researcher", BRANCH, "delta"),
        ("researcher", BRANCH, "final"),
        ("coordinator", None, "result"),
        ("coordinator", None, "final"),
    ]
    records = [e for e in events if not e.partial]
    result = records[-2].function_responses[0]
    assert (result.id, result.response) == ("c1", {"result": "Found 3 papers."})
    assert events[-1].text == "The researcher found 3 papers."

    # The parent model's next request: its call and the one result, nothing of the inner run.
    assert texts(outer.requests[1]) == ["user: Find papers on tides", "model: call researcher",
                                        "user: result researcher"]
    assert outer.requests[1].contents[2].parts[0].function_response.response == {  # type: ignore[union-attr]
        "result": "Found 3 papers."}
    assert tool_names(outer.requests[0]) == ["researcher"]
    # The inner agent sees what it was asked and its own turns, none of the outer's.
    assert inner.requests[0].system_instruction == "You research."
    assert texts(inner.requests[0]) == ["user: papers on tides"]
    assert texts(inner.requests[1]) == ["user: papers on tides",
                                        "model: Let me look. | call search", "user: result search"]

    # The history: the inner aggregates under their branch; every call has one result.
    history = await stored(runner, sid)
    assert [(e.author, e.branch) for e in history] == [
        ("user", None), ("coordinator", None), ("user", BRANCH), ("researcher", BRANCH),
        ("researcher", BRANCH), ("researcher", BRANCH), ("coordinator", None),
        ("coordinator", None)]
    calls_have_one_result(history)
    assert all(not e.partial for e in history)
    await runner.aclose()

    # A reload (a new process on the same file) shows the inner aggregates under the
    # branch, and the next outer turn's request still leaves them out.
    outer2 = ScriptedModel().reply("You are welcome.")
    runner2 = Runner(agent=coordinator(outer2, ScriptedModel()), app_name="shop",
                     session_service=SqlSessionService(url))
    try:
        reloaded = await stored(runner2, sid)
        assert [(e.author, e.branch, e.text) for e in reloaded if e.author == "researcher"
                and not e.function_responses] == [
            ("researcher", BRANCH, "Let me look."), ("researcher", BRANCH, "Found 3 papers.")]
        events = await collect(runner2, sid, "Thanks!")
        assert [e.author for e in events if not e.partial] == ["coordinator"]
        assert texts(outer2.requests[0]) == [
            "user: Find papers on tides", "model: call researcher", "user: result researcher",
            "model: The researcher found 3 papers.", "user: Thanks!"]
    finally:
        await runner2.aclose()


async def test_under_none_the_inner_run_is_stored_not_shown_and_the_history_is_the_same() -> None:
    outer, inner = outer_script(), inner_script()
    runner, sid = await make(coordinator(outer, inner))
    events = await collect(runner, sid, "Find papers on tides", NONE)
    assert [e.author for e in events] == ["coordinator", "coordinator", "coordinator"]
    assert not any(e.partial for e in events)
    history = await stored(runner, sid)

    outer_sse, inner_sse = outer_script(), inner_script()
    runner_sse, sid_sse = await make(coordinator(outer_sse, inner_sse))
    await collect(runner_sse, sid_sse, "Find papers on tides", SSE)
    history_sse = await stored(runner_sse, sid_sse)

    def shape(events: list[Event]) -> list[tuple[str, str | None, str]]:
        return [(e.author, e.branch, e.text) for e in events]

    assert shape(history) == shape(history_sse)
    assert texts(outer.requests[1]) == texts(outer_sse.requests[1])
    calls_have_one_result(history)


async def test_skip_summarization_makes_the_inner_answer_the_final_response() -> None:
    outer = ScriptedModel().call("researcher", {"request": "papers on tides"}, call_id="c1")
    runner, sid = await make(coordinator(outer, inner_script(), skip_summarization=True))
    events = await collect(runner, sid, "Find papers", NONE)
    assert events[-1].is_final_response() and events[-1].actions.skip_summarization
    assert len(outer.requests) == 1  # the parent model was not asked again


async def test_a_bad_request_is_an_error_result_and_nothing_runs() -> None:
    outer = (ScriptedModel().call("researcher", {"query": "tides"}, call_id="c1")
             .reply("Sorry."))
    inner = ScriptedModel()
    runner, sid = await make(coordinator(outer, inner))
    events = await collect(runner, sid, "Find papers", NONE)
    assert events[1].function_responses[0].response["code"] == "invalid_arguments"
    assert inner.requests == []
    assert events[-1].text == "Sorry."


async def test_an_inner_workflow_agent_runs_on_the_branch_and_its_last_answer_is_the_result(
        ) -> None:
    pipeline = SequentialAgent(name="pipeline", description="Drafts then edits.", sub_agents=[
        Agent(name="drafter", model=ScriptedModel().reply("draft")),
        Agent(name="editor", model=ScriptedModel().reply("edited text"))])
    outer = (ScriptedModel().call("pipeline", {"request": "write"}, call_id="c9")
             .reply("Done."))
    root = Agent(name="coordinator", model=outer, tools=[AgentTool(pipeline)])
    runner, sid = await make(root)
    events = await collect(runner, sid, "Write it", SSE)
    inner = [e for e in events if e.author in ("drafter", "editor") and not e.partial]
    assert [(e.author, e.branch) for e in inner] == [("drafter", "coordinator:c9"),
                                                    ("editor", "coordinator:c9")]
    result = next(e for e in events if e.function_responses).function_responses[0]
    assert result.response == {"result": "edited text"}
    # The next request of the coordinator has nothing of the pipeline's run.
    assert texts(outer.requests[1]) == ["user: Write it", "model: call pipeline",
                                        "user: result pipeline"]


# -- budgets and cancellation ----------------------------------------------------------------

async def test_max_llm_calls_counts_the_inner_agents_calls() -> None:
    outer, inner = outer_script(), inner_script()
    runner, sid = await make(coordinator(outer, inner))
    config = RunConfig(streaming_mode=StreamingMode.SSE, max_llm_calls=2)
    events = await collect(runner, sid, "Find papers", config)
    # Outer call 1, inner call 2; the inner agent's second call is over the budget.
    assert (len(outer.requests), len(inner.requests)) == (1, 1)
    inner_error = [e for e in events if e.author == "researcher" and e.error_code]
    assert inner_error[0].error_code == "budget_exceeded" and inner_error[0].branch == BRANCH
    result = [e for e in events if e.author == "coordinator" and e.function_responses]
    assert result[0].function_responses[0].response["code"] == "budget_exceeded"
    assert events[-1].error_code == "budget_exceeded" and events[-1].author == "coordinator"
    calls_have_one_result(await stored(runner, sid))


class BlockingModel(BaseLlm):
    """Streams one delta, then blocks until closed; records when its stream closed."""

    def __init__(self) -> None:
        super().__init__("blocking")
        self.started = asyncio.Event()
        self.closed_at: float | None = None
        self.requests: list[LlmRequest] = []

    async def generate_content(self, request: LlmRequest, stream: bool = False
                               ) -> AsyncGenerator[LlmResponse, None]:
        self.requests.append(request)
        try:
            self.started.set()
            yield LlmResponse(content=Content("model", [Part(text="Thinking")]), partial=True)
            await asyncio.Event().wait()
            yield LlmResponse(content=Content("model", [Part(text="never")]))
        finally:
            self.closed_at = time.monotonic()


async def test_cancelling_the_outer_run_closes_the_inner_model_stream_and_seals_the_call() -> None:
    blocking = BlockingModel()
    inner = Agent(name="researcher", model=blocking, description="Finds things.")
    outer = ScriptedModel().call("researcher", {"request": "papers"}, call_id="c1")
    root = Agent(name="coordinator", model=outer, tools=[AgentTool(inner)])
    runner, sid = await make(root)
    seen: list[Event] = []
    stream = runner.run_async(user_id="u1", session_id=sid, new_message="go", run_config=SSE)
    async for event in stream:
        seen.append(event)
        if event.author == "researcher" and event.partial:
            break
    assert blocking.started.is_set() and blocking.closed_at is None
    stopped = time.monotonic()
    async with asyncio.timeout(1):  # the acceptance: the inner stream closes within 1 s
        await stream.aclose()
    assert blocking.closed_at is not None and blocking.closed_at - stopped < 1
    assert seen[-1].branch == BRANCH

    history = await stored(runner, sid)
    calls_have_one_result(history)
    (sealed,) = [r for e in history for r in e.function_responses]
    assert (sealed.id, sealed.response["code"]) == ("c1", "cancelled")
    shown = [e for e in history if e.interrupted and e.author == "researcher"]
    assert [(e.branch, e.text) for e in shown] == [(BRANCH, "Thinking")]
    assert history[-1].error_code == "cancelled"
    assert runner._ledgers[("u1", sid)].dangling() == []


async def test_a_dangling_inner_call_is_sealed_on_cancel() -> None:
    started = asyncio.Event()

    inner = Agent(name="researcher", model=ScriptedModel().call("slow_search", {"query": "q"},
                                                                call_id="s1"),
                  tools=[slow_search(started)])
    outer = ScriptedModel().call("researcher", {"request": "papers"}, call_id="c1")
    runner, sid = await make(Agent(name="coordinator", model=outer, tools=[AgentTool(inner)]))
    async with runner.run_async(user_id="u1", session_id=sid, new_message="go",
                                run_config=SSE) as stream:
        async for event in stream:
            if event.tool_progress is not None and started.is_set():
                break
    history = await stored(runner, sid)
    calls_have_one_result(history)
    codes = {r.id: r.response["code"] for e in history for r in e.function_responses}
    assert codes == {"c1": "cancelled", "s1": "cancelled"}
    # The next turn's outer request holds the outer call and its result, nothing inner.
    outer.reply("Sorry, stopped.")
    await collect(runner, sid, "And now?", NONE)
    assert texts(outer.requests[1]) == ["user: go", "model: call researcher",
                                        "user: result researcher", "user: And now?"]


async def test_the_ledger_leaves_call_branches_out_of_routing_and_the_single_agent_path() -> None:
    outer, inner = outer_script(), inner_script()
    runner, sid = await make(coordinator(outer, inner))
    await collect(runner, sid, "Find papers", NONE)
    ledger = CallLedger.of(await stored(runner, sid))
    assert ledger.speakers() == ["coordinator"]  # the inner agent answered a call, not the user
    assert texts_of(ledger.contents_for("coordinator")) == [
        "user: Find papers", "model: call researcher", "user: result researcher",
        "model: The researcher found 3 papers."]

    # Even when the only author is the caller itself (an agent used as its own tool), the
    # entries on a call's branch stay out of its main-line requests.
    call = FunctionCall("c1", "me", {"request": "x"})
    events = [
        Event(author="user", content=Content.from_text("hi")),
        Event(author="me", content=Content("model", [Part(function_call=call)])),
        Event(author="user", branch="me:c1", content=Content.from_text("x")),
        Event(author="me", branch="me:c1", content=Content("model", [Part(text="inner")])),
        Event(author="me", content=Content("user", [Part(function_response=FunctionResponse(
            "c1", "me", {"result": "inner"}))])),
    ]
    ledger = CallLedger.of(events)
    assert texts_of(ledger.contents_for("me")) == ["user: hi", "model: call me", "user: result me"]
    assert texts_of(ledger.contents_for("me", "me:c1")) == ["user: x", "model: inner"]


def texts_of(contents: list[Content]) -> list[str]:
    return texts(LlmRequest(contents=contents))


# -- over both real wire formats (FakeProvider on loopback) ----------------------------------

FAST = Settings(model_backoff_initial=0.01, model_backoff_max=0.02, model_idle_timeout=5,
                model_total_timeout=20)
FORMATS = ["openai", "anthropic"]
OUTER_SYSTEM, INNER_SYSTEM = "Delegate research.", "You research."
Json = Any  # raw wire JSON


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient() as c:
        yield c


def wire_model(fmt: str, provider: FakeProvider, client: httpx.AsyncClient) -> BaseLlm:
    if fmt == "openai":
        return OpenAIChatModel("gpt-4o-mini", base_url=f"{provider.base_url}/v1",
                               api_key="sk-test", http_client=client, settings=FAST)
    return AnthropicModel("claude-test", base_url=provider.base_url, api_key="sk-ant-test",
                          http_client=client, settings=FAST)


def wire_text(fmt: str, text: list[str]) -> list[bytes]:
    return render_openai(text=text) if fmt == "openai" else render_anthropic(text=text)


def wire_call(fmt: str, call: ToolCallSpec, text: list[str] | None = None) -> list[bytes]:
    if fmt == "openai":
        return render_openai(text=text or [], tool_calls=[call], finish_reason="tool_calls")
    return render_anthropic(text=text or [], tool_calls=[call], stop_reason="tool_use")


def wire_tree(fmt: str, provider: FakeProvider, client: httpx.AsyncClient) -> Agent:
    inner = Agent(name="researcher", model=wire_model(fmt, provider, client),
                  instruction=INNER_SYSTEM, description="Finds things.", tools=[search])
    return Agent(name="coordinator", model=wire_model(fmt, provider, client),
                 instruction=OUTER_SYSTEM, tools=[AgentTool(inner)])


def system_of(fmt: str, body: Json) -> str:
    if fmt == "openai":
        return str(body["messages"][0]["content"])
    system = body["system"]
    return system if isinstance(system, str) else "".join(b["text"] for b in system)


def turns(fmt: str, body: Json) -> list[tuple[str, str]]:
    """Each wire message as (role, what it holds): text, call <name>, result <id>."""
    out = []
    for message in body["messages"]:
        role, content = message["role"], message.get("content")
        if role == "system":
            continue
        if fmt == "openai":
            if role == "tool":
                out.append(("tool", f"result {message['tool_call_id']}"))
                continue
            calls = [f"call {c['function']['name']}" for c in message.get("tool_calls") or ()]
            text = content if isinstance(content, str) else "".join(
                p.get("text", "") for p in content or ())
            out.append((role, " | ".join(([text] if text else []) + calls)))
            continue
        bits = []
        for block in content if isinstance(content, list) else [{"type": "text",
                                                                    "text": content}]:
            if block["type"] == "text":
                bits.append(block["text"])
            elif block["type"] == "tool_use":
                bits.append(f"call {block['name']}")
            elif block["type"] == "tool_result":
                bits.append(f"result {block['tool_use_id']}")
        out.append((role, " | ".join(bits)))
    return out


@pytest.mark.parametrize("fmt", FORMATS)
async def test_over_the_wire_each_request_is_valid_and_the_outer_one_holds_no_inner_content(
        fmt: str, provider: FakeProvider, client: httpx.AsyncClient) -> None:
    outer_call: ToolCallSpec = {"id": "c1", "name": "researcher",
                                "arguments": {"request": "papers on tides"}, "fragments": 3}
    inner_call: ToolCallSpec = {"id": "s1", "name": "search",
                                "arguments": {"query": "tides"}, "fragments": 2}
    provider.enqueue(  # in order: outer, inner, inner, outer (check_history is on)
        Scenario(body=wire_call(fmt, outer_call)),
        Scenario(body=wire_call(fmt, inner_call, ["Let me ", "look."])),
        Scenario(body=wire_text(fmt, ["Found ", "3 papers."])),
        Scenario(body=wire_text(fmt, ["The researcher found ", "3 papers."])))
    runner, sid = await make(wire_tree(fmt, provider, client))
    events = await collect(runner, sid, "Find papers on tides", SSE)

    assert not [e for e in events if e.error_code], [e.error_message for e in events]
    assert [e.content.text for e in events if e.partial and e.author == "researcher"
            and e.content is not None] == ["Let me ", "look.", "Found ", "3 papers."]
    assert [e.tool_progress.event.delta for e in events  # type: ignore[union-attr]
            if e.tool_progress is not None] == ["looking for tides…", "3 hits"]
    assert {e.branch for e in events if e.author == "researcher"} == {BRANCH}
    assert [e for e in events if not e.partial][-1].text == "The researcher found 3 papers."

    bodies = [r.json() for r in provider.requests]
    assert [system_of(fmt, b) for b in bodies] == [OUTER_SYSTEM, INNER_SYSTEM, INNER_SYSTEM,
                                                   OUTER_SYSTEM]
    tool = "tool" if fmt == "openai" else "user"
    # The outer model's second request: its call, then its one result; nothing inner.
    assert turns(fmt, bodies[3]) == [("user", "Find papers on tides"),
                                     ("assistant", "call researcher"), (tool, "result c1")]
    wire = json.dumps(bodies[3]["messages"])
    assert "papers on tides" in wire  # the outer call's own arguments
    for inner in ("Let me", "looking for", '"query"', "s1", "hits"):
        assert inner not in wire, inner
    # The inner model: what it was asked, its call, then the call's one result.
    assert turns(fmt, bodies[1]) == [("user", "papers on tides")]
    assert turns(fmt, bodies[2]) == [("user", "papers on tides"),
                                     ("assistant", "Let me look. | call search"),
                                     (tool, "result s1")]
    calls_have_one_result(await stored(runner, sid))


@pytest.mark.parametrize("fmt", FORMATS)
async def test_over_the_wire_a_cancel_closes_the_inner_provider_stream(
        fmt: str, provider: FakeProvider, client: httpx.AsyncClient) -> None:
    outer_call: ToolCallSpec = {"id": "c1", "name": "researcher",
                                "arguments": {"request": "papers"}}
    inner_stream = wire_text(fmt, ["Thinking ", "hard", "never sent"])
    shown = next(n for n, chunk in enumerate(inner_stream) if b"Thinking" in chunk) + 1
    provider.enqueue(Scenario(body=wire_call(fmt, outer_call)),
                     Scenario(body=[*inner_stream[:shown], Stall()]),
                     Scenario(body=wire_text(fmt, ["Stopped, as you asked."])))
    runner, sid = await make(wire_tree(fmt, provider, client))
    async with runner.run_async(user_id="u1", session_id=sid, new_message="go",
                                run_config=SSE) as stream:
        async for event in stream:
            if event.author == "researcher" and event.partial:
                break
    inner_request = provider.requests[1]
    assert system_of(fmt, inner_request.json()) == INNER_SYSTEM
    record = await provider.wait_closed(inner_request.connection, timeout=1.0)
    assert record.close_kind in ("client_fin", "client_rst")

    history = await stored(runner, sid)
    calls_have_one_result(history)
    assert [r.response["code"] for e in history for r in e.function_responses] == ["cancelled"]
    # The session stays valid for the provider: the next turn's request is accepted.
    events = await collect(runner, sid, "ok?", NONE)
    assert events[-1].text == "Stopped, as you asked."
    after = ([("tool", "result c1"), ("user", "ok?")] if fmt == "openai"
             else [("user", "result c1 | ok?")])  # Anthropic: one user turn
    assert turns(fmt, provider.requests[2].json()) == [
        ("user", "go"), ("assistant", "call researcher"), *after]


async def test_in_a_live_run_the_agent_tool_runs_its_agent_and_the_caller_sees_it() -> None:
    outer = (ScriptedModel().call("researcher", {"request": "papers on tides"}, call_id="c1")
             .reply("The researcher found 3 papers."))
    inner = inner_script()
    runner = Runner(agent=coordinator(outer, inner), app_name="app", auto_create_session=True)
    queue = LiveRequestQueue()
    queue.send_content(Content.from_text("Find papers"))
    events: list[Event] = []
    async with runner.run_live(user_id="u", session_id="s", live_request_queue=queue) as stream:
        async for event in stream:
            events.append(event)
            if event.author == "coordinator" and "3 papers" in event.text and not event.partial:
                break
    inner_records = [e for e in events if e.author == "researcher" and not e.partial]
    assert [e.branch for e in inner_records] == [BRANCH] * 3
    assert inner_records[-1].text == "Found 3 papers."
    assert texts(inner.requests[1]) == ["user: papers on tides",
                                        "model: Let me look. | call search", "user: result search"]
    result = next(e for e in events if e.author == "coordinator" and e.function_responses)
    assert result.function_responses[0].response == {"result": "Found 3 papers."}
    assert not any("Let me" in " ".join(texts(r)) for r in outer.requests)


async def test_two_calls_in_one_aggregate_run_concurrently_each_on_its_own_branch() -> None:
    def answer(request: LlmRequest) -> ScriptedTurn:
        return ScriptedTurn(text=["answer to ", request.contents[-1].text])

    inner = ScriptedModel(responder=answer)
    outer = (ScriptedModel().add(ScriptedTurn(calls=(
        ScriptedCall("researcher", {"request": "tides"}, id="c1"),
        ScriptedCall("researcher", {"request": "waves"}, id="c2"))))
        .reply("Both done."))
    runner, sid = await make(coordinator(outer, inner))
    events = await collect(runner, sid, "Research both", SSE)
    finals = {e.branch: e.text for e in events if e.author == "researcher" and not e.partial
              and e.is_final_response()}
    assert finals == {"coordinator:c1": "answer to tides", "coordinator:c2": "answer to waves"}
    # Each inner run saw its own request only.
    assert sorted(texts(r)[0] for r in inner.requests) == ["user: tides", "user: waves"]
    assert all(len(r.contents) == 1 for r in inner.requests)
    results = {r.id: r.response for e in events if e.author == "coordinator"
               for r in e.function_responses}
    assert results == {"c1": {"result": "answer to tides"}, "c2": {"result": "answer to waves"}}
    assert texts(outer.requests[1]) == ["user: Research both",
                                        "model: call researcher | call researcher",
                                        "user: result researcher | result researcher"]
    calls_have_one_result(await stored(runner, sid))


async def test_the_inner_run_goes_at_the_callers_pace() -> None:
    inner = ScriptedModel().reply("one ", "two ", "three")
    outer = ScriptedModel().call("researcher", {"request": "count"}, call_id="c1").reply("ok")
    runner, sid = await make(coordinator(outer, inner))
    async with runner.run_async(user_id="u1", session_id=sid, new_message="go",
                                run_config=SSE) as stream:
        async for event in stream:
            if event.author == "researcher" and event.partial:
                await asyncio.sleep(0.05)  # a slow reader: the inner model waits for it
                assert inner.streams[0].emitted == 1
                break
    assert inner.streams[0].closed_early


async def test_a_timeout_stops_the_inner_run_and_the_caller_goes_on() -> None:
    blocking = BlockingModel()
    inner = Agent(name="researcher", model=blocking, description="Finds things.")
    outer = (ScriptedModel().call("researcher", {"request": "papers"}, call_id="c1")
             .reply("It took too long."))
    root = Agent(name="coordinator", model=outer, tools=[AgentTool(inner, timeout=0.2)])
    runner, sid = await make(root)
    events = await collect(runner, sid, "go", SSE)
    assert blocking.closed_at is not None
    result = next(e for e in events if e.author == "coordinator" and e.function_responses)
    assert result.function_responses[0].response["code"] == "timeout"
    assert [e for e in events if not e.partial][-1].text == "It took too long."
    history = await stored(runner, sid)
    calls_have_one_result(history)
    assert [(e.branch, e.text) for e in history if e.interrupted] == [(BRANCH, "Thinking")]
