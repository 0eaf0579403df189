"""What a provider sends, at the byte level: SSE streams, JSON error bodies, 400s.

The framing follows the recorded streams in ``fixtures/provider-streams``:

* OpenAI chat completions: one ``data: {json}\\n\\n`` event per chunk, compact
  JSON (``separators=(",", ":")``) with raw UTF-8, a role chunk first, the finish
  chunk, a usage-only chunk with ``"choices": []`` and ``data: [DONE]\\n\\n``.
* Anthropic Messages: ``event: <type>\\ndata: {json}\\n\\n`` per event, a ping
  after the first ``content_block_start`` whose JSON is ``{"type": "ping"}``
  (with a space, as the API sends it).

Every renderer is pure and deterministic (fixed ids and timestamps) so a test can
compare what a client received with ``b"".join(render_...(...))``. The error
bodies and the history checks (a tool call must be answered by its result) copy
the providers' shapes and messages, so adapters meet the 400s they will meet live.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from http import HTTPStatus
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal, NotRequired, Required, TypedDict

ErrorFormat = Literal["openai", "anthropic", "gemini"]

DEFAULT_OPENAI_USAGE: Mapping[str, int] = MappingProxyType(
    {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
)
"""The usage ``render_openai`` sends when none is given."""

DEFAULT_ANTHROPIC_USAGE: Mapping[str, int] = MappingProxyType(
    {"input_tokens": 10, "output_tokens": 5}
)
"""The usage ``render_anthropic`` sends when none is given."""

_PING = b'event: ping\ndata: {"type": "ping"}\n\n'
_DONE = b"data: [DONE]\n\n"
_EVENT_END = re.compile(rb".*?(?:\r\n\r\n|\n\n|\r\r)|.+", re.DOTALL)


class ToolCallSpec(TypedDict, total=False):
    """One tool call for a renderer.

    Keys:
        name: the tool's name (required).
        id: the call id; defaults to ``call_<n>`` (OpenAI) or ``toolu_<n>`` (Anthropic).
        arguments: a JSON string, sent as is (so it may be incomplete on purpose),
            or a mapping, serialised with ``json.dumps``; defaults to ``"{}"``.
        fragments: into how many argument deltas to split it (default 1).
    """

    name: Required[str]
    id: NotRequired[str]
    arguments: NotRequired[str | Mapping[str, Any]]
    fragments: NotRequired[int]


def _json(payload: Any) -> bytes:  # Any: raw wire JSON
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()


def _data(payload: Any) -> bytes:  # Any: raw wire JSON
    return b"data: " + _json(payload) + b"\n\n"


def _event(name: str, payload: Any) -> bytes:  # Any: raw wire JSON
    return f"event: {name}\n".encode() + _data(payload)


def arguments_json(call: ToolCallSpec) -> str:
    """A call's arguments as the JSON text a provider streams."""
    arguments = call.get("arguments", "{}")
    return arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)


def fragments(text: str, count: int) -> list[str]:
    """Splits ``text`` into ``count`` pieces of near-equal length (fewer if it is short)."""
    count = max(1, min(count, len(text)))
    size, extra = divmod(len(text), count)
    pieces, start = [], 0
    for n in range(count if text else 0):
        end = start + size + (1 if n < extra else 0)
        pieces.append(text[start:end])
        start = end
    return pieces


