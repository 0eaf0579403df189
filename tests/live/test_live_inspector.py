"""A live run's trace for the run inspector (issue 31, docs/inspector.md): a transfer is a
``transfer`` span (the drawer's arrow) and a live streaming tool a ``tool`` span from its
start to its end, its emissions counted as its progress."""

from __future__ import annotations

from collections.abc import AsyncIterator

from headwater import Agent, Content, LiveRequestQueue, Runner, tool
from headwater.core.inspection import recording
from headwater.core.trace_record import TraceRecord
from headwater.testing import ScriptedModel, wait_until


@tool
async def ticks(count: int) -> AsyncIterator[dict[str, int]]:
    """Tick ``count`` times (a live stream).

    Args:
        count: how many ticks.
    """
    for n in range(count):
        yield {"tick": n}


async def test_a_live_transfer_and_a_live_stream_are_spans() -> None:
    front = ScriptedModel().call("transfer_to_agent", {"agent_name": "clock"}, call_id="t1")
    clock = (ScriptedModel().call("ticks", {"count": 3}, call_id="k1")
             .reply("Ticking.").reply("tick").reply("tick").reply("tick").reply("Done."))
    root = Agent(name="front", model=front, description="Front desk.", sub_agents=[
        Agent(name="clock", model=clock, description="Ticks.", tools=[ticks])])
    runner = Runner(agent=root, app_name="app", auto_create_session=True)
    record = TraceRecord()
    queue = LiveRequestQueue()
    queue.send_content(Content.from_text("tick three times"))
    with recording(record):
        async with runner.run_live(user_id="u", session_id="s",
                                   live_request_queue=queue) as stream:
            async for event in stream:
                if event.text == "Done." and not event.partial:
                    break
            await wait_until(lambda: any(s.kind == "tool" and s.end is not None
                                         for s in record.spans), timeout=10)
    queue.close()
    spans = record.as_json()["spans"]
    [transfer] = [s for s in spans if s["kind"] == "transfer"]
    assert (transfer["name"], transfer["agent"]) == ("front → clock", "front")
    [stream_span] = [s for s in spans if s["kind"] == "tool" and s["name"] == "ticks"]
    assert stream_span["agent"] == "clock" and stream_span["attributes"]["progress"] == 3
    assert stream_span["end"] is not None and stream_span["start"] <= stream_span["end"]
