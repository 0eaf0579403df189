"""A session held by a process killed with SIGKILL is taken over at once by the next one.

A lease records the process holding it (host, pid, start); a holder that is
provably dead on this host is taken over without waiting for the lease's TTL,
and the dead run's calls are repaired. A live holder, or one on another host,
keeps the session until its lease expires.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from headwater.errors import SessionBusyError
from headwater.sessions import BaseSessionService

if TYPE_CHECKING:
    from conftest import Store

pytestmark = [pytest.mark.slow,
              pytest.mark.parametrize("store", ["sqlite", pytest.param(
                  "postgres", marks=pytest.mark.postgres)], indirect=True)]

APP = "app"

# A run that blocks in its tool call, holding the session (with the default 30 s lease).
HOLDER = textwrap.dedent("""
    import asyncio, json, sys
    from headwater import Agent, Runner
    from headwater.sessions import SqlSessionService
    from headwater.testing import ScriptedModel

    async def block(n: int) -> str:
        print(json.dumps({"tool_started": n}), flush=True)
        await asyncio.sleep(600)
        return "never"

    async def main(url):
        service = SqlSessionService(url)
        model = ScriptedModel().call("block", {"n": 1}, call_id="held-call").reply("unreached")
        runner = Runner(agent=Agent(name="bot", model=model, tools=[block]), app_name="app",
                        session_service=service)
        async for event in runner.run_async(user_id="u", session_id="s", new_message="go"):
            pass

    asyncio.run(main(sys.argv[1]))
""")

# The restarted process: one turn on the session, refusing to wait for any lease.
RESTART = textwrap.dedent("""
    import asyncio, json, sys
    from headwater import Agent, Runner
    from headwater.errors import SessionBusyError
    from headwater.sessions import SqlSessionService
    from headwater.settings import Settings
    from headwater.testing import ScriptedModel

    async def block(n: int) -> str:
        return "not run again"

    async def main(url):
        service = SqlSessionService(url)
        model = ScriptedModel().reply("back again")
        runner = Runner(agent=Agent(name="bot", model=model, tools=[block]), app_name="app",
                        session_service=service, settings=Settings(session_lock_timeout=0))
        try:
            result = await runner.run_once(user_id="u", session_id="s", new_message="hello?")
        except SessionBusyError:
            print(json.dumps({"busy": True}), flush=True)
            return
        finally:
            await runner.aclose()
        contents = model.requests[0].contents
        print(json.dumps({
            "text": result.text,
            "calls": [c.id for content in contents for c in content.function_calls],
            "responses": [{"id": r.id, "response": r.response}
                          for content in contents for r in content.function_responses],
        }), flush=True)

    asyncio.run(main(sys.argv[1]))
""")


@contextmanager
def holding(url: str, env: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    """A child process whose run holds the session, blocked in its tool call."""
    with subprocess.Popen([sys.executable, "-c", HOLDER, url], stdout=subprocess.PIPE,
                          text=True, env=env) as child:
        try:
            assert child.stdout is not None
            line = child.stdout.readline()
            assert json.loads(line) == {"tool_started": 1}, f"the holder said {line!r}"
            yield child
        finally:
            if child.poll() is None:
                child.kill()
            child.wait(10)


def kill_9(child: subprocess.Popen[str]) -> None:
    os.kill(child.pid, signal.SIGKILL)
    child.wait(10)
    assert child.returncode == -signal.SIGKILL


def restart(url: str, env: dict[str, str]) -> dict[str, Any]:
    """Take a turn in a new process; what it reported."""
    done = subprocess.run([sys.executable, "-c", RESTART, url], capture_output=True, text=True,
                          env=env, timeout=50, check=False)
    assert done.returncode == 0, done.stderr
    reported: dict[str, Any] = json.loads(done.stdout)
    return reported


async def set_holder_host(store: Store, host: str) -> None:
    """Rewrite the session's lease as if a process of another host held it."""
    assert store.url is not None
    update = "UPDATE hw_leases SET holder_host = :host WHERE session_id = 's'"
    if store.kind == "sqlite":
        path = store.url.split("///", 1)[1]
        with sqlite3.connect(path) as raw:
            assert raw.execute(update, {"host": host}).rowcount == 1
        raw.close()
        return
    engine = create_async_engine(store.url, poolclass=NullPool)
    try:
        async with engine.begin() as conn:
            assert (await conn.execute(text(update), {"host": host})).rowcount == 1
    finally:
        await engine.dispose()


async def take(service: BaseSessionService, run_id: str) -> None:
    await service.acquire_lease(app_name=APP, user_id="u", session_id="s",
                                owner=f"test-{run_id}", run_id=run_id, ttl=30)


async def test_a_killed_holder_is_taken_over_at_once_and_repaired(
        store: Store, child_env: dict[str, str]) -> None:
    assert store.url is not None
    await store.service.create_session(app_name=APP, user_id="u", session_id="s")
    with holding(store.url, child_env) as child:
        # Alive on this host, same pid, same start: its lease holds.
        with pytest.raises(SessionBusyError):
            await take(store.reopen(), "while-alive")
        kill_9(child)

    # A new process on the same host gets the session without waiting (lock timeout 0,
    # the dead run's lease still has most of its 30 s to go).
    reported = await asyncio.to_thread(restart, store.url, child_env)
    assert reported.get("text") == "back again", reported
    assert reported["calls"] == ["held-call"]
    [sealed] = reported["responses"]
    assert sealed["id"] == "held-call" and sealed["response"]["code"] == "interrupted"

    loaded = await store.reopen().get_session(app_name=APP, user_id="u", session_id="s")
    assert loaded is not None
    calls = [c.id for e in loaded.events for c in e.function_calls]
    results = [r.id for e in loaded.events for r in e.function_responses]
    assert calls == results == ["held-call"]  # every call has its one result
    assert [e.text for e in loaded.events if e.author == "user"] == ["go", "hello?"]
    assert loaded.events[-1].text == "back again"
    await take(store.reopen(), "after")  # the restarted run released the session


async def test_a_holder_on_another_host_keeps_its_ttl(
        store: Store, child_env: dict[str, str]) -> None:
    assert store.url is not None
    await store.service.create_session(app_name=APP, user_id="u", session_id="s")
    with holding(store.url, child_env) as child:
        kill_9(child)
    # The same dead pid, but recorded by a process of another host: nothing proves it dead.
    await set_holder_host(store, "some-other-host")
    reported = await asyncio.to_thread(restart, store.url, child_env)
    assert reported == {"busy": True}
    with pytest.raises(SessionBusyError):
        await take(store.reopen(), "here")
