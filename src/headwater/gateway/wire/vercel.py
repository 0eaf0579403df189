"""The Vercel AI SDK UI message stream (v1) from a run's typed frames.

One :class:`UIMessageEncoder` per response turns the typed frames into UI
message chunks, each an SSE ``data:`` line of JSON; ``POST /vercel/{agent}``
(:mod:`headwater.gateway.vercel`) serves them:

=====================  ==========================================================
typed frame            UI message chunks
=====================  ==========================================================
(prologue)             ``start`` with ``messageId`` (the run id, or the assistant
                       message a continuation extends)
``delta``              ``text-start`` (once per part), ``text-delta``
``reasoning``          ``reasoning-start`` (once per part), ``reasoning-delta``
``message``            ``text-end`` of the streamed part (the text is never sent
                       twice); without deltas before it, start + delta + end
``tool_call``          ``tool-input-start``, ``tool-input-available`` (``input``
                       is the arguments for ``expose_result`` tools, else ``{}``)
``tool_progress``      ``tool-output-available`` with ``preliminary: true``
``tool_result``        ``tool-output-available`` (the response for
                       ``expose_result`` tools, else the summary), or
                       ``tool-output-error``, or ``tool-output-denied``
``approval_required``  ``tool-input-available`` again, ``input`` = the arguments (when
                       the frame has them), then ``tool-approval-request``
                       (``approvalId`` = the call id, ``approvalDescriptor`` =
                       ``{display, args_sha256}``, the client's
                       ``part.approval.descriptor``)
``agent_transfer``     ``data-agent-transfer`` (``id``: the call id; ``data``:
                       ``{author, to, call_id}``)
``agent_error``        ``data-agent-error`` (``data``: ``{author, branch, code,
                       message}``): one branch failed, the run goes on
``error``              ``error`` (``errorText``: the code and its fixed message)
``done`` / ``error``   open parts ended, ``finish-step``, ``finish`` (with
                       ``finishReason`` and usage in ``messageMetadata``),
                       then ``data: [DONE]``
=====================  ==========================================================

Each model call is one step (``start-step`` … ``finish-step``); a call's tool
outputs stay in its step.

Provenance: the UI message stream has no author field, so each agent's text
(and reasoning) is its own part — one per author and branch — and the agent
rides on the part as ``providerMetadata.headwater = {"author", "branch"?}``
(on ``text-start``/``reasoning-start``, which the client keeps on the part);
a tool part carries the same as ``callProviderMetadata.headwater`` (from
``tool-input-start``/``tool-input-available``). A client reads
``part.providerMetadata?.headwater?.author`` (text, reasoning) or
``part.callProviderMetadata?.headwater?.author`` (tools); the outer call of
an inner agent's part follows from its branch (docs/frame-protocol.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal

from ...core.errors import ERROR_MESSAGES
from ...core.sse import encode_event
from .frames import speaker_key
from .sse import Frame

UI_MESSAGE_STREAM_HEADERS: Final[Mapping[str, str]] = {"x-vercel-ai-ui-message-stream": "v1"}
"""The header that tells the AI SDK client the body is a UI message stream."""

_DONE: Final = b"data: [DONE]\n\n"
TOOL_FAILED: Final = "The tool call failed."
"""What a failed tool call shows when it has no error text of its own."""


# -- the response --------------------------------------------------------------------------------


def chunk(data: Mapping[str, Any]) -> bytes:
    """One UI message chunk as an SSE event: ``data: <json>`` and a blank line."""
    return encode_event(data)


class UIMessageEncoder:
    """Typed frames to UI message chunks, for one response (it keeps the open parts).

    Args:
        message_id: the assistant message's id (``start.messageId``).
        denied: calls the client denied in this request (``tool-output-denied``).
        supplied: calls whose output the client supplied (their result is not echoed).
    """

    def __init__(self, message_id: str, denied: frozenset[str] = frozenset(),
                 supplied: frozenset[str] = frozenset()) -> None:
        self.message_id = message_id
        self.denied = denied
        self.supplied = supplied
        self.text: dict[str, str] = {}  # author (and branch) -> its open text part
        self.reasoning: dict[str, str] = {}  # author -> its open reasoning part
        self.streamed: set[str] = set()  # authors whose text came as deltas since their message
        self.step: Literal["none", "open", "sealed"] = "none"
        self.last_type = ""
        self.progress: dict[str, str] = {}  # call id -> its progress text so far
        self.finish_reason = "stop"

    def start(self) -> bytes:
        """The prologue: the ``start`` chunk."""
        return chunk({"type": "start", "messageId": self.message_id})

    def render(self, frame: Frame) -> bytes:
        """The chunks of one typed frame (a :data:`~.responses.Render`)."""
        out: list[dict[str, Any]] = []
        data = frame.data
        kind = frame.type
        if kind in ("delta", "reasoning", "message", "tool_call"):
            self._step(kind, out)
        if kind == "delta":
            self._delta(data, "text", frame.id, out)
        elif kind == "reasoning":
            self._delta(data, "reasoning", frame.id, out)
        elif kind == "message":
            self._message(data, frame.id, out)
        elif kind == "tool_call":
            self._tool_call(data, out)
        elif kind == "tool_progress":
            self._progress(data, out)
        elif kind == "tool_result":
            self._tool_result(data, out)
        elif kind == "approval_required":
            self._approval(data, out)
        elif kind == "agent_transfer":
            out.append({"type": "data-agent-transfer", "id": data["call_id"],
                        "data": {"author": data["author"], "to": data["to"],
                                 "call_id": data["call_id"]}})
        elif kind == "agent_error":
            code = str(data["code"])
            words = ERROR_MESSAGES.get(code, ERROR_MESSAGES["internal"])  # type: ignore[call-overload]
            out.append({"type": "data-agent-error", "data": {
                "author": data["author"], "branch": data["branch"], "code": code,
                "message": words}})
        elif kind == "error":
            self._close_parts(out)
            out.append({"type": "error", "errorText": error_text(data)})
            self.finish_reason = "error"
            self._finish(None, out)
        elif kind == "done":
            self._close_parts(out)
            self._finish(data.get("usage"), out)
        self.last_type = kind
        body = b"".join(map(chunk, out))
        return body + _DONE if frame.terminal else body

    def _step(self, kind: str, out: list[dict[str, Any]]) -> None:
        """Open a step for model output; a model call after a stored one starts the next."""
        same_event = kind == "tool_call" and self.last_type == "message"
        if self.step == "sealed" and not same_event:
            self._close_parts(out)
            out.append({"type": "finish-step"})
            self.step = "none"
        if self.step == "none":
            out.append({"type": "start-step"})
            self.step = "open"

    def _delta(self, data: Mapping[str, Any], kind: Literal["text", "reasoning"],
               frame_id: int, out: list[dict[str, Any]]) -> None:
        key = speaker_key(data["author"], data.get("branch"))
        other = self.reasoning if kind == "text" else self.text
        if key in other:
            out.append({"type": f"{'reasoning' if kind == 'text' else 'text'}-end",
                        "id": other.pop(key)})
        parts = self.text if kind == "text" else self.reasoning
        if kind == "text":
            self.streamed.add(key)
        part_id = parts.get(key)
        if part_id is None:
            part_id = parts[key] = f"{kind[0]}{frame_id}"
            out.append({"type": f"{kind}-start", "id": part_id,
                        "providerMetadata": _provenance(data)})
        out.append({"type": f"{kind}-delta", "id": part_id, "delta": data["text"]})

    def _message(self, data: Mapping[str, Any], frame_id: int,
                 out: list[dict[str, Any]]) -> None:
        key = speaker_key(data["author"], data.get("branch"))
        reasoning = self.reasoning.pop(key, None)
        if reasoning is not None:
            out.append({"type": "reasoning-end", "id": reasoning})
        part_id = self.text.pop(key, None)
        if part_id is not None:
            out.append({"type": "text-end", "id": part_id})
        elif key not in self.streamed:  # no deltas came before it (streaming "none")
            part_id = f"t{frame_id}"
            out += [{"type": "text-start", "id": part_id,
                     "providerMetadata": _provenance(data)},
                    {"type": "text-delta", "id": part_id, "delta": str(data["text"])},
                    {"type": "text-end", "id": part_id}]
        self.streamed.discard(key)
        self.step = "sealed"
        self.finish_reason = "other" if data.get("interrupted") else "stop"

    def _tool_call(self, data: Mapping[str, Any], out: list[dict[str, Any]]) -> None:
        provenance = _provenance(data)
        for call in data["calls"]:
            call_id, name = call["id"], call["name"]
            out += [{"type": "tool-input-start", "toolCallId": call_id, "toolName": name,
                     "providerMetadata": provenance},
                    {"type": "tool-input-available", "toolCallId": call_id, "toolName": name,
                     "input": call.get("args", {}), "providerMetadata": provenance}]
        self.step = "sealed"
        self.finish_reason = "tool-calls"

    def _approval(self, data: Mapping[str, Any], out: list[dict[str, Any]]) -> None:
        """An approval: the part's ``input`` becomes the arguments the approver is asked
        about (``tool_call`` sent ``{}`` for a tool that does not expose them), and the
        request carries the line to show (the frame's ``display``)."""
        call_id = data["call_id"]
        if "args" in data:
            out.append({"type": "tool-input-available", "toolCallId": call_id,
                        "toolName": data["name"], "input": data["args"],
                        "providerMetadata": _provenance(data)})
        out.append({"type": "tool-approval-request", "approvalId": call_id,
                    "toolCallId": call_id,
                    "approvalDescriptor": {"display": data.get("display") or data["name"],
                                           "args_sha256": data["args_sha256"]}})
        self.finish_reason = "tool-calls"

    def _progress(self, data: Mapping[str, Any], out: list[dict[str, Any]]) -> None:
        call_id = str(data["call_id"])
        delta = data.get("delta")
        text = self.progress.get(call_id, "") + (delta if isinstance(delta, str) else "")
        self.progress[call_id] = text
        out.append({"type": "tool-output-available", "toolCallId": call_id, "preliminary": True,
                    "output": {"type": data["type"], "index": data["index"], "delta": delta,
                               "text": text, "progress": data.get("progress"),
                               "total": data.get("total"), "message": data.get("message")}})

    def _tool_result(self, data: Mapping[str, Any], out: list[dict[str, Any]]) -> None:
        for result in data["results"]:
            call_id = result["id"]
            self.progress.pop(call_id, None)
            if call_id in self.supplied:
                continue  # the client's own output, stored: nothing new to show
            if call_id in self.denied:
                out.append({"type": "tool-output-denied", "toolCallId": call_id})
            elif result["status"] == "error":
                out.append({"type": "tool-output-error", "toolCallId": call_id,
                            "errorText": _tool_error(result)})
            else:
                output = result["response"] if "response" in result else {
                    "status": result["status"], "size": result["size"]}
                out.append({"type": "tool-output-available", "toolCallId": call_id,
                            "output": output})
        self.finish_reason = "tool-calls"

    def _close_parts(self, out: list[dict[str, Any]]) -> None:
        out += [{"type": "reasoning-end", "id": i} for i in self.reasoning.values()]
        out += [{"type": "text-end", "id": i} for i in self.text.values()]
        self.reasoning.clear()
        self.text.clear()

    def _finish(self, usage: Mapping[str, Any] | None, out: list[dict[str, Any]]) -> None:
        if self.step != "none":
            out.append({"type": "finish-step"})
            self.step = "none"
        finish: dict[str, Any] = {"type": "finish", "finishReason": self.finish_reason}
        if usage is not None:
            tokens_in, tokens_out = usage["input_tokens"], usage["output_tokens"]
            finish["messageMetadata"] = {"usage": {"inputTokens": tokens_in,
                                                   "outputTokens": tokens_out,
                                                   "totalTokens": tokens_in + tokens_out}}
        out.append(finish)


def error_text(data: Mapping[str, Any]) -> str:
    """An ``error`` frame's text for the client: its code, the code's fixed message and
    the request id (never any provider or exception text)."""
    code = str(data["code"])
    message = ERROR_MESSAGES.get(code, ERROR_MESSAGES["internal"])  # type: ignore[call-overload]
    return f"{code}: {message} (request {data['request_id']})"


def _tool_error(result: Mapping[str, Any]) -> str:
    error = result.get("response", {}).get("error")
    return error if isinstance(error, str) and error else TOOL_FAILED


def _provenance(data: Mapping[str, Any]) -> dict[str, Any]:
    """A part's ``providerMetadata``: the agent that made it (and its branch)."""
    branch = data.get("branch")
    agent = {"author": data["author"], "branch": branch} if branch else {"author": data["author"]}
    return {"headwater": agent}
