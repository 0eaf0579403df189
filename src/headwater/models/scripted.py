"""``ScriptedModel``: a deterministic offline model, scripted turn by turn.

It is the embedded default of the demo and the examples (always labelled as
scripted) and the workhorse of tests (``headwater.testing`` re-exports it).
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import AsyncGenerator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core.errors import ErrorCode, UserError
from ..core.events import new_id
from ..core.types import Usage
from .aggregator import StreamAggregator
from .base import BaseLlm
from .connection import BaseLlmConnection
from .llm_request import LlmRequest
from .llm_response import LlmResponse


@dataclass(slots=True)
class ScriptedCall:
    """A function call the model will make.

    Attributes:
        name: tool name.
        args: arguments (a JSON object).
        id: call id; generated when ``None``.
        fragments: into how many pieces the argument JSON is split on the wire.
    """

    name: str
    args: dict[str, Any] = field(default_factory=dict)  # raw JSON object
    id: str | None = None
    fragments: int = 1


@dataclass(slots=True)
class ScriptedTurn:
    """What the model does on one call.

    Attributes:
        text: answer text, as the pieces it streams in.
        thoughts: reasoning pieces (thought parts), streamed before the text.
        calls: function calls, on the final response only.
        usage: token usage of the call.
        finish_reason: reported on the final response.
        error: an in-band provider error ``(code, message)`` on the final response.
        raise_error: raised after ``raise_after`` partials instead of finishing.
        raise_after: partials emitted before ``raise_error`` is raised.
        delay: seconds to wait before each streamed item (``0``: no wait).
        responses: raw responses to yield as they are, bypassing the aggregator
            (for scripting broken streams in contract tests).
    """

    text: Sequence[str] = ()
    thoughts: Sequence[str] = ()
    calls: Sequence[ScriptedCall] = ()
    usage: Usage | None = None
    finish_reason: str | None = "stop"
    error: tuple[ErrorCode, str] | None = None
    raise_error: BaseException | None = None
    raise_after: int = 0
    delay: float = 0.0
    responses: Sequence[LlmResponse] | None = None


@dataclass(slots=True)
class StreamRecord:
    """What happened to one ``generate_content`` stream.

    Attributes:
        stream: the ``stream`` flag it was called with.
        emitted: responses yielded so far.
        completed: the stream ran to its end.
        closed: the stream was finalised (completed, closed early or failed).
    """

    stream: bool
    emitted: int = 0
    completed: bool = False
    closed: bool = False

    @property
    def closed_early(self) -> bool:
        """Closed before its end: the consumer broke off, was cancelled or failed."""
        return self.closed and not self.completed


Responder = Callable[[LlmRequest], ScriptedTurn]


class ScriptedModel(BaseLlm):
    """A model that plays back scripted turns, one per call, in order.

    When the queue is empty, ``responder`` (if given) decides the turn from
    the request; otherwise the call fails with ``UserError`` saying the script
    ran out. With ``repeat=True`` the queue never runs out: each turn played
    goes back to its end, so the script plays again from the top (a served
    example answers every message: ``ScriptedModel(repeat=True).reply("Hi.")``).
    Every request and every stream's fate are recorded, and every live
    connection opened on it (``connections``: emulated, each turn one call
    here).

    Args:
        turns: the turns to play, in order.
        model: the model name reported in requests and errors.
        responder: fallback that builds a turn from the request.
        record: keep ``requests``, ``streams`` and ``connections`` (tests read
            them); a long-lived model that serves people (the demo's) keeps none.
        repeat: play the script again and again instead of running out.
    """

    live_emulation = True

    def __init__(
        self,
        turns: Sequence[ScriptedTurn] = (),
        *,
        model: str = "scripted",
        responder: Responder | None = None,
        record: bool = True,
        repeat: bool = False,
    ) -> None:
        super().__init__(model)
        self._turns: deque[ScriptedTurn] = deque(turns)
        self.responder = responder
        self.record = record
        self.repeat = repeat
        self.requests: list[LlmRequest] = []
        self.streams: list[StreamRecord] = []
        self.connections: list[BaseLlmConnection] = []

    def connect(self, request: LlmRequest) -> BaseLlmConnection:
        """The emulated live connection (``live_emulation``), recorded in ``connections``.

        Raises:
            NotImplementedError: ``live_emulation`` was turned off.
        """
        connection = super().connect(request)
        if self.record:
            self.connections.append(connection)
        return connection

    @property
    def supports_live(self) -> bool:
        """Whether :meth:`connect` connects: it records, and emulates when ``live_emulation``."""
        return self.live_emulation

    def add(self, turn: ScriptedTurn, *, first: bool = False) -> ScriptedModel:
        """Queue a turn; returns ``self`` for chaining.

        Args:
            turn: what the model does on that call.
            first: play it on the next call, ahead of the turns already queued
                (a question answered while a scripted conversation waits).
        """
        if first:
            self._turns.appendleft(turn)
        else:
            self._turns.append(turn)
        return self

    def reply(self, *text: str, first: bool = False, **options: Any) -> ScriptedModel:
        """Queue a text turn streamed as the given pieces (``first``: as in :meth:`add`)."""
        return self.add(ScriptedTurn(text=text, **options), first=first)

    def call(
        self, name: str, args: dict[str, Any] | None = None, *, fragments: int = 1,
        call_id: str | None = None, first: bool = False, **options: Any,
    ) -> ScriptedModel:
        """Queue a turn that calls one tool (``text=`` may precede the call).

        ``first``: as in :meth:`add`.
        """
        scripted = ScriptedCall(name=name, args=args or {}, id=call_id, fragments=fragments)
        return self.add(ScriptedTurn(calls=(scripted,), **options), first=first)

    @property
    def pending(self) -> int:
        """Turns still queued."""
        return len(self._turns)

    def _next_turn(self, request: LlmRequest) -> ScriptedTurn:
        if self._turns:
            turn = self._turns.popleft()
            if self.repeat:
                self._turns.append(turn)
            return turn
        if self.responder is not None:
            return self.responder(request)
        raise UserError(
            f"ScriptedModel {self.model!r} has no scripted turn left for call "
            f"#{len(self.requests)}; queue one with reply()/call()/add() or pass responder="
        )

    async def generate_content(
        self, request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        """Play the next turn: partials then one aggregate, or one response.

        Raises:
            UserError: no turn is queued and there is no responder.
            BaseException: the turn's ``raise_error``.
        """
        if self.record:
            self.requests.append(_snapshot(request))
        turn = self._next_turn(request)
        record = StreamRecord(stream=stream)
        if self.record:
            self.streams.append(record)
        try:
            if turn.responses is None and stream and not turn.delay and turn.raise_error is None:
                # The common case, kept lean: deltas straight from the aggregator.
                agg = StreamAggregator()
                for delta in turn.thoughts:
                    if (thought := agg.thought(delta)) is not None:
                        record.emitted += 1
                        yield thought
                text = agg.text
                for delta in turn.text:
                    if (partial := text(delta)) is not None:
                        record.emitted += 1
                        yield partial
                record.emitted += 1
                yield _finish(agg, turn)
                record.completed = True
                return
            source = turn.responses if turn.responses is not None else _play(turn, stream)
            for response in source:
                if turn.delay:
                    await asyncio.sleep(turn.delay)
                if turn.raise_error is not None and record.emitted >= turn.raise_after:
                    raise turn.raise_error
                record.emitted += 1
                yield response
            record.completed = True
        finally:
            record.closed = True


def _play(turn: ScriptedTurn, stream: bool) -> Iterator[LlmResponse]:
    """Build each response as it is played, as a real adapter does."""
    agg = StreamAggregator()
    for piece in turn.thoughts:
        if (p := agg.thought(piece)) is not None and stream:
            yield p
    for piece in turn.text:
        if (p := agg.text(piece)) is not None and stream:
            yield p
    yield _finish(agg, turn)


def _finish(agg: StreamAggregator, turn: ScriptedTurn) -> LlmResponse:
    """The turn's calls, finish reason, usage and error, then its aggregate."""
    for index, scripted in enumerate(turn.calls):
        call_id = scripted.id or new_id("call")
        for i, piece in enumerate(_split(json.dumps(scripted.args), scripted.fragments)):
            agg.tool_call(index=index, call_id=call_id if i == 0 else None,
                          name=scripted.name if i == 0 else None, arguments=piece)
    agg.finish_reason = turn.finish_reason
    agg.usage = turn.usage
    if turn.error is not None:
        agg.error(*turn.error)
    return agg.finish()


def _split(text: str, pieces: int) -> list[str]:
    pieces = max(1, min(pieces, len(text)))
    size, extra = divmod(len(text), pieces)
    out, start = [], 0
    for i in range(pieces):
        end = start + size + (1 if i < extra else 0)
        out.append(text[start:end])
        start = end
    return out


def _snapshot(request: LlmRequest) -> LlmRequest:
    return LlmRequest(model=request.model, system_instruction=request.system_instruction,
                      contents=list(request.contents), tools=list(request.tools),
                      config=dict(request.config),
                      generate_content_config=request.generate_content_config)


def echo_responder(request: LlmRequest) -> ScriptedTurn:
    """A responder that answers every request by quoting the last user text."""
    last = next((c.text for c in reversed(request.contents) if c.role == "user" and c.text), "")
    return ScriptedTurn(text=("(scripted) ", "You said: ", last or "nothing"))


def from_spec(name: str) -> ScriptedModel:
    """Factory for ``"scripted:<name>"``: a scripted model that echoes the user."""
    return ScriptedModel(model=name, responder=echo_responder)
