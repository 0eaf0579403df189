"""Shared pieces of the multi-agent tests: a runner over a tree, collecting, reading back."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from headwater import (
    Content,
    Event,
    FunctionTool,
    RunConfig,
    Runner,
    StreamingMode,
    ToolStreamEvent,
    tool,
)
from headwater.agents.base import BaseAgent
from headwater.models import LlmRequest
from headwater.sessions import InMemorySessionService
from headwater.sessions.base import BaseSessionService

SSE = RunConfig(streaming_mode=StreamingMode.SSE)
NONE = RunConfig(streaming_mode=StreamingMode.NONE)


async def make(root: BaseAgent, service: BaseSessionService | None = None
               ) -> tuple[Runner, str]:
    runner = Runner(agent=root, app_name="shop",
                    session_service=service or InMemorySessionService())
    session = await runner.create_session(user_id="u1")
    return runner, session.id


async def collect(runner: Runner, sid: str, message: str | Content = "hello",
                  config: RunConfig = SSE) -> list[Event]:
    async with runner.run_async(user_id="u1", session_id=sid, new_message=message,
                                run_config=config) as stream:
        return [event async for event in stream]


async def stored(runner: Runner, sid: str) -> list[Event]:
    session = await runner.session_service.get_session(app_name="shop", user_id="u1",
                                                       session_id=sid)
    assert session is not None
    return session.events


async def state(runner: Runner, sid: str) -> dict[str, Any]:
    session = await runner.session_service.get_session(app_name="shop", user_id="u1",
                                                       session_id=sid)
    assert session is not None
    return session.state


def texts(request: LlmRequest) -> list[str]:
    """Each content of a request as ``role: text`` (calls and results by name)."""
    return content_texts(request.contents)


def content_texts(contents: list[Content]) -> list[str]:
    """Each content as ``role: text`` (calls and results by name)."""
    out = []
    for content in contents:
        bits = []
        for part in content.parts:
            if part.text is not None:
                bits.append(part.text)
            elif part.function_call is not None:
                bits.append(f"call {part.function_call.name}")
            elif part.function_response is not None:
                bits.append(f"result {part.function_response.name}")
        out.append(f"{content.role}: {' | '.join(bits)}")
    return out


def assert_valid_history(contents: list[Content]) -> None:
    """Every call is answered, once, before the next model or user turn (what providers
    demand)."""
    open_calls: set[str] = set()
    for content in contents:
        responses = {r.id for r in content.function_responses}
        if responses:
            assert responses <= open_calls, f"response without call: {responses - open_calls}"
            open_calls -= responses
            continue
        assert not open_calls, f"calls without results: {open_calls}"
        open_calls |= {c.id for c in content.function_calls}


def slow_search(started: asyncio.Event) -> FunctionTool:
    """A streaming ``slow_search`` tool: one progress delta, then ``started`` is set and it
    sleeps 60 s (a run is cancelled around it)."""

    @tool(streaming=True)
    async def slow_search(query: str) -> AsyncIterator[ToolStreamEvent]:
        """Search slowly."""
        yield ToolStreamEvent("part_delta", delta="searching…")
        started.set()
        await asyncio.sleep(60)
        yield ToolStreamEvent("done", response="never")

    return slow_search


def tool_names(request: LlmRequest) -> list[str]:
    return [tool.name for tool in request.tools]


def drafts_by_author(events: list[Event]) -> dict[str, list[str]]:
    """Seed 004's reducer, keyed by author: deltas append to the author's draft, the
    author's aggregate replaces it. Returns, per author, the drafts the aggregates replaced."""
    drafts: dict[str, str] = {}
    replaced: dict[str, list[str]] = {}
    for event in events:
        content = event.content
        if content is None or content.role != "model":
            continue
        if event.partial:
            drafts[event.author] = drafts.get(event.author, "") + content.text
        elif content.text:
            replaced.setdefault(event.author, []).append(drafts.pop(event.author, ""))
    return replaced
