"""Every headwater agent is an MCP tool: ``headwater mcp agent.py`` over stdio and ``/mcp`` on
the gateway (Streamable HTTP), each driven by the official ``mcp`` client — progress with the
answer so far, the final text and its session, a cancel recorded as Stop records it."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
import uvicorn
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

import headwater
from headwater import Agent, ToolStreamEvent, tool
from headwater.examples import docs_search, support
from headwater.gateway import create_app
from headwater.gateway.auth import StaticTokenAuth
from headwater.models.demo import DemoModel
from headwater.sessions import InMemorySessionService, SqlSessionService
from headwater.settings import Settings
from headwater.testing import ScriptedModel, wait_until
from headwater.tools.mcp import McpToolset

from .conftest import MCP_TEST_SERVER, Serve

pytestmark = pytest.mark.slow  # MCP servers and clients in processes of their own

SRC = str(Path(headwater.__file__).resolve().parents[1])
TEST_SERVER = MCP_TEST_SERVER
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

SHOP = """\
from headwater import Agent
from headwater.examples.support import lookup_order
from headwater.models import DemoModel

agent = Agent(name="shop", model=DemoModel(), tools=[lookup_order],
              description="A shop's orders.")
"""

FRONT_DESK = """\
from headwater import Agent
from headwater.examples.support import build_agent
from headwater.models import DemoModel

root_agent = Agent(name="desk", model=DemoModel(), instruction="Route each request.",
                   sub_agents=[build_agent(DemoModel())])
"""

DOCS = """\
from headwater.examples.docs_search import build_agent
from headwater.models import DemoModel

agent = build_agent(DemoModel())
"""

CRAWLER = """\
import asyncio

from headwater import Agent, ToolStreamEvent, tool
from headwater.testing import ScriptedModel


@tool(streaming=True)
async def crawl(pages: int):
    \"\"\"Crawl pages, slowly.\"\"\"
    for page in range(1, pages + 1):
        yield ToolStreamEvent("progress", progress=page, total=pages, message=f"page {page}")
        await asyncio.sleep(0.1)
    yield ToolStreamEvent("done", response={"pages": pages})


agent = Agent(name="crawler", tools=[crawl], description="Crawls pages.",
              model=ScriptedModel().call("crawl", {"pages": 1000}, call_id="c1").reply("Done."))
"""

BROKEN = """\
from headwater import Agent
from headwater.models import DemoModel
from headwater.tools.mcp import McpToolset

agent = Agent(name="broken", model=DemoModel(),
              tools=[McpToolset(command=["/nonexistent/mcp-server"])])
"""


Progress = list[tuple[float, float | None, str | None]]


def pid_alive(pid: int) -> bool:
    """Whether a process of that id exists (and is not a zombie)."""
    try:
        return " Z " not in Path(f"/proc/{pid}/stat").read_text().split(")", 1)[1][:4]
    except FileNotFoundError:
        return False


def recorder() -> tuple[Progress, Any]:
    seen: Progress = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    return seen, on_progress


@asynccontextmanager
async def stdio_client(tmp_path: Path, source: str, name: str = "agent.py"
                       ) -> AsyncIterator[tuple[Client, str]]:
    """``headwater mcp <file>`` run by the official client; the store's URL with it."""
    (tmp_path / name).write_text(source)
    url = f"sqlite:///{tmp_path / 'sessions.db'}"
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "headwater", "mcp", name, "--db", url],
        env={"PYTHONPATH": SRC, "HEADWATER_DEMO_WORD_DELAY": "0.01"}, cwd=str(tmp_path))
    async with Client(params) as client:
        yield client, url


async def stored_events(url: str, app: str) -> list[Any]:
    """Every event of the one session of ``app`` (the local user's)."""
    service = SqlSessionService(url)
    try:
        [session] = await service.list_sessions(app_name=app, user_id="local")
        found = await service.get_session(app_name=app, user_id="local", session_id=session.id)
        assert found is not None
        return found.events
    finally:
        await service.close()


# -- headwater mcp: stdio ----------------------------------------------------------------------


