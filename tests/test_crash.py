"""A process killed with SIGKILL mid-run loses nothing its caller had seen."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from headwater import Agent, RunConfig, Runner, StreamingMode
from headwater.sessions import SqlSessionService
from headwater.settings import Settings
from headwater.testing import ScriptedModel

CHILD = textwrap.dedent("""
    import asyncio, json, sys
    from headwater import Agent, RunConfig, Runner, StreamingMode
    from headwater.sessions import SqlSessionService
    from headwater.testing import ScriptedModel

    async def slow_tool(n: int) -> str:
        print(json.dumps({"tool_started": n}), flush=True)
        await asyncio.sleep(60)
        return "never"

    async def main(url, kill_point):
        service = SqlSessionService(url)
        model = ScriptedModel().call("slow_tool", {"n": 1}, call_id="first").reply("ok")
        if kill_point == "stream":
            model = ScriptedModel().call("quick", {}, call_id="q").reply(
                *[f"word{i} " for i in range(1000)], delay=0.01)
        async def quick() -> str:
            return "fast"
        agent = Agent(name="bot", model=model, tools=[slow_tool, quick])
        runner = Runner(agent=agent, app_name="app", session_service=service)
        await service.create_session(app_name="app", user_id="u", session_id="s")
        async for event in runner.run_async(user_id="u", session_id="s", new_message="go",
                                            run_config=RunConfig(streaming_mode=StreamingMode.SSE)):
            print(json.dumps({"id": event.id, "partial": event.partial}), flush=True)

    asyncio.run(main(sys.argv[1], sys.argv[2]))
""")


def run_and_kill(url: str, kill_point: str, child_env: dict[str, str]) -> list[str]:
    """Start the child, SIGKILL it at the kill point; return the non-partial ids it saw."""
    seen: list[str] = []
    partials = 0
    # The default 30 s lease: the next run takes the dead run's session over at once.
    with subprocess.Popen([sys.executable, "-c", CHILD, url, kill_point],
                          stdout=subprocess.PIPE, text=True, env=child_env) as child:
        assert child.stdout is not None
        try:
            for line in child.stdout:
                record = json.loads(line)
                if "tool_started" in record:
                    break
                if record["partial"]:
                    partials += 1
                    if partials == 5:
                        break
                else:
                    seen.append(record["id"])
            else:
                pytest.fail("the child ended before the kill point")
        finally:
            os.kill(child.pid, signal.SIGKILL)
            child.wait(10)
    assert child.returncode == -signal.SIGKILL
    return seen


@pytest.mark.slow
@pytest.mark.parametrize("kill_point", ["tool", "stream"])
async def test_sigkill_mid_run(tmp_path: Path, kill_point: str,
                               child_env: dict[str, str]) -> None:
    path = tmp_path / "sessions.db"
    url = f"sqlite+aiosqlite:///{path}"
    seen = run_and_kill(url, kill_point, child_env)
    assert seen, "the caller had received non-partial events before the kill"

    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    raw.close()

    service = SqlSessionService(url)
    try:
        session = await service.get_session(app_name="app", user_id="u", session_id="s")
        assert session is not None
        stored_ids = [e.id for e in session.events]
        assert set(seen) <= set(stored_ids)
        assert not any(e.partial for e in session.events)
        if kill_point == "stream":
            # The answer being streamed at the kill was never committed.
            assert not any("word" in e.text for e in session.events)

        model = ScriptedModel().reply("back again")
        # The dead run's lease is taken over at once (its process is gone: no waiting for
        # the lease to expire, and none allowed); its calls are repaired then.
        runner = Runner(agent=Agent(name="bot", model=model), app_name="app",
                        session_service=service, settings=Settings(session_lock_timeout=0))
        events = [e async for e in runner.run_async(
            user_id="u", session_id="s", new_message="hello?",
            run_config=RunConfig(streaming_mode=StreamingMode.SSE))]
        assert events[-1].text == "back again"
        contents = model.requests[0].contents
        calls = {c.id for content in contents for c in content.function_calls}
        answered = {r.id for content in contents for r in content.function_responses}
        assert calls == answered
        if kill_point == "tool":
            sealed = [r.response for content in contents for r in content.function_responses]
            assert sealed == [{"error": sealed[0]["error"], "code": "interrupted"}]
    finally:
        await service.close()
