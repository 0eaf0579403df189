"""Approval gates (seed 001 `deploy`) and long-running tools."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from headwater import (
    Agent,
    Content,
    Event,
    Part,
    RunConfig,
    Runner,
    StreamingMode,
    ToolStreamEvent,
    tool,
)
from headwater.errors import ApprovalError, UserError
from headwater.sessions import BaseSessionService, SqlSessionService
from headwater.testing import ScriptedModel
from headwater.tools import approval_response, args_sha256
from headwater.types import FunctionResponse

SSE = RunConfig(streaming_mode=StreamingMode.SSE)
ran: list[str] = []


@tool(name="deploy", description="Deploy with progress.", streaming=True,
      requires_approval=True)
async def deploy(env: str) -> AsyncIterator[ToolStreamEvent]:
    ran.append(env)
    yield ToolStreamEvent(type="part_delta", delta=f"deploying to {env}…")
    yield ToolStreamEvent(type="done", response="deployed")


@pytest.fixture(autouse=True)
def reset() -> None:
    ran.clear()


def deploy_model() -> ScriptedModel:
    return ScriptedModel().call("deploy", {"env": "prod"}, call_id="d1").reply("Deployed.")


def runner_for(model: ScriptedModel, service: BaseSessionService | None = None,
               tools: list[Any] | None = None) -> Runner:
    return Runner(agent=Agent(name="ops", model=model, tools=tools or [deploy]), app_name="app",
                  session_service=service, auto_create_session=True)


async def run(runner: Runner, message: str | Content) -> list[Event]:
    return [e async for e in runner.run_async(user_id="u", session_id="s", new_message=message,
                                              run_config=SSE)]


async def test_nothing_runs_before_approval() -> None:
    model = deploy_model()
    runner = runner_for(model)
    events = await run(runner, "deploy to prod")
    gate = events[-1]
    assert ran == []
    assert gate.is_final_response()
    assert gate.long_running_tool_ids == ["d1"]
    [request] = gate.actions.requested_approvals
    assert (request.call_id, request.tool_name, request.args) == ("d1", "deploy", {"env": "prod"})
    assert request.args_sha256 == args_sha256({"env": "prod"})
    assert len(model.requests) == 1


async def test_approve_runs_with_progress_then_the_result() -> None:
    model = deploy_model()
    runner = runner_for(model)
    gate = (await run(runner, "deploy to prod"))[-1]
    events = await run(runner, approval_response(gate.actions.requested_approvals[0], True))
    assert ran == ["prod"]
    assert [e.tool_progress.event.delta for e in events if e.tool_progress] == [
        "deploying to prod…"]
    results = [r for e in events for r in e.function_responses]
    assert [(r.id, r.response) for r in results] == [("d1", {"result": "deployed"})]
    assert events[-1].text == "Deployed."
    history = model.requests[1].contents
    assert [c.role for c in history] == ["user", "model", "user"]
    assert history[2].function_responses[0].response == {"result": "deployed"}


async def test_deny_sends_the_model_denied() -> None:
    model = ScriptedModel().call("deploy", {"env": "prod"}, call_id="d1").reply("OK, not now.")
    runner = runner_for(model)
    await run(runner, "deploy to prod")
    events = await run(runner, approval_response("d1", False, reason="change freeze"))
    assert ran == []
    response = model.requests[1].contents[-1].function_responses[0].response
    assert response == {"error": "A human denied this call: change freeze", "code": "denied"}
    assert events[-1].text == "OK, not now."


async def test_mismatched_and_replayed_answers_are_refused_and_lose_nothing() -> None:
    model = deploy_model()
    runner = runner_for(model)
    await run(runner, "deploy to prod")
    with pytest.raises(ApprovalError, match="other arguments"):
        await run(runner, approval_response("d1", True,
                                            args_sha256=args_sha256({"env": "staging"})))
    assert ran == []
    session = await runner.session_service.get_session(app_name="app", user_id="u",
                                                       session_id="s")
    assert session is not None and len(session.events) == 3  # nothing of the refused answer
    await run(runner, approval_response("d1", True, args_sha256=args_sha256({"env": "prod"})))
    assert ran == ["prod"]
    with pytest.raises(ApprovalError, match="no approval is pending"):
        await run(runner, approval_response("d1", True))
    with pytest.raises(ApprovalError, match="no approval is pending"):
        await run(runner, approval_response("never-asked", True))
    assert ran == ["prod"]


async def test_a_text_message_while_approval_is_pending_supersedes_it() -> None:
    # The next turn answers an approval or leaves it behind (tests/sessions/test_superseded.py
    # on every store): the model reads the call answered, a late answer is refused.
    model = deploy_model()
    runner = runner_for(model)
    await run(runner, "deploy to prod")
    model.reply("Nothing was deployed.", first=True)  # answered next
    events = await run(runner, "what will it do?")
    assert events[-1].text == "Nothing was deployed."
    contents = model.requests[1].contents
    assert [c.role for c in contents] == ["user", "model", "user", "user"]
    assert contents[2].function_responses[0].response["code"] == "superseded"
    with pytest.raises(ApprovalError, match="superseded"):
        await run(runner, approval_response("d1", True))
    assert ran == []


CHILD = textwrap.dedent("""
    import asyncio, json, sys
    from collections.abc import AsyncIterator
    from headwater import Agent, RunConfig, Runner, StreamingMode, ToolStreamEvent, tool
    from headwater.sessions import SqlSessionService
    from headwater.testing import ScriptedModel

    @tool(name="deploy", streaming=True, requires_approval=True)
    async def deploy(env: str) -> AsyncIterator[ToolStreamEvent]:
        yield ToolStreamEvent(type="done", response="deployed")

    async def main(url):
        service = SqlSessionService(url)
        model = ScriptedModel().call("deploy", {"env": "prod"}, call_id="d1")
        runner = Runner(agent=Agent(name="ops", model=model, tools=[deploy]), app_name="app",
                        session_service=service, auto_create_session=True)
        async for event in runner.run_async(user_id="u", session_id="s", new_message="deploy",
                                            run_config=RunConfig(streaming_mode=StreamingMode.SSE)):
            for request in event.actions.requested_approvals:
                print(json.dumps({"call_id": request.call_id, "hash": request.args_sha256}))
        await service.close()

    asyncio.run(main(sys.argv[1]))