async def test_headwater_mcp_serves_the_agent_as_one_tool_over_stdio(tmp_path: Path) -> None:
    async with stdio_client(tmp_path, SHOP) as (client, _):
        [listed] = (await client.list_tools()).tools
        assert (listed.name, listed.description) == ("shop", "A shop's orders.")
        assert listed.input_schema["required"] == ["message"]
        assert set(listed.input_schema["properties"]) == {"message", "session_id"}
        seen, on_progress = recorder()
        result = await client.call_tool("shop", {"message": "Where is order 1042?"},
                                        progress_callback=on_progress)
        answer = "Order 1042 shipped on 30 September and is due Monday."
        assert not result.is_error
        assert [block.text for block in result.content] == [answer]  # type: ignore[union-attr]
        assert seen and seen[-1][2] == answer  # the answer so far, to the last word
        assert all(answer.startswith(message or "-") for _, _, message in seen)
        assert [p for p, _, _ in seen] == sorted({p for p, _, _ in seen})  # it only grows
        session = result.meta["headwater/session_id"]  # type: ignore[index]
        assert result.meta["headwater/author"] == "shop"  # type: ignore[index]
        assert result.structured_content == {"answer": answer, "author": "shop",
                                             "session_id": session}
        again = await client.call_tool("shop", {"message": "And order 2001?",
                                                "session_id": session})
        assert again.content[0].text == (  # type: ignore[union-attr]
            "Order 2001 is packing and is due Thursday.")
        assert again.meta["headwater/session_id"] == session  # type: ignore[index]
        wrong = await client.call_tool("shop", {"message": "hi", "session_id": "nope"})
        assert wrong.is_error


async def test_a_trees_result_is_its_last_final_answer_and_names_its_author(
        tmp_path: Path) -> None:
    async with stdio_client(tmp_path, FRONT_DESK) as (client, _):
        [listed] = (await client.list_tools()).tools
        assert listed.name == "desk"
        result = await client.call_tool("desk", {"message": "Where is order 1042?"})
        assert result.meta["headwater/author"] == "support"  # type: ignore[index]
        assert result.content[0].text == (  # type: ignore[union-attr]
            "Order 1042 shipped on 30 September and is due Monday.")


async def test_a_tools_progress_reaches_the_client_as_its_progress_line(tmp_path: Path) -> None:
    async with stdio_client(tmp_path, DOCS) as (client, _):
        seen, on_progress = recorder()
        await client.call_tool("docs", {"message": "Search the docs for streaming"},
                               progress_callback=on_progress)
        lines = [message for _, _, message in seen]
        assert f"search_docs: 1/5 searched {docs_search.DOCS[0][1]}" in lines


async def test_a_cancel_from_the_client_stops_the_run_recorded_cancelled(tmp_path: Path) -> None:
    async with stdio_client(tmp_path, CRAWLER) as (client, url):
        seen, on_progress = recorder()
        with anyio.move_on_after(60) as scope:
            async with anyio.create_task_group() as group:
                async def call() -> None:
                    await client.call_tool("crawler", {"message": "crawl"},
                                           progress_callback=on_progress)

                group.start_soon(call)
                await wait_until(lambda: any("page 2" in (m or "") for _, _, m in seen),
                                 timeout=30)
                group.cancel_scope.cancel()  # the SDK sends notifications/cancelled
        assert not scope.cancelled_caught

        async def sealed() -> list[Any]:
            return [r.response for e in await stored_events(url, "crawler")
                    for r in e.function_responses]

        for _ in range(300):
            if await sealed():
                break
            await asyncio.sleep(0.1)
        assert [response["code"] for response in await sealed()] == ["cancelled"]
        assert (await stored_events(url, "crawler"))[-1].error_code == "cancelled"


def test_headwater_mcp_says_what_a_client_sees() -> None:
    done = subprocess.run([sys.executable, "-m", "headwater", "mcp", "--help"],
                          capture_output=True, text=True, timeout=60, check=True)
    assert "session_id" in done.stdout and "notifications" not in done.stderr
    assert "mcpServers" in done.stdout and "/mcp" in done.stdout


