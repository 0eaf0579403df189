"""A1: adapter cost per chunk against the floor of reading the same bytes with httpx.

A FakeProvider in a child process (so its CPU is not ours) serves one OpenAI
stream of N text chunks to every request, framed two ways: one HTTP chunk per
stream chunk, as providers send them (the figure the target is about), and the
whole body as one write (a burst: every read is full, which leaves nothing but
parsing to compare). The floor is ``httpx`` ``aiter_lines()`` over the body;
the adapter figure is ``OpenAIChatModel.generate_content(stream=True)``
consumed to its aggregate (SSE decode + JSON + aggregate + partials). Both
include the same HTTP request.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

from headwater.models import LlmRequest
from headwater.models.openai import OpenAIChatModel
from headwater.testing import FakeProvider, Scenario, render_openai
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


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        asyncio.run(serve(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"))
    else:
        print(json.dumps(a1(int(sys.argv[1]) if len(sys.argv) > 1 else 5000, 5)))
