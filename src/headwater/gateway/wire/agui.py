"""AG-UI 1.0 events (https://docs.ag-ui.com) from a run's typed frames.

:class:`AguiEncoder` turns each typed frame (docs/frame-protocol.md) into AG-UI
events, ``data: <json>`` per SSE message; ``POST /ag-ui/{agent}``
(:mod:`headwater.gateway.agui`) serves them:

=====================  ==========================================================
typed frame            AG-UI events
=====================  ==========================================================
(before any frame)     ``RUN_STARTED``
``reasoning``          ``REASONING_START`` + ``REASONING_MESSAGE_START`` (once), then
                       ``REASONING_MESSAGE_CONTENT``; closed by the next other frame
``delta``              ``TEXT_MESSAGE_START`` (once per message, ``name``: the
                       author), ``TEXT_MESSAGE_CONTENT``
``message``            ``TEXT_MESSAGE_END`` after deltas (never the text again);
                       without deltas ``START`` + one ``CONTENT`` + ``END``
``tool_call``          per call ``TOOL_CALL_START``/``ARGS``/``END``; ``ARGS`` is the
                       arguments' JSON with ``expose_result=True``, else ``{}``
``tool_progress``      ``ACTIVITY_SNAPSHOT`` (first), then ``ACTIVITY_DELTA`` (a JSON
                       Patch appending the event), message id ``<call id>-progress``
``tool_result``        per result ``TOOL_CALL_RESULT`` (the summary JSON, or the
                       response with ``expose_result=True``)
``approval_required``  an interrupt, sent with ``RUN_FINISHED``: ``message`` "Approve
                       <display>?", ``metadata`` ``{toolName, args_sha256, display,
                       args?}`` (the frame's)
``agent_transfer``     ``CUSTOM`` named ``agent_transfer``, value ``{author, to, call_id}``
``agent_error``        ``SUBAGENT_ERROR`` of the branch's subagent (code and fixed message)
``done``               ``RUN_FINISHED`` with ``usage`` and outcome ``success``, or
                       ``interrupt`` (one per approval, ``reason: "tool_call"``)
``error``              ``RUN_ERROR`` with the code and its fixed message; ``cancelled``
                       is ``RUN_FINISHED`` with outcome ``cancelled`` instead
=====================  ==========================================================

Provenance: each agent's message is its own message (one id per author and
branch, ``name`` = the author, also on messages sent whole). Frames on a
branch (a parallel agent's sub-agent, an agent used as a tool) belong to a
subagent: the first frame of a branch opens it with ``SUBAGENT_STARTED``
(``subagentRunId`` ``<run>-s<n>``, ``name`` the author, ``parentSubagentRunId``
the enclosing branch's, ``parentToolCallId`` the call the branch names, see
docs/frame-protocol.md), every event made from its frames carries its
``subagentRunId``, and it ends with ``SUBAGENT_FINISHED`` when the result of
its call arrives (an agent used as a tool) or before ``RUN_FINISHED``/
``RUN_ERROR``, or with ``SUBAGENT_ERROR`` on an ``agent_error`` frame.

An interrupt's id is the call id (what a ``resume`` entry answers).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from ...core.errors import ERROR_MESSAGES
from ...core.sse import encode_event as sse_event
from ...core.sse import encode_json
from .frames import outer_call_id, speaker_key
from .sse import Frame

APPROVAL_SCHEMA: Final[Mapping[str, Any]] = {  # wire JSON Schema
    "type": "object",
    "properties": {"approved": {"type": "boolean"}, "reason": {"type": "string"},
                   "args_sha256": {"type": "string"}},
    "required": ["approved"],
}
"""The ``responseSchema`` of an approval interrupt: what ``resume[].payload`` carries."""

PROGRESS_ACTIVITY: Final = "TOOL_PROGRESS"
"""The ``activityType`` of a tool's progress."""


# -- the encoder ---------------------------------------------------------------------------------


def encode_event(event: Mapping[str, Any]) -> bytes:
    """One AG-UI event as an SSE message: ``data: <compact JSON>`` and a blank line."""
    return sse_event(event)