def test_an_mcp_server_that_cannot_start_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "agent.py").write_text(BROKEN)
    done = subprocess.run(
        [sys.executable, "-m", "headwater", "mcp", "agent.py", "--db",
         f"sqlite:///{tmp_path / 's.db'}"], cwd=tmp_path, capture_output=True, text=True,
        timeout=60, stdin=subprocess.DEVNULL, env={"PYTHONPATH": SRC, "PATH": "/usr/bin:/bin"})
    assert done.returncode == 2
    assert done.stdout == ""
    [line] = done.stderr.splitlines()
    assert line.startswith("headwater mcp: the MCP server command '/nonexistent/mcp-server'")


# -- /mcp on the gateway: Streamable HTTP ------------------------------------------------------


PID_TELLER = """\
import json
import sys

from headwater import Agent
from headwater.testing import ScriptedCall, ScriptedModel, ScriptedTurn
from headwater.tools.mcp import McpToolset


def respond(request):
    last = request.contents[-1]
    if last.function_responses:  # the server's pid, said as the answer
        return ScriptedTurn(text=[json.dumps(last.function_responses[0].response)])
    return ScriptedTurn(calls=[ScriptedCall("pid")])


agent = Agent(name="teller", model=ScriptedModel(responder=respond), description="Pids.",
              tools=[McpToolset(command=[sys.executable, SERVER])])
""".replace("SERVER", repr(MCP_TEST_SERVER))


def test_headwater_run_stops_the_agents_mcp_server_when_it_exits(tmp_path: Path) -> None:
    (tmp_path / "agent.py").write_text(PID_TELLER)
    done = subprocess.run(
        [sys.executable, "-m", "headwater", "run", "agent.py", "pid?", "--db",
         f"sqlite:///{tmp_path / 's.db'}"], cwd=tmp_path, capture_output=True, text=True,
        timeout=120, env={"PYTHONPATH": SRC, "PATH": "/usr/bin:/bin"}, check=True)
    pid = json.loads(done.stdout.rstrip().splitlines()[-1].split("> ", 1)[1])["result"]
    assert isinstance(pid, int) and not pid_alive(pid)


async def test_headwater_mcp_stops_its_agents_mcp_server_when_the_client_leaves(
        tmp_path: Path) -> None:
    async with stdio_client(tmp_path, PID_TELLER) as (client, _):
        result = await client.call_tool("teller", {"message": "pid?"})
        pid = json.loads(result.content[0].text)["result"]  # type: ignore[union-attr]
        assert pid_alive(pid)
    await wait_until(lambda: not pid_alive(pid), timeout=30)


def shop_app(auth: Any = None) -> Any:
    return create_app(support.build_agent(DemoModel(word_delay=0.005)), auth=auth,
                      session_service=InMemorySessionService(),
                      settings=Settings(session_lock_timeout=0, mcp_progress_interval=0))


@asynccontextmanager
async def http_client(url: str, token: str | None = None, mode: str = "auto"
                      ) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (httpx2.AsyncClient(headers=headers) as http,
                Client(streamable_http_client(url, http_client=http), mode=mode) as client):
        yield client


@pytest.mark.parametrize("mode", ["auto", "legacy"])  # the 2026-07-28 revision, and 2025's
async def test_mcp_on_the_gateway_under_its_bearer_tokens(serve: Serve, mode: str) -> None:
    base = await serve(shop_app(StaticTokenAuth({"t-alice": "alice", "t-bob": "bob"})),
                       lifespan="on")
    async with httpx.AsyncClient() as plain:
        refused = await plain.post(f"{base}/mcp", json={"jsonrpc": "2.0", "id": 1,
                                                        "method": "ping"})
    assert refused.status_code == 401
    assert refused.json()["error"]["code"] == "unauthorized"
    async with http_client(f"{base}/mcp", "t-alice", mode) as client:
        [listed] = (await client.list_tools()).tools
        assert listed.name == "support"
        seen, on_progress = recorder()
        result = await client.call_tool("support", {"message": "Where is order 1042?"},
                                        progress_callback=on_progress)
        assert result.content[0].text.startswith("Order 1042 shipped")  # type: ignore[union-attr]
        assert seen and seen[-1][2] == result.content[0].text  # type: ignore[union-attr]
        session = result.meta["headwater/session_id"]  # type: ignore[index]
    async with httpx.AsyncClient(base_url=base,
                                 headers={"Authorization": "Bearer t-alice"}) as alice:
        mine = (await alice.get("/sessions")).json()["items"]
        assert [s["id"] for s in mine] == [session]
    async with http_client(f"{base}/mcp", "t-bob", mode) as client:
        taken = await client.call_tool("support", {"message": "hi", "session_id": session})
        assert taken.is_error and taken.meta["headwater/error_code"] == "not_found"  # type: ignore[index]


