"""Approval answers and long-running results arriving in a message, checked against the
session; and approvals a later message superseded.

**Superseded.** An approval is answered by the next turn or not at all: a plain
user message (no approval answer, no function response) sent while calls await
approval gives each of them a ``superseded`` error result, stored before the
message (one conditional write, like any result: the first wins), so the model
sees each call answered and a late answer is refused (:func:`answered_calls`
says why). ``run_async`` does it as the run starts; ``run_live`` when the
client's content arrives (docs/event-contract.md, "Tool error results").
"""

from __future__ import annotations

from typing import Any

from ..core.errors import ApprovalError, UserError
from ..core.events import ApprovalDecision, Event
from ..core.types import Content, FunctionCall, FunctionResponse, Part
from ..sessions.ledger import CallLedger, CallRecord
from ..tools.approval import APPROVAL_RESPONSE_NAME
from ._execution import CallOutcome, error_result
from .invocation import InvocationContext

SUPERSEDED_MESSAGE = ("Not run: the user sent another message instead of answering this "
                      "call's approval. Ask again if it is still wanted.")
"""What the model reads in a ``superseded`` result."""


def split_approvals(message: Content) -> tuple[Content | None, list[ApprovalDecision]]:
    """Separate approval answers (built by ``approval_response``) from the rest of a message."""
    decisions: list[ApprovalDecision] = []
    rest: list[Part] = []
    for part in message.parts:
        response = part.function_response
        if response is not None and response.name == APPROVAL_RESPONSE_NAME:
            answer = response.response
            decisions.append(ApprovalDecision(
                call_id=response.id, approved=answer.get("approved") is True,
                reason=answer.get("reason"), args_sha256=answer.get("args_sha256")))
        else:
            rest.append(part)
    if not decisions:
        return message, []
    return (Content(message.role, rest) if rest else None), decisions


Resume = list[tuple[FunctionCall, ApprovalDecision]]


def answered_calls(ledger: CallLedger, content: Content | None,
                   decisions: list[ApprovalDecision]) -> Resume:
    """Check a message's answers against the session's ledger; the calls to resume, in order.

    Raises:
        ApprovalError: an answer for no pending approval (or a second answer),
            or bound to other arguments than the pending call's.
        UserError: a function response for no pending long-running call, or
            under another tool name.
    """
    resume: Resume = []
    seen: set[str] = set()
    for decision in decisions:
        request = ledger.awaiting_approval(decision.call_id)
        if request is None or decision.call_id in seen:
            raise ApprovalError(not_pending(ledger, decision.call_id))
        if decision.args_sha256 is not None and decision.args_sha256 != request.args_sha256:
            raise ApprovalError(f"the answer for call {decision.call_id!r} is bound to other "
                                "arguments than the pending call's; refusing it")
        seen.add(decision.call_id)
        record = ledger.record(decision.call_id)
        assert record is not None  # an approval request names a call of the session
        resume.append((record.call, decision))
    for response in content.function_responses if content is not None else ():
        record = ledger.record(response.id)
        if record is None:
            raise UserError(f"function response for {response.id!r}, which is no pending "
                            "long-running call of this session")
        if record.call.name != response.name:
            raise UserError(f"function response for {response.id!r} names {response.name!r}, "
                            f"but the call was to {record.call.name!r}")
        if record.status != "long_running":
            raise UserError(f"function response for {response.id!r}, which is no pending "
                            f"long-running call of this session (it is {record.status})")
    return resume


def not_pending(ledger: CallLedger, call_id: str) -> str:
    """Why an answer for ``call_id`` is refused when no approval of it is pending."""
    record = ledger.record(call_id)
    if record is not None and superseded(record):
        return (f"the approval of call {call_id!r} ({record.call.name}) was superseded: a "
                "later message was sent before it was answered, so the call did not run "
                "and can no longer be approved; ask for it again")
    return f"no approval is pending for call {call_id!r} (unknown, or already answered)"


def superseded(record: CallRecord) -> bool:
    """Whether a call's result is the ``superseded`` one (its approval was never answered)."""
    response = record.response
    return (record.status == "answered" and response is not None
            and response.response.get("code") == "superseded")


def supersedes(content: Content | None, decisions: list[ApprovalDecision]) -> bool:
    """Whether a message (split by :func:`split_approvals`) supersedes pending approvals:
    a plain message, with no approval answer and no function response."""
    return not decisions and (content is None or not content.function_responses)


def superseded_result() -> dict[str, Any]:  # the model's JSON
    """The result a superseded call gets."""
    return error_result("superseded", SUPERSEDED_MESSAGE)


SUPERSEDED_INNER_MESSAGE = ("Not finished: the agent this call ran was waiting for an "
                            "approval, and the user sent another message instead of "
                            "answering it. Ask again if it is still wanted.")
"""What the model reads in the ``superseded`` result of a call to an agent used as a tool
that waited for such an approval."""


def superseded_event(ctx: InvocationContext, author: str) -> Event | None:
    """One event giving every call of the session that awaits approval a ``superseded``
    result, or ``None`` when none does; the calls of agents used as tools that waited only
    for them get one too (docs/multi-agent.md, "A pause inside a tree")."""
    ledger = ctx.ledger
    asked = ledger.awaiting()
    if not asked:
        return None
    parts = [Part(function_response=FunctionResponse(
        id=r.call.id, name=r.call.name, response=superseded_result())) for r in asked]
    parts += closed_waiting(ledger, [r.call.id for r in asked], "superseded",
                            SUPERSEDED_INNER_MESSAGE)
    return Event(invocation_id=ctx.invocation_id, author=author, content=Content("user", parts))


def closed_waiting(ledger: CallLedger, closing: list[str], code: str, message: str
                   ) -> list[Part]:
    """Results for the calls of agents used as tools that wait only for the calls
    ``closing`` (which get results in the same event): ``code`` with ``message``."""
    return [Part(function_response=FunctionResponse(
        id=r.call.id, name=r.call.name, response=error_result(code, message)))
        for r in ledger.orphaned_by(closing)]


def split_decisions(resume: Resume) -> tuple[list[FunctionCall], list[CallOutcome]]:
    """The approved calls to run, and a ``denied`` outcome for each refused one."""
    approved = [call for call, decision in resume if decision.approved]
    denied = [
        CallOutcome(call, error_result(
            "denied", "A human denied this call" + (f": {d.reason}" if d.reason else ".")))
        for call, d in resume if not d.approved
    ]
    return approved, denied
