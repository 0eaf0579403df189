"""ADK samples that lean on ADK's agent behaviours: callbacks around the agent, the
session's state as the callbacks see it, model inheritance and global_instruction,
the long-running rule, a live run — several turns each on a scripted model."""

from __future__ import annotations



from headwater.run_config import RunConfig
from headwater.runner import InMemoryRunner
from headwater.testing import ScriptedModel, VirtualClock
from headwater.testing.harness import LiveHarness
from headwater.types import Content, FunctionResponse, Part

from .conftest import runner_for, sample, say, script


async def test_hello_world_main_runs_as_written() -> None:
    main = sample("hello_world_main")
    model = script(ScriptedModel()
                   .reply("Hello!")
                   .call("roll_die", {"sides": 100}).reply("You rolled it.")
                   .call("roll_die", {"sides": 100}).reply("Rolled again.")
                   .reply("Two numbers.")
                   .reply("Got your file."), main.agent.root_agent)
    printed: list[str] = []
    await main.main(printed)  # its own asserts check the rolls in state

    # genai's Part leaves an unset thought flag out; headwater's is False
    assert printed[0] == ("** User says: "
                          "{'role': 'user', 'parts': [{'text': 'Hi', 'thought': False}]}")
    assert "** hello_world_agent: Hello!" in printed
    uploaded = model.requests[-1].contents[-1]
    assert uploaded.parts[0].text is not None
    name = uploaded.parts[0].text.split(":")[1].split(".")[0].strip()
    assert uploaded.parts[0].text == f"Uploaded file: {name}. It is saved into artifacts"
    assert printed[-1] == str([name]) and name.startswith("artifact_") and name.endswith("_0")


async def test_hello_world_rolls_into_state_and_keeps_an_uploaded_blob() -> None:
    hello = sample("hello_world")
    model = script(ScriptedModel()
                   .reply("Hello!")
                   .call("roll_die", {"sides": 100}).reply("You rolled it.")
                   .call("roll_die", {"sides": 100})
                   .call("check_prime", {"nums": [2, 3]}).reply("2, 3 are prime.")
                   .reply("Got your file."), hello.root_agent)
    runner, sid = await runner_for(hello.root_agent, "my_app")

    assert [e.text for e in await say(runner, sid, "Hi")] == ["Hello!"]
    await say(runner, sid, "Roll a die with 100 sides")
    events = await say(runner, sid, "Roll again and check primes")
    assert events[-2].function_responses[0].response == {"result": "2, 3 are prime numbers."}
    session = await runner.session_service.get_session(app_name="my_app", user_id="user1",
                                                       session_id=sid)
    assert session is not None and len(session.state["rolls"]) == 2
    assert all(1 <= roll <= 100 for roll in session.state["rolls"])
    assert model.requests[0].generate_content_config == \
        hello.root_agent.generate_content_config

    blob = Content(role="user", parts=[Part.from_bytes(data=b"Hi bytes",
                                                       mime_type="text/plain")])
    events = [e async for e in runner.run_async(
        user_id="user1", session_id=sid, new_message=blob,
        run_config=RunConfig(save_input_blobs_as_artifacts=True))]
    name = f"artifact_{events[0].invocation_id}_0"
    assert model.requests[-1].contents[-1] == Content(role="user", parts=[
        Part(text=f"Uploaded file: {name}. It is saved into artifacts")])
    assert runner.artifact_service is not None
    assert await runner.artifact_service.list_artifact_keys(
        app_name="my_app", user_id="user1", session_id=sid) == [name]


async def test_callbacks_run_in_adk_order_and_their_values_count() -> None:
    callbacks = sample("callbacks")
    callbacks.calls.clear()
    model = script(ScriptedModel().call("roll_die", {"sides": 6}).reply("Rolled.")
                   .reply("Hi again."), callbacks.root_agent)
    runner, sid = await runner_for(callbacks.root_agent, "my_app")

    events = await say(runner, sid, "Roll a die with 6 sides")
    assert callbacks.calls == [
        "before_agent_cb1", "before_agent_cb2", "before_model", "after_model",
        "before_tool_cb1", "before_tool_cb2", "after_tool_cb1", "after_tool_cb2",
        "before_model", "after_model", "after_agent_cb1", "after_agent_cb2"]
    # after_tool_cb2's value is the result, as it returned it, with the tool's raw value.
    result = events[1].function_responses[0].response
    assert result["test"] == "after_tool_cb2" and 1 <= result["response"] <= 6
    # after_agent_cb2's content is the agent's last event, and the next turn's model sees it.
    assert (events[-1].author, events[-1].text) == ("data_processing_agent",
                                                    "(stopped) after_agent_cb2")
    await say(runner, sid, "Hi")
    assert model.requests[-1].contents[-2] == Content(
        role="model", parts=[Part(text="(stopped) after_agent_cb2")])


