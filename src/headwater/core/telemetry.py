"""OpenTelemetry traces of runs, model calls and tool calls (the GenAI semantic conventions).

A run is one ``invoke_agent {agent}`` span; each model call of it a ``chat {model}``
child and each tool call an ``execute_tool {tool}`` child (siblings, in the order they
happen). docs/observability.md lists the attributes and how to export them.

Only the OpenTelemetry *API* is used (``pip install "headwater[otel]"``), imported at the
first run: without it every hook here is a no-op object (no import, no allocation);
with it but no SDK configured, the API's own no-op tracer answers. Nothing here runs
per streamed chunk: a chat span is started before the model call, touched once at its
first chunk (the flow checks a flag it holds) and ended with the aggregate.

The same calls record the run inspector's spans (:mod:`.trace_record`) when the run
starts inside :func:`recording` (the gateway does, for ``Settings.inspect_runs``):
one place records both. The inspector's spans add the agents' turns
(:meth:`RunTrace.agent`) and transfers (:meth:`RunTrace.transfer`) and parent
each span as it happened; outside :func:`recording` they cost one context
variable read per run.

Spans never hold a prompt, a completion or a tool's arguments or result unless
``Settings.otel_capture_content`` is on (``HEADWATER_OTEL_CAPTURE_CONTENT=1``).

Context: the run span's parent is the context current when the run starts
(:meth:`headwater.RunStream.start`, or its first iteration); the gateway makes the
caller's W3C ``traceparent`` current for each request (:func:`remote_parent`). The
flow is an async generator, so spans are never made *current* across a ``yield``
(that would leak into the consumer): chat and tool spans get their parent
explicitly, and a tool span is current only while its tool runs (inside one
await of the executor), so the tool's own instrumented calls nest under it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from types import TracebackType
from typing import TYPE_CHECKING, Any

from pydantic_core import to_json

from .inspection import recorded, recording
from .spans import (
    NO_CHAT,
    NO_TOOL,
    NO_TRACE,
    ChatTrace,
    ModelLike,
    RequestLike,
    ResponseLike,
    RunTrace,
    ToolTrace,
    error_type,
)
from .trace_record import message_json
from .types import Usage

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, Tracer, TracerProvider

__all__ = (
    "NO_TRACE",
    "ChatTrace",
    "RunTrace",
    "ToolTrace",
    "error_type",
    "recording",
    "remote_parent",
    "set_tracer_provider",
    "start_run",
)

SCOPE = "headwater"
"""The instrumentation scope (tracer name) of every span."""

_PROVIDER_NAMES = {"gemini": "gcp.gemini"}  # the conventions' names where ours differ

_otel: Any = None  # the opentelemetry.trace module once imported; False: not installed
_otel_context: Any = None  # opentelemetry.context, imported with it
_tracer: Tracer | None = None
_provider: TracerProvider | None = None
_global_provider = False  # a global provider was seen (it is set at most once: it stays)
_proxy_until = 0.0  # until then (time.monotonic) the API's last answer, its proxy, stands
PROVIDER_RECHECK = 1.0
"""Seconds the API's answer "no global tracer provider yet" is kept (:func:`_no_provider`)."""


def set_tracer_provider(provider: TracerProvider | None) -> None:
    """Send headwater's spans to ``provider`` instead of the global one (``None``: back
    to the global provider). For tests and embedding; most applications configure the
    global provider (``opentelemetry.trace.set_tracer_provider``) and leave this alone."""
    global _provider, _tracer
    _provider, _tracer = provider, None


def _get_tracer() -> Tracer | None:
    """The tracer, importing the API at the first call; ``None`` when it is not installed."""
    global _otel, _otel_context, _tracer
    if _tracer is not None:
        return _tracer
    if _otel is None:
        try:
            from opentelemetry import context, trace
        except ImportError:
            _otel = False
        else:
            _otel, _otel_context = trace, context
    if _otel is False:
        return None
    _tracer = _otel.get_tracer(SCOPE, tracer_provider=_provider)
    return _tracer


def _no_provider() -> bool:
    """Whether every span would be a no-op: no provider of ours, and no global one yet.

    Until a global provider is set, the API answers its proxy provider
    (``opentelemetry.trace.get_tracer_provider()`` is a ``ProxyTracerProvider``),
    whose tracer makes no-op spans; asking it for a span each run costs more
    than this question. The question itself is not free either (while no
    provider is set the API looks up ``OTEL_PYTHON_TRACER_PROVIDER`` in the
    environment each time, about a microsecond), so a "no" is kept for
    :data:`PROVIDER_RECHECK` seconds: a provider set after runs began traces
    the runs that start that long after the last question. A global provider is
    set at most once (``opentelemetry.trace.set_tracer_provider``; one named by
    ``OTEL_PYTHON_TRACER_PROVIDER`` is loaded by the first question), so once
    one is seen the API is not asked again.
    """
    global _global_provider, _proxy_until
    if _provider is not None or _global_provider:
        return False
    now = time.monotonic()
    if now < _proxy_until:
        return True
    if isinstance(_otel.get_tracer_provider(), _otel.ProxyTracerProvider):
        _proxy_until = now + PROVIDER_RECHECK
        return True
    _global_provider = True
    return False