def render_openai(
    text: Sequence[str] = (),
    tool_calls: Sequence[ToolCallSpec] = (),
    reasoning: Sequence[str] = (),
    refusal: Sequence[str] = (),
    finish_reason: str | None = "stop",
    usage: Mapping[str, Any] | None = DEFAULT_OPENAI_USAGE,
    done: bool = True,
    model: str = "gpt-4o-mini",
    error: Mapping[str, Any] | None = None,
    *,
    response_id: str = "chatcmpl-fake0001",
    created: int = 1727346168,
    reasoning_key: str = "reasoning_content",
) -> list[bytes]:
    """Renders an OpenAI chat-completions stream, one element per SSE event.

    Order: the role chunk; one chunk per ``reasoning`` piece (under
    ``reasoning_key``: DeepSeek's ``reasoning_content`` or Groq's ``reasoning``),
    per ``text`` piece and per ``refusal`` piece; per tool call a header chunk
    (``index``, ``id``, ``name``, ``arguments: ""``) and its argument fragments;
    the finish chunk (unless ``finish_reason`` is None); the usage-only chunk
    (unless ``usage`` is None; ``total_tokens`` is added when missing); and
    ``data: [DONE]`` when ``done``.

    Args:
        error: when given, an in-band ``event: error`` follows the content chunks
            and ends the stream (no finish, usage or ``[DONE]``), as Groq sends it.
            Either the inner error object (wrapped as ``{"error": ...}``) or the
            whole ``{"error": {...}}`` payload.

    Returns:
        A new list of bytes, one SSE event each; join it for the whole body.
    """
    head = {
        "id": response_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "system_fingerprint": "fp_fake",
    }

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return _data({**head, "choices": [choice]})

    role = {"role": "assistant", "content": None if refusal else "",
            "refusal": "" if refusal else None}
    events = [chunk(role)]
    events += [chunk({reasoning_key: piece}) for piece in reasoning]
    events += [chunk({"content": piece}) for piece in text]
    events += [chunk({"refusal": piece}) for piece in refusal]
    for n, call in enumerate(tool_calls):
        function = {"name": call["name"], "arguments": ""}
        opening = {"index": n, "id": call.get("id", f"call_{n}"), "type": "function",
                   "function": function}
        events.append(chunk({"tool_calls": [opening]}))
        for piece in fragments(arguments_json(call), call.get("fragments", 1)):
            events.append(chunk({"tool_calls": [{"index": n, "function": {"arguments": piece}}]}))
    if error is not None:
        payload = dict(error) if set(error) == {"error"} else {"error": dict(error)}
        return [*events, b"event: error\n" + _data(payload)]
    if finish_reason is not None:
        events.append(chunk({}, finish_reason))
    if usage is not None:
        counts = dict(usage)
        if "total_tokens" not in counts and {"prompt_tokens", "completion_tokens"} <= set(counts):
            counts["total_tokens"] = counts["prompt_tokens"] + counts["completion_tokens"]
        events.append(_data({**head, "choices": [], "usage": counts}))
    if done:
        events.append(_DONE)
    return events


def render_anthropic(
    text: Sequence[str] = (),
    tool_calls: Sequence[ToolCallSpec] = (),
    thinking: Sequence[str] = (),
    stop_reason: str | None = "end_turn",
    usage: Mapping[str, Any] | None = DEFAULT_ANTHROPIC_USAGE,
    message_stop: bool = True,
    model: str = "claude-sonnet-4-20250514",
    error: Mapping[str, Any] | None = None,
    *,
    message_id: str = "msg_fake0001",
    signature: str | None = "EqQBCkYIBxgCKkBfakeSignature==",
) -> list[bytes]:
    """Renders an Anthropic Messages stream, one element per SSE event.

    Order: ``message_start`` (its usage carries ``input_tokens`` and the cache
    counts from ``usage``, and ``output_tokens: 1``); then the blocks, each
    ``content_block_start``, its deltas and ``content_block_stop``: a thinking
    block (a ``thinking_delta`` per piece, then a ``signature_delta`` unless
    ``signature`` is None), a text block (a ``text_delta`` per piece), a
    ``tool_use`` block per call (an empty ``input_json_delta`` then the
    fragments); a ``ping`` after the first ``content_block_start`` (or after
    ``message_start`` when there is no block); ``message_delta`` with
    ``stop_reason`` and ``usage`` as given (omitted when ``stop_reason`` is None);
    ``message_stop`` when ``message_stop``.

    Args:
        error: when given, ``event: error`` follows the last delta, in place of
            the last ``content_block_stop``, and ends the stream. Either the inner
            object (``type`` defaults to ``overloaded_error``, ``message`` to
            ``Overloaded``) or the whole ``{"type": "error", "error": {...}}``.

    Returns:
        A new list of bytes, one SSE event each; join it for the whole body.
    """
    counts = dict(usage or {})
    start_usage = {
        "input_tokens": counts.get("input_tokens", 0),
        "cache_creation_input_tokens": counts.get("cache_creation_input_tokens", 0),
        "cache_read_input_tokens": counts.get("cache_read_input_tokens", 0),
        "output_tokens": 1,
        "service_tier": "standard",
    }
    message: dict[str, Any] = {
        "id": message_id, "type": "message", "role": "assistant", "model": model,
        "content": [], "stop_reason": None, "stop_sequence": None, "usage": start_usage,
    }
    events = [_event("message_start", {"type": "message_start", "message": message})]
    blocks: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []
    if thinking:
        deltas = [{"type": "thinking_delta", "thinking": piece} for piece in thinking]
        if signature is not None:
            deltas.append({"type": "signature_delta", "signature": signature})
        blocks.append(({"type": "thinking", "thinking": "", "signature": ""}, deltas))
    if text:
        blocks.append(({"type": "text", "text": ""},
                       [{"type": "text_delta", "text": piece} for piece in text]))
    for n, call in enumerate(tool_calls):
        block = {"type": "tool_use", "id": call.get("id", f"toolu_{n}"), "name": call["name"],
                 "input": {}}
        pieces = ["", *fragments(arguments_json(call), call.get("fragments", 1))]
        blocks.append((block, [{"type": "input_json_delta", "partial_json": p} for p in pieces]))
    for index, (block, deltas) in enumerate(blocks):
        events.append(_event("content_block_start",
                             {"type": "content_block_start", "index": index,
                              "content_block": block}))
        if index == 0:
            events.append(_PING)
        events += [_event("content_block_delta",
                          {"type": "content_block_delta", "index": index, "delta": delta})
                   for delta in deltas]
        events.append(_event("content_block_stop", {"type": "content_block_stop", "index": index}))
    if not blocks:
        events.append(_PING)
    if error is not None:
        if blocks:
            events.pop()
        inner = {"type": "overloaded_error", "message": "Overloaded", **error}
        payload = dict(error) if error.get("type") == "error" else {"type": "error",
                                                                     "error": inner}
        return [*events, _event("error", payload)]
    if stop_reason is not None:
        delta = {"type": "message_delta",
                 "delta": {"stop_reason": stop_reason, "stop_sequence": None}}
        events.append(_event("message_delta", delta if usage is None else {**delta,
                                                                            "usage": counts}))
    if message_stop:
        events.append(_event("message_stop", {"type": "message_stop"}))
    return events


