"""The caller's trace continues in the gateway (gateway/tracing.py): a run started by a
request, or by a WebSocket handshake, carrying a W3C ``traceparent`` is a child of that
span. Over real uvicorn; spans go to the SDK's in-memory exporter through a provider given
to headwater alone."""

from __future__ import annotations

import json

import httpx
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from websockets.asyncio.client import connect

from headwater import Agent
from headwater.gateway import create_app
from headwater.settings import Settings
from headwater.testing import ScriptedModel, ScriptedTurn, wait_until

from .conftest import Serve
from .stores import new_service

TRACE_ID = 0x4BF92F3577B34DA6A3CE929D0E0E4736
PARENT_ID = 0x00F067AA0BA902B7
TRACEPARENT = f"00-{TRACE_ID:032x}-{PARENT_ID:016x}-01"


def run_spans(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans()
            if (s.attributes or {}).get("gen_ai.operation.name") == "invoke_agent"]


async def app_on(serve: Serve) -> str:
    model = ScriptedModel(responder=lambda _: ScriptedTurn(text=["On ", "its way."]))
    app = create_app(Agent(name="courier", model=model),
                     session_service=new_service(), auth=None,
                     settings=Settings(session_lock_timeout=0, shutdown_grace=2.0))
    return await serve(app)


async def new_session(client: httpx.AsyncClient) -> str:
    response = await client.post("/sessions", json={})
    assert response.status_code == 201, response.text
    sid: str = response.json()["id"]
    return sid


async def test_a_run_posted_with_a_traceparent_joins_the_callers_trace(
        serve: Serve, exporter: InMemorySpanExporter) -> None:
    async with httpx.AsyncClient(base_url=await app_on(serve), timeout=10) as client:
        sid = await new_session(client)
        traced = await client.post(f"/sessions/{sid}/runs", json={"message": "where?"},
                                   headers={"traceparent": TRACEPARENT})
        assert traced.status_code == 200 and "On its way." in traced.text
        await wait_until(lambda: len(run_spans(exporter)) == 1)
        untraced = await client.post(f"/sessions/{sid}/runs", json={"message": "again?"})
        assert untraced.status_code == 200
        await wait_until(lambda: len(run_spans(exporter)) == 2)
    first, second = sorted(run_spans(exporter), key=lambda s: s.start_time or 0)
    assert first.context is not None and first.parent is not None
    assert first.context.trace_id == TRACE_ID
    assert first.parent.span_id == PARENT_ID and first.parent.is_remote
    assert second.context is not None and second.context.trace_id != TRACE_ID
    assert second.parent is None  # a request without a trace starts its own
    chats = [s for s in exporter.get_finished_spans() if s.name.startswith("chat ")]
    assert first.context.span_id in {c.parent.span_id for c in chats if c.parent is not None}


async def test_a_live_run_opened_with_a_traceparent_joins_the_callers_trace(
        serve: Serve, exporter: InMemorySpanExporter) -> None:
    async with httpx.AsyncClient(base_url=await app_on(serve), timeout=10) as client:
        sid = await new_session(client)
        url = str(client.base_url).replace("http://", "ws://", 1) + f"/live/{sid}"
        async with connect(url, additional_headers={"traceparent": TRACEPARENT}) as ws:
            while json.loads(await ws.recv())["type"] != "ready":
                pass
            await ws.send(json.dumps({"type": "content", "text": "where?"}))
            while json.loads(await ws.recv())["type"] != "turn_complete":
                pass
            await ws.send(json.dumps({"type": "close"}))
            async for _ in ws:  # until the server closes the socket
                pass
        await wait_until(lambda: len(run_spans(exporter)) == 1)
    (run,) = run_spans(exporter)
    assert run.context is not None and run.parent is not None
    assert run.context.trace_id == TRACE_ID and run.parent.span_id == PARENT_ID