""")


def first_process(url: str) -> dict[str, str]:
    """Run the turn that asks for approval in another process, which then exits."""
    child = subprocess.run([sys.executable, "-c", CHILD, url], capture_output=True, text=True,
                           timeout=60, check=True, env=dict(os.environ))
    answer: dict[str, str] = json.loads(child.stdout.strip().splitlines()[-1])
    return answer


@pytest.mark.slow
async def test_approval_survives_a_process_restart_on_sqlite(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'sessions.db'}"
    asked = first_process(url)
    service = SqlSessionService(url)
    try:
        model = ScriptedModel().reply("Deployed after restart.")
        runner = runner_for(model, service)
        events = await run(runner, approval_response(asked["call_id"], True,
                                                     args_sha256=asked["hash"]))
        assert ran == ["prod"]
        assert events[-1].text == "Deployed after restart."
        assert model.requests[0].contents[-1].function_responses[0].response == {
            "result": "deployed"}
    finally:
        await service.close()


async def test_long_running_tool_answers_with_a_ticket_then_continues() -> None:
    @tool(long_running=True)
    def start_export(table: str) -> dict[str, str]:
        """Starts an export job."""
        return {"ticket": f"job-{table}", "status": "started"}

    model = (ScriptedModel().call("start_export", {"table": "orders"}, call_id="x1")
             .reply("The export finished: 42 rows."))
    runner = runner_for(model, tools=[start_export])
    events = await run(runner, "export orders")
    assert events[-1].long_running_tool_ids == ["x1"]
    assert events[-1].is_final_response()
    assert events[-1].function_responses[0].response == {"ticket": "job-orders",
                                                         "status": "started"}
    assert len(model.requests) == 1
    done = Content("user", [Part(function_response=FunctionResponse(
        id="x1", name="start_export", response={"status": "done", "rows": 42}))])
    events = await run(runner, done)
    assert events[-1].text == "The export finished: 42 rows."
    contents = model.requests[1].contents
    assert [c.role for c in contents] == ["user", "model", "user"]
    assert contents[2].function_responses[0].response == {"status": "done", "rows": 42}
    with pytest.raises(UserError, match="no pending long-running call"):
        await run(runner, Content("user", [Part(function_response=FunctionResponse(
            id="nope", name="start_export", response={}))]))
    with pytest.raises(UserError, match="names 'other'"):
        await run(runner, Content("user", [Part(function_response=FunctionResponse(
            id="x1", name="other", response={}))]))


# -- what an approver is shown ---------------------------------------------------------------

def deploy_to(version: str, environment: str = "staging") -> str:
    """Deploy a version."""
    return f"{version}@{environment}"


@pytest.mark.parametrize(("summary", "why"), [
    ("deploy {vers}", r"names \{vers\}, which is not a parameter of the tool \(its parameters: "
                      r"version, environment\)"),
    ("deploy {}", "each field names a parameter"),
    ("deploy {0}", "each field names a parameter"),
    ("deploy {version.real}", "each field names a parameter"),
    ("deploy {version[0]}", "each field names a parameter"),
    ("deploy {version:{environment}}", "each field names a parameter"),
    ("deploy {version", "is not a valid template"),
    (lambda: "x", "must take one argument"),
    (lambda a, b: "x", "must take one argument"),
    (42, "must be a template"),
])
def test_a_bad_approval_summary_is_refused_when_the_tool_is_built(summary: Any,
                                                                  why: str) -> None:
    with pytest.raises(ValueError, match=why):
        tool(requires_approval=True, approval_summary=summary)(deploy_to)


def test_an_approval_summary_needs_an_approval_and_a_plain_function() -> None:
    with pytest.raises(ValueError, match="only shown with requires_approval=True"):
        tool(approval_summary="deploy {version}")(deploy_to)

    async def later(args: dict[str, Any]) -> str:
        return "x"

    with pytest.raises(ValueError, match="not an async one"):
        tool(requires_approval=True, approval_summary=later)(deploy_to)


def test_a_template_fills_in_defaults_and_a_function_gets_the_arguments() -> None:
    template = tool(requires_approval=True,
                    approval_summary="deploy {version!r} to {environment}")(deploy_to)
    assert template.summarize_approval({"version": "2"}) == "deploy '2' to staging"
    assert template.summarize_approval({"version": "2", "environment": "prod"}) == (
        "deploy '2' to prod")
    seen: list[dict[str, Any]] = []

    def summary(args: dict[str, Any]) -> str:
        seen.append(args)
        return f"ship\n  {args['version']}\tnow "

    function = tool(requires_approval=True, approval_summary=summary)(deploy_to)
    assert function.summarize_approval({"version": "3"}) == "ship 3 now"  # one line
    assert seen == [{"version": "3", "environment": "staging"}]
    assert tool(requires_approval=True)(deploy_to).summarize_approval({"version": "3"}) is None


def test_a_summary_that_fails_shows_the_arguments_instead(
        caplog: pytest.LogCaptureFixture) -> None:
    def broken(args: dict[str, Any]) -> str:
        raise RuntimeError("secret detail")

    for summary in ("deploy {version}", broken, lambda args: 42, lambda args: "  "):
        gated = tool(requires_approval=True, approval_summary=summary)(deploy_to)
        assert gated.summarize_approval({}) is None  # no version: the template cannot fill
    assert "approval_summary failed (KeyError)" in caplog.text
    assert "approval_summary failed (RuntimeError)" in caplog.text
    assert "returned int, not str" in caplog.text
    assert "secret detail" not in caplog.text


async def test_the_request_carries_the_summary_and_the_display_shows_the_call_without_one(
        ) -> None:
    summarized = tool(name="deploy", requires_approval=True,
                      approval_summary="deploy {version} to {environment}")(deploy_to)
    model = ScriptedModel().call("deploy", {"version": "2", "environment": "prod"},
                                 call_id="d1")
    [asked] = (await run(runner_for(model, tools=[summarized]), "go"))[-1].actions \
        .requested_approvals
    assert (asked.summary, asked.display) == ("deploy 2 to prod", "deploy 2 to prod")
    plain = tool(name="deploy", requires_approval=True)(deploy_to)
    model = ScriptedModel().call("deploy", {"version": "2", "note": "a \"b\"\nc"},
                                 call_id="d1")
    [asked] = (await run(runner_for(model, tools=[plain]), "go"))[-1].actions \
        .requested_approvals
    assert asked.summary is None
    assert asked.display == 'deploy(version="2", note="a \\"b\\"\\nc")'
