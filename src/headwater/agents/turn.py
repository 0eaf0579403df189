"""``ModelTurn``: one model call as every mode checks and traces it.

A step of ``run_async`` (:class:`~headwater.agents.flow.Flow`) and a turn of a
live connection (:class:`~headwater.agents.live_flow.LiveFlow`) are both one
model call, and both go through the same per-turn rules:

- it is admitted against the run's model-call budget before it starts and
  counted then (:meth:`Flow.admit <headwater.agents.flow.Flow.admit>`:
  ``max_llm_calls``, ``max_tokens_per_run``);
- each response is checked against the stream contract as it arrives
  (``models.contract.StreamContract``): a partial passes through as a partial
  event, the aggregate is held to the partials before it is used;
- it is one span (``chat``) of the run's trace, ended with the aggregate or
  failed with an error type;
- stopped before its end, the answer text it had shown is what is kept
  (:meth:`ModelTurn.shown_text`, stored ``interrupted`` by the flow).
"""

from __future__ import annotations

from ..core.events import Event, partial_event
from ..core.telemetry import ChatTrace
from ..models.base import BaseLlm, LlmRequest, LlmResponse
from ..models.contract import StreamContract
from .invocation import InvocationContext


class ModelTurn:
    """One model call of an agent in the run ``ctx``: its contract and its span.

    Args:
        ctx: the run, on the agent's branch.
        author: the agent's name (its events' author).
        model: the agent's model.
        request: what the call was sent (``None`` for a live turn, whose input
            is the connection's).
        stream: whether the call streams (the span records it).

    Attributes:
        contract: the stream contract of the call (its output bound included).
        chat: the call's span.
    """

    __slots__ = ("_author", "_branch", "_invocation_id", "chat", "contract")

    def __init__(self, ctx: InvocationContext, author: str, model: BaseLlm,
                 request: LlmRequest | None, *, stream: bool = True) -> None:
        self._invocation_id = ctx.invocation_id
        self._author = author
        self._branch = ctx.branch
        self.contract = StreamContract(ctx.settings.max_output_chars)
        self.chat: ChatTrace = ctx.trace.chat(author, model, request, stream=stream,
                                              branch=ctx.branch)

    def partial(self, response: LlmResponse) -> Event:
        """Check a partial response; the partial event that shows it.

        Raises:
            ModelProtocolViolation, OutputTooLong: the call broke its contract.
        """
        self.contract.partial(response)
        return partial_event(self._invocation_id, self._author, response.content, self._branch)

    def final(self, response: LlmResponse) -> None:
        """Check the call's non-partial response against its partials.

        Raises:
            ModelProtocolViolation, OutputTooLong: the call broke its contract.
        """
        self.contract.final_response(response)

    def finish(self) -> LlmResponse:
        """The call's aggregate once its stream has ended; the span ends with it.

        Raises:
            ModelProtocolViolation: no non-partial response arrived.
        """
        aggregate = self.contract.finish()
        self.chat.end(aggregate)
        return aggregate

    def end(self, response: LlmResponse) -> None:
        """End the span with the call's aggregate (usage, finish reason, error code)."""
        self.chat.end(response)

    def fail(self, error_type: str) -> None:
        """End the span as failed (``cancelled`` for a call stopped before its end)."""
        self.chat.fail(error_type)

    def shown_text(self) -> str:
        """The answer text the call's partials have shown so far."""
        return self.contract.shown_text()
