"""The app a real ``headwater serve`` child process runs in test_gateway_process.py.

Not a test module: the child imports it as ``served_app:app`` (its working
directory is this folder). It reads where things are from the environment:

- ``HW_TEST_PROVIDER_URL``: the test's ``FakeProvider`` (the model speaks the
  OpenAI wire format to ``<url>/v1``);
- ``HW_TEST_DIR``: a temporary folder for the SQLite store, the pid file the
  ``hold`` tool writes (its ``sleep`` child), the one ``hold_owned`` and
  ``block_owned`` write (a ``sleep`` started through ``ToolContext``'s process
  helper) and the markers ``block`` and ``stubborn`` write;
- ``HEADWATER_*``: the settings (short grace, heartbeats and timeouts).

``served_agents`` next to it holds the plain agents ``headwater serve`` turns
into a dev-mode gateway.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from pathlib import Path

from headwater import Agent, ToolContext
from headwater.gateway import StaticTokenAuth, create_app
from headwater.models.openai import OpenAIChatModel
from headwater.sessions import SqlSessionService
from headwater.settings import Settings

PROVIDER = os.environ.get("HW_TEST_PROVIDER_URL", "http://127.0.0.1:9")
DIR = Path(os.environ.get("HW_TEST_DIR", "."))
PID_FILE = DIR / "hold.pid"
BLOCK_FILE = DIR / "block.started"
STUBBORN_FILE = DIR / "stubborn.started"
OWNED_FILE = DIR / "owned.pid"
DATABASE = DIR / "sessions.db"
TOKEN = "token-a"
USER = "alice"


async def hold(seconds: int) -> str:
    """Run ``sleep seconds`` in a child process and wait for it.

    Args:
        seconds: how long the child sleeps.
    """
    process = await asyncio.create_subprocess_exec("sleep", str(seconds))
    PID_FILE.write_text(str(process.pid))
    try:
        await process.wait()
    finally:
        if process.returncode is None:  # cancelled: the child must not outlive the call
            process.kill()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(process.wait())  # reap it, so its pid is gone
    return f"slept {seconds} s"


def block(seconds: float) -> str:
    """Block this thread for a while (a sync tool: it cannot be interrupted).

    Args:
        seconds: how long.
    """
    BLOCK_FILE.write_text("started")
    time.sleep(seconds)
    return f"blocked {seconds} s"


async def hold_owned(seconds: int, tool_context: ToolContext) -> str:
    """Run ``sleep seconds`` through the framework's process helper (it kills it on cancel).

    Args:
        seconds: how long the child sleeps.
    """
    process = await tool_context.start_process("sleep", str(seconds))
    OWNED_FILE.write_text(str(process.pid))
    await process.wait()
    return f"slept {seconds} s"


def block_owned(seconds: int, tool_context: ToolContext) -> str:
    """Run ``sleep seconds`` through the framework's process helper from a sync tool.

    Args:
        seconds: how long the child sleeps.
    """
    process = tool_context.popen(["sleep", str(seconds)])
    OWNED_FILE.write_text(str(process.pid))
    process.wait()
    return f"slept {seconds} s"


async def stubborn(seconds: float) -> str:
    """Wait, and go on waiting when cancelled (a tool that does not stop when asked).

    Args:
        seconds: how long.
    """
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    STUBBORN_FILE.write_text("started")
    while (left := end - loop.time()) > 0:
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(left)
    return f"waited {seconds} s"


model = OpenAIChatModel(model="gpt-4o-mini", base_url=f"{PROVIDER}/v1", api_key="x")
agent = Agent(name="bot", model=model, tools=[hold, block, stubborn, hold_owned, block_owned])
app = create_app(agent, session_service=SqlSessionService(f"sqlite+aiosqlite:///{DATABASE}"),
                 auth=StaticTokenAuth({TOKEN: USER}), settings=Settings())
