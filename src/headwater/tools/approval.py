"""Approval gates: the hash that binds an answer to the arguments, and the answer message."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from ..events import ApprovalRequest
from ..types import Content, FunctionResponse, Part

APPROVAL_RESPONSE_NAME = "headwater:approval"
"""The function-response name that marks a part as an approval answer (never sent to a model)."""


def args_sha256(args: dict[str, Any]) -> str:  # raw JSON object
    """SHA-256 of the canonical JSON of a call's arguments (sorted keys, no spaces)."""
    canonical = json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def approval_response(
    call_id: str | ApprovalRequest,
    approved: bool,
    reason: str | None = None,
    *,
    args_sha256: str | None = None,
) -> Content:
    """The message that answers a pending approval; send it as ``new_message``.

    Args:
        call_id: the pending call's id, or the :class:`ApprovalRequest` itself
            (then its ``args_sha256`` is used, binding the answer to those arguments).
        approved: run the call (``True``) or send the model a ``denied`` result.
        reason: shown to the model with a denial.
        args_sha256: the hash of the arguments the human saw; an answer whose
            hash differs from the pending call's is refused.
    """
    if isinstance(call_id, ApprovalRequest):
        args_sha256 = args_sha256 or call_id.args_sha256
        call_id = call_id.call_id
    answer: dict[str, Any] = {"approved": approved, "reason": reason,
                              "args_sha256": args_sha256}
    return Content("user", [Part(function_response=FunctionResponse(
        id=call_id, name=APPROVAL_RESPONSE_NAME, response=answer))])