async def test_mcp_in_dev_mode_is_the_local_user_on_loopback(serve: Serve) -> None:
    base = await serve(shop_app(), lifespan="on")
    async with http_client(f"{base}/mcp") as client:
        result = await client.call_tool("support", {"message": "Where is order 2001?"})
    assert result.content[0].text == "Order 2001 is packing and is due Thursday."  # type: ignore[union-attr]
    async with httpx.AsyncClient(base_url=base) as local:
        assert len((await local.get("/sessions")).json()["items"]) == 1


def crawler_app() -> tuple[Any, InMemorySessionService]:
    @tool(streaming=True)
    async def crawl(pages: int) -> AsyncIterator[ToolStreamEvent]:
        """Crawl pages, slowly."""
        for page in range(1, pages + 1):
            yield ToolStreamEvent("progress", progress=page, total=pages, message=f"page {page}")
            await asyncio.sleep(0.05)
        yield ToolStreamEvent("done", response={"pages": pages})

    model = ScriptedModel(repeat=True).call("crawl", {"pages": 1000}).reply("Done.")
    service = InMemorySessionService()
    agent = Agent(name="crawler", model=model, tools=[crawl], description="Crawls pages.")
    return create_app(agent, session_service=service,
                      settings=Settings(session_lock_timeout=0)), service


async def crawling(client: Client, group: Any) -> Progress:
    """Start a crawl call in ``group``; its progress, once the crawl is under way."""
    seen, on_progress = recorder()

    async def call() -> None:
        result = await client.call_tool("crawler", {"message": "crawl"},
                                        progress_callback=on_progress)
        seen.append((-1, None, result.content[0].text))  # type: ignore[union-attr]

    group.start_soon(call)
    await wait_until(lambda: any("page 2" in (m or "") for _, _, m in seen), timeout=30)
    return seen


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_cancel_over_http_stops_the_run_recorded_cancelled(serve: Serve,
                                                                   mode: str) -> None:
    app, service = crawler_app()
    base = await serve(app, lifespan="on")
    async with http_client(f"{base}/mcp", mode=mode) as client, \
            anyio.create_task_group() as group:
        await crawling(client, group)
        group.cancel_scope.cancel()
    [session] = await service.list_sessions(app_name="crawler", user_id="local")

    async def sealed() -> list[str]:
        found = await service.get_session(app_name="crawler", user_id="local",
                                          session_id=session.id)
        assert found is not None
        return [r.response["code"] for e in found.events for r in e.function_responses]

    for _ in range(300):
        if await sealed():
            break
        await asyncio.sleep(0.05)
    assert await sealed() == ["cancelled"]


async def test_stop_on_another_surface_ends_the_mcp_call_with_an_error(serve: Serve) -> None:
    app, _ = crawler_app()
    base = await serve(app, lifespan="on")
    async with http_client(f"{base}/mcp") as client, anyio.create_task_group() as group, \
            httpx.AsyncClient(base_url=base) as page:
        seen = await crawling(client, group)
        [session] = (await page.get("/sessions")).json()["items"]
        assert session["active_run"]  # the MCP call's run is the session's, as any run
        stopped = await page.post(f"/runs/{session['active_run']}/cancel")
        assert stopped.json()["status"] == "cancelled"
        await wait_until(lambda: seen[-1][0] == -1, timeout=30)
    assert seen[-1][2] == "The run ended with an error (cancelled): The run was cancelled."


# -- an MCP tool's progress on the other surfaces (AG-UI, Vercel: their tests) ------------------