def start_run(*, agent: str, session_id: str, invocation_id: str,
              capture_content: bool = False) -> RunTrace:
    """Start the span of a run, a child of the current context.

    The root agent's first model call adds its model (``gen_ai.request.model``,
    ``gen_ai.provider.name``): the model is not resolved any earlier than the run
    needs it (a workflow agent has none).

    Args:
        agent: the root agent's name (``gen_ai.agent.name``; the span is
            ``invoke_agent {agent}``).
        session_id: ``gen_ai.conversation.id``.
        invocation_id: the run's id (``headwater.invocation_id``).
        capture_content: put prompts, completions and tool payloads in the spans
            (``Settings.otel_capture_content``).

    Returns:
        :data:`NO_TRACE` when the OpenTelemetry API is not installed and the run is
        not inside :func:`recording`.
    """
    return recorded(_start_otel(agent, session_id, invocation_id, capture_content), agent)


def _start_otel(agent: str, session_id: str, invocation_id: str,
                capture_content: bool) -> RunTrace:
    tracer = _get_tracer()
    if tracer is None or _no_provider():
        return NO_TRACE
    span = tracer.start_span(f"invoke_agent {agent}", kind=_otel.SpanKind.INTERNAL, attributes={
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent,
        "gen_ai.conversation.id": session_id, "headwater.invocation_id": invocation_id})
    if not span.is_recording():  # no SDK, or not sampled: its model and tool calls are not
        span.end()                 # either (children follow their parent), so nothing more
        return NO_TRACE            # is spent on spans for this run
    return _RunSpan(tracer, span, _otel.set_span_in_context(span), agent, capture_content)


def _provider_name(model: ModelLike) -> str:
    provider = model.provider
    return _PROVIDER_NAMES.get(provider, provider) or "_OTHER"


def _fail(span: Span, error_type: str) -> None:
    span.set_attribute("error.type", error_type)
    span.set_status(_otel.Status(_otel.StatusCode.ERROR))


class _RunSpan(RunTrace):
    __slots__ = ("_capture", "_context", "_error", "_root", "_span", "_tracer")

    def __init__(self, tracer: Tracer, span: Span, context: Context | None, root: str,
                 capture: bool) -> None:
        self._tracer = tracer
        self._span: Span | None = span
        self._context = context  # None: not recording, and neither are its children
        self._root: str | None = root  # the root agent, until its model is on the span
        self._capture = capture
        self._error: str | None = None

    def chat(self, agent: str, model: ModelLike, request: RequestLike | None, *,
             stream: bool = True, branch: str | None = None) -> ChatTrace:
        if self._context is None:
            return NO_CHAT
        provider = _provider_name(model)
        if agent == self._root and self._span is not None:
            self._root = None
            self._span.set_attribute("gen_ai.provider.name", provider)
            self._span.set_attribute("gen_ai.request.model", model.model)
        span = self._tracer.start_span(
            f"chat {model.model}", self._context, kind=_otel.SpanKind.CLIENT, attributes={
                "gen_ai.operation.name": "chat", "gen_ai.provider.name": provider,
                "gen_ai.agent.name": agent, "gen_ai.request.model": model.model,
                "gen_ai.request.stream": stream})
        if self._capture and request is not None:
            if request.system_instruction:
                span.set_attribute("gen_ai.system_instructions", _json(
                    [{"type": "text", "content": request.system_instruction}]))
            span.set_attribute("gen_ai.input.messages",
                               _json([message_json(c) for c in request.contents]))
        return _ChatSpan(span, model.model, self._capture)

    def tool(self, agent: str, name: str, call_id: str, args: Mapping[str, Any], *,
             branch: str | None = None) -> ToolTrace:
        if self._context is None:
            return NO_TOOL
        return _ToolSpan(self, agent, name, call_id, args)

    def start_tool(self, agent: str, name: str, call_id: str, args: Mapping[str, Any]) -> Span:
        span = self._tracer.start_span(
            f"execute_tool {name}", self._context, kind=_otel.SpanKind.INTERNAL, attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.agent.name": agent,
                "gen_ai.tool.name": name, "gen_ai.tool.call.id": call_id,
                "gen_ai.tool.type": "function"})
        if self._capture:
            span.set_attribute("gen_ai.tool.call.arguments", _json(args))
        return span

    @property
    def capture(self) -> bool:
        return self._capture

    def fail(self, error_type: str) -> None:
        if self._error is None:
            self._error = error_type

    def end(self, usage: Usage, error_type: str | None = None) -> None:
        span, self._span = self._span, None
        if span is None:
            return
        if error_type is not None:
            self.fail(error_type)
        if self._context is not None:
            span.set_attribute("gen_ai.usage.input_tokens", usage.input_tokens)
            span.set_attribute("gen_ai.usage.output_tokens", usage.output_tokens)
            if self._error is not None:
                _fail(span, self._error)
        span.end()


