"""H1: the hardening figures the tests must not time (docs/architecture.md).

- ``loop_stall_ms``: the longest gap a 1 ms ticker on the event loop sees while
  a tool returns a result of ``h1_result_mib`` MiB (serialised and cut to
  ``max_result_bytes`` off the loop; 0.7 s for 50 MiB when it was on it).
- ``getaddrinfo_ms``: ``loop.getaddrinfo("localhost")`` right after a turn in
  which six sync tools hung past their timeout, on a loop whose default
  executor has six threads (28 s when sync tools shared it).
- ``connections_per_20_calls``: TCP connections FakeProvider accepted for 20
  sequential model calls of one ``OpenAIChatModel`` (1 when reused).
"""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from headwater import Agent, Runner, tool
from headwater.models import LlmRequest
from headwater.models.openai import OpenAIChatModel
from headwater.testing import (
    FakeProvider,
    Scenario,
    ScriptedCall,
    ScriptedModel,
    ScriptedTurn,
    render_openai,
)
from headwater.types import Content

Figures = dict[str, float]


async def _ticker(stop: asyncio.Event, gaps: list[float]) -> None:
    last = time.perf_counter()
    while not stop.is_set():
        await asyncio.sleep(0.001)
        now = time.perf_counter()
        gaps.append(now - last)
        last = now


async def loop_stall_ms(mib: int) -> float:
    async def big() -> dict[str, Any]:
        """A large result."""
        return {"rows": ["y" * 1024] * (mib * 1024)}

    runner = Runner(agent=Agent(name="b", model=ScriptedModel().call("big").reply("ok"),
                                tools=[big]), app_name="h1", auto_create_session=True)
    stop, gaps = asyncio.Event(), []
    ticker = asyncio.create_task(_ticker(stop, gaps))
    await asyncio.sleep(0.01)
    gaps.clear()
    await runner.run_once(user_id="u", new_message="go")
    stop.set()
    await ticker
    return max(gaps) * 1000


async def getaddrinfo_ms() -> float:
    loop = asyncio.get_running_loop()
    loop.set_default_executor(ThreadPoolExecutor(max_workers=6))
    gate = threading.Event()

    @tool(timeout=0.05)
    def hang(n: int) -> None:
        """Hangs."""
        gate.wait(30)

    model = ScriptedModel([ScriptedTurn(calls=[ScriptedCall("hang", {"n": n})
                                               for n in range(6)])]).reply("ok")
    runner = Runner(agent=Agent(name="b", model=model, tools=[hang]), app_name="h1",
                    auto_create_session=True)
    try:
        await runner.run_once(user_id="u", new_message="go")
        start = time.perf_counter()
        await asyncio.wait_for(loop.getaddrinfo("localhost", 80), 60)
        return (time.perf_counter() - start) * 1000
    finally:
        gate.set()


async def connections_per_20_calls() -> float:
    request = LlmRequest(contents=[Content.from_text("hi")])
    async with FakeProvider() as provider:
        for _ in range(20):
            provider.enqueue(Scenario(body=render_openai(text=["ok"]), check_history=False))
        async with OpenAIChatModel("m", base_url=f"{provider.base_url}/v1",
                                   api_key="k") as model:
            for _ in range(20):
                async for _ in model.generate_content(request):
                    pass
        return float(len(provider.connections))


def h1(result_mib: int) -> Figures:
    return {"loop_stall_ms": asyncio.run(loop_stall_ms(result_mib)),
            "getaddrinfo_ms": asyncio.run(getaddrinfo_ms()),
            "connections_per_20_calls": asyncio.run(connections_per_20_calls())}
