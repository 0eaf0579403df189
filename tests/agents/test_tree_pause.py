"""A pause inside a tree (issue 30, docs/multi-agent.md "A pause inside a tree").

A tool that needs approval, or a long-running one, anywhere in a tree — inside an
agent used as a tool (two deep too), a sequence or loop step, a parallel branch —
pauses the run: the ``approval_required`` event carries the inner agent and its
branch (which names the outer call), the outer call stays pending (``waiting``),
siblings go on. The answer resumes the tree there: the inner tool runs (or is
denied), the inner agent finishes, the outer call gets its final text, the outer
model goes on, and whatever came after in a workflow runs. The history is valid at
every pause (checked on a real SQLite file across a new runner, as after a restart).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from headwater import (
    Agent,
    AgentTool,
    Content,
    Event,
    LiveRequestQueue,
    LoopAgent,
    ParallelAgent,
    RunConfig,
    Runner,
    SequentialAgent,
    StreamingMode,
    tool,
)
from headwater.errors import ApprovalError
from headwater.sessions import SqlSessionService
from headwater.sessions.ledger import CallLedger
from headwater.settings import Settings
from headwater.testing import ScriptedModel
from headwater.tools.approval import approval_response
from headwater.types import FunctionResponse, Part

from .helpers import NONE, SSE, assert_valid_history, collect, make, stored, texts

RAN: list[str] = []


@tool(requires_approval=True, approval_summary="deploy {version}")
def deploy(version: str) -> dict[str, Any]:
    """Deploy a version."""
    RAN.append(f"deploy {version}")
    return {"deployed": version}


@tool(long_running=True)
def build(target: str) -> dict[str, Any]:
    """Start a build; its result comes later."""
    RAN.append(f"build {target}")
    return {"status": "queued", "ticket": f"b-{target}"}


@tool
def notify(text: str) -> str:
    """Notify the team."""
    RAN.append(f"notify {text}")
    return "sent"


@pytest.fixture(autouse=True)
def _clear() -> None:
    RAN.clear()


def approvals(events: list[Event]) -> list[tuple[str, str | None, str]]:
    """(author, branch, call id) of each approval the events ask."""
    return [(e.author, e.branch, r.call_id) for e in events
            for r in e.actions.requested_approvals]


def answer(events: list[Event], approved: bool = True, reason: str | None = None) -> Content:
    """The message answering every approval the events ask."""
    requests = [r for e in events for r in e.actions.requested_approvals]
    parts: list[Part] = []
    for request in requests:
        parts += approval_response(request, approved, reason).parts
    return Content("user", parts)


def result_of(events: list[Event], call_id: str) -> dict[str, Any]:
    found = [r.response for e in events for r in e.function_responses
             if r.id == call_id and r.id not in e.long_running_tool_ids]  # (not a ticket)
    assert len(found) == 1, f"{call_id}: {len(found)} results"
    return found[0]


async def history_ok(runner: Runner, sid: str) -> None:
    """Every agent's view of the stored history is valid (each call answered once, a
    pending one by its placeholder) and the ledger agrees with the store."""
    events = await stored(runner, sid)
    ledger = CallLedger.of(events)
    for name in {e.author for e in events if e.author != "user"}:
        for branch in {e.branch for e in events}:
            assert_valid_history(ledger.contents_for(name, branch))
    answered: dict[str, int] = {}
    for event in events:
        for response in event.function_responses:
            if response.id not in event.long_running_tool_ids:
                answered[response.id] = answered.get(response.id, 0) + 1
    assert all(n == 1 for n in answered.values()), answered


def release_tree(outer: ScriptedModel, inner: ScriptedModel) -> Agent:
    deployer = Agent(name="deployer", model=inner, description="Deploys.", tools=[deploy])
    return Agent(name="release", model=outer, tools=[AgentTool(deployer)])


async def sql_runner(root: Agent, path: Path) -> tuple[Runner, str]:
    service = SqlSessionService(f"sqlite+aiosqlite:///{path}")
    return await make(root, service)


# -- an agent used as a tool ------------------------------------------------------------------


async def test_agent_tool_approval_pauses_and_resumes(tmp_path: Path) -> None:
    outer = (ScriptedModel().call("deployer", {"request": "ship 2"}, call_id="c1")
             .reply("Released 2."))
    inner = (ScriptedModel().call("deploy", {"version": "2"}, call_id="d1")
             .reply("Deployed 2."))
    root = release_tree(outer, inner)
    runner, sid = await sql_runner(root, tmp_path / "s.db")
    first = await collect(runner, sid, "release 2")
    assert approvals(first) == [("deployer", "release:c1", "d1")]
    assert RAN == []  # the gated tool never ran
    assert len(outer.requests) == 1  # the outer model was not asked again
    assert all(r.id != "c1" for e in first for r in e.function_responses)  # c1 stays pending
    pause = first[-1]
    assert pause.author == "release" and pause.long_running_tool_ids == ["c1"]
    assert CallLedger.of(await stored(runner, sid)).record("c1").status == "waiting"
    await history_ok(runner, sid)

    # a new runner on the same file: as after a restart
    runner2 = Runner(agent=root, app_name="shop",
                     session_service=SqlSessionService(f"sqlite+aiosqlite:///{tmp_path / 's.db'}"))
    second = await collect(runner2, sid, answer(first))
    assert RAN == ["deploy 2"]
    assert result_of(second, "d1") == {"deployed": "2"}
    assert result_of(second, "c1") == {"result": "Deployed 2."}
    assert [e.author for e in second if not e.partial] == [
        "deployer", "deployer", "release", "release"]
    assert second[-1].content is not None and second[-1].content.text == "Released 2."
    assert [e.branch for e in second if e.author == "deployer"] == ["release:c1"] * len(
        [e for e in second if e.author == "deployer"])
    # the outer model saw its call and the inner final text, nothing else of the inner run
    assert texts(outer.requests[-1])[-2:] == ["model: call deployer", "user: result deployer"]
    await history_ok(runner2, sid)


async def test_agent_tool_denied_goes_through_the_inner_agent() -> None:
    outer = (ScriptedModel().call("deployer", {"request": "ship 3"}, call_id="c1")
             .reply("Not released."))
    inner = (ScriptedModel().call("deploy", {"version": "3"}, call_id="d1")
             .reply("The deploy was denied."))
    runner, sid = await make(release_tree(outer, inner))
    first = await collect(runner, sid, "release 3")
    second = await collect(runner, sid, answer(first, False, "not today"))
    assert RAN == []
    assert result_of(second, "d1")["code"] == "denied"
    assert result_of(second, "c1") == {"result": "The deploy was denied."}
    assert second[-1].content is not None and second[-1].content.text == "Not released."
    await history_ok(runner, sid)


async def test_two_deep() -> None:
    top = ScriptedModel().call("release", {"request": "ship 4"}, call_id="c0").reply("All done.")
    outer = (ScriptedModel().call("deployer", {"request": "ship 4"}, call_id="c1")
             .reply("Released 4."))
    inner = (ScriptedModel().call("deploy", {"version": "4"}, call_id="d1")
             .reply("Deployed 4."))
    root = Agent(name="ops", model=top, tools=[AgentTool(release_tree(outer, inner))])
    runner, sid = await make(root)
    first = await collect(runner, sid, "ship it")
    assert approvals(first) == [("deployer", "ops:c0.release:c1", "d1")]
    ledger = CallLedger.of(await stored(runner, sid))
    assert (ledger.record("c0").status, ledger.record("c1").status) == ("waiting", "waiting")
    await history_ok(runner, sid)
    second = await collect(runner, sid, answer(first))
    assert result_of(second, "c1") == {"result": "Deployed 4."}
    assert result_of(second, "c0") == {"result": "Released 4."}
    assert second[-1].author == "ops" and second[-1].content.text == "All done."
    assert [e.author for e in second if not e.partial] == [
        "deployer", "deployer", "release", "release", "ops", "ops"]
    await history_ok(runner, sid)


async def test_none_mode_stores_the_same_and_shows_no_inner_event() -> None:
    outer = (ScriptedModel().call("deployer", {"request": "ship 5"}, call_id="c1")
             .reply("Released 5."))
    inner = (ScriptedModel().call("deploy", {"version": "5"}, call_id="d1")
             .reply("Deployed 5."))
    runner, sid = await make(release_tree(outer, inner))
    first = await collect(runner, sid, "release 5", NONE)
    assert approvals(first) == []  # the inner records are stored, not shown
    assert approvals(await stored(runner, sid)) == [("deployer", "release:c1", "d1")]
    second = await collect(runner, sid, answer(await stored(runner, sid)), NONE)
    assert [e.author for e in second] == ["release", "release"]
    assert result_of(await stored(runner, sid), "c1") == {"result": "Deployed 5."}
    await history_ok(runner, sid)


async def test_superseded_inner_approval_answers_the_outer_call() -> None:
    outer = (ScriptedModel().call("deployer", {"request": "ship 6"}, call_id="c1")
             .reply("OK, something else."))
    inner = ScriptedModel().call("deploy", {"version": "6"}, call_id="d1")
    runner, sid = await make(release_tree(outer, inner))
    first = await collect(runner, sid, "release 6")
    await collect(runner, sid, "never mind")
    events = await stored(runner, sid)
    assert result_of(events, "d1")["code"] == "superseded"
    assert result_of(events, "c1")["code"] == "superseded"
    ledger = CallLedger.of(events)
    assert ledger.dangling() == [] and ledger.awaiting() == []
    await history_ok(runner, sid)
    with pytest.raises(ApprovalError, match="superseded"):
        await collect(runner, sid, answer(first))


async def test_cancelled_resume_seals_the_outer_call() -> None:
    """A run resumed and stopped while the inner agent runs: the seal answers the inner
    calls and the outer one, ``cancelled``; nothing hangs."""
    outer = ScriptedModel().call("deployer", {"request": "ship 7"}, call_id="c1")
    inner = (ScriptedModel().call("deploy", {"version": "7"}, call_id="d1")
             .call("notify", {"text": "x"}, call_id="n1").reply("done"))
    deployer = Agent(name="deployer", model=inner, tools=[deploy, notify])
    runner, sid = await make(Agent(name="release", model=outer, tools=[AgentTool(deployer)]))
    first = await collect(runner, sid, "release 7")
    async with runner.run_async(user_id="u1", session_id=sid, new_message=answer(first),
                                run_config=SSE) as stream:
        async for event in stream:
            if event.function_responses and event.function_responses[0].id == "d1":
                break  # the reader leaves after the inner deploy's result
    events = await stored(runner, sid)
    assert result_of(events, "c1")["code"] == "cancelled"
    assert CallLedger.of(events).dangling() == []
    await history_ok(runner, sid)


async def test_long_running_inside_an_agent_tool() -> None:
    outer = (ScriptedModel().call("builder", {"request": "build web"}, call_id="c1")
             .reply("Built."))
    inner = ScriptedModel().call("build", {"target": "web"}, call_id="b1").reply("web is built")
    builder = Agent(name="builder", model=inner, tools=[build])
    runner, sid = await make(Agent(name="ci", model=outer, tools=[AgentTool(builder)]))
    first = await collect(runner, sid, "build web")
    ticket = [e for e in first if e.long_running_tool_ids and e.author == "builder"]
    assert ticket and ticket[0].branch == "ci:c1"
    assert CallLedger.of(await stored(runner, sid)).record("c1").status == "waiting"
    result = Content("user", [Part(function_response=FunctionResponse(
        id="b1", name="build", response={"artifact": "web.tar"}))])
    second = await collect(runner, sid, result)
    assert result_of(second, "c1") == {"result": "web is built"}
    assert second[-1].content.text == "Built."
    await history_ok(runner, sid)


async def test_expired_inner_ticket_expires_the_outer_call() -> None:
    outer = ScriptedModel().call("builder", {"request": "build"}, call_id="c1").reply("ok")
    inner = ScriptedModel().call("build", {"target": "api"}, call_id="b1")
    builder = Agent(name="builder", model=inner, tools=[build])
    root = Agent(name="ci", model=outer, tools=[AgentTool(builder)])
    from headwater.sessions import InMemorySessionService
    runner = Runner(agent=root, app_name="shop", session_service=InMemorySessionService(),
                    settings=Settings(long_running_ttl=0.01))
    sid = (await runner.create_session(user_id="u1")).id
    await collect(runner, sid, "build")
    await asyncio.sleep(0.05)  # past the ticket's TTL
    await collect(runner, sid, "and now?")
    events = await stored(runner, sid)
    assert result_of(events, "b1")["code"] == "expired"
    assert result_of(events, "c1")["code"] == "expired"
    await history_ok(runner, sid)


# -- workflow agents --------------------------------------------------------------------------


async def test_sequence_waits_for_the_paused_step(tmp_path: Path) -> None:
    first_model = ScriptedModel().call("deploy", {"version": "8"}, call_id="d1").reply("deployed")
    second_model = ScriptedModel().reply("announced")
    root = SequentialAgent(name="pipeline", sub_agents=[
        Agent(name="shipper", model=first_model, tools=[deploy]),
        Agent(name="announcer", model=second_model)])
    runner, sid = await sql_runner(root, tmp_path / "s.db")  # type: ignore[arg-type]
    first = await collect(runner, sid, "go")
    assert approvals(first) == [("shipper", None, "d1")]
    assert second_model.requests == []  # the next step waits for the approval
    await history_ok(runner, sid)
    second = await collect(runner, sid, answer(first))
    assert RAN == ["deploy 8"]
    assert [e.author for e in second if not e.partial] == [
        "shipper", "shipper", "announcer"]
    assert len(second_model.requests) == 1
    await history_ok(runner, sid)


async def test_loop_goes_on_after_the_pause() -> None:
    worker = (ScriptedModel().call("deploy", {"version": "9"}, call_id="d1").reply("round 1")
              .reply("round 2"))
    checker = ScriptedModel().reply("check 1").reply("check 2")
    root = LoopAgent(name="loop", max_iterations=2, sub_agents=[
        Agent(name="worker", model=worker, tools=[deploy]),
        Agent(name="checker", model=checker)])
    runner, sid = await make(root)
    first = await collect(runner, sid, "go")
    assert approvals(first) == [("worker", None, "d1")] and checker.requests == []
    second = await collect(runner, sid, answer(first))
    authors = [e.author for e in second if not e.partial and e.content is not None]
    assert authors[:3] == ["worker", "worker", "checker"]
    assert RAN == ["deploy 9"]
    await history_ok(runner, sid)


async def test_parallel_branches_pause_and_are_answered_one_by_one() -> None:
    a = ScriptedModel().call("deploy", {"version": "a"}, call_id="da").reply("a done")
    b = ScriptedModel().call("deploy", {"version": "b"}, call_id="db").reply("b done")
    c = ScriptedModel().reply("c done")
    after = ScriptedModel().reply("all three done")
    root = SequentialAgent(name="pipeline", sub_agents=[
        ParallelAgent(name="fan", sub_agents=[
            Agent(name="a", model=a, tools=[deploy]),
            Agent(name="b", model=b, tools=[deploy]),
            Agent(name="c", model=c)]),
        Agent(name="summary", model=after)])
    runner, sid = await make(root)  # type: ignore[arg-type]
    first = await collect(runner, sid, "go")
    assert sorted(approvals(first)) == [("a", "fan.a", "da"), ("b", "fan.b", "db")]
    assert [e.content.text for e in first if e.author == "c" and not e.partial] == ["c done"]
    assert after.requests == []
    await history_ok(runner, sid)
    requests = {r.call_id: r for e in first for r in e.actions.requested_approvals}
    second = await collect(runner, sid, approval_response(requests["da"], True))
    assert RAN == ["deploy a"]
    assert [e.author for e in second if not e.partial] == ["a", "a"]
    assert after.requests == []  # b still waits
    await history_ok(runner, sid)
    third = await collect(runner, sid, approval_response(requests["db"], False))
    assert [e.author for e in third if not e.partial] == ["b", "b", "summary"]
    assert result_of(third, "db")["code"] == "denied"
    await history_ok(runner, sid)


async def test_parallel_branches_answered_together() -> None:
    a = ScriptedModel().call("deploy", {"version": "a"}, call_id="da").reply("a done")
    b = ScriptedModel().call("deploy", {"version": "b"}, call_id="db").reply("b done")
    root = ParallelAgent(name="fan", sub_agents=[Agent(name="a", model=a, tools=[deploy]),
                                                 Agent(name="b", model=b, tools=[deploy])])
    runner, sid = await make(root)
    first = await collect(runner, sid, "go")
    second = await collect(runner, sid, answer(first))
    assert sorted(RAN) == ["deploy a", "deploy b"]
    assert sorted(e.author for e in second if not e.partial and e.content is not None
                  and e.content.role == "model") == ["a", "b"]
    await history_ok(runner, sid)


async def test_agent_tool_in_a_parallel_branch_and_a_sibling_goes_on() -> None:
    outer = (ScriptedModel().call("deployer", {"request": "ship p"}, call_id="c1")
             .reply("released p"))
    inner = ScriptedModel().call("deploy", {"version": "p"}, call_id="d1").reply("deployed p")
    sibling = ScriptedModel().reply("docs written")
    root = ParallelAgent(name="fan", sub_agents=[release_tree(outer, inner),
                                                 Agent(name="docs", model=sibling)])
    runner, sid = await make(root)
    first = await collect(runner, sid, "go")
    assert approvals(first) == [("deployer", "fan.release.release:c1", "d1")]
    assert any(e.author == "docs" and not e.partial for e in first)
    second = await collect(runner, sid, answer(first))
    assert result_of(second, "c1") == {"result": "deployed p"}
    assert second[-1].author == "release" and second[-1].branch == "fan.release"
    await history_ok(runner, sid)


async def test_stale_and_unknown_answers_are_refused() -> None:
    outer = ScriptedModel().call("deployer", {"request": "ship"}, call_id="c1")
    inner = ScriptedModel().call("deploy", {"version": "1"}, call_id="d1")
    runner, sid = await make(release_tree(outer, inner))
    first = await collect(runner, sid, "release")
    with pytest.raises(ApprovalError):
        await collect(runner, sid, approval_response("nope", True))
    with pytest.raises(ApprovalError, match="other arguments"):
        await collect(runner, sid, approval_response("d1", True, args_sha256="0" * 64))
    with pytest.raises(ApprovalError):  # the outer call is no approval
        await collect(runner, sid, approval_response("c1", True))
    assert approvals(first) == [("deployer", "release:c1", "d1")]


async def test_budget_counts_inner_and_outer_calls_across_the_pause() -> None:
    outer = (ScriptedModel().call("deployer", {"request": "ship"}, call_id="c1")
             .reply("never"))
    inner = ScriptedModel().call("deploy", {"version": "1"}, call_id="d1").reply("deployed")
    runner, sid = await make(release_tree(outer, inner))
    first = await collect(runner, sid, "release")
    second = await collect(runner, sid, answer(first), RunConfig(max_llm_calls=1))
    assert len(inner.requests) == 2 and len(outer.requests) == 1  # one model call this run
    assert second[-1].error_code == "budget_exceeded" and second[-1].author == "release"
    await history_ok(runner, sid)


# -- a live run -------------------------------------------------------------------------------


async def test_a_live_run_pauses_inside_an_agent_tool_and_the_queue_answer_resumes_it() -> None:
    outer = (ScriptedModel().call("deployer", {"request": "ship L"}, call_id="c1")
             .reply("Released L."))
    inner = ScriptedModel().call("deploy", {"version": "L"}, call_id="d1").reply("Deployed L.")
    runner, sid = await make(release_tree(outer, inner))
    queue = LiveRequestQueue()
    queue.send_content(Content.from_text("release L"))
    events: list[Event] = []
    async with runner.run_live(user_id="u1", session_id=sid, live_request_queue=queue) as stream:
        async for event in stream:
            events.append(event)
            if event.actions.requested_approvals:
                assert (event.author, event.branch) == ("deployer", "release:c1")
                assert RAN == [] and len(outer.requests) == 1
                queue.send_content(answer([event]))
            if event.author == "release" and event.text == "Released L." and not event.partial:
                break
    assert RAN == ["deploy L"]
    assert result_of(events, "c1") == {"result": "Deployed L."}
    assert [e.author for e in events if e.function_responses] == ["deployer", "release"]
    queue.close()
    await history_ok(runner, sid)


async def test_tool_budget_counts_the_resumed_run_as_any_run() -> None:
    """``max_tool_calls`` of the resumed run counts what runs in it: the approved inner
    call, then a second inner call is refused (a result the inner model reads)."""
    outer = (ScriptedModel().call("deployer", {"request": "ship"}, call_id="c1")
             .reply("done"))
    inner = (ScriptedModel().call("deploy", {"version": "1"}, call_id="d1")
             .call("notify", {"text": "shipped"}, call_id="n1").reply("deployed"))
    deployer = Agent(name="deployer", model=inner, tools=[deploy, notify])
    runner, sid = await make(Agent(name="release", model=outer, tools=[AgentTool(deployer)]))
    first = await collect(runner, sid, "release")
    second = await collect(runner, sid, answer(first),
                           RunConfig(streaming_mode=StreamingMode.SSE, max_tool_calls=1))
    assert RAN == ["deploy 1"]
    assert result_of(second, "n1")["code"] == "budget_exceeded"
    assert result_of(second, "c1") == {"result": "deployed"}
    await history_ok(runner, sid)
