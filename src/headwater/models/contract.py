"""``StreamContract``: the partial/aggregate invariants of one model call, checked as it streams.

The one implementation of the event contract's invariants (docs/event-contract.md).
The agent flow feeds every response of a model call through it (so a model that
breaks the contract fails its turn with ``model_protocol_violation`` and nothing
of it is stored), and ``headwater.testing.check_stream_contract`` wraps it for
tests.

Invariants, by the name a :class:`~headwater.errors.ModelProtocolViolation` carries:

- ``one_final_last``: zero or more partials, then exactly one non-partial, last;
- ``text_concatenation``: the partials' text (and thought text) concatenates to
  the final's;
- ``calls_only_on_final``: only the final carries function calls (or responses);
- ``usage_only_on_final``: only the final carries usage.

A contract given ``max_chars`` also bounds what the call may stream: past that
many characters of text (answer and thought), :class:`~headwater.errors.OutputTooLong`.

Call ids are not checked here: a call whose id the session already holds, or
that another call of the same final took, is stored under a fresh id
(``CallLedger.unique_calls``), so a model that repeats ids loses nothing.
"""

from __future__ import annotations

import sys

from ..core.errors import ModelProtocolViolation, OutputTooLong
from .llm_response import LlmResponse


class StreamContract:
    """Checks one model call's responses as they arrive.

    Call :meth:`check` with each response, then :meth:`finish` when the stream
    ends. Each raises :class:`ModelProtocolViolation` at the first broken
    invariant, and :class:`OutputTooLong` once the call's text passes
    ``max_chars`` (``None``: unbounded).
    """

    __slots__ = ("_final", "_max_chars", "_room", "_texts", "_thoughts")

    def __init__(self, max_chars: int | None = None) -> None:
        self._texts: list[str] = []
        self._thoughts: list[str] = []
        self._final: LlmResponse | None = None
        self._max_chars = max_chars
        # characters the call may still stream (one subtraction per chunk)
        self._room = max_chars if max_chars is not None else sys.maxsize

    @property
    def final(self) -> LlmResponse | None:
        """The non-partial response, once it has arrived."""
        return self._final

    def check(self, response: LlmResponse) -> None:
        """Check the next response of the call (partial or final)."""
        if self._final is not None:
            raise ModelProtocolViolation(
                "one_final_last", "the model sent a response after its non-partial one")
        if response.partial:
            self.partial(response)
        else:
            self.final_response(response)

    def partial(self, response: LlmResponse) -> None:
        """Check a partial response (the caller knows it is partial and not late)."""
        if response.usage is not None:
            raise ModelProtocolViolation("usage_only_on_final", "a partial response carried usage")
        content = response.content
        if content is None:
            return
        for part in content.parts:
            if part.function_call is not None or part.function_response is not None:
                raise ModelProtocolViolation(
                    "calls_only_on_final", "a partial response carried a function call")
            text = part.text
            if text is not None:
                self._room -= len(text)
                if self._room < 0:
                    raise OutputTooLong(self._max_chars or 0)
                if part.thought:
                    self._thoughts.append(text)
                else:
                    self._texts.append(text)

    def shown_text(self) -> str:
        """The answer text the partials have carried so far (what a reader has seen)."""
        return "".join(self._texts)

    def final_response(self, final: LlmResponse) -> None:
        """Check the non-partial response against the partials seen before it."""
        if self._final is not None:
            raise ModelProtocolViolation(
                "one_final_last", "the model sent a second non-partial response")
        content = final.content
        texts, thoughts = self._texts, self._thoughts
        if (not texts and not thoughts and content is not None
                and self._max_chars is not None):  # a final that was not streamed
            chars = 0
            for part in content.parts:
                if part.text is not None:
                    chars += len(part.text)
            if chars > self._max_chars:
                raise OutputTooLong(self._max_chars)
        if texts:
            streamed = "".join(texts)
            text = content.text if content else ""
            if streamed != text:
                raise ModelProtocolViolation(
                    "text_concatenation",
                    f"the partials concatenate to {len(streamed)} characters but the final "
                    f"text has {len(text)}: {streamed[:60]!r} vs {text[:60]!r}")
        if thoughts and "".join(thoughts) != (content.thought_text if content else ""):
            raise ModelProtocolViolation(
                "text_concatenation",
                "the partials' thought text does not concatenate to the final's")
        self._final = final

    def finish(self) -> LlmResponse:
        """The final response, once the stream has ended.

        Raises:
            ModelProtocolViolation: ``one_final_last`` when no final arrived.
        """
        if self._final is None:
            raise ModelProtocolViolation(
                "one_final_last", "the stream ended without a non-partial response")
        return self._final
