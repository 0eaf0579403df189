"""``McpToolset``: a real MCP server's tools (the SDK's server, over stdio and Streamable HTTP)
as an agent's tools — listing, progress, cancel, failures, approvals, requests, content."""

from __future__ import annotations

import asyncio
import logging
import sys
from contextlib import aclosing
from typing import Any

import mcp_types as types
import pytest

from headwater import Agent, Event, RunConfig, Runner, StreamingMode, tool
from headwater.agents.toolsets import open_toolsets
from headwater.artifacts import InMemoryArtifactService
from headwater.errors import McpUnavailableError, UserError
from headwater.settings import Settings
from headwater.testing import ScriptedModel
from headwater.tools import approval_response, args_sha256
from headwater.tools.mcp import McpTool, McpToolset

from .conftest import McpServer, pid_alive

pytestmark = pytest.mark.slow  # every test starts server processes

SSE = RunConfig(streaming_mode=StreamingMode.SSE)
NONE = RunConfig(streaming_mode=StreamingMode.NONE)


def runner_for(model: ScriptedModel, tools: list[Any], **options: Any) -> Runner:
    return Runner(agent=Agent(name="bot", model=model, tools=tools), app_name="app",
                  auto_create_session=True, **options)


async def run(runner: Runner, message: Any = "go", config: RunConfig = SSE,
              session: str = "s") -> list[Event]:
    return [e async for e in runner.run_async(user_id="u", session_id=session,
                                              new_message=message, run_config=config)]


def results(events: list[Event]) -> list[dict[str, Any]]:
    return [r.response for e in events for r in e.function_responses]


async def stored(runner: Runner, session: str = "s") -> list[Event]:
    found = await runner.session_service.get_session(app_name="app", user_id="u",
                                                     session_id=session)
    assert found is not None
    return found.events


# -- the tools ---------------------------------------------------------------------------------


async def test_the_servers_tools_are_the_agents_with_their_names_and_schemas(
        mcp_server: McpServer) -> None:
    model = ScriptedModel().call("add", {"a": 2, "b": 3}, call_id="c1").reply("Five.")
    runner = runner_for(model, [mcp_server.toolset()])
    events = await run(runner)
    assert results(events) == [{"result": 5}]
    declared = {d.name: d for d in model.requests[0].tools}
    assert {"add", "echo", "slow", "weather", "picture"} <= set(declared)
    assert declared["add"].description == "Add two integers."
    assert declared["add"].parameters["properties"] == {
        "a": {"title": "A", "type": "integer"}, "b": {"title": "B", "type": "integer"}}
    assert declared["add"].parameters["required"] == ["a", "b"]
    assert events[-1].text == "Five."


async def test_a_filter_keeps_the_tools_it_names_or_likes(mcp_server: McpServer) -> None:
    named = mcp_server.toolset(tool_filter=["echo", "add"])
    await named.open()
    assert [t.name for t in named.listed() or ()] == ["echo", "add"]
    liked = mcp_server.toolset(tool_filter=lambda t: t.name.startswith("s"))
    await liked.open()
    assert sorted(t.name for t in liked.listed() or ()) == ["sample", "slow"]
    assert all(isinstance(t, McpTool) for t in liked.listed() or ())


async def test_a_filter_naming_a_tool_the_server_lacks_is_refused(
        stdio_server: McpServer) -> None:
    toolset = stdio_server.toolset(tool_filter=["echo", "ecko"])
    with pytest.raises(UserError, match="names 'ecko', which the server does not list"):
        await toolset.open()


async def test_a_clash_with_another_tool_is_refused_naming_both(
        stdio_server: McpServer) -> None:
    @tool
    def echo(text: str) -> str:
        """Echo locally."""
        return text

    with pytest.raises(UserError, match=r"two tools named 'echo': FunctionTool\('echo'.*"
                                        r"McpToolset\(command="):
        Agent(name="bot", model=ScriptedModel(), tools=[echo, stdio_server.toolset(
            tool_filter=["echo"])])
    agent = Agent(name="bot", model=ScriptedModel(), tools=[echo, stdio_server.toolset()])
    with pytest.raises(UserError, match=r"two tools named 'echo': FunctionTool\('echo'.*"
                                        r"the one McpToolset\(command="):
        await open_toolsets(agent)


