"""How the live examples print a conversation: one line per stored event."""

from __future__ import annotations

import json

from ..core.events import Event


def live_lines(event: Event, stamp: str) -> list[str]:
    """The lines one live event adds to a printed conversation (partials add none).

    A stream talking to the model (an event on a branch) is shown as
    ``-> model: …``; calls and results each get a line.
    """
    if event.partial:
        return []
    lines: list[str] = []
    if event.error_code is not None:
        lines.append(f"{stamp} error {event.error_code}: {event.error_message}")
    if event.author == "user":
        lines.append(f"{stamp} user: {event.text}")
    elif event.branch is not None and event.text:
        lines.append(f"{stamp}   -> model: {event.text}")
    elif event.text:
        lines.append(f"{stamp} {event.author}: {event.text}")
    for call in event.function_calls:
        lines.append(f"{stamp} {event.author} calls {call.name}({json.dumps(call.args)})")
    for response in event.function_responses:
        lines.append(f"{stamp}   {response.name} answered: {json.dumps(response.response)}")
    return lines
