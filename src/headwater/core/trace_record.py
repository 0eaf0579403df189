"""A run's spans as the run inspector keeps them: plain records, no collector needed.

:mod:`.telemetry` records them (the same calls that make the OpenTelemetry
spans: one place records both); the gateway keeps the last
``Settings.inspect_runs`` records of each session and answers them at
``GET /runs/{run_id}/trace`` (docs/inspector.md). A record holds, per span,
its kind (``agent``, ``model``, ``tool``, ``transfer``), its parent, its
agent and branch, its start and end (``time.monotonic``, shown as seconds
since the run's start) and a few attributes (tokens, finish reason, error
code, status).

Payloads (what a model call was sent and answered, a tool call's arguments and
result) are kept only when the record is made with ``payloads`` on
(``Settings.inspect_payloads``); they are kept as references and turned into
JSON only when the record is read (:meth:`TraceRecord.as_json`), with every
credential-shaped string redacted (:mod:`.redaction`) and every argument a
tool's schema marks secret (``writeOnly``, or ``format: password``: pydantic's
``SecretStr``) replaced.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from pydantic_core import to_jsonable_python

from .redaction import REDACTED, redact_value
from .types import Content, ToolDeclaration

__all__ = ("SpanKind", "SpanRecord", "TraceRecord", "message_json", "secret_args")

SpanKind = Literal["agent", "model", "tool", "transfer"]


class SpanRecord:
    """One span of a run: what the inspector shows as a bar (or, for a transfer, an arrow).

    Attributes:
        id: its number in the run (1 is the run's root agent).
        parent_id: the span it happened under (``None`` for the root).
        kind: ``agent``, ``model``, ``tool`` or ``transfer``.
        name: the agent's, the model's or the tool's name; ``a → b`` for a transfer.
        agent: the agent it belongs to.
        branch: the branch it ran on (``None``: the main line).
        start, end: ``time.monotonic()`` values; ``end`` is ``None`` while it is open.
        attributes: what it measured (tokens, finish reason, status, …).
        payload: what was sent and answered, when payloads are recorded.
        lazy: an agent span opened by the first call of an agent no tree
            step announced (a lone agent's, a live run's transfer target).
    """

    __slots__ = ("agent", "attributes", "branch", "end", "id", "kind", "lazy", "name",
                 "parent_id", "payload", "start")

    def __init__(self, id: int, parent_id: int | None, kind: SpanKind, name: str, agent: str,
                 branch: str | None, attributes: dict[str, Any]) -> None:
        self.id = id
        self.parent_id = parent_id
        self.kind = kind
        self.name = name
        self.agent = agent
        self.branch = branch
        self.start = time.monotonic()
        self.end: float | None = None
        self.attributes = attributes
        self.payload: dict[str, Any] | None = None
        self.lazy = False

    def close(self) -> None:
        """End the span now (once: a second call keeps the first end)."""
        if self.end is None:
            self.end = time.monotonic()


class TraceRecord:
    """The spans of one run, in the order they started.

    Args:
        payloads: keep what each model call was sent and answered and each
            tool call's arguments and result (``Settings.inspect_payloads``).
        max_spans: spans kept at most (``Settings.inspect_max_spans``); past
            it a span is counted in :attr:`dropped` and not kept.

    Attributes:
        claimed: a run records here already (a record serves one run).
        ended: the run has ended.
        on_end: called once when the run ends (the gateway's store persists it).
    """

    __slots__ = ("claimed", "dropped", "ended", "max_spans", "on_end", "origin", "payloads",
                 "secrets", "spans")

    def __init__(self, *, payloads: bool = False, max_spans: int = 1000) -> None:
        self.payloads = payloads
        self.max_spans = max_spans
        self.spans: list[SpanRecord] = []
        self.origin = time.monotonic()
        self.dropped = 0
        self.claimed = False
        self.ended = False
        self.secrets: dict[str, frozenset[str]] = {}  # tool name -> its secret arguments
        self.on_end: Callable[[TraceRecord], None] | None = None

    def open(self, kind: SpanKind, name: str, agent: str, branch: str | None,
             parent_id: int | None, attributes: dict[str, Any] | None = None
             ) -> SpanRecord | None:
        """Start a span; ``None`` (and one more :attr:`dropped`) past ``max_spans``."""
        spans = self.spans
        count = len(spans)
        if count >= self.max_spans:
            self.dropped += 1
            return None
        span = SpanRecord(count + 1, parent_id, kind, name, agent, branch,
                          {} if attributes is None else attributes)
        spans.append(span)
        return span

    def span(self, span_id: int) -> SpanRecord:
        """The span numbered ``span_id``."""
        return self.spans[span_id - 1]

    def learn_secrets(self, tools: Sequence[ToolDeclaration]) -> None:
        """Note which arguments of these tools are secret (kept out of every payload)."""
        known = self.secrets
        for tool in tools:
            if tool.name not in known:
                known[tool.name] = secret_args(tool.parameters)

    def finish(self) -> None:
        """The run has ended: every span still open ends now; :attr:`on_end` is called."""
        if self.ended:
            return
        self.ended = True
        now = time.monotonic()
        for span in self.spans:
            if span.end is None:
                span.end = now
        callback, self.on_end = self.on_end, None
        if callback is not None:
            callback(self)

    def as_json(self, *, payloads: bool = False) -> dict[str, Any]:
        """The record as the trace route answers it (docs/inspector.md): ``spans``, each
        ``{id, parent_id, kind, name, agent, branch, start, end, attributes}`` with times
        in seconds since the run's start, plus ``payload`` with ``payloads`` (when
        recorded); ``ended``, ``dropped`` and ``payloads`` (whether any were recorded)."""
        origin = self.origin
        spans = []
        for span in self.spans:
            item: dict[str, Any] = {
                "id": span.id, "parent_id": span.parent_id, "kind": span.kind,
                "name": span.name, "agent": span.agent, "branch": span.branch,
                "start": round(span.start - origin, 6),
                "end": None if span.end is None else round(span.end - origin, 6),
                "attributes": {key: round(value, 6) if isinstance(value, float) else value
                               for key, value in span.attributes.items()}}
            if payloads and span.payload is not None:
                item["payload"] = self._payload(span.payload)
            spans.append(item)
        return {"spans": spans, "ended": self.ended, "dropped": self.dropped,
                "payloads": self.payloads}

    def _payload(self, payload: Mapping[str, Any]) -> Any:
        """A span's payload as JSON: contents as messages, secrets replaced."""
        out: dict[str, Any] = {}
        secrets = self.secrets
        for key, value in payload.items():
            if key == "request":
                out[key] = _request_json(value, secrets)
            elif key == "response":
                out[key] = None if value is None else message_json(value, secrets)
            elif key == "arguments":
                tool, args = value
                out[key] = _masked(args, secrets.get(tool, frozenset()))
            else:
                out[key] = to_jsonable_python(value, fallback=repr)
        return redact_value(out)


def secret_args(schema: Mapping[str, Any]) -> frozenset[str]:
    """The top-level arguments a tool's JSON schema marks secret: ``writeOnly: true`` or
    ``format: "password"`` (what pydantic writes for ``SecretStr``)."""
    properties = schema.get("properties")
    if not isinstance(properties, Mapping):
        return frozenset()
    return frozenset(name for name, prop in properties.items() if isinstance(prop, Mapping)
                     and (prop.get("writeOnly") is True or prop.get("format") == "password"))


def _masked(args: Any, secret: frozenset[str]) -> Any:
    if not secret or not isinstance(args, Mapping):
        return args
    return {key: REDACTED if key in secret else value for key, value in args.items()}


def _request_json(request: Mapping[str, Any], secrets: Mapping[str, frozenset[str]]
                  ) -> dict[str, Any]:
    tools: Sequence[ToolDeclaration] = request["tools"]
    return {
        "system_instruction": request["system_instruction"],
        "contents": [message_json(c, secrets) for c in request["contents"]],
        "tools": [{"name": t.name, "description": t.description, "parameters": t.parameters}
                  for t in tools],
        "config": to_jsonable_python(request["config"], fallback=repr),
        "generate_content_config": to_jsonable_python(request["generate_content_config"],
                                                      fallback=repr),
    }


def message_json(content: Content, secrets: Mapping[str, frozenset[str]] | None = None
                 ) -> dict[str, Any]:
    """A content as the GenAI conventions' message: role and typed parts (blobs without
    their bytes); the arguments ``secrets`` names, per tool, replaced."""
    parts: list[dict[str, Any]] = []
    tool = False
    for part in content.parts:
        if part.function_call is not None:
            call = part.function_call
            args: Any = call.args
            if secrets:
                args = _masked(args, secrets.get(call.name, frozenset()))
            parts.append({"type": "tool_call", "id": call.id, "name": call.name,
                          "arguments": args})
        elif part.function_response is not None:
            tool = True
            response = part.function_response
            parts.append({"type": "tool_call_response", "id": response.id,
                          "response": response.response})
        elif part.inline_data is not None:
            parts.append({"type": "blob", "mime_type": part.inline_data.mime_type,
                          "size": len(part.inline_data.data)})
        elif part.text is not None:
            parts.append({"type": "reasoning" if part.thought else "text",
                          "content": part.text})
    role = "tool" if tool else ("assistant" if content.role == "model" else content.role)
    return {"role": role, "parts": parts}