async def test_one_server_process_serves_every_run_and_call(stdio_server: McpServer) -> None:
    toolset = stdio_server.toolset()
    model = ScriptedModel(repeat=True).call("pid", call_id="p").reply("ok")
    runner = runner_for(model, [toolset])
    await open_toolsets(runner.agent)
    first, second = await asyncio.gather(run(runner, session="a"), run(runner, session="b"))
    pids = {r["result"] for r in results(first) + results(second)}
    assert len(pids) == 1


async def test_closing_the_runner_stops_the_server(stdio_server: McpServer) -> None:
    model = ScriptedModel().call("pid", call_id="p").reply("ok")
    async with runner_for(model, [stdio_server.toolset()]) as runner:
        pid = results(await run(runner))[0]["result"]
        assert pid_alive(pid)
    assert not pid_alive(pid)


async def test_a_toolset_nobody_opened_is_listed_by_the_runs_start(
        stdio_server: McpServer) -> None:
    toolset = stdio_server.toolset()
    runner = runner_for(ScriptedModel(repeat=True).call("echo", {"text": "hi"}).reply("ok"),
                        [toolset])
    assert toolset.listed() is None and not runner.tools_open
    assert results(await run(runner)) == [{"result": "hi"}]
    assert toolset.listed() is not None and runner.tools_open  # the runner opened it
    assert results(await run(runner, session="t")) == [{"result": "hi"}]


# -- progress ----------------------------------------------------------------------------------


async def test_progress_reaches_the_caller_and_is_never_stored(mcp_server: McpServer) -> None:
    model = ScriptedModel().call("slow", {"steps": 3, "pause": 0.01}, call_id="c1").reply("ok")
    runner = runner_for(model, [mcp_server.toolset()])
    events = await run(runner)
    progress = [e.tool_progress for e in events if e.tool_progress is not None]
    assert [(p.call_id, p.tool_name, p.event.type, p.event.progress, p.event.total,
             p.event.message) for p in progress] == [
        ("c1", "slow", "progress", 1.0, 3.0, "step 1 of 3"),
        ("c1", "slow", "progress", 2.0, 3.0, "step 2 of 3"),
        ("c1", "slow", "progress", 3.0, 3.0, "step 3 of 3")]
    assert results(events) == [{"result": "counted to 3"}]
    assert not any(e.tool_progress is not None or e.partial for e in await stored(runner))


async def test_under_none_progress_is_drained_and_the_result_kept(mcp_server: McpServer) -> None:
    model = ScriptedModel().call("slow", {"steps": 2, "pause": 0.01}, call_id="c1").reply("ok")
    runner = runner_for(model, [mcp_server.toolset()])
    events = await run(runner, config=NONE)
    assert not any(e.tool_progress is not None for e in events)
    assert results(events) == [{"result": "counted to 2"}]


# -- cancel and failures -----------------------------------------------------------------------


async def test_cancelling_the_run_cancels_the_call_on_the_server(mcp_server: McpServer) -> None:
    model = ScriptedModel().call("slow", {"steps": 500, "pause": 0.05}, call_id="c1")
    runner = runner_for(model, [mcp_server.toolset()])
    stream = runner.run_async(user_id="u", session_id="s", new_message="go", run_config=SSE)
    async with aclosing(stream):
        async for event in stream:
            if event.tool_progress is not None:
                break  # the call runs on the server: stop the run as Stop does
    await mcp_server.wait_mark("cancelled slow")
    [result] = [r.response for e in await stored(runner) for r in e.function_responses]
    assert result["code"] == "cancelled"


