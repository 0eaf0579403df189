"""A bug in our own code is ours: ``internal``, its traceback in the log, never the provider's.

Provider JSON of the wrong shape is caught by the checks of ``models/_wire.py``
(``provider_bad_response``, tests/models/test_wrong_shapes.py); a ``TypeError``
raised by our parser itself is not a bad response of the provider's.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx
import pytest

from headwater import Agent, RunConfig, Runner, StreamingMode
from headwater.gateway import create_app
from headwater.models._http import StreamParser
from headwater.models.openai import OpenAIChatModel
from headwater.settings import Settings
from headwater.sse import ServerSentEvent
from headwater.testing import FakeProvider, Scenario, render_openai
from headwater.testing.sse import aiter_sse

from .conftest import Serve
from .stores import new_service

FAST = Settings(model_backoff_initial=0.001, model_backoff_max=0.002, model_idle_timeout=5,
                session_lock_timeout=0, shutdown_grace=2.0)
BUG = "unsupported operand type(s) for +: 'int' and 'NoneType'"


def parser_bug() -> None:
    """Stands for a slip in our own parser (what ``1 + None`` raises)."""
    raise TypeError(BUG)


class BuggyParserModel(OpenAIChatModel):
    """The OpenAI adapter whose parser breaks, by our fault, once content has arrived."""

    def new_parser(self) -> StreamParser:
        parser = super().new_parser()
        feed = parser.feed

        def buggy_feed(event: ServerSentEvent) -> None:
            feed(event)
            if parser.agg.has_content:
                parser_bug()

        parser.feed = buggy_feed  # type: ignore[method-assign]
        return parser


def buggy_agent(provider: FakeProvider, client: httpx.AsyncClient) -> Agent:
    provider.enqueue(Scenario(body=render_openai(text=["Hello ", "there."]),
                              check_history=False))
    model = BuggyParserModel("m", base_url=f"{provider.base_url}/v1", api_key="k",
                             http_client=client, settings=FAST)
    return Agent(name="bot", model=model)


async def test_a_parser_type_error_reaches_the_caller_as_itself(provider: FakeProvider) -> None:
    async with httpx.AsyncClient() as client:
        runner = Runner(agent=buggy_agent(provider, client), app_name="app", settings=FAST)
        session = await runner.create_session(user_id="u")
        seen = []
        with pytest.raises(TypeError, match="unsupported operand"):
            async with runner.run_async(
                    user_id="u", session_id=session.id, new_message="hi",
                    run_config=RunConfig(streaming_mode=StreamingMode.SSE)) as stream:
                seen += [e async for e in stream]
    assert all(e.error_code != "provider_bad_response" for e in seen)
    assert len(provider.requests) == 1  # a bug of ours is not retried as a provider failure


async def test_a_parser_type_error_ends_the_run_internal_with_its_traceback_logged(
        provider: FakeProvider, serve: Serve, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="headwater")
    async with httpx.AsyncClient() as model_client:
        app = create_app(buggy_agent(provider, model_client),
                         session_service=new_service(), settings=FAST)
        async with httpx.AsyncClient(base_url=await serve(app), timeout=30) as client:
            sid = (await client.post("/sessions", json={})).json()["id"]
            frames: list[tuple[str, dict[str, Any]]] = []
            raw = b""
            async with client.stream("POST", f"/sessions/{sid}/runs",
                                     json={"message": "hi"}) as response:
                assert response.status_code == 200
                async for message in aiter_sse(response.aiter_bytes()):
                    frames.append((message.event, json.loads(message.data)))
                    raw += message.data.encode()
            history = (await client.get(f"/sessions/{sid}/events")).json()["items"]

    kind, data = frames[-1]
    assert (kind, data["code"], data["retryable"]) == ("error", "internal", False)
    assert BUG.encode() not in raw and b"Traceback" not in raw  # nothing of it on the wire
    assert not any(item.get("error", {}).get("code") == "provider_bad_response"
                   for item in history)

    logged = [r for r in caplog.records if r.name == "headwater.gateway" and r.exc_info]
    assert len(logged) == 1, [r.getMessage() for r in caplog.records]
    record = logged[0]
    assert record.levelno == logging.ERROR
    assert record.exc_info is not None and record.exc_info[0] is TypeError
    traceback = logging.Formatter().formatException(record.exc_info)
    assert "parser_bug" in traceback and BUG in traceback
