"""``POST /vercel/{agent}``: the same runs as the Vercel AI SDK UI message stream (v1).

The request is the body ``useChat`` sends (``DefaultChatTransport``): ``id`` is
the chat, which is the session (created for the caller on first use), and
only the **last** message is read — the session already holds the history.
A user message's text parts are the new message; an assistant message carries
the client's answers: ``approval-responded`` tool parts become approval
answers, and tool outputs the client supplied for pending long-running calls
become function responses. Anything else is a 400 before any byte is streamed.

The run is started and followed by :class:`~.core.Gateway` (auth, limits,
persistence, cancellation on disconnect); this module only translates the
request, and :mod:`headwater.gateway.wire.vercel` the frames (its docstring has
the table).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from ..agents.approvals import not_pending, superseded
from ..core.types import Content, FunctionResponse, Part
from ..sessions.ledger import CallLedger
from ..tools.approval import approval_response
from .core import STREAM_RESPONSES, CurrentUser, GatewayDep
from .http.problems import GatewayHTTPError, request_id_of
from .wire.vercel import TOOL_FAILED, UI_MESSAGE_STREAM_HEADERS, UIMessageEncoder, chunk, error_text

# -- the request ---------------------------------------------------------------------------------


class ToolApproval(BaseModel):
    """A tool part's ``approval`` as the client answered it."""

    model_config = ConfigDict(extra="allow")
    id: str = ""
    approved: bool | None = None
    reason: str | None = None


class UIPart(BaseModel):
    """One part of a UI message; only the fields the gateway reads are declared."""

    model_config = ConfigDict(extra="allow")
    type: str
    text: str | None = None
    toolCallId: str | None = None  # the AI SDK spells its fields in camelCase
    state: str | None = None
    output: Any = None  # wire JSON the client supplied for a long-running call
    errorText: str | None = None
    preliminary: bool | None = None
    approval: ToolApproval | None = None


class UIMessageIn(BaseModel):
    """A UI message of the chat (``useChat``'s ``messages[]``)."""

    model_config = ConfigDict(extra="allow")
    id: str = ""
    role: Literal["system", "user", "assistant"]
    parts: list[UIPart] = Field(default_factory=list)


class ChatRequest(BaseModel):
    """The body ``DefaultChatTransport`` posts: the chat id, its messages, the trigger."""

    model_config = ConfigDict(extra="allow")  # the app's own ``body`` fields ride along
    id: str = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9._:-]+$")
    messages: list[UIMessageIn] = Field(min_length=1)
    trigger: Literal["submit-message", "regenerate-message"] = "submit-message"
    messageId: str | None = None


@dataclass(frozen=True, slots=True)
class Turn:
    """What the last message of a chat request asks the run to do.

    Attributes:
        content: the new message of the run.
        continues: the id of the assistant message this run extends, if any.
        denied: calls the client denied (their result is a denial).
        supplied: calls whose output the client supplied (not echoed back).
    """

    content: Content
    continues: str | None = None
    denied: frozenset[str] = frozenset()
    supplied: frozenset[str] = frozenset()


def turn_of(body: ChatRequest, ledger: CallLedger) -> Turn:
    """The run a chat request asks for, checked against the session's pending calls.

    Raises:
        GatewayHTTPError: ``invalid_request`` (400) for a regenerate request, or
            a last message that is neither user text nor answers to pending calls.
    """
    if body.trigger == "regenerate-message":
        raise GatewayHTTPError("invalid_request", "regenerating a message is not supported; "
                               "send a new message", status=400)
    last = body.messages[-1]
    if last.role == "user":
        parts = [Part(text=p.text) for p in last.parts if p.type == "text" and p.text]
        if not parts:
            raise GatewayHTTPError("invalid_request", "the last message has no text",
                                   status=400)
        return Turn(Content("user", parts))
    if last.role == "assistant":
        return _answers(last, ledger)
    raise GatewayHTTPError("invalid_request", "the last message is a user's or the "
                           "assistant's", status=400)


def _answers(message: UIMessageIn, ledger: CallLedger) -> Turn:
    parts: list[Part] = []
    denied: set[str] = set()
    supplied: set[str] = set()
    for part in message.parts:
        call_id = part.toolCallId
        if call_id is None or not _is_tool_part(part.type):
            continue
        approval = part.approval
        record = ledger.record(call_id)
        if (part.state == "approval-responded" and approval is not None
                and approval.approved is not None):
            if ledger.awaiting_approval(call_id):
                parts += approval_response(call_id, approval.approved, approval.reason).parts
                if not approval.approved:
                    denied.add(call_id)
                continue
            if record is not None and superseded(record):  # answered since: refused, said why
                raise GatewayHTTPError("invalid_request", not_pending(ledger, call_id),
                                       status=400)
        if (record is not None and record.status == "long_running" and not part.preliminary
                and part.state in ("output-available", "output-error")):
            response = (_error_output(part.errorText) if part.state == "output-error"
                        else _output(part.output))
            parts.append(Part(function_response=FunctionResponse(
                id=call_id, name=record.call.name, response=response)))
            supplied.add(call_id)
    if not parts:
        raise GatewayHTTPError("invalid_request", "the last message answers no pending "
                               "approval or long-running call", status=400)
    return Turn(Content("user", parts), message.id or None, frozenset(denied),
                frozenset(supplied))


def _is_tool_part(kind: str) -> bool:
    return kind.startswith("tool-") or kind == "dynamic-tool"


def _output(output: Any) -> dict[str, Any]:  # wire JSON
    return output if isinstance(output, dict) else {"result": output}


def _error_output(text: str | None) -> dict[str, Any]:
    return {"error": text or TOOL_FAILED}


# -- the route -----------------------------------------------------------------------------------


router = APIRouter(tags=["formats"])
"""``POST /vercel/{agent}``: a run as the Vercel AI SDK UI message stream."""


@router.post("/vercel/{agent}", response_class=Response, responses=STREAM_RESPONSES)
async def vercel_chat(request: Request, gw: GatewayDep, user: CurrentUser, agent: str,
                      body: ChatRequest) -> Response:
    gw.require_agent(agent)
    last = body.messages[-1]
    if last.role == "user":  # bounded before the chat's session is opened
        gw.check_message(Content("user", [Part(text=p.text) for p in last.parts
                                          if p.type == "text" and p.text]))
    session = await gw.open_session(user, agent, body.id)
    turn = turn_of(body, CallLedger.of(session.events))
    run = await gw.start_run(user, agent, body.id, gw.message_run(turn.content),
                             request_id_of(request))
    encoder = UIMessageEncoder(turn.continues or run.id, turn.denied, turn.supplied)
    return gw.stream(run, 0, render=encoder.render, headers=UI_MESSAGE_STREAM_HEADERS,
                     prologue=encoder.start())


__all__ = ("UI_MESSAGE_STREAM_HEADERS", "ChatRequest", "ToolApproval", "Turn", "UIMessageEncoder",
           "UIMessageIn", "UIPart", "chunk", "error_text", "router", "turn_of", "vercel_chat")
