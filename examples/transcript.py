"""How the examples print a live conversation: one line per thing that happened."""

from __future__ import annotations

import json

from headwater import Event


def describe(event: Event, stamp: str) -> list[str]:
    """The lines one event adds to the printed conversation (partials add none)."""
    if event.partial:
        return []
    lines: list[str] = []
    if event.error_code is not None:
        lines.append(f"{stamp} error {event.error_code}: {event.error_message}")
    if event.author == "user":
        lines.append(f"{stamp} user: {event.text}")
    elif event.branch is not None and event.text:  # a stream talking to the model
        lines.append(f"{stamp}   -> model: {event.text}")
    elif event.text:
        lines.append(f"{stamp} {event.author} (scripted model): {event.text}")
    for call in event.function_calls:
        lines.append(f"{stamp} {event.author} calls {call.name}({json.dumps(call.args)})")
    for response in event.function_responses:
        lines.append(f"{stamp}   {response.name} answered: {json.dumps(response.response)}")
    return lines