async def test_an_error_result_is_the_calls_error_and_the_model_answers(
        mcp_server: McpServer) -> None:
    model = ScriptedModel().call("fail", call_id="c1").reply("The disk is full, sorry.")
    runner = runner_for(model, [mcp_server.toolset()])
    events = await run(runner)
    assert results(events) == [{"error": "Error executing tool fail: the disk is full",
                                "code": "tool_error"}]
    assert events[-1].text == "The disk is full, sorry."


async def test_a_server_that_dies_mid_call_gives_an_error_result_and_comes_back(
        mcp_server: McpServer) -> None:
    model = (ScriptedModel().call("crash", call_id="c1").reply("It crashed.")
             .call("echo", {"text": "back"}, call_id="c2").reply("ok"))
    runner = runner_for(model, [mcp_server.toolset()])
    events = await run(runner)
    [result] = results(events)
    assert result["code"] == "mcp_disconnected"
    assert "went away during the call" in result["error"]
    assert events[-1].text == "It crashed."
    if mcp_server.transport == "http":
        mcp_server.kill()
        await mcp_server.start_http()  # on its port again: the next call connects again
    assert results(await run(runner)) == [{"result": "back"}]


async def test_a_call_past_mcp_call_timeout_times_out_and_is_cancelled_on_the_server(
        mcp_server: McpServer) -> None:
    settings = Settings(mcp_call_timeout=0.5)
    model = ScriptedModel().call("hang", call_id="c1").reply("Too slow.")
    runner = runner_for(model, [mcp_server.toolset(settings=settings)])
    events = await run(runner)
    [result] = results(events)
    assert result["code"] == "timeout"
    assert "mcp_call_timeout" in result["error"]
    await mcp_server.wait_mark("cancelled hang")


def test_what_a_toolset_refuses_when_it_is_made() -> None:
    with pytest.raises(UserError, match="one server"):
        McpToolset()
    with pytest.raises(UserError, match="one server"):
        McpToolset(["srv"], url="http://127.0.0.1/mcp")
    with pytest.raises(UserError, match="is a list"):
        McpToolset("npx server")  # type: ignore[arg-type]
    with pytest.raises(UserError, match="http:// or https://"):
        McpToolset(url="ftp://example/mcp")
    with pytest.raises(UserError, match="for a server started with command"):
        McpToolset(url="http://127.0.0.1/mcp", env={"A": "1"})
    with pytest.raises(UserError, match="for a server at a url"):
        McpToolset(["srv"], headers={"Authorization": "x"})
    with pytest.raises(UserError, match=r"write \['echo'\]"):
        McpToolset(["srv"], tool_filter="echo")
    assert repr(McpToolset(["python", "-m", "srv"])) == "McpToolset(command='python -m srv')"


async def test_a_server_that_cannot_start_is_one_clear_error() -> None:
    toolset = McpToolset(command=["/nonexistent/mcp-server", "--stdio"])
    with pytest.raises(McpUnavailableError, match="/nonexistent/mcp-server --stdio") as caught:
        await toolset.open()
    assert caught.value.code == "mcp_unavailable"
    quits = McpToolset(command=[sys.executable, "-c", "pass"])
    with pytest.raises(McpUnavailableError, match="could not be started or reached"):
        await quits.open()


async def test_a_server_that_cannot_be_reached_is_one_clear_error(unused_port: int) -> None:
    url = f"http://127.0.0.1:{unused_port}/mcp"
    toolset = McpToolset(url=url, headers={"Authorization": "Bearer s3cret"})
    with pytest.raises(McpUnavailableError) as caught:
        await toolset.open()
    assert url in str(caught.value) and "s3cret" not in str(caught.value)


async def test_a_run_whose_server_is_unavailable_raises_its_error() -> None:
    runner = runner_for(ScriptedModel().reply("never"),
                        [McpToolset(command=["/nonexistent/mcp-server"])])
    with pytest.raises(McpUnavailableError):
        await run(runner)


# -- approvals, requests from the server -------------------------------------------------------


