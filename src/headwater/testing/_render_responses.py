"""What OpenAI's Responses API sends, at the byte level, and the 400s it answers.

The framing follows the recorded streams in
``fixtures/provider-streams/openai-responses``: one ``event: <type>\\ndata:
{json}\\n\\n`` per event, compact JSON with raw UTF-8, a ``sequence_number`` on
every event, ``response.created`` and ``response.in_progress`` first, each
output item opened by ``response.output_item.added`` and closed by
``response.output_item.done``, and one terminal event carrying the whole
response: ``response.completed``, ``response.incomplete`` or
``response.failed`` (an ``error`` event instead ends the stream without one).

Pure and deterministic (fixed ids and timestamps), like the other renderers.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from ._render import ToolCallSpec, arguments_json, fragments

DEFAULT_RESPONSES_USAGE: Mapping[str, Any] = MappingProxyType({
    "input_tokens": 10, "input_tokens_details": {"cached_tokens": 0},
    "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 15,
})
"""The usage ``render_openai_responses`` sends when none is given."""

RESPONSES_PATH_SUFFIX = "/responses"


def _json(payload: Any) -> bytes:  # Any: raw wire JSON
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()


class _Stream:
    """Numbers and frames the events of one response."""

    def __init__(self) -> None:
        self.events: list[bytes] = []

    def emit(self, kind: str, **fields: Any) -> None:  # Any: raw wire JSON
        payload = {"type": kind, "sequence_number": len(self.events), **fields}
        self.events.append(f"event: {kind}\n".encode() + b"data: " + _json(payload) + b"\n\n")

    def item(self, index: int, item: dict[str, Any], done: dict[str, Any]) -> None:
        self.emit("response.output_item.added", output_index=index, item=item)
        self.emit("response.output_item.done", output_index=index, item=done)


def render_openai_responses(
    text: Sequence[str] = (),
    tool_calls: Sequence[ToolCallSpec] = (),
    reasoning: Sequence[str] = (),
    refusal: Sequence[str] = (),
    status: str = "completed",
    incomplete_reason: str = "max_output_tokens",
    usage: Mapping[str, Any] | None = DEFAULT_RESPONSES_USAGE,
    terminal: bool = True,
    model: str = "gpt-4o-mini",
    error: Mapping[str, Any] | None = None,
    *,
    response_id: str = "resp_fake0001",
    created: int = 1727346168,
    encrypted_content: str | None = "gAAAAABfakeEncryptedReasoning==",
) -> list[bytes]:
    """Renders a Responses API stream, one element per SSE event.

    Order: ``response.created``, ``response.in_progress``; a reasoning item
    when ``reasoning`` is given (one summary part, a
    ``response.reasoning_summary_text.delta`` per piece; its done item carries
    ``encrypted_content`` unless that is None); a message item when ``text``
    or ``refusal`` is given (an ``output_text`` part with a delta per piece,
    then a ``refusal`` part with a delta per piece); a ``function_call`` item
    per call (``call_id`` from ``id``, default ``call_<n>``; the arguments in
    ``fragments`` deltas); then the terminal event for ``status``:
    ``response.completed``, ``response.incomplete`` (with
    ``incomplete_details.reason`` = ``incomplete_reason``) or
    ``response.failed`` (with ``error`` as the response's error, default
    ``server_error``). ``terminal=False`` leaves the terminal event out.

    Args:
        error: with ``status="failed"``, the failed response's error; with
            any other status, an ``error`` event (``code``, ``message`` and
            ``param`` at its top level, as the API reference has it) follows the
            output and ends the stream.

    Returns:
        A new list of bytes, one SSE event each; join it for the whole body.
    """
    stream = _Stream()
    response: dict[str, Any] = {
        "id": response_id, "object": "response", "created_at": created, "status": "in_progress",
        "error": None, "incomplete_details": None, "model": model, "output": [],
        "parallel_tool_calls": True, "store": False, "usage": None,
    }
    stream.emit("response.created", response=response)
    stream.emit("response.in_progress", response=response)
    output: list[dict[str, Any]] = []
    if reasoning:
        output.append(_reasoning(stream, len(output), reasoning, encrypted_content))
    if text or refusal:
        output.append(_message(stream, len(output), text, refusal))
    for n, call in enumerate(tool_calls):
        output.append(_function_call(stream, len(output), n, call))
    if error is not None and status != "failed":
        stream.emit("error", code=error.get("code", "server_error"),
                    message=error.get("message", "The server had an error."),
                    param=error.get("param"))
        return stream.events
    if terminal:
        final = {**response, "status": status, "output": output,
                 "usage": dict(usage) if usage is not None else None}
        if status == "incomplete":
            final["incomplete_details"] = {"reason": incomplete_reason}
        if status == "failed":
            final["error"] = dict(error or {"code": "server_error",
                                            "message": "The server had an error."})
        stream.emit(f"response.{status}", response=final)
    return stream.events


def _reasoning(stream: _Stream, index: int, pieces: Sequence[str],
               encrypted: str | None) -> dict[str, Any]:  # raw wire JSON
    item_id = f"rs_fake{index:04d}"
    summary = "".join(pieces)
    opened = {"id": item_id, "type": "reasoning", "summary": []}
    stream.emit("response.output_item.added", output_index=index, item=opened)
    where = {"item_id": item_id, "output_index": index, "summary_index": 0}
    stream.emit("response.reasoning_summary_part.added", **where,
                part={"type": "summary_text", "text": ""})
    for piece in pieces:
        stream.emit("response.reasoning_summary_text.delta", **where, delta=piece)
    stream.emit("response.reasoning_summary_text.done", **where, text=summary)
    stream.emit("response.reasoning_summary_part.done", **where,
                part={"type": "summary_text", "text": summary})
    done = {**opened, "summary": [{"type": "summary_text", "text": summary}]}
    if encrypted is not None:
        done["encrypted_content"] = encrypted
    stream.emit("response.output_item.done", output_index=index, item=done)
    return done


def _message(stream: _Stream, index: int, text: Sequence[str],
             refusal: Sequence[str]) -> dict[str, Any]:  # raw wire JSON
    item_id = f"msg_fake{index:04d}"
    opened = {"id": item_id, "type": "message", "status": "in_progress", "role": "assistant",
              "content": []}
    stream.emit("response.output_item.added", output_index=index, item=opened)
    parts: list[dict[str, Any]] = []
    for kind, pieces in (("output_text", text), ("refusal", refusal)):
        if not pieces:
            continue
        where = {"item_id": item_id, "output_index": index, "content_index": len(parts)}
        field = "text" if kind == "output_text" else "refusal"
        empty: dict[str, Any] = {"type": kind, field: ""}
        if kind == "output_text":
            empty["annotations"] = []
        stream.emit("response.content_part.added", **where, part=empty)
        for piece in pieces:
            stream.emit(f"response.{kind}.delta", **where, delta=piece)
        whole = "".join(pieces)
        stream.emit(f"response.{kind}.done", **where, **{field: whole})
        part = {**empty, field: whole}
        stream.emit("response.content_part.done", **where, part=part)
        parts.append(part)
    done = {**opened, "status": "completed", "content": parts}
    stream.emit("response.output_item.done", output_index=index, item=done)
    return done


def _function_call(stream: _Stream, index: int, n: int,
                   call: ToolCallSpec) -> dict[str, Any]:  # raw wire JSON
    item_id = f"fc_fake{index:04d}"
    arguments = arguments_json(call)
    opened = {"id": item_id, "type": "function_call", "status": "in_progress", "arguments": "",
              "call_id": call.get("id", f"call_{n}"), "name": call["name"]}
    stream.emit("response.output_item.added", output_index=index, item=opened)
    where = {"item_id": item_id, "output_index": index}
    for piece in fragments(arguments, call.get("fragments", 1)):
        stream.emit("response.function_call_arguments.delta", **where, delta=piece)
    stream.emit("response.function_call_arguments.done", **where, arguments=arguments)
    done = {**opened, "status": "completed", "arguments": arguments}
    stream.emit("response.output_item.done", output_index=index, item=done)
    return done


# -- request validation, as the Responses API does it --------------------------------

_UNANSWERED = "No tool output found for function call {id}."
_ORPHAN = "No tool call found for function call output with call_id {id}."
_NOT_PERSISTED = (
    "Item with id '{id}' not found. Items are not persisted when `store` is set to false. "
    "Try again with `store` set to true, or remove this item from your input."
)


def is_responses_path(path: str) -> bool:
    """Whether a request path is the Responses API's (``…/responses``)."""
    return path.endswith(RESPONSES_PATH_SUFFIX)


