"""``StreamAggregator``: the one place the partial/aggregate protocol is built.

Every adapter feeds provider chunks into a fresh aggregator per attempt. Text
and thought deltas become partial responses — at once (:meth:`text`,
:meth:`thought`) or batched: an HTTP adapter records every delta of one network
read (:meth:`add_text`, :meth:`add_thought`) and takes them as one partial per
run of the same kind (:meth:`take_partials`), so text that arrives together is
shown together and a burst costs one partial, not hundreds. Tool-call fragments,
finish reason and usage are kept for the one final response of :meth:`finish`.
"""

from __future__ import annotations

from ..core.errors import ErrorCode
from ..core.types import Content, Part, Usage
from ._toolcalls import ToolCallAssembler
from .llm_response import LlmResponse


class StreamAggregator:
    """Builds partials and the one aggregate of a model call.

    Not reusable: make a new one per model call and per retry attempt.
    """

    __slots__ = (
        "_calls",
        "_error_code",
        "_error_message",
        "_pending",
        "_sealed_thoughts",
        "_text",
        "_thought",
        "finish_reason",
        "usage",
    )

    def __init__(self) -> None:
        self._text: list[str] = []
        self._thought: list[str] = []
        self._sealed_thoughts: list[Part] = []
        self._pending: list[tuple[bool, str]] = []  # (is thought, delta) not yet taken
        self._calls = ToolCallAssembler()
        self.finish_reason: str | None = None
        self.usage: Usage | None = None
        self._error_code: ErrorCode | None = None
        self._error_message: str | None = None

    @property
    def has_content(self) -> bool:
        """Whether anything the caller could have seen (or a call) has arrived."""
        return bool(self._text or self._thought or self._sealed_thoughts or self._calls)

    def text(self, delta: str) -> LlmResponse | None:
        """Record an answer-text delta; returns its partial, or ``None`` if empty."""
        if not delta:
            return None
        self._text.append(delta)
        # _partial(delta, False), written out: this is the per-chunk path of every adapter.
        part: Part = _new(Part)
        part.text = delta
        part.thought = False
        part.thought_signature = None
        part.function_call = None
        part.function_response = None
        part.inline_data = None
        content: Content = _new(Content)
        content.role = "model"
        content.parts = [part]
        response: LlmResponse = _new(LlmResponse)
        response.content = content
        response.partial = True
        response.finish_reason = None
        response.usage = None
        response.error_code = None
        response.error_message = None
        response.turn_complete = False
        response.interrupted = False
        return response

    def thought(self, delta: str) -> LlmResponse | None:
        """Record a reasoning delta (kept as a thought part, never as answer text)."""
        if not delta:
            return None
        self._thought.append(delta)
        return _partial(delta, True)

    def add_text(self, delta: str) -> None:
        """Record an answer-text delta for the next :meth:`take_partials`."""
        if delta:
            self._text.append(delta)
            self._pending.append((False, delta))

    def add_thought(self, delta: str) -> None:
        """Record a reasoning delta for the next :meth:`take_partials`."""
        if delta:
            self._thought.append(delta)
            self._pending.append((True, delta))

    def take_partials(self) -> list[LlmResponse]:
        """The deltas recorded since the last call, one partial per run of one kind."""
        pending = self._pending
        if not pending:
            return []
        self._pending = []
        if len(pending) == 1:
            thought, delta = pending[0]
            return [_partial(delta, thought)]
        partials: list[LlmResponse] = []
        run: list[str] = []
        kind = pending[0][0]
        for thought, delta in pending:
            if thought is not kind:
                partials.append(_partial("".join(run), kind))
                run, kind = [], thought
            run.append(delta)
        partials.append(_partial("".join(run), kind))
        return partials

    def thought_signature(self, signature: str) -> None:
        """Close the current thought block with the provider's signature."""
        self._sealed_thoughts.append(
            Part(text="".join(self._thought), thought=True, thought_signature=signature))
        self._thought = []

    def tool_call(
        self,
        *,
        index: int | None = None,
        call_id: str | None = None,
        name: str | None = None,
        arguments: str | None = None,
    ) -> None:
        """Record a tool-call fragment; nothing is emitted until :meth:`finish`."""
        self._calls.feed(index=index, call_id=call_id, name=name, arguments=arguments)

    def error(self, code: ErrorCode, message: str) -> None:
        """Record an in-band provider error; the final response will carry it."""
        self._error_code = code
        self._error_message = message

    def finish(self) -> LlmResponse:
        """The aggregate: all text, all calls, finish reason, usage and error.

        Raises:
            ToolCallAssemblyError: a tool call did not assemble.
        """
        parts: list[Part] = list(self._sealed_thoughts)
        if self._thought:
            parts.append(Part(text="".join(self._thought), thought=True))
        if self._text:
            parts.append(Part(text="".join(self._text)))
        if self._calls and self._error_code is None:
            parts.extend(Part(function_call=call) for call in self._calls.finish())
        return LlmResponse(
            content=Content("model", parts) if parts else None,
            partial=False,
            finish_reason=self.finish_reason,
            usage=self.usage,
            error_code=self._error_code,
            error_message=self._error_message,
        )


_new = object.__new__


def _partial(text: str, thought: bool) -> LlmResponse:
    """``LlmResponse(content=Content("model", [Part(text=, thought=)]), partial=True)``.

    Built slot by slot: this runs once per streamed chunk, and the dataclass
    constructors (keyword parsing, defaults) cost more than twice as much.
    ``tests/models/test_aggregator.py`` checks it equals the constructors' result.
    """
    part: Part = _new(Part)
    part.text = text
    part.thought = thought
    part.thought_signature = None
    part.function_call = None
    part.function_response = None
    part.inline_data = None
    content: Content = _new(Content)
    content.role = "model"
    content.parts = [part]
    response: LlmResponse = _new(LlmResponse)
    response.content = content
    response.partial = True
    response.finish_reason = None
    response.usage = None
    response.error_code = None
    response.error_message = None
    response.turn_complete = False
    response.interrupted = False
    return response
