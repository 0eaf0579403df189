"""``/inspect`` in ``headwater chat``: a run's trace as text (docs/inspector.md).

One line per span of ``GET /runs/{id}/trace``, indented by its parent, in the
order the spans started: its kind, its name (its branch when off the main line),
when it started and how long it took (seconds since the run's start), and what
it measured (tokens, finish reason, status, error code).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

_SHOWN = ("input_tokens", "output_tokens", "time_to_first_chunk", "finish_reason", "status",
          "error_code", "error_type", "call_id")


def timeline_lines(trace: Mapping[str, Any]) -> list[str]:
    """The trace's spans as lines of text, each indented two spaces per ancestor."""
    spans: Sequence[Mapping[str, Any]] = trace.get("spans", ())
    depth: dict[int, int] = {}
    lines = []
    for span in spans:
        parent = span.get("parent_id")
        level = depth[span["id"]] = depth.get(parent, -1) + 1 if parent is not None else 0
        name = str(span["name"])
        if span.get("branch"):
            name += f" [{span['branch']}]"
        end = span.get("end")
        took = "running" if end is None else _seconds(end - span["start"])
        attributes = span.get("attributes") or {}
        measured = " ".join(f"{key}={_value(attributes[key])}" for key in _SHOWN
                            if key in attributes)
        lines.append(f"{'  ' * level}{span['kind']:<8} {name}  "
                     f"@{_seconds(span['start'])} {took}" + (f"  {measured}" if measured else ""))
    if not trace.get("ended", True):
        lines.append("(the run is still going)")
    if trace.get("dropped"):
        lines.append(f"({trace['dropped']} more spans were not kept)")
    return lines


def _seconds(value: float) -> str:
    return f"{value * 1000:.0f}ms" if value < 1 else f"{value:.2f}s"


def _value(value: Any) -> str:
    return _seconds(value) if isinstance(value, float) else str(value)