async def test_an_mcp_tools_progress_is_a_tool_progress_frame(serve: Serve) -> None:
    toolset = McpToolset(command=[sys.executable, TEST_SERVER])
    model = (ScriptedModel().call("slow", {"steps": 2, "pause": 0.01}, call_id="m1")
             .reply("Counted."))
    app = create_app(Agent(name="ops", model=model, tools=[toolset]),
                     session_service=InMemorySessionService())
    try:
        async with httpx.AsyncClient(base_url=await serve(app), timeout=30) as client:
            sid = (await client.post("/sessions", json={})).json()["id"]
            body = (await client.post(f"/sessions/{sid}/runs", json={"message": "go"})).text
    finally:
        await toolset.aclose()
    frames = [json.loads(block.split("data: ", 1)[1]) for block in body.split("\n\n")
              if "event: tool_progress" in block]
    assert [(f["call_id"], f["name"], f["type"], f["progress"], f["total"], f["message"])
            for f in frames] == [("m1", "slow", "progress", 1, 2, "step 1 of 2"),
                                 ("m1", "slow", "progress", 2, 2, "step 2 of 2")]


def test_headwater_run_shows_an_mcp_servers_progress(tmp_path: Path) -> None:
    env = {"PYTHONPATH": SRC, "PATH": "/usr/bin:/bin", "HEADWATER_DEMO_WORD_DELAY": "0.001"}
    args = [sys.executable, "-m", "headwater", "run", str(EXAMPLES / "indexer.py"),
            "Index the docs", "--db", f"sqlite:///{tmp_path / 's.db'}"]
    done = subprocess.run([*args, "--json"], capture_output=True, text=True, timeout=120,
                          env=env, check=True)
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    measured = [line["tool_progress"] for line in lines if line["type"] == "tool_progress"]
    assert measured[2] == {"call_id": measured[2]["call_id"], "name": "index_docs",
                           "type": "progress", "delta": None, "progress": 2, "total": 8,
                           "message": "indexing docs/event-contract.md"}
    shown = subprocess.run(args, capture_output=True, text=True, timeout=120, env=env,
                           check=True).stdout
    assert "[progress] index_docs: 2/8 indexing docs/event-contract.md" in shown
    assert shown.rstrip().endswith("I indexed 8 pages of the docs (25,300 words).")


# -- MCP toolsets of served agents: listed at the start, closed at the end ---------------------


def mcp_agent(toolset: McpToolset) -> Agent:
    model = ScriptedModel(repeat=True).call("pid", call_id="p").reply("ok")
    return Agent(name="bot", model=model, tools=[toolset])


async def test_the_gateway_lists_toolsets_at_start_and_stops_their_servers_at_the_end(
        ) -> None:
    toolset = McpToolset(command=[sys.executable, TEST_SERVER])
    service = InMemorySessionService()
    app = create_app(mcp_agent(toolset), session_service=service)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    task = asyncio.create_task(server.serve())
    await wait_until(lambda: server.started or task.done(), timeout=60)
    assert toolset.listed() is not None  # listed before the server said it was up
    port = server.servers[0].sockets[0].getsockname()[1]
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
        sid = (await client.post("/sessions", json={})).json()["id"]
        body = (await client.post(f"/sessions/{sid}/runs", json={"message": "pid?"})).text
    assert "event: done" in body
    session = await service.get_session(app_name="bot", user_id="local", session_id=sid)
    assert session is not None
    [pid] = [r.response["result"] for e in session.events for r in e.function_responses]
    assert pid_alive(pid)
    server.should_exit = True
    await task
    assert not pid_alive(pid)


async def test_a_server_that_cannot_start_is_logged_once_and_runs_answer_503(
        serve: Serve, caplog: pytest.LogCaptureFixture) -> None:
    agent = mcp_agent(McpToolset(command=["/nonexistent/mcp-server"]))
    with caplog.at_level(logging.WARNING, "headwater.gateway"):
        base = await serve(create_app(agent, session_service=InMemorySessionService()),
                           lifespan="on")
        async with httpx.AsyncClient(base_url=base) as client:
            sid = (await client.post("/sessions", json={})).json()["id"]
            for _ in range(2):
                refused = await client.post(f"/sessions/{sid}/runs", json={"message": "hi"})
                assert refused.status_code == 503
                assert refused.json()["error"]["code"] == "mcp_unavailable"
    lines = [r.getMessage() for r in caplog.records if "mcp_unavailable" in r.getMessage()]
    assert len(lines) == 1 and "/nonexistent/mcp-server" in lines[0]

