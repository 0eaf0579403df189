"""Approval answers and long-running results arriving in a message, checked against the session."""

from __future__ import annotations

from ..errors import ApprovalError, UserError
from ..events import ApprovalDecision
from ..sessions.ledger import CallLedger
from ..tools.approval import APPROVAL_RESPONSE_NAME
from ..types import Content, FunctionCall, Part


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
            raise ApprovalError(f"no approval is pending for call {decision.call_id!r} "
                                "(unknown, or already answered)")
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
