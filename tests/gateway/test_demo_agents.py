"""``headwater demo``'s app serves every example agent: over HTTP through its coordinator, and
live over the WebSocket.

The app is the one ``headwater demo`` builds (``headwater.cli.demo_app``), on
the demo model and a fresh SQLite file, under a real uvicorn server.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect

from headwater.examples.people_counter import FPS, scene_frames
from headwater.settings import reload_settings

from .conftest import Serve
from .stores import new_database_url


@pytest.fixture
def demo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    from headwater.cli import demo_app
    from headwater.models.demo import DemoModel

    monkeypatch.setenv("HEADWATER_DEMO_WORD_DELAY", "0")
    reload_settings()
    yield demo_app(new_database_url(), DemoModel())
    monkeypatch.undo()
    reload_settings()


def config_of(html: str) -> Any:
    start = html.index('id="headwater-config">') + len('id="headwater-config">')
    return json.loads(html[start:html.index("</script>", start)])


async def ask(client: httpx.AsyncClient, agent: str, message: str) -> tuple[str, str]:
    """The author and text of the run's last final message."""
    sid = (await client.post("/sessions", json={"agent": agent})).json()["id"]
    body = (await client.post(f"/sessions/{sid}/runs", json={"message": message})).text
    finals = [json.loads(line[6:]) for line in body.splitlines()
              if line.startswith("data: ") and '"final":true' in line]
    return finals[-1]["author"], finals[-1]["text"]


async def test_the_demo_serves_the_examples_and_offers_their_prompts(
        serve: Serve, demo: Any) -> None:
    async with httpx.AsyncClient(base_url=await serve(demo, lifespan="on"), timeout=10) as client:
        config = config_of((await client.get("/")).text)
        # The coordinator (the default) over all six; the live ones are entries of their own.
        assert [(a["name"], a["live"]) for a in config["agents"]] == [
            ("coordinator", False), ("market", True), ("people", True)]
        assert {s["text"]: (s["agent"], s["live"]) for s in config["suggestions"]} == {
            "Where is order 1042?": ("coordinator", False),
            "Search the docs for streaming": ("coordinator", False),
            "Deploy version 2 to staging": ("coordinator", False),
            "Release version 3 to staging": ("coordinator", False),
            "Watch GOOG": ("market", True), "Count the people": ("people", True),
            "Index the docs": ("coordinator", False),
            "Tell me a long story": ("coordinator", False)}
        assert config["sample_frames"] == len(scene_frames()) == 40
        frames = (await client.get("/page/frames")).json()
        assert frames["fps"] == FPS
        assert [(f["mime_type"], base64.b64decode(f["data"])) for f in frames["frames"]] == [
            (blob.mime_type, blob.data) for blob in scene_frames()]
        assert await ask(client, "coordinator", "Where is order 1042?") == (
            "support", "Order 1042 shipped on 30 September and is due Monday.")
        author, text = await ask(client, "coordinator", "Search the docs for streaming")
        assert author == "docs" and text.startswith("I found 3 pages about streaming")
        # The indexer's tool is an MCP server's (a process of the demo's own).
        assert await ask(client, "coordinator", "Index the docs") == (
            "indexer", "I indexed 8 pages of the docs (25,300 words).")
        # A live agent's tool is not started outside a live run: it says where it runs.
        assert await ask(client, "coordinator", "Watch GOOG") == (
            "market", "Watching a price is a live stream: it runs in a live session.")


async def test_the_people_counter_counts_frames_sent_over_the_websocket(
        serve: Serve, demo: Any) -> None:
    base = await serve(demo, lifespan="on")
    async with httpx.AsyncClient(base_url=base, timeout=10) as client:
        sid = (await client.post("/sessions", json={"agent": "people"})).json()["id"]
    emitted: list[str] = []
    said: list[str] = []

    def take(text: str) -> None:
        frame = json.loads(text)
        if frame["type"] == "message":
            said.append(frame["data"]["text"])
        elif frame["type"] == "tool_emission":
            emitted.append(frame["data"]["text"])

    async with connect(f"ws://{base[len('http://'):]}/live/{sid}") as socket:
        assert json.loads(await socket.recv())["type"] == "ready"
        await socket.send(json.dumps({"type": "content", "text": "Count the people"}))
        while "Counting. I'll tell you when the number changes." not in said:
            take(await socket.recv())
        # The tool samples one frame a second of real time: send each second's first frame.
        for blob in scene_frames()[::FPS][:4]:  # 0, 1, 1, 2 people
            await socket.send(json.dumps({"type": "realtime", "mime_type": blob.mime_type,
                                          "data": base64.b64encode(blob.data).decode()}))
            while True:  # wait a sampling period, reading what comes
                try:
                    take(await _recv(socket, 1.05))
                except TimeoutError:
                    break
        await socket.send(json.dumps({"type": "content", "text": "Stop counting."}))
        while "Stopped counting." not in said:
            take(await socket.recv())
        await socket.send(json.dumps({"type": "close"}))
    assert emitted == [f'Function count_people returned: {{"people": {n}}}' for n in (0, 1, 2)]
    assert said[-4:-1] == ["Nobody is in view.", "I can see 1 person.", "I can see 2 people."]


async def _recv(socket: Any, seconds: float) -> str:
    async with asyncio.timeout(seconds):
        message: str = await socket.recv()
        return message
