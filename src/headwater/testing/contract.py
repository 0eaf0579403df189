"""``check_stream_contract``: the partial/aggregate invariants of DESIGN.md §1 as a check."""

from __future__ import annotations

from collections.abc import Sequence

from ..models.llm_response import LlmResponse


class StreamContractError(AssertionError):
    """A response sequence broke the stream contract.

    Attributes:
        invariant: which one: ``"one_final_last"`` (1), ``"text_concatenation"``
            (2), ``"calls_only_on_final"`` (3), ``"call_once"`` (4) or
            ``"usage_only_on_final"``.
    """

    def __init__(self, invariant: str, message: str) -> None:
        super().__init__(f"stream contract violated [{invariant}]: {message}")
        self.invariant = invariant


def check_stream_contract(responses: Sequence[LlmResponse]) -> LlmResponse:
    """Check one model call's responses; returns the final response.

    Invariants: (1) zero or more partials, then exactly one non-partial, last;
    (2) the partials' text (and thought text) concatenates to the final's;
    (3) only the final carries function calls; (4) each call id appears once;
    and usage only on the final.

    Raises:
        StreamContractError: naming the first invariant broken.
    """
    finals = [i for i, r in enumerate(responses) if not r.partial]
    if not finals:
        raise StreamContractError("one_final_last",
                                  f"no non-partial response among {len(responses)}")
    if len(finals) > 1:
        raise StreamContractError("one_final_last",
                                  f"{len(finals)} non-partial responses; exactly one is allowed")
    if finals[0] != len(responses) - 1:
        raise StreamContractError("one_final_last", "the non-partial response is not the last")
    final = responses[-1]
    texts: list[str] = []
    thoughts: list[str] = []
    for n, response in enumerate(responses[:-1]):
        if response.usage is not None:
            raise StreamContractError("usage_only_on_final", f"partial #{n} carries usage")
        for part in response.content.parts if response.content else ():
            if part.function_call is not None or part.function_response is not None:
                raise StreamContractError("calls_only_on_final",
                                          f"partial #{n} carries a function call or response")
            if part.text is not None:
                (thoughts if part.thought else texts).append(part.text)
    content = final.content
    final_text = content.text if content else ""
    if texts and "".join(texts) != final_text:
        raise StreamContractError(
            "text_concatenation",
            f"partials concatenate to {len(''.join(texts))} characters but the final text has "
            f"{len(final_text)}: {''.join(texts)[:60]!r} vs {final_text[:60]!r}")
    final_thought = content.thought_text if content else ""
    if thoughts and "".join(thoughts) != final_thought:
        raise StreamContractError("text_concatenation",
                                  "partial thoughts do not concatenate to the final thought text")
    ids = [c.id for c in content.function_calls] if content else []
    if len(ids) != len(set(ids)):
        raise StreamContractError("call_once", f"a call id appears twice in the final: {ids}")
    return final