class AguiEncoder:
    """Turns one run's typed frames into AG-UI events; one per response.

    It keeps what the events need across frames: the open text and reasoning
    message of each author, the tool calls with progress already shown, the
    approvals to report with ``RUN_FINISHED``. Its :meth:`render` is the
    response's :data:`~.responses.Render`.

    Args:
        thread_id: the AG-UI thread (the session id).
        run_id: the AG-UI run id, as the client sent it.
        prefix: makes the message ids this encoder invents unique (the run's id).
    """

    def __init__(self, thread_id: str, run_id: str, prefix: str) -> None:
        self.thread_id = thread_id
        self.run_id = run_id
        self.prefix = prefix
        self._count = 0
        self._text: dict[str, str] = {}  # author (and branch) -> open text message id
        # author -> (span id, message id, subagent run id)
        self._thinking: dict[str, tuple[str, str, str | None]] = {}
        self._progress: set[str] = set()  # call ids whose activity exists
        self._interrupts: list[dict[str, Any]] = []
        self._last_message: str | None = None  # a message's id, for its event's tool calls
        self._subagents: dict[str, str] = {}  # branch -> its open subagent run id
        self._opened: list[dict[str, Any]] = []  # SUBAGENT_STARTED events of this frame

    def started(self) -> bytes:
        """``RUN_STARTED``: the response's prologue."""
        return encode_event({"type": "RUN_STARTED", "threadId": self.thread_id,
                             "runId": self.run_id})

    def render(self, frame: Frame) -> bytes:
        """The AG-UI events of one frame, encoded (``b""`` for none)."""
        if frame.type not in _RENDERED:  # a frame type this format does not carry
            return b""
        data = frame.data
        parent, self._last_message = self._last_message, None
        branch = data.get("branch")
        subagent = None if branch is None else self._subagent(branch, str(data["author"]))
        match frame.type:
            case "delta":
                events = self._delta(data)
            case "reasoning":
                events = self._reasoning(data)
            case "message":
                events = self._message(data)
            case "tool_call":
                events = self._close_thinking() + self._tool_calls(data, parent)
            case "tool_progress":
                events = self._close_thinking() + self._tool_progress(data)
            case "tool_result":
                events = self._close_thinking() + self._tool_results(data)
            case "approval_required":
                self._interrupts.append(self._interrupt(data))
                events = self._close_thinking()
            case "agent_transfer":
                events = [{"type": "CUSTOM", "name": "agent_transfer",
                           "value": {"author": data["author"], "to": data["to"],
                                     "call_id": data["call_id"]}}]
            case "agent_error":
                events = self._subagent_error(data)
            case "done":
                events = self._finish(data)
            case _:  # "error"
                events = self._error(data)
        for event in events:  # each event of a branch's frame is its subagent's
            if "subagentRunId" in event:  # set where made (closing another's message)
                if event["subagentRunId"] is None:
                    del event["subagentRunId"]
            elif subagent is not None and event["type"] not in _UNATTRIBUTED:
                event["subagentRunId"] = subagent
        if self._opened:
            events[:0] = self._opened
            self._opened = []
        if frame.type == "tool_result":
            events += self._subagents_of_calls(data)
        return b"".join(encode_event(event) for event in events)

    # -- subagents (branches) --------------------------------------------------------------------

    def _subagent(self, branch: str, author: str) -> str:
        """The open subagent run of ``branch``, opened (queued in ``_opened``) when new."""
        run_id = self._subagents.get(branch)
        if run_id is not None:
            return run_id
        parent = None
        cut = branch.rfind(".")
        while cut > 0:  # the nearest enclosing branch that is open
            parent = self._subagents.get(branch[:cut])
            if parent is not None:
                break
            cut = branch.rfind(".", 0, cut)
        run_id = self._subagents[branch] = self._new_id("s")
        started: dict[str, Any] = {"type": "SUBAGENT_STARTED", "subagentRunId": run_id,
                                   "name": author}
        if parent is not None:
            started["parentSubagentRunId"] = parent
        call_id = outer_call_id(branch)
        if call_id is not None:
            started["parentToolCallId"] = call_id
        self._opened.append(started)
        return run_id

    def _subagent_error(self, data: Mapping[str, Any]) -> list[dict[str, Any]]:
        branch = str(data["branch"])
        events = self._close_branch(branch)
        run_id = self._subagents.pop(branch)
        code = data["code"]
        events.append({"type": "SUBAGENT_ERROR", "subagentRunId": run_id, "code": code,
                       "message": ERROR_MESSAGES.get(code, ERROR_MESSAGES["internal"])})
        return events

    def _subagents_of_calls(self, data: Mapping[str, Any]) -> list[dict[str, Any]]:
        """``SUBAGENT_FINISHED`` for the open branches that name a call just answered."""
        answered = {result["id"] for result in data["results"]}
        events: list[dict[str, Any]] = []
        for branch in [b for b in self._subagents if outer_call_id(b) in answered]:
            events += self._close_branch(branch)
            events.append({"type": "SUBAGENT_FINISHED",
                           "subagentRunId": self._subagents.pop(branch)})
        return events

    def _close_branch(self, branch: str) -> list[dict[str, Any]]:
        """End the text messages still open on ``branch``."""
        suffix = speaker_key("", branch)
        events = []
        for key in [k for k in self._text if k.endswith(suffix)]:
            events.append({"type": "TEXT_MESSAGE_END", "messageId": self._text.pop(key),
                           "subagentRunId": self._subagents[branch]})
        return events

    # -- text and reasoning ----------------------------------------------------------------------

    def _new_id(self, kind: str) -> str:
        self._count += 1
        return f"{self.prefix}-{kind}{self._count}"

    def _delta(self, data: Mapping[str, Any]) -> list[dict[str, Any]]:
        author = data["author"]
        events = self._close_thinking(author)
        key = speaker_key(data["author"], data.get("branch"))
        message_id = self._text.get(key)
        if message_id is None:
            message_id = self._text[key] = self._new_id("m")
            events.append({"type": "TEXT_MESSAGE_START", "messageId": message_id,
                           "role": "assistant", "name": author})
        events.append({"type": "TEXT_MESSAGE_CONTENT", "messageId": message_id,
                       "delta": data["text"]})
        return events

    def _message(self, data: Mapping[str, Any]) -> list[dict[str, Any]]:
        author = data["author"]
        events = self._close_thinking(author)
        message_id = self._text.pop(speaker_key(data["author"], data.get("branch")), None)
        if message_id is None:  # no deltas came (streaming off, a tool-only turn's text)
            message_id = str(data["id"])
            events += [{"type": "TEXT_MESSAGE_START", "messageId": message_id,
                        "role": "assistant", "name": author},
                       {"type": "TEXT_MESSAGE_CONTENT", "messageId": message_id,
                        "delta": data["text"]}]
        events.append({"type": "TEXT_MESSAGE_END", "messageId": message_id})
        self._last_message = message_id
        return events

    def _reasoning(self, data: Mapping[str, Any]) -> list[dict[str, Any]]:
        author = data["author"]
        events: list[dict[str, Any]] = []
        ids = self._thinking.get(author)
        if ids is None:
            branch = data.get("branch")
            ids = self._thinking[author] = (self._new_id("r"), self._new_id("m"),
                                            None if branch is None else self._subagents[branch])
            events += [{"type": "REASONING_START", "messageId": ids[0]},
                       {"type": "REASONING_MESSAGE_START", "messageId": ids[1],
                        "role": "reasoning"}]
        events.append({"type": "REASONING_MESSAGE_CONTENT", "messageId": ids[1],
                       "delta": data["text"]})
        return events

    def _close_thinking(self, author: str | None = None) -> list[dict[str, Any]]:
        authors = list(self._thinking) if author is None else [author]
        events: list[dict[str, Any]] = []
        for name in authors:
            ids = self._thinking.pop(name, None)
            if ids is not None:  # attributed as its start was
                events += [{"type": "REASONING_MESSAGE_END", "messageId": ids[1],
                            "subagentRunId": ids[2]},
                           {"type": "REASONING_END", "messageId": ids[0],
                            "subagentRunId": ids[2]}]
        return events

    def _close_all(self) -> list[dict[str, Any]]:
        events = self._close_thinking()
        for branch in reversed(self._subagents):  # innermost first: each closes its own
            events += self._close_branch(branch)
            events.append({"type": "SUBAGENT_FINISHED",
                           "subagentRunId": self._subagents[branch]})
        self._subagents.clear()
        events += [{"type": "TEXT_MESSAGE_END", "messageId": message_id}
                   for message_id in self._text.values()]
        self._text.clear()
        return events

    # -- tools -----------------------------------------------------------------------------------

    def _tool_calls(self, data: Mapping[str, Any], parent: str | None) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        for call in data["calls"]:
            start: dict[str, Any] = {"type": "TOOL_CALL_START", "toolCallId": call["id"],
                                     "toolCallName": call["name"]}
            if parent is not None:  # the text of the same model turn carries the calls
                start["parentMessageId"] = parent
            args = encode_json(call["args"]) if "args" in call else "{}"
            events += [start,
                       {"type": "TOOL_CALL_ARGS", "toolCallId": call["id"], "delta": args},
                       {"type": "TOOL_CALL_END", "toolCallId": call["id"]}]
        return events

    def _tool_progress(self, data: Mapping[str, Any]) -> list[dict[str, Any]]:
        call_id = data["call_id"]
        item = {"type": data["type"], "index": data["index"], "delta": data["delta"],
                **_measure(data)}
        message_id = f"{call_id}-progress"
        if call_id in self._progress:
            return [{"type": "ACTIVITY_DELTA", "messageId": message_id,
                     "activityType": PROGRESS_ACTIVITY,
                     "patch": [{"op": "add", "path": "/events/-", "value": item}]}]
        self._progress.add(call_id)
        return [{"type": "ACTIVITY_SNAPSHOT", "messageId": message_id,
                 "activityType": PROGRESS_ACTIVITY,
                 "content": {"toolCallId": call_id, "toolName": data["name"],
                             "events": [item]}}]

    def _tool_results(self, data: Mapping[str, Any]) -> list[dict[str, Any]]:
        # The response with expose_result=True, else the summary (id, name, status, size).
        return [{"type": "TOOL_CALL_RESULT", "messageId": self._new_id("t"),
                 "toolCallId": result["id"], "role": "tool",
                 "content": encode_json(result.get("response", result))}
                for result in data["results"]]

    def _interrupt(self, data: Mapping[str, Any]) -> dict[str, Any]:
        # What the approver is shown, as the frame gives it (FrameMapper.approval); a frame
        # logged by an earlier version (a run followed across an upgrade) has only the name.
        display = data.get("display") or data["name"]
        metadata: dict[str, Any] = {"toolName": data["name"], "args_sha256": data["args_sha256"],
                                    "display": display}
        if "args" in data:
            metadata["args"] = data["args"]
        return {"id": data["call_id"], "reason": "tool_call", "toolCallId": data["call_id"],
                "message": f"Approve {display}?",
                "responseSchema": dict(APPROVAL_SCHEMA), "metadata": metadata}

    # -- the end ---------------------------------------------------------------------------------

    def _finish(self, data: Mapping[str, Any]) -> list[dict[str, Any]]:
        usage = data.get("usage") or {}
        tokens = {"inputTokens": usage.get("input_tokens", 0),
                  "outputTokens": usage.get("output_tokens", 0)}
        tokens["totalTokens"] = tokens["inputTokens"] + tokens["outputTokens"]
        outcome: dict[str, Any] = {"type": "success"}
        if self._interrupts:
            outcome = {"type": "interrupt", "interrupts": self._interrupts}
        return self._finished(outcome, usage=[tokens])

    def _error(self, data: Mapping[str, Any]) -> list[dict[str, Any]]:
        code = data["code"]
        if code == "cancelled":  # stopped on request: AG-UI's cancelled outcome, not a failure
            return self._finished({"type": "cancelled"})
        message = ERROR_MESSAGES.get(code, ERROR_MESSAGES["internal"])
        return [{"type": "RUN_ERROR", "message": message, "code": code}]

    def _finished(self, outcome: dict[str, Any], **extra: Any) -> list[dict[str, Any]]:
        # RUN_FINISHED may not leave a text or reasoning message open.
        events = self._close_all()
        events.append({"type": "RUN_FINISHED", "threadId": self.thread_id,
                       "runId": self.run_id, "outcome": outcome, **extra})
        return events


_RENDERED: Final = frozenset({"delta", "reasoning", "message", "tool_call", "tool_progress",
                              "tool_result", "approval_required", "agent_transfer",
                              "agent_error", "done", "error"})
"""The frame types this format carries (live-only frames are not among them)."""

_UNATTRIBUTED: Final = frozenset({"RUN_FINISHED", "RUN_ERROR", "CUSTOM", "SUBAGENT_STARTED",
                                   "SUBAGENT_FINISHED", "SUBAGENT_ERROR"})
"""Events that carry no ``subagentRunId`` of the frame they come from."""


def _measure(data: Mapping[str, Any]) -> dict[str, Any]:  # raw frame JSON
    """A progress frame's ``progress``, ``total`` and ``message`` (absent from a frame
    logged by an earlier version: ``None``)."""
    return {"progress": data.get("progress"), "total": data.get("total"),
            "message": data.get("message")}
