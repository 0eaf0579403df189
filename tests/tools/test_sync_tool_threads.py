"""Sync tools run on a bounded pool of their own: hung ones starve neither later tools nor the
HTTP client's name resolution, and an abandoned one holds its thread until it really returns."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from headwater import Agent, Event, RunConfig, Runner, tool
from headwater.models.openai import OpenAIChatModel
from headwater.settings import Settings
from headwater.testing import FakeProvider, Scenario, ScriptedCall, ScriptedModel, ScriptedTurn
from headwater.testing import render_openai as render


@pytest.fixture
def release() -> Iterator[threading.Event]:
    gate = threading.Event()
    yield gate
    gate.set()  # let the hung threads end, whatever the test did


def results(events: list[Event]) -> list[dict[str, Any]]:
    return [r.response for e in events for r in e.function_responses]


async def test_six_hung_sync_tools_delay_neither_a_seventh_tool_nor_a_model_call_s_dns(
        release: threading.Event) -> None:
    # The loop's default executor (where getaddrinfo runs) has exactly six threads: if the
    # hung tools sat on it, resolving "localhost" for the next model call would never end.
    loop = asyncio.get_running_loop()
    loop.set_default_executor(ThreadPoolExecutor(max_workers=6))
    started: list[str] = []

    @tool(timeout=0.2)
    def hang(n: int) -> str:
        """Hangs."""
        release.wait(30)
        return "late"

    def quick() -> str:
        """Answers at once."""
        started.append(threading.current_thread().name)
        return "quick"

    close = {"connection": "close"}  # every model call opens (and resolves) anew
    async with FakeProvider() as provider, httpx.AsyncClient() as client:
        provider.enqueue(
            Scenario(headers=close, body=render(tool_calls=[
                {"name": "hang", "id": f"h{n}", "arguments": {"n": n}} for n in range(6)],
                finish_reason="tool_calls")),
            Scenario(headers=close, body=render(tool_calls=[{"name": "quick", "id": "q"}],
                                                finish_reason="tool_calls")),
            Scenario(headers=close, body=render(text=["done"])))
        base_url = provider.base_url.replace("127.0.0.1", "localhost") + "/v1"
        model = OpenAIChatModel("m", base_url=base_url, api_key="k", http_client=client,
                                settings=Settings(model_connect_timeout=5))
        runner = Runner(agent=Agent(name="bot", model=model, tools=[hang, quick]),
                        app_name="app", auto_create_session=True)
        result = await runner.run_once(user_id="u", new_message="go",
                                       run_config=RunConfig())
    answers = results(result.events)
    assert [a.get("code") for a in answers[:6]] == ["timeout"] * 6
    assert answers[6] == {"result": "quick"}
    assert result.text == "done" and result.error_code is None
    assert len(provider.requests) == 3
    assert started and started[0].startswith("headwater-sync-tool")


async def test_an_abandoned_sync_tool_keeps_its_thread_until_it_returns(
        release: threading.Event, caplog: pytest.LogCaptureFixture) -> None:
    calls: list[int] = []

    @tool(timeout=0.2)
    def work(n: int) -> int:
        """Hangs until released."""
        calls.append(n)
        release.wait(30)
        return n

    def turn(*ns: int) -> ScriptedTurn:
        return ScriptedTurn(calls=[ScriptedCall("work", {"n": n}) for n in ns])

    model = ScriptedModel([turn(1, 2), turn(3)]).reply("later")
    runner = Runner(agent=Agent(name="bot", model=model, tools=[work]), app_name="app",
                    auto_create_session=True, settings=Settings(sync_tool_workers=2))
    result = await runner.run_once(user_id="u", new_message="go")
    answers = results(result.events)
    # Both threads are still held by the abandoned calls: the third never got one.
    assert [a.get("code") for a in answers] == ["timeout"] * 3
    assert sorted(calls) == [1, 2]
    abandoned = [r for r in caplog.records if r.levelname == "WARNING"
                 and "abandoned" in r.getMessage()]
    assert len(abandoned) == 2
    release.set()  # the abandoned calls return; their threads are free again
    model.add(turn(4)).reply("done")
    result = await runner.run_once(user_id="u", new_message="again")
    assert results(result.events) == [{"result": 4}]
    assert sorted(calls) == [1, 2, 4]
