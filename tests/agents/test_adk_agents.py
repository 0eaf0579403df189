"""ADK's agent behaviours (issue 29): agent callbacks, a model from above, the global
instruction, few-shot examples, output schemas, the raw value an after-tool callback
sees, and long-running tools as ADK runs them (the human_in_loop sample's flow)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from headwater import (
    Agent,
    Content,
    Example,
    ExampleTool,
    FunctionResponse,
    LongRunningFunctionTool,
    Part,
    Runner,
    SequentialAgent,
    ToolContext,
)
from headwater.context import CallbackContext
from headwater.errors import UserError
from headwater.testing import ScriptedModel

from .helpers import collect, make, state, stored


def said(text: str) -> Content:
    return Content("model", [Part(text=text)])


# -- 1. before/after agent callbacks -----------------------------------------------------------

async def test_before_agent_callback_content_replaces_the_run_and_after_adds_a_reply() -> None:
    seen: list[str] = []

    def gate(callback_context: CallbackContext) -> Content | None:
        seen.append(callback_context.agent_name)
        callback_context.state["gated"] = True
        return said("closed today") if callback_context.agent_name == "first" else None

    async def sign(callback_context: CallbackContext) -> Content | None:
        return said(f"-- {callback_context.agent_name}")

    first_model, second_model = ScriptedModel(), ScriptedModel().reply("second answers")
    first = Agent(name="first", model=first_model, before_agent_callback=gate,
                  after_agent_callback=sign)
    second = Agent(name="second", model=second_model, before_agent_callback=[gate],
                   after_agent_callback=[lambda callback_context: None, sign])
    flow = SequentialAgent(name="flow", sub_agents=[first, second], after_agent_callback=sign)
    runner, sid = await make(flow)
    events = await collect(runner, sid)
    replies = [(e.author, e.text) for e in events if not e.partial and e.author != "user"]
    assert replies == [("first", "closed today"),  # no run, no after-callback
                       ("second", ""),  # the state the callback set, in an event of its own
                       ("second", "second answers"), ("second", "-- second"),
                       ("flow", "-- flow")]
    assert seen == ["first", "second"]
    assert first_model.requests == []
    assert (await state(runner, sid))["gated"] is True
    kept = [e for e in await stored(runner, sid) if e.author == "second" and not e.text]
    assert kept[0].actions.state_delta == {"gated": True}


async def test_a_lone_agents_callbacks_run_too() -> None:
    model = ScriptedModel().reply("hi")
    agent = Agent(name="solo", model=model,
                  after_agent_callback=lambda callback_context: said("bye"))
    runner, sid = await make(agent)
    assert [e.text for e in await collect(runner, sid) if not e.partial][-2:] == ["hi", "bye"]


# -- 2. a model from the nearest LLM agent above ----------------------------------------------

async def test_a_sub_agent_without_a_model_uses_its_nearest_llm_ancestors() -> None:
    model = ScriptedModel().reply("from the parent's model")
    child = Agent(name="child", instruction="Child.")
    root = Agent(name="root", model=model, sub_agents=[SequentialAgent(name="s",
                                                                        sub_agents=[child])])
    assert child.model is model and child.canonical_model is model
    runner, sid = await make(root.sub_agents[0])  # a tree rooted under root still finds it
    assert (await collect(runner, sid))[-1].text == "from the parent's model"
    assert model.requests[0].system_instruction == "Child."


def test_a_tree_with_no_model_for_an_llm_agent_is_refused_naming_it() -> None:
    orphan = Agent(name="orphan")
    with pytest.raises(UserError, match="agent 'orphan' has no model"):
        Runner(agent=SequentialAgent(name="s", sub_agents=[orphan]), app_name="a")


# -- 3. global_instruction -----------------------------------------------------------------

async def test_the_roots_global_instruction_comes_before_every_agents_own() -> None:
    model = (ScriptedModel().call("transfer_to_agent", {"agent_name": "seq"})
             .reply("child answers"))
    child = Agent(name="child", instruction="Child for {user?}.",
                  global_instruction="ignored: only the root's counts")
    llm_root = Agent(name="boss", model=model, global_instruction="Be brief, {who}.",
                     instruction="Boss.",
                     sub_agents=[SequentialAgent(name="seq", sub_agents=[child])])
    runner, _ = await make(llm_root)
    await runner.session_service.create_session(app_name="shop", user_id="u1",
                                                session_id="s2", state={"who": "Ann"})
    assert (await collect(runner, "s2"))[-1].text == "child answers"
    boss, kid = (r.system_instruction or "" for r in model.requests)
    assert boss.startswith("Be brief, Ann.\n\nBoss.")
    assert kid.startswith("Be brief, Ann.\n\nChild for .")

    def provided(ctx: CallbackContext) -> str:
        return f"Global for {ctx.agent_name} {{not filled}}"

    model2 = ScriptedModel().reply("x")
    solo = Agent(name="solo", model=model2, global_instruction=provided)
    runner2, sid2 = await make(solo)
    await collect(runner2, sid2)
    assert model2.requests[0].system_instruction == "Global for solo {not filled}"


# -- 4. Example and ExampleTool --------------------------------------------------------------

async def test_example_tool_puts_examples_in_the_instruction_and_declares_nothing() -> None:
    examples = ExampleTool([Example(
        input=Content("user", [Part(text="weather in Paris?")]),
        output=[Content("model", [Part(function_call=_call("get_weather", city="Paris"))]),
                Content("user", [Part(function_response=FunctionResponse(
                    id="c", name="get_weather", response={"temp": 21}))]),
                said("21 degrees")])])

    def get_weather(city: str) -> dict[str, int]:
        """The weather."""
        return {"temp": 20}

    model = ScriptedModel().reply("hello")
    runner, sid = await make(Agent(name="a", model=model, instruction="Be nice.",
                                   tools=[get_weather, examples]))
    await collect(runner, sid)
    request = model.requests[0]
    assert [t.name for t in request.tools] == ["get_weather"]
    text = request.system_instruction or ""
    assert text.startswith("Be nice.\n\n<EXAMPLES>\nBegin few-shot\n")
    assert "EXAMPLE 1:\nBegin example\n[user]\nweather in Paris?\n[model]\n" in text
    assert "```\nget_weather(city='Paris')\n```\n" in text
    assert "[model]\n21 degrees\nEnd example" in text and text.endswith("<EXAMPLES>")
    with pytest.raises(UserError, match="examples must be Example"):
        ExampleTool([{"input": "not content"}])


def _call(name: str, **args: Any) -> Any:
    from headwater import FunctionCall
    return FunctionCall("c", name, args)


# -- 5. output_schema ----------------------------------------------------------------------

class Capital(BaseModel):
    country: str
    capital: str
    note: str | None = None


async def test_output_schema_asks_for_json_validates_and_stores_the_object() -> None:
    model = ScriptedModel().reply('```json\n{"country": "France", "capital": "Paris"}\n```')
    agent = Agent(name="geo", model=model, output_schema=Capital, output_key="found")
    runner, sid = await make(agent)
    events = await collect(runner, sid)
    assert events[-1].error_code is None
    assert (await state(runner, sid))["found"] == {"country": "France", "capital": "Paris"}
    assert '"capital"' in (model.requests[0].system_instruction or "")
    assert agent.disallow_transfer_to_parent and agent.disallow_transfer_to_peers


async def test_an_answer_that_does_not_fit_the_schema_is_kept_and_ends_in_output_invalid(
        ) -> None:
    model = ScriptedModel().reply("Paris, I think.")
    runner, sid = await make(Agent(name="geo", model=model, output_schema=Capital,
                                   output_key="found"))
    events = await collect(runner, sid)
    assert events[-1].error_code == "output_invalid"
    assert "Capital" in (events[-1].error_message or "")
    history = await stored(runner, sid)
    assert history[-2].text == "Paris, I think." and not history[-2].actions.state_delta
    assert "found" not in await state(runner, sid)


def test_output_schema_with_tools_or_a_non_model_is_refused() -> None:
    def t() -> str:
        """T."""
        return ""

    with pytest.raises(UserError, match="cannot be combined with tools"):
        Agent(name="a", model=ScriptedModel(), output_schema=Capital, tools=[t])
    with pytest.raises(UserError, match="must be a pydantic model class"):
        Agent(name="a", model=ScriptedModel(), output_schema=dict)  # type: ignore[arg-type]


# -- 6. after_tool_callback sees the raw value --------------------------------------------------

async def test_after_tool_callback_gets_the_raw_value_and_the_wrapping_comes_after() -> None:
    seen: list[Any] = []

    def shout(word: str) -> str:
        """Shout."""
        return word.upper()

    def after(tool: Any, args: dict[str, Any], tool_context: ToolContext,
              tool_response: Any) -> Any:
        seen.append(tool_response)
        return tool_response + "!" if args["word"] == "hey" else None

    model = (ScriptedModel().call("shout", {"word": "hey"}).call("shout", {"word": "yo"})
             .reply("done"))
    runner, sid = await make(Agent(name="a", model=model, tools=[shout],
                                   after_tool_callback=after))
    events = await collect(runner, sid)
    results = [r.response for e in events for r in e.function_responses]
    assert seen == ["HEY", "YO"]
    assert results == [{"result": "HEY!"}, {"result": "YO"}]


# -- 7/8. long-running tools as ADK runs them (contributing/samples/human_in_loop) ------------

def ask_for_approval(purpose: str, amount: float, tool_context: ToolContext) -> dict[str, Any]:
    """Ask for approval for the reimbursement."""
    return {"status": "pending", "amount": amount, "ticketId": "reimbursement-ticket-001"}


def reimburse(purpose: str, amount: float) -> dict[str, str]:
    """Reimburse the amount of money to the employee."""
    return {"status": "ok"}


async def test_human_in_loop_flow() -> None:
    model = (ScriptedModel()
             .call("ask_for_approval", {"purpose": "travel", "amount": 200.0}, call_id="lr1")
             .reply("I asked your manager; waiting for approval.")
             .call("reimburse", {"purpose": "travel", "amount": 200.0}, call_id="r1")
             .reply("Approved and reimbursed."))
    agent = Agent(name="reimbursement_agent", model=model,
                  tools=[reimburse, LongRunningFunctionTool(func=ask_for_approval)])
    runner, sid = await make(agent)
    events = [e for e in await collect(runner, sid, "reimburse $200") if not e.partial]
    call_event = next(e for e in events if e.function_calls)
    [call] = call_event.function_calls
    assert call_event.long_running_tool_ids == ["lr1"]  # what main.py looks at
    ticket = next(e for e in events if e.function_responses)
    assert ticket.function_responses[0].response["status"] == "pending"
    assert events[-1].text == "I asked your manager; waiting for approval."  # asked once more
    assert len(model.requests) == 2
    assert model.requests[1].contents[-1].function_responses[0].response["status"] == "pending"
    stored_call = next(e for e in await stored(runner, sid) if e.function_calls)
    assert stored_call.long_running_tool_ids == ["lr1"]  # persisted with the event

    answer = Content("user", [Part(function_response=FunctionResponse(
        id=call.id, name=call.name,
        response={"status": "approved", "ticketId": "reimbursement-ticket-001"}))])
    events = [e for e in await collect(runner, sid, answer) if not e.partial]
    assert events[-1].text == "Approved and reimbursed."
    seen = model.requests[2].contents
    assert [r.response["status"] for c in seen for r in c.function_responses][:1] == [
        "approved"]  # the real result took the ticket's place
    with pytest.raises(UserError, match="no pending long-running call"):
        await collect(runner, sid, answer)  # answered: the ledger closed it
