"""Adapter benchmarks: A1 cost per chunk, A2 SSE decoder scaling, A3 deadlines and closes.

A1: adapter cost per chunk against the floor of reading the same bytes with httpx.

A FakeProvider in a child process (so its CPU is not ours) serves one OpenAI
stream of N text chunks to every request, framed two ways: one HTTP chunk per
stream chunk, as providers send them (the figure the target is about), and the
whole body as one write (a burst: every read is full, which leaves nothing but
parsing to compare). The floor is ``httpx`` ``aiter_lines()`` over the body;
the adapter figure is ``OpenAIChatModel.generate_content(stream=True)``
consumed to its aggregate (SSE decode + JSON + aggregate + partials). Both
include the same HTTP request.

A2: the SSE decoder fed one byte at a time, at two body sizes four times apart;
the cost ratio is about 4 when decoding is linear and 16 when it is quadratic.

A3: how promptly the adapters let go, against an in-process FakeProvider: the
time from the consumer breaking off a stream to the server seeing the close
(adapter and bare httpx), how far past ``model_idle_timeout`` and
``model_total_timeout`` the ``ProviderTimeout`` comes, and how long a
``Retry-After: 1`` answer holds the next attempt back. The tests check that
each of these happens; the figures are here.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import subprocess
import sys
import time
from contextlib import aclosing
from pathlib import Path

import httpx

from headwater.errors import ProviderTimeout
from headwater.models import LlmRequest
from headwater.models.openai import OpenAIChatModel
from headwater.settings import Settings
from headwater.testing import FakeProvider, Scenario, Stall, Trickle, render_openai
from headwater.types import Content

Figures = dict[str, float]
HERE = Path(__file__).resolve()


async def serve(chunks: int, requests: int, one_write: bool) -> None:
    """Child: serve the stream ``requests`` times, print the URL, wait for stdin to close."""
    events = render_openai(text=[f"w{i % 1000:03d}"[:4] for i in range(chunks)])
    body = [b"".join(events)] if one_write else list(events)
    async with FakeProvider() as provider:
        provider.enqueue(*(Scenario(body=body, check_history=False) for _ in range(requests)))
        print(provider.base_url, flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)


async def floor_ns(client: httpx.AsyncClient, url: str) -> int:
    start = time.perf_counter_ns()
    async with client.stream("POST", f"{url}/v1/chat/completions", json={"messages": []}) as r:
        lines = 0
        async for _ in r.aiter_lines():
            lines += 1
    elapsed = time.perf_counter_ns() - start
    assert lines > 0
    return elapsed


async def adapter_ns(model: OpenAIChatModel, chunks: int) -> int:
    request = LlmRequest(contents=[Content.from_text("go")])
    start = time.perf_counter_ns()
    final = None
    async for response in model.generate_content(request, stream=True):
        final = response
    elapsed = time.perf_counter_ns() - start
    assert final is not None and final.content is not None
    assert len(final.content.text) == 4 * chunks
    return elapsed


async def measure(url: str, chunks: int, samples: int) -> Figures:
    async with httpx.AsyncClient() as client:
        model = OpenAIChatModel("bench", base_url=f"{url}/v1", http_client=client)
        floors, adapters = [], []
        await floor_ns(client, url)  # warm-up: connection, imports, caches
        await adapter_ns(model, chunks)
        for _ in range(samples):
            floors.append(await floor_ns(client, url))
            adapters.append(await adapter_ns(model, chunks))
    floor = statistics.median(floors) / chunks / 1000
    adapter = statistics.median(adapters) / chunks / 1000
    return {"floor_us_per_chunk": floor, "adapter_us_per_chunk": adapter,
            "ratio_to_floor": adapter / floor}


def a1(chunks: int, samples: int) -> Figures:
    """Run A1 both ways, each with its server in a child process."""
    figures = _a1(chunks, samples, one_write=False)
    burst = _a1(chunks, samples, one_write=True)
    figures.update({f"one_write_{key}": value for key, value in burst.items()})
    return figures


def _a1(chunks: int, samples: int, one_write: bool) -> Figures:
    with subprocess.Popen([sys.executable, str(HERE), "--serve", str(chunks),
                           str(2 * samples + 2), "1" if one_write else "0"],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as child:
        assert child.stdout is not None and child.stdin is not None
        url = child.stdout.readline().strip()
        try:
            return asyncio.run(measure(url, chunks, samples))
        finally:
            child.stdin.close()
            child.wait(10)


# -- A2: SSE decoder, one byte at a time ----------------------------------------------------


def decode_bytewise_s(size: int) -> float:
    """Seconds to decode ``size`` bytes of 200-byte events fed one byte at a time."""
    from headwater.sse import SSEDecoder  # the one SSE decoder

    body = (b"data: " + b"y" * 200 + b"\n\n") * (size // 208)
    decoder = SSEDecoder()
    start = time.perf_counter()
    count = 0
    for i in range(len(body)):
        count += len(decoder.feed(body[i : i + 1]))
    elapsed = time.perf_counter() - start
    assert count == size // 208
    return elapsed


def a2(size: int, samples: int) -> Figures:
    """Best of ``samples`` at ``size`` and at four times it; the ratio shows the growth."""
    small = min(decode_bytewise_s(size) for _ in range(samples))
    large = min(decode_bytewise_s(4 * size) for _ in range(samples))
    return {"us_per_kib_small": small / (size / 1024) * 1e6,
            "us_per_kib_large": large / (4 * size / 1024) * 1e6,
            "cost_ratio_4x_bytes": large / small}


# -- A3: deadlines and closes ----------------------------------------------------------------

FAST = Settings(model_backoff_initial=0.01, model_backoff_max=0.02, model_idle_timeout=5,
                model_total_timeout=20)
REQUEST = LlmRequest(contents=[Content.from_text("go")])


def openai_model(provider: FakeProvider, client: httpx.AsyncClient,
                 settings: Settings = FAST) -> OpenAIChatModel:
    return OpenAIChatModel("bench", base_url=f"{provider.base_url}/v1", api_key="sk-bench",
                           http_client=client, settings=settings)


async def close_seen_ms(provider: FakeProvider, client: httpx.AsyncClient, index: int,
                        bare: bool) -> float:
    """Break off a stalled stream after its first piece; ms until the server sees the close."""
    provider.enqueue(Scenario(body=[*render_openai(text=["a ", "b "])[:2], Stall()],
                              check_history=False))
    if bare:
        async with client.stream("POST", f"{provider.base_url}/v1/chat/completions",
                                 json={"messages": []}) as response:
            async for _ in response.aiter_raw():
                stopped = time.monotonic()
                break
    else:
        stream = openai_model(provider, client).generate_content(REQUEST, stream=True)
        async with aclosing(stream) as responses:
            async for _ in responses:
                stopped = time.monotonic()
                break
    record = await provider.wait_closed(index, timeout=10.0)
    assert record.closed_at is not None
    return (record.closed_at - stopped) * 1000


async def drain(model: OpenAIChatModel) -> None:
    async with aclosing(model.generate_content(REQUEST, stream=True)) as responses:
        async for _ in responses:
            pass


async def timeout_overrun_ms(provider: FakeProvider, client: httpx.AsyncClient,
                             body: list[bytes | Stall | Trickle], settings: Settings,
                             limit: float) -> float:
    """ms between ``limit`` and the ``ProviderTimeout`` the adapter raises."""
    provider.enqueue(Scenario(body=body, check_history=False))
    start = time.monotonic()
    try:
        await drain(openai_model(provider, client, settings))
    except ProviderTimeout:
        return (time.monotonic() - start - limit) * 1000
    raise AssertionError("no ProviderTimeout")


async def retry_after_wait_s(provider: FakeProvider, client: httpx.AsyncClient) -> float:
    """Seconds the server waited between a ``Retry-After: 1`` answer and the next attempt."""
    before = len(provider.requests)
    provider.enqueue(Scenario.error(429, headers={"retry-after": "1"}),
                     Scenario(body=render_openai(text=["fine"]), check_history=False))
    await drain(openai_model(provider, client))
    first, second = provider.requests[before:]
    return second.received_at - first.received_at


async def measure_a3(samples: int) -> Figures:
    idle = FAST.model_copy(update={"model_idle_timeout": 0.5})
    total = FAST.model_copy(update={"model_idle_timeout": 0.3, "model_total_timeout": 1.0})
    adapter, bare, idle_over, total_over, retry = [], [], [], [], []
    async with FakeProvider() as provider, httpx.AsyncClient() as client:
        for _ in range(samples):
            # A client of its own per close: a pooled connection (the adapter now reuses
            # them) would not be the new one whose close is timed.
            async with httpx.AsyncClient() as own:
                adapter.append(await close_seen_ms(provider, own, len(provider.connections),
                                                   bare=False))
            async with httpx.AsyncClient() as own:
                bare.append(await close_seen_ms(provider, own, len(provider.connections),
                                                bare=True))
            idle_over.append(await timeout_overrun_ms(
                provider, client, [*render_openai(text=["one "])[:2], Stall()], idle, 0.5))
            total_over.append(await timeout_overrun_ms(
                provider, client, [Trickle(b": keep-alive\n", every=0.05, forever=True)],
                total, 1.0))
            retry.append(await retry_after_wait_s(provider, client))
    return {"close_seen_ms": statistics.median(adapter),
            "httpx_close_seen_ms": statistics.median(bare),
            "idle_timeout_overrun_ms": statistics.median(idle_over),
            "total_deadline_overrun_ms": statistics.median(total_over),
            "retry_after_1_wait_s": statistics.median(retry)}


def a3(samples: int) -> Figures:
    return asyncio.run(measure_a3(samples))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        asyncio.run(serve(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"))
    else:
        print(json.dumps(a1(int(sys.argv[1]) if len(sys.argv) > 1 else 5000, 5)))
