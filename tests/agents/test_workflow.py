"""Workflow agents: sequence, parallel branches, loops; budgets over the tree; output_key."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from headwater import (
    Agent,
    Event,
    LoopAgent,
    ParallelAgent,
    RunConfig,
    SequentialAgent,
    StreamingMode,
    ToolContext,
    tool,
)
from headwater.errors import ProviderTruncated, UserError
from headwater.testing import ScriptedModel, ScriptedTurn

from .helpers import (
    NONE,
    SSE,
    collect,
    drafts_by_author,
    make,
    slow_search,
    state,
    stored,
    texts,
)


async def test_sequential_runs_in_order_and_output_key_feeds_the_next_instruction() -> None:
    researcher = ScriptedModel().reply("Rivers ", "flow downhill.")
    writer = ScriptedModel().reply("A poem.")
    pipeline = SequentialAgent(name="pipeline", sub_agents=[
        Agent(name="researcher", model=researcher, instruction="Research.",
              output_key="notes"),
        Agent(name="writer", model=writer, output_key="poem",
              instruction="Write from: {notes}. Style: {style?}."),
    ])
    runner, sid = await make(pipeline)
    events = await collect(runner, sid, "Rivers, please")
    finals = [e for e in events if not e.partial]
    assert [(e.author, e.text) for e in finals] == [("researcher", "Rivers flow downhill."),
                                                   ("writer", "A poem.")]
    assert finals[0].actions.state_delta == {"notes": "Rivers flow downhill."}
    assert writer.requests[0].system_instruction == "Write from: Rivers flow downhill.. Style: ."
    assert texts(writer.requests[0]) == ["user: Rivers, please",
                                         "user: For context: | [researcher] said: Rivers flow "
                                         "downhill."]
    assert tuple(t.name for t in writer.requests[0].tools) == ()  # workflow parent: no transfer
    assert await state(runner, sid) == {"notes": "Rivers flow downhill.", "poem": "A poem."}
    assert [e.author for e in await stored(runner, sid)] == ["user", "researcher", "writer"]


async def test_a_missing_required_state_key_is_a_clear_error() -> None:
    model = ScriptedModel().reply("never")
    runner, sid = await make(SequentialAgent(name="s", sub_agents=[
        Agent(name="writer", model=model, instruction="Write from {notes}.")]))
    with pytest.raises(UserError, match=r"agent 'writer' needs state key 'notes'.*\{notes\?\}"):
        await collect(runner, sid)
    assert model.requests == []


def searcher(name: str, pieces: tuple[str, ...], **turn: Any) -> Agent:
    return Agent(name=name, model=ScriptedModel([ScriptedTurn(text=pieces, **turn)]),
                 output_key=name)


def models(agent: Agent | ParallelAgent) -> dict[str, ScriptedModel]:
    out = {}
    for sub in agent.walk():
        if isinstance(sub, Agent):
            assert isinstance(sub.model, ScriptedModel)
            out[sub.name] = sub.model
    return out


def parallel(**turn: Any) -> ParallelAgent:
    return ParallelAgent(name="research", sub_agents=[
        searcher("web", ("Web ", "says ", "yes."), **turn),
        searcher("papers", ("Papers ", "say ", "no."), **turn)])


async def test_parallel_branches_stream_attributed_and_drafts_rebuild_each_final() -> None:
    root = parallel(delay=0.001)
    runner, sid = await make(root)
    events = await collect(runner, sid, "Is it so?")
    for event in events:
        assert event.branch == f"research.{event.author}", event
    deltas = [e for e in events if e.partial]
    assert {e.author for e in deltas} == {"web", "papers"}
    finals = {e.author: e.text for e in events if not e.partial}
    assert finals == {"web": "Web says yes.", "papers": "Papers say no."}
    assert drafts_by_author(events) == {"web": ["Web says yes."], "papers": ["Papers say no."]}
    # One aggregate per model call, and each model saw only its own branch.
    history = await stored(runner, sid)
    for name, model in models(root).items():
        assert len([e for e in history if e.author == name]) == len(model.requests) == 1
        assert texts(model.requests[0]) == ["user: Is it so?"]
    assert await state(runner, sid) == {"web": "Web says yes.", "papers": "Papers say no."}


async def test_a_branch_goes_on_only_once_the_caller_has_its_event() -> None:
    def look(query: str) -> str:
        """Look something up."""
        return f"found {query}"

    root = ParallelAgent(name="research", sub_agents=[  # each: a call, its result, an answer
        Agent(name=name, model=ScriptedModel().call("look", {"query": name}).reply("done"),
              tools=[look]) for name in ("web", "papers")])
    runner, sid = await make(root)
    checked = 0
    async with runner.run_async(user_id="u1", session_id=sid, new_message="go",
                                run_config=SSE) as stream:
        async for event in stream:
            if event.partial:
                continue
            await asyncio.sleep(0.01)  # time for a branch that does not wait to run ahead
            mine = [e.id for e in await stored(runner, sid) if e.branch == event.branch]
            assert mine[-1] == event.id  # persisted, and nothing of its branch after it
            checked += 1
    assert checked == 6


async def test_none_and_sse_leave_the_same_history_per_branch() -> None:
    def record(events: list[Event]) -> dict[str | None, list[Any]]:
        out: dict[str | None, list[Any]] = {}
        for e in events:
            out.setdefault(e.branch, []).append((e.author, e.content, e.actions.state_delta))
        return out

    runs = []
    for config in (NONE, SSE):
        runner, sid = await make(parallel())
        events = await collect(runner, sid, "Is it so?", config=config)
        assert any(e.partial for e in events) is (config is SSE)
        runs.append(record(await stored(runner, sid)))
    assert runs[0] == runs[1]
    assert set(runs[0]) == {None, "research.web", "research.papers"}


async def test_a_failing_branch_ends_with_its_own_error_and_the_other_completes() -> None:
    broken = Agent(name="papers", model=ScriptedModel([ScriptedTurn(
        text=("Pap", "ers"), raise_error=ProviderTruncated("cut"), raise_after=1, delay=0.001)]))
    root = ParallelAgent(name="research", sub_agents=[
        searcher("web", ("Web ", "says ", "yes."), delay=0.002), broken])
    runner, sid = await make(root)
    events = await collect(runner, sid, "Is it so?")
    errors = [e for e in events if e.error_code]
    assert [(e.author, e.branch, e.error_code) for e in errors] == [
        ("papers", "research.papers", "provider_truncated")]
    finals = [e for e in events if not e.partial and not e.error_code]
    assert [(e.author, e.text) for e in finals] == [("web", "Web says yes.")]
    stored_errors = [e for e in await stored(runner, sid) if e.error_code]
    assert [(e.author, e.branch) for e in stored_errors] == [("papers", "research.papers")]


def counter() -> Agent:
    return Agent(name="worker", model=ScriptedModel(responder=lambda _: ScriptedTurn(
        text=("again",))))


async def test_loop_stops_at_max_iterations() -> None:
    worker = counter()
    runner, sid = await make(LoopAgent(name="loop", sub_agents=[worker], max_iterations=3))
    events = await collect(runner, sid, "go", config=NONE)
    assert [e.text for e in events] == ["again"] * 3
    assert len(models(worker)["worker"].requests) == 3


@tool
def exit_loop(tool_context: ToolContext) -> str:
    """Stop the loop: the work is good enough."""
    tool_context.actions.escalate = True
    tool_context.actions.skip_summarization = True
    return "stopping"


async def test_loop_stops_after_an_escalate_whichever_comes_first() -> None:
    worker = counter()
    checker_model = ScriptedModel().reply("Not yet.").call("exit_loop")
    checker = Agent(name="checker", model=checker_model, tools=[exit_loop])
    runner, sid = await make(LoopAgent(name="loop", sub_agents=[worker, checker],
                                       max_iterations=5))
    events = await collect(runner, sid, "go", config=NONE)
    assert [e.author for e in events] == ["worker", "checker", "worker", "checker", "checker"]
    assert events[-1].actions.escalate and events[-1].is_final_response()
    assert len(models(worker)["worker"].requests) == 2
    assert checker_model.pending == 0


async def test_max_llm_calls_counts_every_agent_of_the_tree() -> None:
    agents = [Agent(name=f"a{n}", model=ScriptedModel().reply(f"answer {n}")) for n in range(5)]
    root = SequentialAgent(name="all", sub_agents=agents)
    runner, sid = await make(root)
    config = RunConfig(streaming_mode=StreamingMode.SSE, max_llm_calls=3)
    async with runner.run_async(user_id="u1", session_id=sid, new_message="go",
                                run_config=config) as stream:
        events = [e async for e in stream]
    assert sum(len(a.model.requests) for a in agents  # type: ignore[attr-defined]
               ) == stream.stats.llm_calls == 3
    assert events[-1].error_code == "budget_exceeded" and events[-1].author == "a3"
    # The loop is bounded the same way.
    looped = LoopAgent(name="loop", sub_agents=[counter()])
    runner, sid = await make(looped)
    async with runner.run_async(user_id="u1", session_id=sid, new_message="go",
                                run_config=config) as stream:
        events = [e async for e in stream]
    assert len(models(looped.sub_agents[0])["worker"].requests) == 3  # type: ignore[arg-type]
    assert events[-1].error_code == "budget_exceeded"


async def test_cancelling_a_parallel_run_closes_every_model_stream_and_seals_calls() -> None:
    started = asyncio.Event()

    slow = [ScriptedTurn(text=tuple("x" * 200), delay=0.05)]
    tooled = ScriptedModel().call("slow_search", {"query": "q"})
    root = ParallelAgent(name="p", sub_agents=[
        Agent(name="a", model=ScriptedModel(slow)), Agent(name="b", model=ScriptedModel(slow)),
        Agent(name="c", model=tooled, tools=[slow_search(started)])])
    runner, sid = await make(root)
    seen: set[str] = set()
    async with runner.run_async(user_id="u1", session_id=sid, new_message="go",
                                run_config=SSE) as stream:
        async for event in stream:
            if event.partial and event.content is not None:
                seen.add(event.author)
            if {"a", "b"} <= seen and started.is_set():
                break
    streams = models(root)
    for name in ("a", "b"):
        assert streams[name].streams[0].closed_early, name
    history = await stored(runner, sid)
    (call,) = [e for e in history if e.function_calls]
    (result,) = [e for e in history if e.function_responses]
    response = result.function_responses[0]
    assert (response.id, response.response["code"]) == (call.function_calls[0].id, "cancelled")
    assert call.branch == "p.c"
    assert history[-1].error_code == "cancelled"
    # What each stopped branch had shown is kept, marked interrupted, on its branch.
    shown = {e.branch for e in history if e.interrupted and e.content is not None
             and e.content.role == "model"}
    assert shown == {"p.a", "p.b"}
    assert runner._ledgers[("u1", sid)].dangling() == []


async def test_nested_parallel_branches_name_their_path_and_a_sequence_keeps_its_branch() -> None:
    inner = ParallelAgent(name="inner", sub_agents=[
        Agent(name="x", model=ScriptedModel().reply("x done")),
        Agent(name="y", model=ScriptedModel().reply("y done"))])
    first = ScriptedModel().reply("a done")
    root = ParallelAgent(name="outer", sub_agents=[
        SequentialAgent(name="seq", sub_agents=[Agent(name="a", model=first), inner]),
        Agent(name="b", model=ScriptedModel().reply("b done"))])
    runner, sid = await make(root)
    events = await collect(runner, sid, "go", config=NONE)
    assert {(e.author, e.branch) for e in events} == {
        ("a", "outer.seq"), ("x", "outer.seq.inner.x"), ("y", "outer.seq.inner.y"),
        ("b", "outer.b")}
    # x descends from outer.seq: it sees a's answer; it never sees b's or y's.
    x_model = models(inner)["x"]
    assert texts(x_model.requests[0]) == ["user: go", "user: For context: | [a] said: a done"]


@tool
def finish(tool_context: ToolContext) -> str:
    """End the whole run."""
    tool_context.actions.end_invocation = True
    return "ending"


async def test_end_invocation_ends_the_sequence_and_an_empty_loop_ends_at_once() -> None:
    later = ScriptedModel().reply("never")
    root = SequentialAgent(name="s", sub_agents=[
        Agent(name="a", model=ScriptedModel().call("finish"), tools=[finish]),
        Agent(name="b", model=later)])
    runner, sid = await make(root)
    events = await collect(runner, sid, "go", config=NONE)
    assert [e.author for e in events] == ["a", "a"] and events[-1].actions.end_invocation
    assert later.requests == []
    runner, sid = await make(LoopAgent(name="idle", sub_agents=[
        SequentialAgent(name="empty")]))
    assert await asyncio.wait_for(collect(runner, sid, "go"), 10) == []


def test_a_refused_agent_leaves_its_sub_agents_free() -> None:
    child = Agent(name="child", model=ScriptedModel())
    with pytest.raises(UserError, match="two tools named"):
        Agent(name="p", model=ScriptedModel(), tools=[exit_loop, exit_loop], sub_agents=[child])
    assert child.parent_agent is None
    assert Agent(name="p", model=ScriptedModel(), sub_agents=[child]).sub_agents == (child,)
