"""``LlmResponse``: one item a model yields, a partial or the aggregate (docs/event-contract.md)."""

from __future__ import annotations

from dataclasses import dataclass

from ..core.errors import ErrorCode
from ..core.types import Content, Usage


@dataclass(slots=True)
class LlmResponse:
    """One item a model yields: a partial delta or the one aggregate of a call.

    The contract (checked by ``headwater.testing.check_stream_contract``): zero
    or more partials, then exactly one non-partial; partial texts concatenate to
    the final text; only the final carries function calls and usage.
    """

    content: Content | None = None
    partial: bool = False
    finish_reason: str | None = None
    usage: Usage | None = None
    error_code: ErrorCode | None = None
    error_message: str | None = None
    turn_complete: bool = False
    interrupted: bool = False
