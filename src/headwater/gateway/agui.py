"""``POST /ag-ui/{agent}``: the same runs as AG-UI 1.0 events (https://docs.ag-ui.com).

The request is AG-UI's ``RunAgentInput``: ``threadId`` is the session (created
for the caller when it is new), the last message — a user message — is the new
message, and ``resume[]`` answers the approvals a previous run paused on. The
run starts through :meth:`Gateway.start_run` and is followed through
:meth:`Gateway.stream`, exactly like the typed endpoint, so auth, limits,
persistence and cancellation on disconnect are the same; only the encoding
differs: :mod:`headwater.gateway.wire.agui` turns the typed frames into AG-UI
events (its docstring has the table).

An interrupt's id is the call id; a ``resume`` entry answers it with
``status: "resolved"`` and ``payload: {"approved": bool, "reason"?,
"args_sha256"?}``, or ``status: "cancelled"`` (a denial).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterator
from typing import Any, Final, Literal

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from ..core.types import Blob, Content, Part
from ..tools.approval import approval_response
from .core import STREAM_RESPONSES, CurrentUser, GatewayDep
from .http.problems import GatewayHTTPError, request_id_of
from .wire.agui import APPROVAL_SCHEMA, PROGRESS_ACTIVITY, AguiEncoder, encode_event

_MEDIA_PARTS: Final = frozenset({"image", "audio", "video", "document"})


# -- the request ---------------------------------------------------------------------------------


class AguiMessage(BaseModel):
    """One message of ``RunAgentInput.messages`` (only what the gateway reads)."""

    model_config = ConfigDict(extra="allow")
    id: str
    role: str
    content: str | list[dict[str, Any]] | None = None  # wire JSON content parts


class ResumeEntry(BaseModel):
    """An answer to one interrupt of the previous run."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)
    interrupt_id: str = Field(alias="interruptId", min_length=1)
    status: Literal["resolved", "cancelled"]
    payload: Any = None  # wire JSON: the answer


class RunAgentInput(BaseModel):
    """AG-UI's ``RunAgentInput`` (``tools``, ``context`` and ``state`` are accepted, unused)."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)
    thread_id: str = Field(alias="threadId", min_length=1, max_length=256)
    run_id: str = Field(alias="runId", min_length=1, max_length=256)
    messages: list[AguiMessage]
    resume: list[ResumeEntry] | None = None
    forwarded_props: Any = Field(default=None, alias="forwardedProps")  # wire JSON


def message_of(body: RunAgentInput) -> Content:
    """The run's new message: the approvals of ``resume``, else the last (user) message.

    Raises:
        GatewayHTTPError: ``invalid_request`` (400) for an input with neither,
            an answer without ``payload.approved`` or content the gateway cannot take.
    """
    if body.resume:
        parts: list[Part] = []
        for entry in body.resume:
            parts += _answer(entry).parts
        return Content("user", parts)
    if not body.messages or body.messages[-1].role != "user":
        raise _invalid("the last message must be a user message (or send resume)")
    parts = list(_parts(body.messages[-1].content))
    if not parts:
        raise _invalid("the message is empty")
    return Content("user", parts)


def _answer(entry: ResumeEntry) -> Content:
    if entry.status == "cancelled":
        return approval_response(entry.interrupt_id, False, "cancelled")
    payload = entry.payload
    if not isinstance(payload, dict) or not isinstance(payload.get("approved"), bool):
        raise _invalid("a resolved interrupt needs payload.approved (true or false)")
    reason, digest = payload.get("reason"), payload.get("args_sha256")
    return approval_response(entry.interrupt_id, payload["approved"],
                             reason if isinstance(reason, str) else None,
                             args_sha256=digest if isinstance(digest, str) else None)


def _parts(content: str | list[dict[str, Any]] | None) -> Iterator[Part]:
    if isinstance(content, str):
        if content.strip():
            yield Part(text=content)
        return
    for item in content or ():
        kind = item.get("type")
        if kind == "text" and isinstance(item.get("text"), str):
            yield Part(text=item["text"])
        elif kind in _MEDIA_PARTS:
            yield Part(inline_data=_blob(item.get("source")))
        else:
            raise _invalid("unsupported content part")


def _blob(source: Any) -> Blob:  # wire JSON
    if (not isinstance(source, dict) or source.get("type") != "data"
            or not isinstance(source.get("value"), str)
            or not isinstance(source.get("mimeType"), str)):
        raise _invalid("media parts must carry their bytes inline (source type 'data')")
    try:
        data = base64.b64decode(source["value"], validate=True)
    except (binascii.Error, ValueError):
        raise _invalid("a media part's value is not base64") from None
    return Blob(mime_type=source["mimeType"], data=data)


def _invalid(message: str) -> GatewayHTTPError:
    return GatewayHTTPError("invalid_request", message, status=400)


def _streaming(props: Any) -> bool:  # wire JSON
    return not (isinstance(props, dict) and props.get("streaming_mode") == "none")


# -- the route -----------------------------------------------------------------------------------


router = APIRouter(tags=["formats"])
"""``POST /ag-ui/{agent}``: a run as AG-UI events."""


@router.post("/ag-ui/{agent}", response_class=Response, responses=STREAM_RESPONSES)
async def run_agui(request: Request, gw: GatewayDep, user: CurrentUser, agent: str,
                   body: RunAgentInput) -> Response:
    gw.require_agent(agent)
    message = message_of(body)
    gw.check_message(message)  # before the thread's session is opened
    await gw.open_session(user, agent, body.thread_id)
    run = await gw.start_run(user, agent, body.thread_id,
                             gw.message_run(message, streaming=_streaming(body.forwarded_props)),
                             request_id_of(request))
    encoder = AguiEncoder(body.thread_id, body.run_id, run.id)
    return gw.stream(run, 0, render=encoder.render, prologue=encoder.started())


__all__ = ("APPROVAL_SCHEMA", "PROGRESS_ACTIVITY", "AguiEncoder", "AguiMessage", "ResumeEntry",
           "RunAgentInput", "encode_event", "message_of", "router", "run_agui")