def load_transcript(path: str | Path) -> bytes:
    """Reads a recorded ``.sse`` body unchanged, to serve byte for byte.

    Raises:
        OSError: when the file cannot be read.
    """
    return Path(path).read_bytes()


def split_events(body: bytes) -> list[bytes]:
    """Splits an SSE body after each blank line (LF, CRLF or CR), keeping every byte.

    ``b"".join(split_events(body)) == body`` always holds; a trailing incomplete
    event is kept as the last element. Use it to serve a transcript one event per
    chunk or to cut it with :func:`cut_inside_utf8`.
    """
    return [match.group() for match in _EVENT_END.finditer(body)]


def split_inside_characters(body: bytes) -> list[bytes]:
    """``body`` as network reads cut inside every multi-byte UTF-8 character.

    Serve the pieces as one scenario's body: an adapter that decodes each read
    on its own, instead of the stream, garbles every such character.
    """
    pieces, start = [], 0
    for i in range(1, len(body)):
        if 0x80 <= body[i] < 0xC0 and body[i - 1] >= 0xC0:
            pieces.append(body[start:i])
            start = i
    pieces.append(body[start:])
    return pieces


def cut_inside_utf8(body: Sequence[bytes], after_events: int) -> list[bytes]:
    """Keeps events whole up to a cut in the middle of a multi-byte UTF-8 character.

    The result is ``body[:after_events]``, then any ASCII-only events that follow,
    then the first event at index ``after_events`` or later that holds a
    multi-byte character, cut just after that character's first byte. Append
    ``Close()`` or ``Reset()`` to end the response there.

    Raises:
        ValueError: when no event from ``after_events`` on holds a multi-byte
            character.
    """
    for index in range(after_events, len(body)):
        event = body[index]
        lead = next((i for i, byte in enumerate(event) if byte >= 0xC0), None)
        if lead is not None:
            return [*body[:index], event[: lead + 1]]
    raise ValueError(
        f"cut_inside_utf8: no event from index {after_events} on (of {len(body)}) holds a "
        "multi-byte UTF-8 character; put non-ASCII text into the rendered stream"
    )


_OPENAI_TYPES = {429: "requests"}
_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


def default_message(status: int) -> str:
    """A short message for an error status, like the providers' ("Overloaded" for 529)."""
    if status == 529:
        return "Overloaded"
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return f"Error {status}"


def error_body(
    format: ErrorFormat,
    status: int,
    message: str,
    *,
    error_type: str | None = None,
    param: str | None = None,
    code: str | None = None,
) -> bytes:
    """A JSON error body shaped like the provider's for an HTTP error.

    OpenAI: ``{"error": {"message", "type", "param", "code"}}``, indented as the
    API sends it (``type`` defaults to ``invalid_request_error`` below 500,
    ``requests`` for 429, ``server_error`` from 500). Anthropic:
    ``{"type": "error", "error": {"type", "message"}}``, compact (``type``
    defaults by status: ``rate_limit_error``, ``overloaded_error``, ...).
    ``param`` and ``code`` apply to OpenAI only.
    """
    if format == "anthropic":
        fallback = "api_error" if status >= 500 else "invalid_request_error"
        kind = error_type or _ANTHROPIC_TYPES.get(status, fallback)
        return _json({"type": "error", "error": {"type": kind, "message": message}})
    fallback = "server_error" if status >= 500 else "invalid_request_error"
    kind = error_type or _OPENAI_TYPES.get(status, fallback)
    inner = {"message": message, "type": kind, "param": param, "code": code}
    return json.dumps({"error": inner}, ensure_ascii=False, indent=4).encode() + b"\n"


