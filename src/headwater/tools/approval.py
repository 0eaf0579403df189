"""Approval gates: the hash that binds an answer to the arguments, the line an approver
is shown, and the answer message."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from typing import Any

from ..core.events import ApprovalRequest
from ..core.types import Content, FunctionResponse, Part
from .options import ApprovalSummary

logger = logging.getLogger("headwater.tools")

APPROVAL_RESPONSE_NAME = "headwater:approval"
"""The function-response name that marks a part as an approval answer (never sent to a model)."""


def args_sha256(args: dict[str, Any]) -> str:  # raw JSON object
    """SHA-256 of the canonical JSON of a call's arguments (sorted keys, no spaces)."""
    canonical = json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def render_summary(tool_name: str, summary: str | ApprovalSummary | None,
                   values: Mapping[str, Any]) -> str | None:  # values: raw JSON and defaults
    """A tool's ``approval_summary`` for a call's arguments, as one line; ``None`` when the
    tool has none, or when it fails (logged): the approver is then shown the arguments.

    A template is filled from ``values`` (``str.format_map``); a function gets them as a
    new dict. Every run of whitespace becomes one space.
    """
    if summary is None:
        return None
    try:
        line = summary.format_map(values) if isinstance(summary, str) else summary(dict(values))
    except Exception as exc:  # the tool's own code, or a field without a value
        logger.warning("tool %r: approval_summary failed (%s); the approver is shown the "
                       "call's arguments instead", tool_name, type(exc).__name__)
        return None
    if not isinstance(line, str):
        logger.warning("tool %r: approval_summary returned %s, not str; the approver is shown "
                       "the call's arguments instead", tool_name, type(line).__name__)
        return None
    return " ".join(line.split()) or None


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
