"""The event type: is_final_response and serialisation."""

from __future__ import annotations

import dataclasses

import pytest

from headwater import Event, EventActions
from headwater.events import (
    NO_ACTIONS,
    ToolProgress,
    ToolStreamEvent,
    event_from_json,
    event_to_json,
    partial_event,
)
from headwater.types import Blob, Content, FunctionCall, FunctionResponse, Part, Usage


def call_event(**kw: object) -> Event:
    return Event(author="a", content=Content("model", [Part(function_call=FunctionCall("c", "f"))]),
                 **kw)  # type: ignore[arg-type]


def test_is_final_response_rules() -> None:
    assert Event(author="a", content=Content.from_text("done", "model")).is_final_response()
    assert not Event(author="a", content=Content.from_text("do", "model"),
                     partial=True).is_final_response()
    assert not call_event().is_final_response()
    assert not Event(author="a", content=Content("user", [Part(
        function_response=FunctionResponse("c", "f", {}))])).is_final_response()
    assert call_event(long_running_tool_ids=["c"]).is_final_response()
    assert call_event(actions=EventActions(skip_summarization=True)).is_final_response()
    assert Event(author="a", error_code="provider_error").is_final_response()


def test_json_round_trip_keeps_every_field() -> None:
    event = Event(
        invocation_id="inv", author="bot", branch="root.bot",
        content=Content("model", [
            Part(text="thinking", thought=True), Part(text="hi ✓"),
            Part(function_call=FunctionCall("c1", "f", {"a": [1, {"b": None}]})),
            Part(inline_data=Blob("image/png", b"\x89PNG\x00\xff")),
        ]),
        finish_reason="stop", usage=Usage(1, 2, 3), long_running_tool_ids=["c1"],
        turn_complete=True, interrupted=True, error_code="provider_error", error_message="m",
        actions=EventActions(state_delta={"k": [1]}, end_invocation=True),
        tool_progress=ToolProgress("c1", "f", ToolStreamEvent("part_delta", delta="x"), 2),
    )
    assert event_from_json(event_to_json(event)) == event


def test_ids_are_unique() -> None:
    assert len({Event().id for _ in range(1000)}) == 1000


def test_a_partial_events_id_is_made_when_first_read_unique_and_stable() -> None:
    events = [partial_event("inv", "agent", None) for _ in range(1000)]
    assert all(isinstance(e, Event) and e.partial for e in events)
    ids = [e.id for e in reversed(events)]  # read in another order than they were made
    assert len(set(ids)) == 1000 and [e.id for e in reversed(events)] == ids  # kept
    assert not set(ids) & {Event().id for _ in range(1000)}  # no id an Event has either
    copy = dataclasses.replace(events[0], author="other")
    assert copy.id == events[0].id and copy.author == "other"
    events[1].id = "mine"
    assert events[1].id == "mine"


def test_partial_event_is_a_partial_event_with_read_only_empty_actions() -> None:
    content = Content("model", [Part(text="Hel")])
    fast = partial_event("inv", "agent", content, branch="agent/c1")
    slow = Event(invocation_id="inv", author="agent", content=content, branch="agent/c1",
                 partial=True)
    fast.id, fast.timestamp = slow.id, slow.timestamp
    # Every field is set (a field added to Event and forgotten here fails this) and equal,
    # the actions aside, which are empty but shared and read-only.
    for name in (f.name for f in dataclasses.fields(Event)):
        if name not in ("actions", "long_running_tool_ids"):
            assert getattr(fast, name) == getattr(slow, name), name
    assert list(fast.long_running_tool_ids) == []
    assert not fast.actions.state_delta and not fast.actions.requested_approvals
    with pytest.raises(TypeError):
        fast.actions.state_delta["k"] = 1
    assert fast.actions is NO_ACTIONS and fast.is_final_response() is False
