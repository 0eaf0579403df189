"""The event type: is_final_response and serialisation."""

from __future__ import annotations

from headwater import Event, EventActions
from headwater.events import ToolProgress, ToolStreamEvent, event_from_json, event_to_json
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