async def test_session_state_agent_sees_state_cached_then_stored_and_replies_once() -> None:
    state_agent = sample("session_state_agent")
    state_agent.checked.clear()
    model = script(ScriptedModel().reply("I answer once."), state_agent.root_agent)
    runner, sid = await runner_for(state_agent.root_agent, "my_app")

    events = await say(runner, sid, "hi")
    assert state_agent.checked == ["before_agent", "before_model", "after_model",
                                   "after_agent"]
    assert events[-1].text == "I answer once." or events[-1].actions.state_delta
    session = await runner.session_service.get_session(app_name="my_app", user_id="user1",
                                                       session_id=sid)
    assert session is not None
    assert session.state == {"before_agent": 1, "before_model": 1, "after_model": 1,
                             "after_agent": 1}
    second = await say(runner, sid, "and again?")
    assert [e.text for e in second] == ["Sorry, I can only reply once."]
    assert len(model.requests) == 1


async def test_hello_world_ma_sub_agents_inherit_the_model_and_the_global_instruction(
        ) -> None:
    ma = sample("hello_world_ma")
    model = script(ScriptedModel()
                   .call("transfer_to_agent", {"agent_name": "roll_agent"})
                   .call("roll_die", {"sides": 6}).reply("I rolled a 3.")
                   .call("transfer_to_agent", {"agent_name": "prime_agent"})
                   .call("check_prime", {"nums": [3]}).reply("3 is prime."),
                   ma.root_agent)
    runner, sid = await runner_for(ma.root_agent, "ma")

    events = await say(runner, sid, "Roll a 6-sided die")
    assert events[-1].author == "roll_agent" and events[-1].text == "I rolled a 3."
    events = await say(runner, sid, "Is it prime?")  # roll_agent has the turn now
    assert events[-1].author == "prime_agent" and events[-1].text == "3 is prime."
    for request in model.requests:  # every agent of the tree: the root's global instruction
        assert (request.system_instruction or "").startswith(
            "You are DicePrimeBot, ready to roll dice and check prime numbers.")
    root_request = model.requests[0].system_instruction or ""
    assert "Roll a 6-sided die." in root_request and "I rolled a 4 for you." in root_request


async def test_human_in_loop_pending_then_approved() -> None:
    hil = sample("human_in_loop")
    model = script(ScriptedModel()
                   .call("reimburse", {"purpose": "meals", "amount": 50}).reply("Done: $50.")
                   .call("ask_for_approval", {"purpose": "travel", "amount": 200})
                   .reply("Your request is pending approval.")
                   .call("reimburse", {"purpose": "travel", "amount": 200})
                   .reply("Approved and reimbursed."), hil.root_agent)
    runner, sid = await runner_for(hil.root_agent, "human_in_the_loop")

    events = await say(runner, sid, "Please reimburse $50 for meals")
    assert events[-1].text == "Done: $50." and not events[0].long_running_tool_ids

    events = await say(runner, sid, "Please reimburse $200 for conference travel")
    call = events[0].function_calls[0]
    assert list(events[0].long_running_tool_ids) == [call.id]
    pending = events[1].function_responses[0]
    assert (pending.id, pending.response["status"]) == (call.id, "pending")
    # ADK: the tool answered, so the model is asked again in the same turn.
    assert events[-1].text == "Your request is pending approval."

    approved = FunctionResponse(id=call.id, name=call.name, response={
        "status": "approved", "ticketId": pending.response["ticketId"]})
    after = [e async for e in runner.run_async(
        user_id="user1", session_id=sid,
        new_message=Content(role="user", parts=[Part(function_response=approved)]))]
    assert after[-1].text == "Approved and reimbursed."
    # The model sees the approval as the call's result (the pending ticket is gone).
    seen = [p.function_response for c in model.requests[-2].contents for p in c.parts
            if p.function_response is not None and p.function_response.id == call.id]
    assert seen == [approved]


async def test_live_bidi_streaming_agent_rolls_over_two_live_turns() -> None:
    live = sample("live_bidi_streaming_agent")
    script(ScriptedModel()
           .call("roll_die", {"sides": 6}).reply("You rolled.")
           .call("check_prime", {"nums": [2]}).reply("2 is prime."), live.root_agent)
    clock = VirtualClock()
    runner = InMemoryRunner(agent=live.root_agent, app_name="live", clock=clock)
    await runner.session_service.create_session(app_name="live", user_id="u",
                                                session_id="s")
    async with LiveHarness(runner, clock) as harness:
        await harness.say("Roll a 6-sided die")
        await harness.say("Is 2 prime?")
    assert "You rolled." in harness.texts() and "2 is prime." in harness.texts()
    assert harness.responses("check_prime") == [{"result": "2 are prime numbers."}]
    session = await runner.session_service.get_session(app_name="live", user_id="u",
                                                       session_id="s")
    assert session is not None and len(session.state["rolls"]) == 1
