"""ADK code moved over by its imports: ``google.genai.types`` → ``headwater.types``,
``google.adk`` names (``LlmAgent``, planners, bare model strings) → ``headwater``."""

from __future__ import annotations

import re
from typing import Any

import pydantic
import pytest
from pydantic import TypeAdapter

from headwater import Agent, Event, LlmAgent, Runner, types
from headwater.agents import LlmAgent as AgentsLlmAgent
from headwater.errors import UserError
from headwater.models import LlmRequest, LlmResponse
from headwater.models.registry import ModelString, check_model, parse_model_string
from headwater.planners import (
    FINAL_ANSWER_TAG,
    PLANNING_INSTRUCTION,
    BuiltInPlanner,
    PlanReActPlanner,
)
from headwater.sessions import InMemorySessionService
from headwater.testing import ScriptedModel

# -- content types ------------------------------------------------------------------------------


def test_content_and_parts_as_adk_samples_write_them() -> None:
    content = types.Content(role="user", parts=[types.Part(text="hi")])
    assert content.text == "hi" and content.role == "user"
    assert types.Part.from_text(text="hi") == types.Part(text="hi")
    image = types.Part.from_bytes(data=b"\x89PNG", mime_type="image/png")
    assert image.inline_data == types.Blob(mime_type="image/png", data=b"\x89PNG")
    call = types.Part.from_function_call(name="lookup", args={"q": "x"})
    assert call.function_call is not None and call.function_call.name == "lookup"
    answer = types.Part.from_function_response(name="lookup", response={"ok": 1})
    assert answer.function_response == types.FunctionResponse(name="lookup",
                                                              response={"ok": 1})
    assert types.FunctionCall(name="f", args={"a": 1}).args == {"a": 1}


@pytest.mark.parametrize("parts", ["hello", types.Part(text="hello"), ["hel", "lo"],
                                   [types.Part(text="hel"), "lo"]])
def test_user_and_model_content_take_a_part_a_text_or_a_list(parts: Any) -> None:
    user, model = types.UserContent(parts), types.ModelContent(parts)
    assert (user.role, user.text) == ("user", "hello")
    assert (model.role, model.text) == ("model", "hello")
    assert type(user) is types.Content  # plain contents: equal to any other, stored alike


def test_user_content_refuses_what_is_not_a_part() -> None:
    with pytest.raises(TypeError, match="a content part is a Part or a str, not int"):
        types.UserContent([3])  # type: ignore[list-item]


def test_enums_carry_genais_names_and_values() -> None:
    assert types.HarmCategory.HARM_CATEGORY_HARASSMENT == "HARM_CATEGORY_HARASSMENT"
    assert types.HarmBlockThreshold("block_none") is types.HarmBlockThreshold.BLOCK_NONE
    assert types.ThinkingLevel("High") is types.ThinkingLevel.HIGH
    assert {t.name for t in types.HarmBlockThreshold} == {
        "HARM_BLOCK_THRESHOLD_UNSPECIFIED", "BLOCK_LOW_AND_ABOVE", "BLOCK_MEDIUM_AND_ABOVE",
        "BLOCK_ONLY_HIGH", "BLOCK_NONE", "OFF"}
    setting = types.SafetySetting(category="harm_category_hate_speech", threshold="OFF")
    assert setting.category is types.HarmCategory.HARM_CATEGORY_HATE_SPEECH


def test_generate_content_config_as_genai_takes_it() -> None:
    config = types.GenerateContentConfig(
        temperature=0.2, maxOutputTokens=100,  # genai takes camelCase too
        safety_settings=[{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}],
        thinking_config={"thinking_budget": 0}, http_options={"timeout": 5},
        speech_config={"voice_config": {"prebuilt_voice_config": {"voice_name": "Kore"}}})
    assert config.max_output_tokens == 100
    assert config.thinking_config == types.ThinkingConfig(thinking_budget=0)
    assert config.safety_settings == [types.SafetySetting(
        category=types.HarmCategory.HARM_CATEGORY_HARASSMENT,
        threshold=types.HarmBlockThreshold.BLOCK_NONE)]
    assert list(config.given()) == ["temperature", "max_output_tokens", "safety_settings",
                                    "thinking_config", "http_options", "speech_config"]
    with pytest.raises(pydantic.ValidationError, match="temprature"):
        types.GenerateContentConfig(temprature=0.2)  # type: ignore[call-arg]


