"""The ledger's per-(agent, branch) views of the conversation (docs/multi-agent.md)."""

from __future__ import annotations

from headwater.events import Event
from headwater.sessions.ledger import CallLedger, visible
from headwater.types import Content, FunctionCall, FunctionResponse, Part


def said(author: str, text: str, branch: str | None = None) -> Event:
    role = "user" if author == "user" else "model"
    return Event(author=author, branch=branch, content=Content(role, [Part(text=text)]))


def called(author: str, call_id: str, branch: str | None = None) -> Event:
    return Event(author=author, branch=branch, content=Content("model", [Part(
        function_call=FunctionCall(call_id, "look", {"q": 1}))]))


def answered(author: str, call_id: str, result: str) -> Event:
    return Event(author=author, content=Content("user", [Part(
        function_response=FunctionResponse(call_id, "look", {"result": result}))]))


def flat(contents: list[Content]) -> list[str]:
    return [f"{c.role}: " + " | ".join(
        p.text if p.text is not None else
        f"call {p.function_call.id}" if p.function_call is not None else
        f"result {p.function_response.response}" if p.function_response is not None else "?"
        for p in c.parts) for c in contents]


def test_a_single_agent_session_is_served_by_the_ledger_contents_unchanged() -> None:
    ledger = CallLedger.of([said("user", "hi"), said("bot", "hello"),
                            said("bot", "tick", branch="bot/call-1")])  # a live stream's
    assert ledger.contents_for("bot") == ledger.contents
    assert ledger.contents_for("other") != ledger.contents  # another agent: a view
    assert ledger.speakers() == ["bot"]


def test_other_agents_are_recast_as_context_and_results_follow_into_views() -> None:
    ledger = CallLedger.of([said("user", "hi"), called("coord", "c1")])
    before = ledger.contents_for("billing")
    assert flat(before) == [
        "user: hi",
        'user: For context: | [coord] called tool `look` with parameters: {"q": 1}',
        "user: For context: | [coord] `look` tool returned result: "
        '{"status": "pending", "detail": "No result yet: the call awaits a human\'s approval '
        'or is still running."}']
    ledger.observe(answered("coord", "c1", "ok"))  # the view is kept level, not rebuilt
    ledger.observe(said("billing", "paid"))
    assert flat(ledger.contents_for("billing"))[2:] == [
        'user: For context: | [coord] `look` tool returned result: {"result": "ok"}',
        "model: paid"]
    assert flat(ledger.contents_for("coord"))[1:] == [
        "model: call c1", "user: result {'result': 'ok'}",
        "user: For context: | [billing] said: paid"]
    assert ledger.speakers() == ["billing", "coord"]
    assert len(before) == 3  # a list handed out earlier is not changed


def test_a_branch_sees_its_own_line_and_not_its_siblings() -> None:
    ledger = CallLedger.of([said("user", "go"), said("a", "from a", branch="p.a"),
                            said("b", "from b", branch="p.b"),
                            said("c", "nested", branch="p.a.q.c")])
    assert flat(ledger.contents_for("a", "p.a")) == ["user: go", "model: from a"]
    assert flat(ledger.contents_for("c", "p.a.q.c")) == [
        "user: go", "user: For context: | [a] said: from a", "model: nested"]
    assert len(ledger.contents_for("writer")) == 4  # no branch: everything
    assert visible("p.ab", "p.a") is False and visible("p.a.x", "p.a") is True
    assert visible(None, "p.b") is True and visible("p.a", None) is True
