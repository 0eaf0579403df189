"""Events to typed frames: the one home of what the browser may see.

A run's events become the frames of docs/frame-protocol.md (``delta``,
``message``, ``tool_call``, ``tool_progress``, ``tool_result``,
``approval_required``, then one terminal ``error`` or ``done``), and a stored
event becomes one history item with the same summaries. A live run's mapper
(``live=True``) adds ``tool_emission`` (what a live streaming tool tells the
model and the user) and ``turn_complete`` (the model ended its turn, maybe
cut short). Tool arguments and
results leave only as summaries (names, ids, status, size, an error result's
code, a hash) unless the tool sets ``expose_result=True``; partial tool calls
never leave at all. An approval is the exception: the approver is the
session's owner, so ``approval_required`` (and the history's
``approvals_requested``) carries the line to show, ``display``, and the
arguments unless the tool summarises them (:meth:`FrameMapper.approval`).

Provenance: every frame made from an event carries its ``author`` (the agent
that made it) and, off the main line, its ``branch``; a result event that
hands the conversation over (``actions.transfer_to_agent``) adds an
``agent_transfer`` frame, and an error event on a branch (a parallel agent's
failing branch, which ends alone) is an ``agent_error`` frame, not the run's end.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final

from ...agents.live_flow import PENDING
from ...agents.transfer import TRANSFER_TO_AGENT
from ...core.errors import ERRORS, TOOL_ERROR_CODES, ErrorCode, error_info
from ...core.events import ApprovalRequest, Event
from ...core.types import Content, FunctionResponse, Usage
from ...sessions.ledger import calls_above

FramePayload = tuple[str, dict[str, Any]]
"""A frame before it is numbered and encoded: its type and its data."""

RETRYABLE: Final[frozenset[str]] = frozenset(
    code for code, info in ERRORS.items() if info.retryable)
"""Error codes after which the same request may succeed later (from the registry,
:data:`headwater.errors.ERRORS`)."""

_compact = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def result_status(response: Mapping[str, Any]) -> str:
    """``"error"`` for an error result (it carries an ``"error"`` key); ``"pending"`` for a
    live streaming tool's answer in a live run, given at once (its values follow as
    ``tool_emission`` frames); else ``"ok"``."""
    if "error" in response:
        return "error"
    return "pending" if response == PENDING else "ok"


def result_size(response: Mapping[str, Any]) -> int:
    """The size of a result's JSON in UTF-8 bytes (what the model was given, before bounds)."""
    return len(_compact(response).encode())


def error_frame(code: ErrorCode | str, request_id: str) -> FramePayload:
    """The terminal ``error`` frame of a code (never any provider or exception text)."""
    return "error", {"code": code, "retryable": code in RETRYABLE, "request_id": request_id}


def done_frame(usage: Usage) -> FramePayload:
    """The terminal ``done`` frame with the run's summed usage."""
    return "done", {"usage": {"input_tokens": usage.input_tokens,
                              "output_tokens": usage.output_tokens}}


def above(branch: str | None, of: str | None) -> bool:
    """Whether ``branch`` is a branch ``of`` descends from (the main line, ``None``, is
    above every branch): an event there means the run went on past ``of``'s end."""
    if branch is None:
        return of is not None
    return of is not None and of.startswith(branch) and of[len(branch):len(branch) + 1] == "."


def outer_call_id(branch: str | None) -> str | None:
    """The call a frame on ``branch`` nests under: an agent used as a tool runs on its
    call's branch, ``<calling agent>:<call id>`` (``sessions.ledger.call_branch``), so
    the innermost such segment names the call (``sessions.ledger.calls_above``);
    ``None`` when no segment names a call (the main line, a parallel agent's
    ``<parallel>.<sub>``)."""
    above = calls_above(branch)
    return above[-1] if above else None


def speaker_key(author: str, branch: str | None) -> str:
    """The key of one speaker's draft: its author, and its branch off the main line (a
    client keeps one draft per key, docs/frame-protocol.md, "Provenance").
    ``speaker_key("", branch)`` is the suffix every key on ``branch`` ends with."""
    return f"{author}\0{branch}" if branch else author