async def test_a_call_built_without_an_id_gets_one_when_recorded() -> None:
    answered: list[bool] = []

    def answer(callback_context: Any, llm_request: LlmRequest) -> LlmResponse | None:
        if answered:
            return None  # the second call goes to the model
        answered.append(True)
        return LlmResponse(content=types.ModelContent(
            [types.Part.from_function_call(name="ping", args={})]))

    def ping() -> dict[str, str]:
        """Answers pong."""
        return {"said": "pong"}

    model = ScriptedModel().reply("done")
    agent = Agent(name="a", model=model, tools=[ping], before_model_callback=answer)
    events = await _run(agent, "go")
    ids = [c.id for e in events for c in e.function_calls]
    assert len(ids) == 1 and ids[0]  # a fresh, non-empty id
    assert [r.id for e in events for r in e.function_responses] == ids
    # Persisted and read back as it was.
    adapter = TypeAdapter(types.Content)
    content = types.UserContent(types.Part.from_function_response(name="p", response={}))
    assert adapter.validate_json(adapter.dump_json(content)) == content


# -- LlmAgent, model strings ----------------------------------------------------------------------

def test_llm_agent_is_agent() -> None:
    agent = LlmAgent(name="a", model="demo")
    assert LlmAgent is Agent is AgentsLlmAgent
    assert isinstance(agent, Agent) and isinstance(Agent(name="b", model="demo"), LlmAgent)


