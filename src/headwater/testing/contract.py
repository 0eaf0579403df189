"""``check_stream_contract``: the partial/aggregate invariants of docs/event-contract.md as a check.

A thin wrapper over :class:`headwater.models.contract.StreamContract`, the same
check the runner applies to every model call at run time.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..core.errors import ModelProtocolViolation
from ..models.contract import StreamContract
from ..models.llm_response import LlmResponse


class StreamContractError(AssertionError):
    """A response sequence broke the stream contract.

    Attributes:
        invariant: which one: ``"one_final_last"`` (1), ``"text_concatenation"``
            (2), ``"calls_only_on_final"`` (3) or ``"usage_only_on_final"`` (see
            ``headwater.models.contract``).
    """

    def __init__(self, invariant: str, message: str) -> None:
        super().__init__(f"stream contract violated [{invariant}]: {message}")
        self.invariant = invariant


def check_stream_contract(responses: Sequence[LlmResponse]) -> LlmResponse:
    """Check one model call's responses; returns the final response.

    Raises:
        StreamContractError: naming the first invariant broken.
    """
    contract = StreamContract()
    try:
        for response in responses:
            contract.check(response)
        return contract.finish()
    except ModelProtocolViolation as exc:
        raise StreamContractError(exc.invariant, str(exc)) from None
