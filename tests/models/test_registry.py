"""Models named by strings, through the registry the built-ins use too."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from headwater import Agent
from headwater.errors import UserError
from headwater.models import (
    BaseLlm,
    DemoModel,
    LlmRequest,
    LlmResponse,
    get_model,
    register_model,
    registered_model,
)
from headwater.models.anthropic import AnthropicModel
from headwater.models.openai import OpenAIChatModel
from headwater.models.registry import ModelString, available_providers, parse_model_string
from headwater.settings import reload_settings
from headwater.testing import ScriptedModel


def test_openai_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    model = get_model("openai:gpt-4o-mini")
    assert isinstance(model, OpenAIChatModel)
    assert (model.model, model.url) == ("gpt-4o-mini", "http://127.0.0.1:9/v1/chat/completions")
    assert model.auth_headers() == {"authorization": "Bearer sk-env"}
    assert "sk-env" not in repr(model)


def test_anthropic_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant")
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    model = get_model("anthropic:claude-sonnet-4-5")
    assert isinstance(model, AnthropicModel)
    assert model.url == "https://api.anthropic.com/v1/messages"
    assert model.auth_headers()["x-api-key"] == "sk-ant"


@pytest.mark.parametrize(("spec", "variable"), [("openai:gpt-4o", "OPENAI_API_KEY"),
                                                ("anthropic:claude-x", "ANTHROPIC_API_KEY")])
def test_a_missing_key_names_the_variable(spec: str, variable: str,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(variable, raising=False)
    with pytest.raises(UserError, match=variable):
        get_model(spec)


def test_openai_compatible_needs_no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_COMPATIBLE_API_KEY", raising=False)
    model = get_model("openai-compatible:llama3.1:8b@http://127.0.0.1:11434/v1")
    assert isinstance(model, OpenAIChatModel)
    assert model.model == "llama3.1:8b"
    assert model.url == "http://127.0.0.1:11434/v1/chat/completions"
    assert model.auth_headers() == {}
    with pytest.raises(UserError, match="openai-compatible:<model>@"):
        get_model("openai-compatible:llama3")


def test_unknown_and_malformed_strings() -> None:
    with pytest.raises(UserError, match="unknown model provider 'nope'"):
        get_model("nope:model")
    with pytest.raises(UserError, match="provider:model"):
        get_model("llama3")


def test_built_ins_come_through_entry_points() -> None:
    assert {"anthropic", "openai", "openai-compatible", "scripted"} <= set(
        available_providers())
    model = get_model("scripted:echo")
    assert isinstance(model, ScriptedModel) and model.model == "echo"


class Mine(BaseLlm):
    async def generate_content(self, request: LlmRequest, stream: bool = False):  # type: ignore[override]
        yield LlmResponse()


def test_third_party_registration_and_agent_strings() -> None:
    undo = register_model("mine", Mine)
    try:
        assert "mine" in available_providers()
        assert isinstance(get_model("mine:v1"), Mine)
        agent = Agent(name="a", model="mine:v2")
        assert isinstance(agent.model, Mine) and agent.model.model == "v2"
        model = Mine("x")
        assert get_model(model) is model
    finally:
        undo()
    assert "mine" not in available_providers()
    with pytest.raises(UserError, match="unknown model provider 'mine'"):
        get_model("mine:v1")


def test_a_registration_in_a_block_shadows_a_built_in_and_is_undone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    with registered_model("openai", Mine):
        assert isinstance(get_model("openai:gpt-4o"), Mine)
        with registered_model("openai", ScriptedModel):
            assert isinstance(get_model("openai:gpt-4o"), ScriptedModel)
        assert isinstance(get_model("openai:gpt-4o"), Mine)
    assert isinstance(get_model("openai:gpt-4o"), OpenAIChatModel)  # the built-in is back
    with pytest.raises(RuntimeError, match="boom"), registered_model("mine", Mine):
        raise RuntimeError("boom")
    assert "mine" not in available_providers()


def test_connect_emulates_live_for_streaming_models_and_refuses_others() -> None:
    from headwater.models.connection import EmulatedLlmConnection

    connection = OpenAIChatModel("gpt-4o", api_key="k").connect(LlmRequest())
    assert isinstance(connection, EmulatedLlmConnection)

    class Plain(BaseLlm):
        async def generate_content(self, request: LlmRequest, stream: bool = False):  # type: ignore[override]
            yield LlmResponse()

    with pytest.raises(NotImplementedError, match=r"'plain-1'.*Plain.*live"):
        Plain("plain-1").connect(LlmRequest())


# -- one parser for model strings (issue 26, points 7 and 8) -------------------------------------

def test_one_parser_reads_every_model_string() -> None:
    assert parse_model_string("openai:gpt-4o-mini") == ModelString("openai", "gpt-4o-mini")
    assert parse_model_string("openai-compatible:llama3.1:8b@http://h/v1") == ModelString(
        "openai-compatible", "llama3.1:8b@http://h/v1")  # split at the first colon
    assert parse_model_string("demo") == parse_model_string("demo:demo") == ModelString(
        "demo", "demo")
    for bad in ("gpt4", "openai:", ":gpt", ""):
        with pytest.raises(UserError, match=r"must look like 'provider:model'; a model is a "
                                            r"BaseLlm object, 'demo' \(the offline demo"):
            parse_model_string(bad)


@pytest.fixture
def headwater_model(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], None]]:
    """Set ``HEADWATER_MODEL`` for the process-wide settings; put them back after."""
    def use(value: str) -> None:
        monkeypatch.setenv("HEADWATER_MODEL", value)
        reload_settings()

    yield use
    monkeypatch.delenv("HEADWATER_MODEL", raising=False)
    reload_settings()


def test_demo_names_the_demo_model_everywhere(headwater_model: Callable[[str], None]) -> None:
    from headwater.cli._models import resolve_model
    from headwater.examples._console import example_model

    for spec in ("demo", "demo:demo"):
        assert type(get_model(spec)) is DemoModel
        assert type(Agent(name="a", model=spec).model) is DemoModel
        assert type(resolve_model(spec)) is DemoModel  # --model on demo, chat, run, serve
        headwater_model(spec)
        assert type(resolve_model(None)) is DemoModel  # HEADWATER_MODEL
        assert type(example_model()) is DemoModel


def test_every_door_refuses_a_bad_string_in_the_same_words(
        headwater_model: Callable[[str], None]) -> None:
    from headwater.cli._models import resolve_model

    with pytest.raises(UserError) as parsed:
        parse_model_string("gpt4")
    words = str(parsed.value)
    for door in (lambda: get_model("gpt4"), lambda: resolve_model("gpt4"),
                 lambda: (headwater_model("gpt4"), resolve_model(None))):
        with pytest.raises(UserError) as refused:
            door()
        assert str(refused.value) == words
    with pytest.raises(UserError) as built:
        Agent(name="helper", model="gpt4")
    assert str(built.value) == f"agent 'helper': {words}"


@pytest.mark.parametrize(("model", "said"), [
    (..., "model=... is a placeholder, not a model"),
    (42, "model=42 (an int) is not a model"),
    ("llama3", "model string 'llama3' must look like 'provider:model'"),
    ("nope:x", "unknown model provider 'nope' in 'nope:x'"),
])
def test_an_agent_is_refused_when_built_with_what_is_not_a_model(model: object,
                                                                 said: str) -> None:
    with pytest.raises(UserError) as refused:
        Agent(name="billing", model=model)  # type: ignore[arg-type]  # what users paste
    assert str(refused.value).startswith(f"agent 'billing': {said}")
    assert "a model is a BaseLlm object, 'demo'" in str(refused.value) or "nope" in said
    with pytest.raises(UserError, match="agent 'billing': model=42"):
        Agent(name="billing", model="demo").model = 42  # type: ignore[assignment]
    # No model at all is ADK's inheritance (the nearest LLM agent above lends its own); a
    # runner refuses a tree where none has one, naming the agent.
    from headwater.runner import Runner

    with pytest.raises(UserError, match="agent 'support' has no model, and no LLM agent"):
        Runner(agent=Agent(name="support"), app_name="app")