async def test_approval_gates_the_tools_as_the_decorator_does(mcp_server: McpServer) -> None:
    model = ScriptedModel().call("echo", {"text": "ship it"}, call_id="c1").reply("Done.")
    runner = runner_for(model, [mcp_server.toolset(requires_approval=["echo"])])
    gate = (await run(runner))[-1]
    [request] = gate.actions.requested_approvals
    assert (request.tool_name, request.args_sha256) == ("echo", args_sha256({"text": "ship it"}))
    assert "started echo" not in mcp_server.marks()
    events = await run(runner, approval_response(request, True))
    assert results(events) == [{"result": "ship it"}]
    everything = mcp_server.toolset(requires_approval=True)
    await everything.open()
    assert all(t.options.requires_approval for t in everything.listed() or ())


async def test_elicitation_is_declined_and_logged_unless_a_handler_answers(
        mcp_server: McpServer, caplog: pytest.LogCaptureFixture) -> None:
    model = ScriptedModel().call("ask", call_id="c1").reply("ok")
    runner = runner_for(model, [mcp_server.toolset()])
    with caplog.at_level(logging.WARNING, "headwater.tools.mcp"):
        events = await run(runner)
    assert results(events) == [{"result": "elicitation decline: None"}]
    [line] = [r.getMessage() for r in caplog.records if "asked for input" in r.getMessage()]
    assert "during ask" in line
    assert ("mcp_server.py" if mcp_server.transport == "stdio" else mcp_server.url) in line

    async def answer(context: Any, params: Any) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"name": "Ada"})

    model = ScriptedModel().call("ask", call_id="c1").reply("ok")
    runner = runner_for(model, [mcp_server.toolset(elicitation_handler=answer)])
    assert results(await run(runner)) == [{"result": "elicitation accept: name='Ada'"}]


async def test_sampling_is_refused(mcp_server: McpServer) -> None:
    model = ScriptedModel().call("sample", call_id="c1").reply("ok")
    runner = runner_for(model, [mcp_server.toolset()])
    [result] = results(await run(runner))
    assert result["code"] == "tool_error" and "sampling" in result["error"]


# -- content -----------------------------------------------------------------------------------


async def test_text_structured_content_and_resources_reach_the_model(
        mcp_server: McpServer) -> None:
    model = (ScriptedModel().call("weather", {"city": "Oslo"}, call_id="c1").reply("ok")
             .call("document", call_id="c2").reply("ok"))
    runner = runner_for(model, [mcp_server.toolset()])
    assert results(await run(runner)) == [{"city": "Oslo", "celsius": 21.5}]
    [document] = results(await run(runner))
    assert document["resources"][0] == {"uri": "file:///notes.txt", "mime_type": "text/plain",
                                        "text": "remember the milk"}
    assert document["resources"][1]["uri"] == "file:///big.csv"


async def test_an_image_becomes_an_artifact_the_model_gets_a_reference_to(
        mcp_server: McpServer) -> None:
    artifacts = InMemoryArtifactService()
    model = ScriptedModel().call("picture", call_id="c1").reply("A pixel.")
    runner = runner_for(model, [mcp_server.toolset()], artifact_service=artifacts)
    events = await run(runner)
    [result] = results(events)
    assert result["result"] == "a single pixel"
    [reference] = result["artifacts"]
    assert reference["artifact"] == "picture-c1-1.png" and reference["mime_type"] == "image/png"
    assert "iVBORw0KGgo" not in str(model.requests[1])  # never base64 in its context
    saved = await artifacts.load_artifact(app_name="app", user_id="u", session_id="s",
                                          filename="picture-c1-1.png")
    assert saved is not None and saved.inline_data is not None
    assert saved.inline_data.data.startswith(b"\x89PNG")
    [event] = [e for e in events if e.function_responses]
    assert event.actions.artifact_delta == {"picture-c1-1.png": 0}


async def test_without_an_artifact_service_an_image_is_said_not_dropped(
        stdio_server: McpServer) -> None:
    model = ScriptedModel().call("picture", call_id="c1").reply("ok")
    runner = runner_for(model, [stdio_server.toolset()])
    [result] = results(await run(runner))
    [omitted] = result["artifacts"]
    assert omitted["omitted"] == "image/png" and "artifact service" in omitted["why"]