@pytest.mark.parametrize(("model", "provider"), [
    ("gemini-2.0-flash", "gemini"), ("gemini-2.5-pro-preview-05-06", "gemini"),
    ("model-optimizer-exp-04-09", "gemini"), ("claude-3-5-sonnet-20241022", "anthropic"),
    ("claude-sonnet-4-5", "anthropic"), ("gpt-4o", "openai"), ("gpt-4.1-mini", "openai"),
    ("o1", "openai"), ("o3-mini", "openai"), ("o4-mini", "openai"),
])
def test_adk_model_names_name_their_provider(model: str, provider: str,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GOOGLE_API_KEY", "GEMINI_API_KEY"):
        monkeypatch.delenv(key, raising=False)
    assert parse_model_string(model) == ModelString(provider, model)
    agent = Agent(name="a", model=model)  # built without a key: the key is read on first use
    assert repr(agent) == f"Agent(name='a', model={model!r})"
    with pytest.raises(UserError, match=r"API key|needs"):
        agent.model  # noqa: B018


def test_a_provider_prefix_is_still_a_prefix() -> None:
    assert parse_model_string("gemini-live:gemini-2.0-flash-live-001") == ModelString(
        "gemini-live", "gemini-2.0-flash-live-001")
    assert parse_model_string("openai:gpt-4o") == ModelString("openai", "gpt-4o")


@pytest.mark.parametrize(("model", "said"), [
    ("llama3", "model string 'llama3' must look like 'provider:model'"),
    ("gpt4", "model string 'gpt4' must look like 'provider:model'"),
    ("projects/p/locations/us-central1/endpoints/123",
     "model 'projects/p/locations/us-central1/endpoints/123' is a Vertex AI endpoint"),
])
def test_an_unknown_bare_name_is_refused_when_the_agent_is_built(model: str, said: str) -> None:
    with pytest.raises(UserError) as refused:
        Agent(name="a", model=model)
    message = str(refused.value)
    assert message.startswith(f"agent 'a': {said}")
    assert "'gemini-…'" in message and "'provider:model'" in message
    with pytest.raises(UserError):
        check_model(model, agent="a")


# -- generate_content_config on the agent ---------------------------------------------------------

@pytest.mark.parametrize(("field", "value", "said"), [
    ("tools", [{"function_declarations": []}], "Agent(tools=...)"),
    ("system_instruction", "be brief", "Agent(instruction=...)"),
    ("response_schema", {"type": "object"}, "output schema"),
])
def test_the_fields_adk_refuses_are_refused(field: str, value: Any, said: str) -> None:
    with pytest.raises(UserError, match=rf"agent 'a': generate_content_config\.{field} is "
                                        rf"refused\. .*{re.escape(said)}"):
        Agent(name="a", model="demo",
              generate_content_config=types.GenerateContentConfig(**{field: value}))


def test_the_config_must_be_a_config() -> None:
    with pytest.raises(UserError, match=r"is a headwater\.types\.GenerateContentConfig, not str"):
        Agent(name="a", model="demo", generate_content_config="hot")  # type: ignore[arg-type]
    with pytest.raises(UserError, match=r"not a headwater\.planners planner"):
        Agent(name="a", model="demo", planner="plan")  # type: ignore[arg-type]
    agent = Agent(name="a", model="demo", generate_content_config={"temperature": 0.3})
    assert agent.generate_content_config == types.GenerateContentConfig(temperature=0.3)


# -- planners -------------------------------------------------------------------------------------

async def _run(agent: Agent, text: str) -> list[Event]:
    runner = Runner(agent=agent, app_name="app", session_service=InMemorySessionService())
    session = await runner.create_session(user_id="u")
    async with runner.run_async(user_id="u", session_id=session.id, new_message=text) as events:
        return [e async for e in events]


async def test_built_in_planner_sets_the_thinking_over_the_agents_config() -> None:
    model = ScriptedModel().reply("ok")
    config = types.GenerateContentConfig(
        temperature=0.4, thinking_config=types.ThinkingConfig(thinking_budget=10))
    thinking = types.ThinkingConfig(include_thoughts=True, thinking_budget=1024)
    agent = Agent(name="a", model=model, generate_content_config=config,
                  planner=BuiltInPlanner(thinking_config=thinking))
    await _run(agent, "hi")
    sent = model.requests[0].generate_content_config
    assert sent == types.GenerateContentConfig(temperature=0.4, thinking_config=thinking)
    assert agent.generate_content_config is config
    assert config.thinking_config == types.ThinkingConfig(thinking_budget=10)  # not changed
    assert model.requests[0].system_instruction is None  # no planning instruction


async def test_plan_react_planner_instructs_and_marks_its_planning_as_thought() -> None:
    model = ScriptedModel().reply(
        "/*PLANNING*/ 1. look it up\n", f"/*REASONING*/ found it\n{FINAL_ANSWER_TAG}",
        " Paris.").reply("Madrid.")
    agent = LlmAgent(name="a", model=model, instruction="Answer about cities.",
                     planner=PlanReActPlanner())
    runner = Runner(agent=agent, app_name="app", session_service=InMemorySessionService())
    session = await runner.create_session(user_id="u")
    finals = []
    for text in ("capital of France?", "and Spain?"):
        async with runner.run_async(user_id="u", session_id=session.id,
                                    new_message=text) as stream:
            finals.append([e async for e in stream][-1])
    assert model.requests[0].system_instruction == (
        f"Answer about cities.\n\n{PLANNING_INSTRUCTION}")
    final = finals[0]
    assert final.content is not None and not final.partial
    assert final.content.text == " Paris."
    assert final.content.thought_text == (
        f"/*PLANNING*/ 1. look it up\n/*REASONING*/ found it\n{FINAL_ANSWER_TAG}")
    # Its plan goes back to the model as text: the model sees what it planned.
    history = model.requests[1].contents
    assert not any(p.thought for c in history for p in c.parts)
    assert "/*PLANNING*/ 1. look it up" in history[1].text


def test_plan_react_splits_and_keeps_the_first_call_group() -> None:
    planner = PlanReActPlanner()
    parts = [types.Part(text="/*PLANNING*/ plan"), types.Part(text="plain"),
             types.Part.from_function_call(name="", args={}),
             types.Part.from_function_call(name="a", args={}),
             types.Part.from_function_call(name="b", args={}),
             types.Part(text="after"), types.Part.from_function_call(name="c", args={})]
    kept = planner.process_planning_response(None, parts)  # type: ignore[arg-type]
    assert kept is not None
    assert [(p.text, p.thought, p.function_call and p.function_call.name) for p in kept] == [
        ("/*PLANNING*/ plan", True, None), ("plain", False, None), (None, False, "a"),
        (None, False, "b")]
    assert parts[0].thought is False  # the given parts are not changed
    assert planner.process_planning_response(None, []) is None  # type: ignore[arg-type]
    only = planner.process_planning_response(  # type: ignore[arg-type]
        None, [types.Part(text=f"why{FINAL_ANSWER_TAG}")])
    assert only == [types.Part(text=f"why{FINAL_ANSWER_TAG}", thought=True)]
