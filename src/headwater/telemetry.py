"""OpenTelemetry traces of runs, model calls and tool calls (the GenAI semantic conventions).

Re-exported from :mod:`headwater.core.telemetry`, where the code lives.
"""

from .core.telemetry import (
    NO_TRACE,
    PROVIDER_RECHECK,
    SCOPE,
    ChatTrace,
    RunTrace,
    ToolTrace,
    error_type,
    remote_parent,
    set_tracer_provider,
    start_run,
)

__all__ = (
    "NO_TRACE",
    "PROVIDER_RECHECK",
    "SCOPE",
    "ChatTrace",
    "RunTrace",
    "ToolTrace",
    "error_type",
    "remote_parent",
    "set_tracer_provider",
    "start_run",
)
