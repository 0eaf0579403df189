"""How one run behaves: streaming mode and budgets (DESIGN.md §2)."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field


class StreamingMode(StrEnum):
    """How a model call reaches the caller.

    ``NONE``: one aggregate per model call. ``SSE``: partial deltas, then the
    aggregate. ``BIDI``: a live session through ``Runner.run_live``.
    """

    NONE = "none"
    SSE = "sse"
    BIDI = "bidi"


class RunConfig(BaseModel):
    """Per-run settings.

    Attributes:
        streaming_mode: see :class:`StreamingMode`; ``run_async`` serves NONE and SSE.
        max_llm_calls: model calls allowed in one run; the next one ends the run
            with a ``budget_exceeded`` error event.
        max_tool_calls: tool calls allowed in one run (``None``: unbounded);
            calls beyond it get a ``budget_exceeded`` result and do not run.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    streaming_mode: StreamingMode = StreamingMode.NONE
    max_llm_calls: int = Field(default=500, ge=1)
    max_tool_calls: int | None = Field(default=None, ge=0)
