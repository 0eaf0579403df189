"""Two gateways in one process, each with its own settings, each honouring its own.

``create_app(settings=…)`` hands its settings to everything it builds (the
runners, the default session store, the run log); nothing below fetches the
process-wide settings on its own (tests/test_layering.py checks the code for it).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from headwater import Agent
from headwater.gateway import create_app
from headwater.gateway.runlog import InMemoryRunLog
from headwater.sessions import SqlSessionService
from headwater.settings import Settings, get_settings, reload_settings
from headwater.testing import ScriptedModel
from headwater.testing.sse import aiter_sse

from .conftest import Serve

WORDS = ("one ", "two ", "three ", "four ", "five ", "six ")


@pytest.fixture
def other_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[Settings]:
    """Process-wide settings that differ from both apps' (neither may read them)."""
    monkeypatch.setenv("HEADWATER_MAX_BODY_BYTES", "1024")
    monkeypatch.setenv("HEADWATER_RUN_LOG_MAX_FRAMES", "1")
    monkeypatch.setenv("HEADWATER_LEASE_POLL_INTERVAL", "3")
    yield reload_settings()
    monkeypatch.undo()
    reload_settings()


def app_with(tmp_path: Path, name: str, **bounds: Any) -> Any:
    settings = Settings(database_url=f"sqlite:///{tmp_path / name}.db", session_lock_timeout=0,
                        shutdown_grace=2.0, **bounds)
    agent = Agent(name="talker", model=ScriptedModel().reply(*WORDS))
    return create_app(agent, settings=settings)


async def run_frames(client: httpx.AsyncClient, sid: str) -> list[tuple[str, dict[str, Any]]]:
    frames = []
    async with client.stream("POST", f"/sessions/{sid}/runs",
                             json={"message": "count"}) as response:
        assert response.status_code == 200
        async for message in aiter_sse(response.aiter_bytes()):
            frames.append((message.event, json.loads(message.data)))
    return frames


async def test_two_apps_in_one_process_each_honour_their_own_settings(
        tmp_path: Path, serve: Serve, other_environment: Settings) -> None:
    small = app_with(tmp_path, "small", max_body_bytes=2048, run_log_max_frames=3,
                     lease_poll_interval=0.01)
    large = app_with(tmp_path, "large", max_body_bytes=16_384, run_log_max_frames=1000,
                     lease_poll_interval=0.02)
    assert get_settings() is other_environment  # what a get_settings() below would see

    # Everything each app built holds that app's settings, not the environment's.
    for app, frames, poll in ((small, 3, 0.01), (large, 1000, 0.02)):
        gateway = app.state.gateway
        assert isinstance(gateway.runs.log, InMemoryRunLog)
        assert gateway.runs.log.max_frames == frames
        assert isinstance(gateway.service, SqlSessionService)
        assert gateway.service.lease_poll_interval == poll
        assert all(r.settings is gateway.settings for r in gateway.runners.values())

    async with (httpx.AsyncClient(base_url=await serve(small, lifespan="on"), timeout=30) as s,
                httpx.AsyncClient(base_url=await serve(large, lifespan="on"), timeout=30) as b):
        # max_body_bytes: a 4 KiB body is too large for one app only.
        state = {"note": "x" * 4000}
        too_large = await s.post("/sessions", json={"state": state})
        assert too_large.status_code == 413
        assert too_large.json()["error"]["code"] == "payload_too_large"
        created = await b.post("/sessions", json={"state": state})
        assert created.status_code == 201, created.text

        # database_url: each app's default store is its own file.
        sid_large = created.json()["id"]
        assert (await s.get(f"/sessions/{sid_large}")).status_code == 404
        assert (await b.get(f"/sessions/{sid_large}")).status_code == 200
        assert (tmp_path / "small.db").is_file() and (tmp_path / "large.db").is_file()

        # run_log_max_frames: the same six-word answer overflows one app's run log only.
        sid_small = (await s.post("/sessions", json={})).json()["id"]
        cut = await run_frames(s, sid_small)
        assert cut[-1] == ("error", {"code": "budget_exceeded", "retryable": False,
                                     "request_id": cut[-1][1]["request_id"]})
        assert len(cut) == 4  # three frames, then the terminal one
        whole = await run_frames(b, sid_large)
        assert whole[-1][0] == "done"
        assert "".join(d["text"] for t, d in whole if t == "delta") == "".join(WORDS)
