"""A pending approval is answered by the next turn or not at all, on every store.

A plain message sent while calls await approval gives each a ``superseded``
result, stored before the message (agents/approvals.py); a late answer is
refused, by this runner and by one that opens the store afresh (a restart).
Answers to approvals supersede nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from headwater import Agent, Event, Runner, tool
from headwater.agents.approvals import SUPERSEDED_MESSAGE
from headwater.errors import ApprovalError
from headwater.sessions import BaseSessionService
from headwater.sessions.ledger import CallLedger
from headwater.testing import ScriptedCall, ScriptedModel, ScriptedTurn
from headwater.tools import approval_response

if TYPE_CHECKING:
    from conftest import Store

ran: list[str] = []


@tool(requires_approval=True, approval_summary="deploy {version} to {environment}")
def deploy(version: str, environment: str = "staging") -> str:
    """Deploy a version."""
    ran.append(f"{version}@{environment}")
    return "live"


@pytest.fixture(autouse=True)
def reset() -> None:
    ran.clear()


def runner_on(service: BaseSessionService, model: ScriptedModel) -> Runner:
    return Runner(agent=Agent(name="ops", model=model, tools=[deploy]), app_name="app",
                  session_service=service)


async def turn(runner: Runner, session_id: str, message: object) -> list[Event]:
    return [e async for e in runner.run_async(user_id="u", session_id=session_id,
                                              new_message=message)]  # type: ignore[arg-type]


async def stored(service: BaseSessionService, session_id: str) -> list[Event]:
    session = await service.get_session(app_name="app", user_id="u", session_id=session_id)
    assert session is not None
    return session.events


async def test_a_message_supersedes_a_pending_approval_and_a_late_answer_is_refused(
        store: Store) -> None:
    service = store.service
    session = await service.create_session(app_name="app", user_id="u")
    model = ScriptedModel().call("deploy", {"version": "2"}, call_id="d1").reply("OK, no deploy.")
    runner = runner_on(service, model)
    [asked] = (await turn(runner, session.id, "deploy 2"))[-1].actions.requested_approvals
    assert asked.summary == "deploy 2 to staging"  # the option, its default filled in
    assert asked.display == "deploy 2 to staging"

    # The same runner knows the session's ledger: the lease's fast path must not store the
    # message past the pending call.
    second = await turn(runner, session.id, "never mind, what is the weather?")
    assert second[-1].text == "OK, no deploy."
    events = await stored(service, session.id)
    kinds = [(e.author, [r.response.get("code") for r in e.function_responses], e.text)
             for e in events]
    assert kinds == [("user", [], "deploy 2"), ("ops", [], ""), ("ops", [], ""),
                     ("ops", ["superseded"], ""),
                     ("user", [], "never mind, what is the weather?"),
                     ("ops", [], "OK, no deploy.")]
    superseded = events[3]
    assert superseded.invocation_id == second[-1].invocation_id  # the new run stored it
    assert superseded.function_responses[0].response == {"error": SUPERSEDED_MESSAGE,
                                                         "code": "superseded"}
    # The model saw the call answered, right after it, then the new message.
    request = model.requests[1].contents
    assert request[2].function_responses[0].response["code"] == "superseded"
    assert request[3].text == "never mind, what is the weather?"
    ledger = CallLedger.of(events)
    assert ledger.awaiting() == [] and ledger.dangling() == []

    with pytest.raises(ApprovalError, match="superseded: a later message was sent"):
        await turn(runner, session.id, approval_response(asked, True))
    restarted = runner_on(store.reopen(), ScriptedModel())
    with pytest.raises(ApprovalError, match=r"call 'd1' \(deploy\) was superseded"):
        await turn(restarted, session.id, approval_response(asked, True))
    assert ran == []
    assert len(await stored(service, session.id)) == len(events)  # nothing of either answer


async def test_an_answer_supersedes_nothing(store: Store) -> None:
    service = store.service
    session = await service.create_session(app_name="app", user_id="u")
    both = ScriptedTurn(calls=[ScriptedCall("deploy", {"version": "1"}, id="d1"),
                               ScriptedCall("deploy", {"version": "2"}, id="d2")])
    model = ScriptedModel().add(both).reply("1 is live; 2 waits.").reply("2 is live too.")
    runner = runner_on(service, model)
    asked = (await turn(runner, session.id, "deploy 1 and 2"))[-1].actions.requested_approvals
    assert [a.display for a in asked] == ["deploy 1 to staging", "deploy 2 to staging"]
    await turn(runner, session.id, approval_response(asked[0], True))
    assert ran == ["1@staging"]
    assert [r.call.id for r in CallLedger.of(await stored(service, session.id)).awaiting()] == [
        "d2"]
    await turn(runner_on(store.reopen(), model), session.id, approval_response(asked[1], True))
    assert ran == ["1@staging", "2@staging"]
