"""What the Gemini API sends, at the byte level: ``streamGenerateContent?alt=sse`` bodies.

The framing follows the recorded streams in
``fixtures/provider-streams/gemini``: one ``data: {json}\\r\\n\\r\\n`` event per
``GenerateContentResponse``, JSON written as the API writes it (``": "`` after
a key, ``","`` between items), ``usageMetadata`` repeated cumulatively on every
chunk, the ``finishReason`` on the last candidate chunk, no terminal sentinel.
Error bodies are Google's ``{"error": {"code", "message", "status"}}``; the
history checks copy the API's 400 messages (a function-call turn must follow a
user turn or a function-response turn, and be answered part for part; on
Gemini 3 the first call of each model turn of the current turn must carry a
``thoughtSignature``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from ._render import ToolCallSpec
from ._render import fragments as split_text

DEFAULT_GEMINI_USAGE: Mapping[str, int] = MappingProxyType(
    {"promptTokenCount": 10, "candidatesTokenCount": 5}
)
"""The usage ``render_gemini`` sends when none is given (``totalTokenCount`` is added)."""

_STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
           404: "NOT_FOUND", 409: "ABORTED", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL",
           501: "NOT_IMPLEMENTED", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}


def _data(payload: Any, eol: str) -> bytes:  # Any: raw wire JSON
    text = json.dumps(payload, ensure_ascii=False, separators=(",", ": "))
    return f"data: {text}{eol}{eol}".encode()


def _arguments(call: ToolCallSpec) -> dict[str, Any]:  # raw JSON object
    arguments = call.get("arguments", {})
    value = json.loads(arguments) if isinstance(arguments, str) else dict(arguments)
    if not isinstance(value, dict):
        raise ValueError("render_gemini: a call's arguments must be a JSON object")
    return value


def _leaves(value: Any, path: str) -> list[tuple[str, Any]]:  # Any: raw JSON
    if isinstance(value, dict) and value:
        return [leaf for key, item in value.items() for leaf in _leaves(item, f"{path}.{key}")]
    if isinstance(value, list) and value:
        return [leaf for n, item in enumerate(value) for leaf in _leaves(item, f"{path}[{n}]")]
    return [(path, value)]


def _partial_args(arguments: dict[str, Any], fragments: int) -> list[list[dict[str, Any]]]:
    """One ``partialArgs`` list per chunk: each leaf, strings in ``fragments`` pieces."""
    chunks: list[list[dict[str, Any]]] = []
    for path, value in _leaves(arguments, "$"):
        if path == "$":  # no arguments: nothing to stream
            continue
        if isinstance(value, str):
            pieces = split_text(value, fragments) if value else []
            chunks += [[{"jsonPath": path, "stringValue": p, "willContinue": True}]
                       for p in pieces]
            chunks.append([{"jsonPath": path, "stringValue": ""}])
        elif isinstance(value, bool):
            chunks.append([{"jsonPath": path, "boolValue": value}])
        elif value is None:
            chunks.append([{"jsonPath": path, "nullValue": None}])
        elif isinstance(value, int | float):
            chunks.append([{"jsonPath": path, "numberValue": value}])
        else:  # an empty object or list
            chunks.append([{"jsonPath": path, "structValue" if isinstance(value, dict)
                            else "listValue": value}])
    return chunks


def render_gemini(
    text: Sequence[str] = (),
    tool_calls: Sequence[ToolCallSpec] = (),
    thoughts: Sequence[str] = (),
    finish_reason: str | None = "STOP",
    usage: Mapping[str, Any] | None = DEFAULT_GEMINI_USAGE,
    model: str = "gemini-2.5-flash",
    error: Mapping[str, Any] | None = None,
    *,
    block_reason: str | None = None,
    signature: str | None = "CiQBjz1rX0fakeSignature==",
    response_id: str = "hwFakeResponse0001",
    eol: str = "\r\n",
) -> list[bytes]:
    """Renders a Gemini ``streamGenerateContent?alt=sse`` body, one element per event.

    Order: one chunk per ``thoughts`` piece (``thought: true``), one per
    ``text`` piece, then the calls: a call with ``fragments`` > 1 streams its
    arguments by JSON path (a ``name`` + ``willContinue`` chunk, ``partialArgs``
    chunks with strings in ``fragments`` pieces, an empty closing
    ``functionCall``); the others go whole (``args``), together in one chunk
    (parallel calls). ``signature`` goes on the first call, or, without calls,
    on an empty text part of the finish chunk. The finish chunk carries
    ``finishReason`` (omitted when None: a stream cut short). Every chunk
    carries ``usageMetadata`` (cumulative; the counts of ``usage``) unless
    ``usage`` is None. A call's ``id`` is sent only when the spec gives one
    (the Gemini API sends none).

    Args:
        error: when given, an in-band ``{"error": {...}}`` event follows the
            content chunks and ends the stream (``code`` defaults to 503,
            ``status`` to ``UNAVAILABLE``).
        block_reason: the prompt was blocked: the whole body is one chunk with
            ``promptFeedback.blockReason`` and no candidates.
        eol: ``"\\r\\n"`` as the API frames events, or ``"\\n"``.

    Returns:
        A new list of bytes, one SSE event each; join it for the whole body.
    """
    counts = dict(usage or {})
    if counts and "totalTokenCount" not in counts:
        counts["totalTokenCount"] = sum(
            counts.get(k, 0) for k in ("promptTokenCount", "candidatesTokenCount",
                                       "thoughtsTokenCount", "toolUsePromptTokenCount"))
    tail: dict[str, Any] = {"modelVersion": model, "responseId": response_id}
    if counts:
        tail = {"usageMetadata": counts, **tail}

    def chunk(parts: list[dict[str, Any]], finish: str | None = None) -> bytes:
        candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}}
        if finish is not None:
            candidate["finishReason"] = finish
        candidate["index"] = 0
        return _data({"candidates": [candidate], **tail}, eol)

    if block_reason is not None:
        feedback = {"blockReason": block_reason}
        return [_data({"promptFeedback": feedback, **tail}, eol)]
    events = [chunk([{"text": piece, "thought": True}]) for piece in thoughts]
    events += [chunk([{"text": piece}]) for piece in text]
    events += _calls(tool_calls, signature, chunk)
    if error is not None:
        inner = {"code": 503, "message": "The model is overloaded. Please try again later.",
                 "status": "UNAVAILABLE", **error}
        return [*events, _data({"error": inner}, eol)]
    if finish_reason is not None:
        last: dict[str, Any] = {"text": ""}
        if signature is not None and not tool_calls:
            last["thoughtSignature"] = signature
        events.append(chunk([last], finish_reason))
    return events


def _calls(tool_calls: Sequence[ToolCallSpec], signature: str | None,
           chunk: Any) -> list[bytes]:  # Any: the chunk builder of render_gemini
    events: list[bytes] = []
    whole: list[dict[str, Any]] = []
    for n, call in enumerate(tool_calls):
        head: dict[str, Any] = {"name": call["name"]}
        if "id" in call:
            head["id"] = call["id"]
        part: dict[str, Any] = {"functionCall": head}
        if n == 0 and signature is not None:
            part["thoughtSignature"] = signature
        arguments = _arguments(call)
        if call.get("fragments", 1) <= 1:
            head["args"] = arguments
            whole.append(part)
            continue
        head["willContinue"] = True
        events.append(chunk([part]))
        events += [chunk([{"functionCall": {"partialArgs": pieces, "willContinue": True}}])
                   for pieces in _partial_args(arguments, call.get("fragments", 1))]
        events.append(chunk([{"functionCall": {}}]))
    if whole:
        events.append(chunk(whole))
    return events


def gemini_error_body(status: int, message: str, *, error_type: str | None = None,
                      retry_delay: str | None = None) -> bytes:
    """Google's JSON error body: ``{"error": {"code", "message", "status"}}``, indented.

    ``error_type`` is the ``status`` (defaults by HTTP status: ``RESOURCE_EXHAUSTED``
    for 429, ``UNAVAILABLE`` for 503, ...). ``retry_delay`` (e.g. ``"7s"``) adds the
    ``RetryInfo`` detail Google sends with a 429 instead of a ``Retry-After`` header.
    """
    kind = error_type or _STATUS.get(status, "INTERNAL" if status >= 500 else "INVALID_ARGUMENT")
    inner: dict[str, Any] = {"code": status, "message": message, "status": kind}
    if retry_delay is not None:
        inner["details"] = [{"@type": "type.googleapis.com/google.rpc.RetryInfo",
                             "retryDelay": retry_delay}]
    return json.dumps({"error": inner}, ensure_ascii=False, indent=2).encode() + b"\n"


def is_gemini_path(path: str) -> bool:
    """Whether a request path is a Gemini ``generateContent`` or ``streamGenerateContent``."""
    return path.endswith((":streamGenerateContent", ":generateContent"))


_BAD_JSON = "Invalid JSON payload received. Unexpected token."
_CALL_ORDER = ("Please ensure that function call turn comes immediately after a user turn or "
               "after a function response turn.")
_CALL_COUNT = ("Please ensure that the number of function response parts is equal to the "
               "number of function call parts of the function call turn.")
_NO_SIGNATURE = ("Function call is missing a thought_signature in functionCall parts. This is "
                 "required for tools to work correctly, and missing thought_signature may lead "
                 "to degraded model performance. Additional data, function call `{name}` , "
                 "position {n}. Please refer to https://ai.google.dev/gemini-api/docs/"
                 "thought-signatures for more details.")


def gemini_history_problem(path: str, body: bytes) -> tuple[str, str | None] | None:
    """Why the Gemini API would answer 400 to this request: ``(message, None)``, or None."""
    try:
        payload = json.loads(body)
    except ValueError:
        return _BAD_JSON, None
    contents = payload.get("contents") if isinstance(payload, dict) else None
    if not isinstance(contents, list):
        return None
    turns = [c if isinstance(c, dict) else {} for c in contents]
    problem = _call_order(turns)
    if problem is None and "/models/gemini-3" in path:
        problem = _signatures(turns)
    return None if problem is None else (problem, None)


def _parts(turn: dict[str, Any], key: str) -> list[dict[str, Any]]:  # Any: raw wire JSON
    parts = turn.get("parts")
    return [p for p in parts if isinstance(p, dict) and key in p] if isinstance(parts,
                                                                                 list) else []


def _call_order(turns: list[dict[str, Any]]) -> str | None:  # Any: raw wire JSON
    calls = 0
    for n, turn in enumerate(turns):
        responses = len(_parts(turn, "functionResponse"))
        if calls and turn.get("role") != "model" and responses != calls:
            return _CALL_COUNT
        if responses and not calls:
            return _CALL_COUNT
        made = len(_parts(turn, "functionCall"))
        if made and (n == 0 or turns[n - 1].get("role") == "model"):
            return _CALL_ORDER
        calls = made if turn.get("role") == "model" else 0
    return None


def _signatures(turns: list[dict[str, Any]]) -> str | None:  # Any: raw wire JSON
    """In the current turn (after the last user text), each model turn's first call is signed."""
    start = 0
    for n, turn in enumerate(turns):
        if turn.get("role") != "model" and _parts(turn, "text"):
            start = n
    for turn in turns[start:]:
        if turn.get("role") != "model":
            continue
        parts = turn.get("parts")
        for m, part in enumerate(parts if isinstance(parts, list) else []):
            if isinstance(part, dict) and "functionCall" in part:
                if not (part.get("thoughtSignature") or part.get("thought_signature")):
                    call = part["functionCall"]
                    name = call.get("name") if isinstance(call, dict) else None
                    return _NO_SIGNATURE.format(name=f"default_api:{name}", n=m + 1)
                break
    return None