def _on_branch(frame: dict[str, Any], branch: str | None) -> dict[str, Any]:
    """``frame`` with its ``branch`` when the event ran on one (docs/frame-protocol.md,
    "Provenance"): the main line's frames carry none."""
    if branch:
        frame["branch"] = branch
    return frame


class FrameMapper:
    """Turns a run's events into frame payloads for one agent's tools.

    Args:
        exposes: whether a tool (by name) set ``expose_result=True``; its
            arguments and results go out raw.
        live: map a live run's events: live tool emissions become
            ``tool_emission`` frames and the end of each model turn a
            ``turn_complete`` frame (other runs never give them).
    """

    __slots__ = ("exposes", "live")

    def __init__(self, exposes: Callable[[str], bool], *, live: bool = False) -> None:
        self.exposes = exposes
        self.live = live

    def frames(self, event: Event) -> Iterator[FramePayload]:
        """The frames an event gives, in order (none for a partial tool call or a thought).

        An error event gives its terminal ``error`` frame only through
        :func:`error_frame`: the caller ends the run on it.
        """
        return self._partial(event) if event.partial else self._whole(event)

    @staticmethod
    def _partial(event: Event) -> Iterator[FramePayload]:
        """A partial event's frames: ``tool_progress``, or ``delta`` and ``reasoning``."""
        progress = event.tool_progress
        if progress is not None:
            item = progress.event
            data = {"author": event.author, "call_id": progress.call_id,
                    "name": progress.tool_name, "type": item.type, "index": item.index,
                    "delta": item.delta, "progress": item.progress, "total": item.total,
                    "message": item.message}
            yield "tool_progress", _on_branch(data, event.branch)
            return
        content = event.content
        if content is not None and content.role == "model":
            text = content.text
            if text:
                yield "delta", _on_branch({"author": event.author, "text": text}, event.branch)
            thought = content.thought_text
            if thought:
                yield "reasoning", _on_branch({"author": event.author, "text": thought},
                                              event.branch)

    def _whole(self, event: Event) -> Iterator[FramePayload]:
        """A whole event's frames: its content's, then approvals and the turn's end."""
        content = event.content
        branch = event.branch
        if content is not None and content.role == "model":
            yield from self._model(event, content)
        elif content is not None:
            responses = content.function_responses
            if responses:
                yield from self._results(event, responses)
            elif self.live and event.branch and event.branch.startswith(f"{event.author}/"):
                text = content.text
                if text:  # a live stream told the model (and the user): "<agent>/<call id>"
                    yield "tool_emission", {"author": event.author, "id": event.id,
                                            "call_id": event.branch[len(event.author) + 1:],
                                            "branch": event.branch, "text": text}
        for request in event.actions.requested_approvals:
            yield "approval_required", _on_branch(
                {"author": event.author, **self.approval(request)}, branch)
        if self.live and event.turn_complete and event.author != "user":
            yield "turn_complete", {"author": event.author, "interrupted": event.interrupted}

    def _model(self, event: Event, content: Content) -> Iterator[FramePayload]:
        """A model's whole event: its ``message`` and its ``tool_call``."""
        branch = event.branch
        text = content.text
        if text:
            message: dict[str, Any] = {"author": event.author, "id": event.id, "text": text,
                                       "final": event.is_final_response()}
            if event.interrupted:
                message["interrupted"] = True
            yield "message", _on_branch(message, branch)
        calls = content.function_calls
        if calls:
            call_frame: dict[str, Any] = {
                "author": event.author, "names": [c.name for c in calls],
                "calls": [self._call(c.id, c.name, c.args) for c in calls]}
            yield "tool_call", _on_branch(call_frame, branch)

    def _results(self, event: Event,
                 responses: list[FunctionResponse]) -> Iterator[FramePayload]:
        """Tool results: ``tool_result``, and ``agent_transfer`` when one transferred."""
        branch = event.branch
        result_frame: dict[str, Any] = {
            "author": event.author, "count": len(responses),
            "results": [self._result(r) for r in responses]}
        yield "tool_result", _on_branch(result_frame, branch)
        target = event.actions.transfer_to_agent
        if target:
            transfer: dict[str, Any] = {"author": event.author, "to": target,
                                        "call_id": _transfer_call(responses)}
            yield "agent_transfer", _on_branch(transfer, branch)

    @staticmethod
    def branch_error(event: Event) -> FramePayload:
        """The ``agent_error`` frame of an error event on a branch: that branch ended in an
        error and the others go on (the run's terminal frame comes at its end)."""
        code = event.error_code or "internal"
        return "agent_error", {"author": event.author, "branch": event.branch, "code": code,
                               "retryable": code in RETRYABLE}

    def history_item(self, event: Event) -> dict[str, Any]:
        """One stored event as the history endpoint shows it (summaries as in frames)."""
        content = event.content
        item: dict[str, Any] = {
            "id": event.id, "invocation_id": event.invocation_id, "author": event.author,
            "timestamp": event.timestamp, "role": content.role if content is not None else None,
            "text": content.text if content is not None else "",
            "final": event.author != "user" and event.is_final_response(),
        }
        if event.branch:
            item["branch"] = event.branch
        if event.interrupted:
            item["interrupted"] = True
        if content is not None:
            calls = content.function_calls
            if calls:
                item["calls"] = [self._call(c.id, c.name, c.args) for c in calls]
            responses = content.function_responses
            if responses:
                item["results"] = [self._result(r) for r in responses]
        actions = event.actions
        if actions.requested_approvals:
            item["approvals_requested"] = [self.approval(r) for r in actions.requested_approvals]
        if actions.approval_decisions:
            item["approval_decisions"] = [
                {"call_id": d.call_id, "approved": d.approved, "reason": d.reason}
                for d in actions.approval_decisions]
        if event.error_code is not None:
            item["error"] = {"code": event.error_code,
                             "message": error_info(event.error_code).message}
        if actions.transfer_to_agent:
            item["transfer_to"] = actions.transfer_to_agent
        if actions.state_delta:  # the session's own state, which its owner reads anyway
            item["state_delta"] = dict(actions.state_delta)
        if event.usage is not None:
            item["usage"] = {"input_tokens": event.usage.input_tokens,
                             "output_tokens": event.usage.output_tokens}
        return item

    def approval(self, request: ApprovalRequest) -> dict[str, Any]:
        """An approval as every surface shows it (the frame, the history, and through them
        AG-UI, Vercel, the page and chat): the call, the hash its answer is bound to, and
        ``display``, the line the approver reads (``ApprovalRequest.display``). The
        arguments go along — the approver is the session's owner — unless the tool gives a
        summary in their place (then only with ``expose_result``)."""
        shown: dict[str, Any] = {"call_id": request.call_id, "name": request.tool_name,
                                 "args_sha256": request.args_sha256,
                                 "display": request.display}
        if request.summary is None or self.exposes(request.tool_name):
            shown["args"] = request.args
        return shown

    def _call(self, call_id: str, name: str, args: Mapping[str, Any]) -> dict[str, Any]:
        call: dict[str, Any] = {"id": call_id, "name": name}
        if self.exposes(name):
            call["args"] = args
        return call

    def _result(self, response: FunctionResponse) -> dict[str, Any]:
        body = response.response
        status = result_status(body)
        result: dict[str, Any] = {"id": response.id, "name": response.name,
                                  "status": status, "size": result_size(body)}
        code = body.get("code") if status == "error" else None
        if code in TOOL_ERROR_CODES:  # a fixed word (denied, superseded...), never payload
            result["code"] = code
        if self.exposes(response.name):
            result["response"] = body
        return result


def _transfer_call(responses: list[FunctionResponse]) -> str | None:
    """The id of the ``transfer_to_agent`` call a result event answers."""
    for response in responses:
        if response.name == TRANSFER_TO_AGENT:
            return response.id
    return None
