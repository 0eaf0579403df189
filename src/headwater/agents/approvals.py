"""Approval answers and long-running results arriving in a message, checked against the session."""

from __future__ import annotations

from ..errors import ApprovalError, UserError
from ..events import ApprovalDecision, ApprovalRequest
from ..sessions.base import Session
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


def answered_calls(session: Session, content: Content | None,
                   decisions: list[ApprovalDecision]) -> Resume:
    """Check a message's answers against the session; the calls to resume, in order.

    Raises:
        ApprovalError: an answer for no pending approval (or a second answer),
            or bound to other arguments than the pending call's.
        UserError: a function response for no pending long-running call, or
            under another tool name.
    """
    calls: dict[str, FunctionCall] = {}
    requests: dict[str, ApprovalRequest] = {}
    long_running: set[str] = set()
    for event in session.events:
        for call in event.function_calls:
            calls[call.id] = call
        long_running.update(event.long_running_tool_ids)
        for asked in event.actions.requested_approvals:
            requests[asked.call_id] = asked
        for answered in event.actions.approval_decisions:
            requests.pop(answered.call_id, None)
    resume: Resume = []
    for decision in decisions:
        request = requests.get(decision.call_id)
        if request is None:
            raise ApprovalError(f"no approval is pending for call {decision.call_id!r} "
                                "(unknown, or already answered)")
        if decision.args_sha256 is not None and decision.args_sha256 != request.args_sha256:
            raise ApprovalError(f"the answer for call {decision.call_id!r} is bound to other "
                                "arguments than the pending call's; refusing it")
        del requests[decision.call_id]
        resume.append((calls[decision.call_id], decision))
    for response in content.function_responses if content is not None else ():
        made = calls.get(response.id)
        if made is None or response.id not in long_running:
            raise UserError(f"function response for {response.id!r}, which is no pending "
                            "long-running call of this session")
        if made.name != response.name:
            raise UserError(f"function response for {response.id!r} names {response.name!r}, "
                            f"but the call was to {made.name!r}")
    return resume