class _ChatSpan(ChatTrace):
    __slots__ = ("_capture", "_model", "_span", "_started")
    recording = True

    def __init__(self, span: Span, model: str, capture: bool) -> None:
        self._span: Span | None = span
        self._model = model
        self._capture = capture
        self._started = time.monotonic()

    def first_chunk(self) -> bool:
        if self._span is not None:
            self._span.set_attribute("gen_ai.response.time_to_first_chunk",
                                     time.monotonic() - self._started)
        return False

    def end(self, response: ResponseLike) -> None:
        span, self._span = self._span, None
        if span is None:
            return
        span.set_attribute("gen_ai.response.model", self._model)
        if response.finish_reason:
            span.set_attribute("gen_ai.response.finish_reasons", [response.finish_reason])
        usage = response.usage
        if usage is not None:
            span.set_attribute("gen_ai.usage.input_tokens", usage.input_tokens)
            span.set_attribute("gen_ai.usage.output_tokens", usage.output_tokens)
        if self._capture and response.content is not None:
            message = message_json(response.content)
            message["finish_reason"] = response.finish_reason or "stop"
            span.set_attribute("gen_ai.output.messages", _json([message]))
        if response.error_code is not None:
            _fail(span, response.error_code)
        span.end()

    def fail(self, error_type: str) -> None:
        span, self._span = self._span, None
        if span is not None:
            _fail(span, error_type)
            span.end()


class _ToolSpan(ToolTrace):
    __slots__ = ("_agent", "_args", "_call_id", "_name", "_run", "_span", "_token")

    def __init__(self, run: _RunSpan, agent: str, name: str, call_id: str,
                 args: Mapping[str, Any]) -> None:
        self._run = run
        self._agent = agent
        self._name = name
        self._call_id = call_id
        self._args = args
        self._span: Span | None = None
        self._token: object = None

    def __enter__(self) -> ToolTrace:
        span = self._span = self._run.start_tool(self._agent, self._name, self._call_id,
                                                 self._args)
        # Current only for the await the executor owns: the tool's own spans nest here.
        self._token = _otel_context.attach(_otel.set_span_in_context(span))
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        _otel_context.detach(self._token)
        span, self._span = self._span, None
        if span is None:
            return
        if exc is not None:
            _fail(span, error_type(exc))
        span.end()

    def result(self, result: Mapping[str, Any]) -> None:
        span = self._span
        if span is None:
            return
        if "error" in result:
            code = result.get("code")
            _fail(span, code if isinstance(code, str) else "tool_error")
        if self._run.capture:
            span.set_attribute("gen_ai.tool.call.result", _json(result))


# -- the payloads (only with capture on) --------------------------------------------------------


def _json(value: object) -> str:
    return to_json(value, fallback=repr).decode()



# -- propagation ----------------------------------------------------------------------------


@contextmanager
def remote_parent(headers: Iterable[tuple[bytes, bytes]]) -> Iterator[None]:
    """Make the trace a request carries (W3C ``traceparent``/``tracestate``, or whatever the
    global propagator reads) current for the block, so runs started in it are its children.

    ``headers`` are an ASGI scope's raw header pairs. Does nothing without the
    OpenTelemetry API or without a ``traceparent`` header.
    """
    carrier = _carrier(headers)
    if carrier is None or _get_tracer() is None:
        yield
        return
    from opentelemetry import propagate  # only for a traced request

    token = _otel_context.attach(propagate.extract(carrier))
    try:
        yield
    finally:
        _otel_context.detach(token)


def _carrier(headers: Iterable[tuple[bytes, bytes]]) -> dict[str, str] | None:
    """The request's headers as text, or ``None`` when none carries a trace."""
    pairs = list(headers)
    if not any(name == b"traceparent" for name, _ in pairs):  # ASGI names are lower case
        return None
    return {name.decode("latin-1"): value.decode("latin-1") for name, value in pairs}