# -- history validation, as the providers do it ------------------------------------

def format_of(path: str) -> ErrorFormat | None:
    """Whose API a path is: Anthropic for ``…/v1/messages``, OpenAI for ``…/chat/completions``."""
    if path.endswith("/v1/messages"):
        return "anthropic"
    if path.endswith("/chat/completions"):
        return "openai"
    return None


def history_problem(format: ErrorFormat, body: bytes) -> tuple[str, str | None] | None:
    """Why the provider would answer 400 to this request body: ``(message, param)``, or None.

    The body must be JSON. OpenAI: an assistant message's ``tool_calls`` must be
    answered by ``tool`` messages (``tool_call_id``) before any other message, and
    every ``tool`` message must answer an open call. Anthropic: every ``tool_use``
    id must have a ``tool_result`` (``tool_use_id``) in the next (user) message,
    and every ``tool_result`` a ``tool_use`` in the previous one.
    """
    try:
        payload = json.loads(body)
    except ValueError:
        return "We could not parse the JSON body of your request.", None
    messages = payload.get("messages") if isinstance(payload, dict) else None
    if not isinstance(messages, list):
        return None
    check = _openai_history if format == "openai" else _anthropic_history
    message = check([m if isinstance(m, dict) else {} for m in messages])
    return None if message is None else (message, "messages")


_OPENAI_UNANSWERED = (
    "An assistant message with 'tool_calls' must be followed by tool messages responding to "
    "each 'tool_call_id'. The following tool_call_ids did not have response messages: {ids}"
)
_OPENAI_ORPHAN = (
    "Invalid parameter: messages with role 'tool' must be a response to a preceeding message "
    "with 'tool_calls'."
)
_ANTHROPIC_UNANSWERED = (
    "messages.{n}: `tool_use` ids were found without `tool_result` blocks immediately after: "
    "{ids}. Each `tool_use` block must have a corresponding `tool_result` block in the next "
    "message."
)
_ANTHROPIC_ORPHAN = (
    "messages.{n}.content.{m}: unexpected `tool_use_id` found in `tool_result` blocks: {id}. "
    "Each `tool_result` block must have a corresponding `tool_use` block in the previous "
    "message."
)


def _openai_history(messages: list[dict[str, Any]]) -> str | None:  # Any: raw wire JSON
    """Tool calls must be answered by ``tool`` messages before any other message."""
    open_ids: list[str] = []
    for message in messages:
        if message.get("role") == "tool":
            if message.get("tool_call_id") not in open_ids:
                return _OPENAI_ORPHAN
            open_ids.remove(message["tool_call_id"])
            continue
        if open_ids:
            break
        if message.get("role") == "assistant":
            open_ids = [str(call.get("id")) for call in message.get("tool_calls") or ()]
    return _OPENAI_UNANSWERED.format(ids=", ".join(open_ids)) if open_ids else None


def _blocks(message: dict[str, Any], kind: str) -> list[dict[str, Any]]:  # Any: raw wire JSON
    content = message.get("content")
    if not isinstance(content, list):
        return []
    return [b for b in content if isinstance(b, dict) and b.get("type") == kind]


def _anthropic_history(messages: list[dict[str, Any]]) -> str | None:  # Any: raw wire JSON
    """Each ``tool_use`` needs a ``tool_result`` in the very next (user) message, and back."""
    called: list[str] = []
    for n, message in enumerate(messages):
        results = _blocks(message, "tool_result") if message.get("role") == "user" else []
        answered = [block.get("tool_use_id") for block in results]
        missing = [call for call in called if call not in answered]
        if missing:
            return _ANTHROPIC_UNANSWERED.format(n=n - 1, ids=", ".join(missing))
        content = message.get("content")
        for block in results:
            if block.get("tool_use_id") not in called and isinstance(content, list):
                return _ANTHROPIC_ORPHAN.format(n=n, m=content.index(block),
                                                id=block.get("tool_use_id"))
        uses = _blocks(message, "tool_use") if message.get("role") == "assistant" else []
        called = [str(block.get("id")) for block in uses]
    if called:
        return _ANTHROPIC_UNANSWERED.format(n=len(messages) - 1, ids=", ".join(called))
    return None
