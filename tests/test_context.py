"""What callbacks and tools see of a run, with ADK's names (``headwater.context``).

Artifacts saved, loaded and listed from a callback or a tool (scoped to the
app, user and session; recorded in ``actions.artifact_delta``), state written
from a callback (a state delta, persisted with the event), the run's ids and the
user's message, and ``_invocation_context`` (session, session_service) as ADK's
samples read it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from headwater import Agent
from headwater.artifacts import InMemoryArtifactService
from headwater.context import CallbackContext, ReadonlyContext
from headwater.errors import UserError
from headwater.models.llm_request import LlmRequest
from headwater.runner import InMemoryRunner, Runner
from headwater.testing import ScriptedModel
from headwater.tools import ToolContext
from headwater.types import Blob, Content, Part


async def run(runner: Runner, session_id: str, text: str, user_id: str = "u") -> list[Any]:
    return [e async for e in runner.run_async(user_id=user_id, session_id=session_id,
                                              new_message=text)]


async def test_a_callback_saves_loads_and_lists_artifacts_recorded_on_its_event() -> None:
    seen: list[Any] = []

    async def before(callback_context: CallbackContext, llm_request: LlmRequest) -> None:
        version = await callback_context.save_artifact("notes.txt", Part(text="first"))
        again = await callback_context.save_artifact("notes.txt", Part(text="second"))
        seen.append((version, again, await callback_context.list_artifacts(),
                     (await callback_context.load_artifact("notes.txt", version=0)),
                     (await callback_context.load_artifact("notes.txt")),
                     await callback_context.load_artifact("missing")))

    model = ScriptedModel().reply("hello")
    runner = InMemoryRunner(agent=Agent(name="a", model=model, before_model_callback=before),
                            app_name="app")
    session = await runner.session_service.create_session(app_name="app", user_id="u")
    events = await run(runner, session.id, "hi")

    assert seen == [(0, 1, ["notes.txt"], Part(text="first"), Part(text="second"), None)]
    assert events[-1].actions.artifact_delta == {"notes.txt": 1}
    stored = await runner.session_service.get_session(app_name="app", user_id="u",
                                                      session_id=session.id)
    assert stored is not None and stored.events[-1].actions.artifact_delta == {"notes.txt": 1}
    # Scoped to the session: another session of the user does not see it.
    other = await runner.session_service.create_session(app_name="app", user_id="u")
    assert await runner.artifact_service.list_artifact_keys(  # type: ignore[union-attr]
        app_name="app", user_id="u", session_id=other.id) == []


async def test_a_tool_sees_its_call_the_state_and_the_artifacts() -> None:
    seen: dict[str, Any] = {}

    async def note(text: str, tool_context: ToolContext) -> dict[str, Any]:
        """Keep a note."""
        seen.update(agent=tool_context.agent_name, call=tool_context.function_call_id,
                    invocation=tool_context.invocation_id,
                    user=tool_context.user_content)
        tool_context.state["notes"] = [*tool_context.state.get("notes", []), text]
        version = await tool_context.save_artifact("user:shared.txt", Part(text=text))
        return {"version": version, "files": await tool_context.list_artifacts()}

    model = ScriptedModel().call("note", {"text": "milk"}, call_id="c1").reply("noted")
    artifacts = InMemoryArtifactService()
    runner = Runner(agent=Agent(name="keeper", model=model, tools=[note]), app_name="app",
                    artifact_service=artifacts)
    session = await runner.create_session(user_id="u")
    events = await run(runner, session.id, "remember milk")

    result = events[1]
    assert result.function_responses[0].response == {"version": 0,
                                                     "files": ["user:shared.txt"]}
    assert result.actions.artifact_delta == {"user:shared.txt": 0}
    assert result.actions.state_delta == {"notes": ["milk"]}
    assert seen == {"agent": "keeper", "call": "c1", "invocation": events[0].invocation_id,
                    "user": Content(role="user", parts=[Part(text="remember milk")])}
    # A "user:" file is the user's: another session sees it.
    other = await runner.create_session(user_id="u")
    assert await artifacts.list_artifact_keys(app_name="app", user_id="u",
                                              session_id=other.id) == ["user:shared.txt"]


async def test_callback_state_is_a_delta_and_the_session_is_read_as_adk_samples_do() -> None:
    seen: list[Any] = []

    async def before(callback_context: CallbackContext, llm_request: LlmRequest) -> None:
        callback_context.state["k"] = "v"
        ctx = callback_context._invocation_context
        session = ctx.session
        stored = await ctx.session_service.get_session(
            app_name=session.app_name, user_id=session.user_id, session_id=session.id)
        seen.append(("k" in session.state, "k" in stored.state, callback_context.agent_name,
                     callback_context.user_content.parts[0].text))

    model = ScriptedModel().reply("one").reply("two")
    runner = InMemoryRunner(agent=Agent(name="a", model=model, before_model_callback=before))
    assert runner.app_name == "InMemoryRunner"  # ADK's default
    session = await runner.session_service.create_session(app_name=runner.app_name,
                                                          user_id="u")
    events = await run(runner, session.id, "hi")
    # Cached in the context at once; in the store only once its event is.
    assert seen == [(True, False, "a", "hi")]
    assert events[-1].actions.state_delta == {"k": "v"}
    stored = await runner.session_service.get_session(app_name=runner.app_name, user_id="u",
                                                      session_id=session.id)
    assert stored is not None and stored.state == {"k": "v"}


async def test_an_instruction_provider_annotated_with_adk_readonly_context_runs() -> None:
    seen: list[Any] = []

    def instruction(context: ReadonlyContext) -> str:
        assert isinstance(context, ReadonlyContext)
        seen.append((dict(context.state), context.agent_name, context.user_content))
        return "be brief"

    model = ScriptedModel().reply("ok")
    runner = InMemoryRunner(agent=Agent(name="a", model=model, instruction=instruction),
                            app_name="app")
    session = await runner.session_service.create_session(app_name="app", user_id="u",
                                                          state={"who": "Ann"})
    await run(runner, session.id, "hi")
    assert seen == [({"who": "Ann"}, "a", Content(role="user", parts=[Part(text="hi")]))]
    assert model.requests[0].system_instruction == "be brief"


def test_a_readonly_context_cannot_change_state() -> None:
    context = ReadonlyContext(invocation_id="i", agent_name="a", app_name="app", user_id="u",
                              session_id="s", session_state={"k": 1})
    assert context.state == {"k": 1}
    with pytest.raises(TypeError):
        context.state["k"] = 2  # type: ignore[index]


async def test_without_an_artifact_service_a_save_says_what_to_pass() -> None:
    context = CallbackContext(invocation_id="i", agent_name="a", app_name="app", user_id="u",
                              session_id="s", session_state={})
    for call in (context.save_artifact("a", Part(text="x")), context.load_artifact("a"),
                 context.list_artifacts()):
        with pytest.raises(UserError, match="artifact_service="):
            await call


async def test_input_blobs_become_artifacts_when_the_run_config_asks() -> None:
    from headwater.run_config import RunConfig

    model = ScriptedModel().reply("got it").reply("again")
    runner = InMemoryRunner(agent=Agent(name="a", model=model), app_name="app")
    session = await runner.session_service.create_session(app_name="app", user_id="u")
    message = Content(role="user", parts=[
        Part(text="look"), Part(inline_data=Blob(mime_type="text/plain", data=b"Hi bytes"))])
    events = [e async for e in runner.run_async(
        user_id="u", session_id=session.id, new_message=message,
        run_config=RunConfig(save_input_blobs_as_artifacts=True))]

    name = f"artifact_{events[0].invocation_id}_1"
    assert runner.artifact_service is not None
    assert await runner.artifact_service.list_artifact_keys(
        app_name="app", user_id="u", session_id=session.id) == [name]
    assert await runner.artifact_service.load_artifact(
        app_name="app", user_id="u", session_id=session.id, filename=name
    ) == Part(inline_data=Blob(mime_type="text/plain", data=b"Hi bytes"))
    stored = await runner.session_service.get_session(app_name="app", user_id="u",
                                                      session_id=session.id)
    assert stored is not None
    assert stored.events[0].content == Content(role="user", parts=[
        Part(text="look"), Part(text=f"Uploaded file: {name}. It is saved into artifacts")])
    assert model.requests[0].contents[-1] == stored.events[0].content
    # Without the flag the blob is stored as it is.
    await run_blob(runner, session.id, message)
    stored = await runner.session_service.get_session(app_name="app", user_id="u",
                                                      session_id=session.id)
    assert stored is not None and stored.events[-2].content == message


async def run_blob(runner: Runner, session_id: str, message: Content) -> None:
    async for _ in runner.run_async(user_id="u", session_id=session_id, new_message=message):
        pass


def test_the_sync_run_of_adk_scripts() -> None:
    model = ScriptedModel().reply("sync answer")
    with InMemoryRunner(agent=Agent(name="a", model=model), app_name="app") as runner:
        session = asyncio.run(runner.session_service.create_session(app_name="app",
                                                                   user_id="u"))
        texts = [e.text for e in runner.run(user_id="u", session_id=session.id,
                                            new_message=Content.from_text("hi"))]
    assert texts == ["sync answer"]


async def test_a_tool_setting_skip_summarization_ends_the_turn_with_its_result() -> None:
    def lookup(code: str, tool_context: ToolContext) -> dict[str, str]:
        """Look a code up; its result is the answer."""
        tool_context.actions.skip_summarization = True
        return {"answer": f"{code} is fine"}

    model = ScriptedModel().call("lookup", {"code": "A1"}).reply("never asked")
    runner = InMemoryRunner(agent=Agent(name="a", model=model, tools=[lookup]), app_name="app")
    session = await runner.session_service.create_session(app_name="app", user_id="u")
    events = await run(runner, session.id, "check A1")
    assert events[-1].function_responses[0].response == {"answer": "A1 is fine"}
    assert events[-1].is_final_response() and len(model.requests) == 1
