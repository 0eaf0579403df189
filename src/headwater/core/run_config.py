"""How one run behaves: streaming mode and budgets (docs/event-contract.md)."""

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
        max_tool_calls: tool calls allowed in one run; calls beyond it get a
            ``budget_exceeded`` result and do not run. ``None`` (unbounded)
            must be passed explicitly.
        max_tool_calls_per_turn: tool calls of one model turn that run; the
            turn's later calls get a ``budget_exceeded`` result and do not run.
            ``None`` (unbounded) must be passed explicitly.
        max_tokens_per_run: tokens (the providers' reported usage, input plus
            output, summed over the run's model calls) after which the next
            model call is refused and the run ends with a ``budget_exceeded``
            error event. ``None`` (unbounded) must be passed explicitly.
        save_input_blobs_as_artifacts: each ``inline_data`` part of the user's
            message is saved in the runner's artifact service as
            ``artifact_{invocation_id}_{i}`` and stored (and shown to the model)
            as a text part naming it, as ADK's runner does; without an artifact
            service the message is stored as it is.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    streaming_mode: StreamingMode = StreamingMode.NONE
    max_llm_calls: int = Field(default=500, ge=1)
    max_tool_calls: int | None = Field(default=1000, ge=0)
    max_tool_calls_per_turn: int | None = Field(default=64, ge=0)
    max_tokens_per_run: int | None = Field(default=2_000_000, ge=1)
    save_input_blobs_as_artifacts: bool = False
