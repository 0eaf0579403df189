"""``load_memory`` and ``preload_memory`` (ADK's memory tools) over a runner's memory service,
in memory and in a real SQLite file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from headwater import Agent
from headwater.errors import UserError
from headwater.memory import BaseMemoryService, InMemoryMemoryService, SqlMemoryService
from headwater.runner import InMemoryRunner, Runner
from headwater.sessions import SqlSessionService
from headwater.testing import ScriptedModel
from headwater.tools import ToolContext, load_memory, preload_memory


async def say(runner: Runner, session_id: str, text: str) -> list[Any]:
    return [e async for e in runner.run_async(user_id="u", session_id=session_id,
                                              new_message=text)]


async def remember_a_talk(runner: Runner, memory: BaseMemoryService) -> None:
    """A first session where the user says their cat's name, then remembered."""
    first = await runner.create_session(user_id="u")
    await say(runner, first.id, "My cat is called Tom")
    stored = await runner.session_service.get_session(app_name=runner.app_name, user_id="u",
                                                      session_id=first.id)
    assert stored is not None
    await memory.add_session_to_memory(stored)


@pytest.fixture(params=["memory", "sqlite"])
async def services(request: pytest.FixtureRequest, tmp_path: Path
                   ) -> Any:
    if request.param == "memory":
        yield None, InMemoryMemoryService()
        return
    sessions = SqlSessionService(f"sqlite:///{tmp_path / 'app.db'}")
    try:
        yield sessions, SqlMemoryService(sessions)
    finally:
        await sessions.close()


async def test_load_memory_finds_what_the_user_said_in_another_session(services: Any) -> None:
    sessions, memory = services
    model = ScriptedModel().reply("Noted.").call("load_memory", {"query": "cat"}).reply(
        "Your cat is Tom.")
    runner = Runner(agent=Agent(name="a", model=model, tools=[load_memory]), app_name="app",
                    session_service=sessions, memory_service=memory)
    await remember_a_talk(runner, memory)

    second = await runner.create_session(user_id="u")
    events = await say(runner, second.id, "What is my cat called?")
    found = events[1].function_responses[0].response["memories"]
    assert [(m["author"], m["content"]["parts"][0]["text"]) for m in found] == [
        ("user", "My cat is called Tom")]
    assert events[-1].text == "Your cat is Tom."
    request = model.requests[-2]
    assert "call load_memory function with a query" in (request.system_instruction or "")
    assert [t.name for t in request.tools] == ["load_memory"]


async def test_preload_memory_puts_past_talks_in_the_instruction_and_is_not_declared(
        services: Any) -> None:
    sessions, memory = services
    model = ScriptedModel().reply("Noted.").reply("Tom.")
    runner = Runner(agent=Agent(name="a", model=model, instruction="Be kind.",
                                tools=[preload_memory]),
                    app_name="app", session_service=sessions, memory_service=memory)
    await remember_a_talk(runner, memory)

    second = await runner.create_session(user_id="u")
    await say(runner, second.id, "what is my cat called")
    instruction = model.requests[-1].system_instruction or ""
    assert instruction.startswith("Be kind.\n\nThe following content is from your previous")
    assert "<PAST_CONVERSATIONS>\nTime: " in instruction
    assert "user: My cat is called Tom\n</PAST_CONVERSATIONS>" in instruction
    assert model.requests[-1].tools == []
    # The first talk had nothing to remember yet: its instruction is the agent's.
    assert model.requests[0].system_instruction == "Be kind."


async def test_search_memory_without_a_memory_service_says_what_to_pass() -> None:
    async def recall(tool_context: ToolContext) -> str:
        """Recall."""
        await tool_context.search_memory("x")
        return "no"

    model = ScriptedModel().call("recall").reply("done")
    runner = Runner(agent=Agent(name="a", model=model, tools=[recall]), app_name="app")
    session = await runner.create_session(user_id="u")
    events = await say(runner, session.id, "go")
    assert "memory_service=" in str(events[1].function_responses[0].response)
    with pytest.raises(UserError, match="memory_service="):
        await ToolContext(function_call_id="c", tool_name="t", invocation_id="i",
                          agent_name="a", app_name="app", user_id="u", session_id="s",
                          session_state={}).search_memory("x")


def test_an_in_memory_runner_has_every_in_memory_service() -> None:
    runner = InMemoryRunner(agent=Agent(name="a", model=ScriptedModel()), app_name="app")
    assert isinstance(runner.memory_service, InMemoryMemoryService)
    assert runner.artifact_service is not None