def responses_problem(body: bytes) -> tuple[str, str | None] | None:
    """Why the Responses API would answer 400 to this body: ``(message, param)``, or None.

    The body must be JSON. Every ``function_call`` in ``input`` needs a
    ``function_call_output`` with its ``call_id`` and every output a call
    before it; with ``store`` false a ``reasoning`` item must carry its
    ``encrypted_content`` (its id alone refers to nothing kept).
    """
    try:
        payload = json.loads(body)
    except ValueError:
        return "We could not parse the JSON body of your request.", None
    items = payload.get("input") if isinstance(payload, dict) else None
    if not isinstance(items, list):
        return None
    store = payload.get("store", True) is not False
    called: list[str] = []
    answered: set[str] = set()
    for item in (i for i in items if isinstance(i, dict)):
        kind = item.get("type")
        if kind == "function_call":
            called.append(str(item.get("call_id")))
        elif kind == "function_call_output":
            call_id = str(item.get("call_id"))
            if call_id not in called:
                return _ORPHAN.format(id=call_id), "input"
            answered.add(call_id)
        elif kind == "reasoning" and not store and not item.get("encrypted_content"):
            return _NOT_PERSISTED.format(id=item.get("id")), "input"
    missing = [c for c in called if c not in answered]
    return (_UNANSWERED.format(id=missing[0]), "input") if missing else None
