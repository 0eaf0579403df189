"""The emulated live connection checks each model call with the one stream contract.

A model whose call breaks it (two finals, a partial after the final, no final, a call on
a partial) fails that turn with ``model_protocol_violation`` in a live run exactly as
``run_async`` rejects it: nothing of the broken call is stored, shown as a final, or
joins the conversation the next call is asked.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

import pytest

from headwater import Agent, Content, Event, LiveRequestQueue, Runner
from headwater.models import BaseLlm, LlmRequest, LlmResponse
from headwater.run_config import RunConfig, StreamingMode
from headwater.sessions import InMemorySessionService
from headwater.testing import wait_until
from headwater.types import FunctionCall, Part


def said(text: str, *, partial: bool = False) -> LlmResponse:
    return LlmResponse(content=Content("model", [Part(text=text)]), partial=partial)


BROKEN: dict[str, list[LlmResponse]] = {
    "two finals": [said("first"), said("second")],
    "a partial after the final": [said("first", partial=True), said("first"),
                                  said("late", partial=True)],
    "no final": [said("first", partial=True)],
    "a call on a partial": [
        LlmResponse(content=Content("model", [Part(function_call=FunctionCall(
            "c1", "lookup", {}))]), partial=True),
        said("first")],
}


class CustomModel(BaseLlm):
    """A user's own adapter: streams only, emulated in live runs; its first ``broken`` calls
    break the contract with ``shape``, later ones answer ``"fine"``."""

    live_emulation = True

    def __init__(self, shape: list[LlmResponse], broken: int = 1) -> None:
        super().__init__("custom")
        self.shape = shape
        self.broken = broken
        self.requests: list[LlmRequest] = []

    async def generate_content(self, request: LlmRequest, stream: bool = False
                               ) -> AsyncGenerator[LlmResponse, None]:
        self.requests.append(request)
        if len(self.requests) <= self.broken:
            for response in self.shape:
                yield response
            return
        yield said("fine")


def contents_of(events: list[Event]) -> list[tuple[str, str, str | None]]:
    return [(e.author, e.text, e.error_code) for e in events]


@pytest.mark.parametrize("shape", list(BROKEN))
async def test_a_live_run_rejects_the_model_run_async_rejects(shape: str) -> None:
    # run_async: the reference.
    service = InMemorySessionService()
    runner = Runner(agent=Agent(name="a", model=CustomModel(BROKEN[shape])), app_name="app",
                    session_service=service, auto_create_session=True)
    events = [e async for e in runner.run_async(
        user_id="u", session_id="batch", new_message="hi",
        run_config=RunConfig(streaming_mode=StreamingMode.SSE))]
    assert events[-1].error_code == "model_protocol_violation"
    batch = await service.get_session(app_name="app", user_id="u", session_id="batch")
    assert batch is not None
    expected = [("user", "hi", None), ("a", "", "model_protocol_violation")]
    assert contents_of(batch.events) == expected

    # run_live over the emulation: the same verdict, the same record.
    model = CustomModel(BROKEN[shape])
    runner = Runner(agent=Agent(name="a", model=model), app_name="app",
                    session_service=service, auto_create_session=True)
    queue = LiveRequestQueue()
    queue.send_content(Content.from_text("hi"))
    live: list[Event] = []

    async def consume() -> None:
        async for event in runner.run_live(user_id="u", session_id="live",
                                           live_request_queue=queue):
            live.append(event)

    await asyncio.wait_for(consume(), 30)  # a violation ends the live run, as run_async's
    queue.close()
    assert [e.error_code for e in live if not e.partial] == [None, "model_protocol_violation"]
    assert not any(e.function_calls for e in live)
    record = await service.get_session(app_name="app", user_id="u", session_id="live")
    assert record is not None
    assert contents_of(record.events) == expected
    assert len(model.requests) == 1


@pytest.mark.parametrize("shape", list(BROKEN))
async def test_nothing_of_a_broken_call_joins_the_emulated_conversation(shape: str) -> None:
    model = CustomModel(BROKEN[shape])
    conn = model.connect(LlmRequest())
    seen: list[LlmResponse] = []

    async def read() -> None:
        async for response in conn.receive():
            seen.append(response)

    reader = asyncio.create_task(read())
    try:
        await conn.send_content(Content.from_text("hi"))
        await wait_until(lambda: any(not r.partial for r in seen))
        await conn.send_content(Content.from_text("again"))
        await wait_until(lambda: sum(1 for r in seen if not r.partial) == 2)
    finally:
        await conn.close()
        await reader
    finals = [r for r in seen if not r.partial]
    assert [(f.error_code, f.content.text if f.content else None) for f in finals] == [
        ("model_protocol_violation", None), (None, "fine")]
    assert all(f.turn_complete for f in finals)
    # The second call was asked the conversation without any of the broken one.
    assert [c.text for c in model.requests[1].contents] == ["hi", "again"]
    # No partial after a final, and no call on a partial, ever left the connection.
    assert all(r.content is None or not r.content.function_calls for r in seen if r.partial)
    assert not any(r.content is not None and r.content.text == "late" for r in seen)
