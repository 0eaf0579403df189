"""ADK samples that need nothing beyond the ADK names: run for several turns on a scripted
model (each sample's module is imported in the test, so a missing feature fails the test
that needs it, not the collection).

The samples are ``tests/adk_samples/<name>.py``: ADK's code shapes with only the import
block headwater's (see each file's header and docs/coming-from-adk.md).
"""

from __future__ import annotations


from headwater.run_config import RunConfig, StreamingMode
from headwater.testing import ScriptedModel
from headwater.types import Blob, Part

from .conftest import runner_for, sample, say, script


async def test_quickstart_answers_weather_then_time_over_two_turns() -> None:
    quickstart = sample("quickstart")
    model = script(ScriptedModel()
                   .call("get_weather", {"city": "New York"}).reply("Sunny in New York.")
                   .call("get_current_time", {"city": "Paris"}).reply("No time for Paris.")
                   .reply("Bye."), quickstart.root_agent)
    runner, sid = await runner_for(quickstart.root_agent, "quickstart")

    first = await say(runner, sid, "What is the weather in New York?")
    assert first[1].function_responses[0].response == {
        "status": "success", "report": "Sunny, 25 degrees Celsius in New York."}
    assert first[-1].text == "Sunny in New York."
    second = await say(runner, sid, "And the time in Paris?")
    assert second[1].function_responses[0].response == {
        "status": "error", "error_message": "No time zone for Paris."}
    assert (await say(runner, sid, "Thanks"))[-1].text == "Bye."
    request = model.requests[-1]
    assert [t.name for t in request.tools] == ["get_weather", "get_current_time"]
    assert request.system_instruction == "Answer questions about the time and weather in a city."
    assert len(request.contents) == 9  # three turns: 1 + 4 + 4 user, call, result, answer


async def test_non_llm_sequential_says_1_then_2_each_turn() -> None:
    seq = sample("non_llm_sequential")
    model = script(ScriptedModel().reply("1").reply("2").reply("1").reply("2"),
                   seq.sub_agent_1, seq.sub_agent_2)
    runner, sid = await runner_for(seq.root_agent, "seq")
    for _ in range(2):
        events = await say(runner, sid, "go")
        assert [(e.author, e.text) for e in events] == [("sub_agent_1", "1"),
                                                        ("sub_agent_2", "2")]
    assert [r.system_instruction for r in model.requests] == ["JUST SAY 1.", "JUST SAY 2."] * 2


async def test_simple_sequential_rolls_then_checks_the_roll() -> None:
    seq = sample("simple_sequential_agent")
    model = script(ScriptedModel()
                   .call("roll_die", {"sides": 6}).reply("Rolled it.")
                   .call("check_prime", {"nums": [5]}).reply("5 is prime."),
                   seq.roll_agent, seq.prime_agent)
    runner, sid = await runner_for(seq.root_agent, "seq")
    events = await say(runner, sid, "Roll a 6-sided die and check it")
    assert [e.author for e in events] == ["roll_agent"] * 3 + ["prime_agent"] * 3
    roll = events[1].function_responses[0].response["result"]
    assert 1 <= roll <= 6
    assert events[4].function_responses[0].response == {"result": "5 are prime numbers."}
    assert [t.name for t in model.requests[2].tools] == ["check_prime"]


async def test_workflow_agent_seq_passes_code_through_state_over_two_turns() -> None:
    seq = sample("workflow_agent_seq")
    agents = (seq.code_writer_agent, seq.code_reviewer_agent, seq.code_refactorer_agent)
    model = script(ScriptedModel()
                   .reply("def quicksort(xs): ...").reply("- add a docstring")
                   .reply("def quicksort(xs):\n    'Sort.'")
                   .reply("def bubble(xs): ...").reply("No major issues found.")
                   .reply("def bubble(xs): ..."), *agents)
    runner, sid = await runner_for(seq.root_agent, "my_app")

    await say(runner, sid, "Write a python function to do quicksort.")
    session = await runner.session_service.get_session(app_name="my_app", user_id="user1",
                                                       session_id=sid)
    assert session is not None
    assert session.state == {"generated_code": "def quicksort(xs): ...",
                             "review_comments": "- add a docstring",
                             "refactored_code": "def quicksort(xs):\n    'Sort.'"}
    assert model.requests[1].system_instruction == (
        "Review this code:\ndef quicksort(xs): ...\nAnswer with a bulleted list.")
    assert "- add a docstring" in (model.requests[2].system_instruction or "")

    await say(runner, sid, "Write another python function to do bubble sort.")
    session = await runner.session_service.get_session(app_name="my_app", user_id="user1",
                                                       session_id=sid)
    assert session is not None and session.state["review_comments"] == "No major issues found."


async def test_artifact_save_text_keeps_each_query_as_a_version() -> None:
    saver = sample("artifact_save_text")
    script(ScriptedModel()
           .call("log_query", {"query": "first question"}).reply("kk, I've logged.")
           .call("log_query", {"query": "second question"}).reply("kk, I've logged."),
           saver.root_agent)
    runner, sid = await runner_for(saver.root_agent, "log")
    for version, text in enumerate(("first question", "second question")):
        events = await say(runner, sid, text)
        assert events[1].actions.artifact_delta == {"query": version}
        assert events[-1].text == "kk, I've logged."
    assert runner.artifact_service is not None
    assert await runner.artifact_service.load_artifact(
        app_name="log", user_id="user1", session_id=sid, filename="query", version=0
    ) == Part(inline_data=Blob(mime_type="text/plain", data=b"first question"))
    assert await runner.artifact_service.list_versions(
        app_name="log", user_id="user1", session_id=sid, filename="query") == [0, 1]


async def test_agent_tool_streams_the_research_agents_events_and_skips_summarization(
        ) -> None:
    streaming = sample("agent_tool_event_streaming")
    model = script(ScriptedModel()
                   .call("research_agent", {"request": "history of AI"})
                   .reply("Step 1: outline.", " Step 2: findings.", " Summary: long story.")
                   .call("research_agent", {"request": "and of Python"})
                   .reply("Summary: Guido, 1991."),
                   streaming.research_agent, streaming.coordinator_agent)
    runner, sid = await runner_for(streaming.root_agent, "stream")
    # `adk web`, where the sample is meant to be watched, runs with SSE streaming.
    sse = RunConfig(streaming_mode=StreamingMode.SSE)
    for asked, summary in (("Research the history of AI", "Summary: long story."),
                           ("And Python?", "Summary: Guido, 1991.")):
        events = [e for e in await say(runner, sid, asked, run_config=sse) if not e.partial]
        # The call, the research agent's own answer as it came, then the result ends the turn.
        assert events[0].author == "coordinator_agent" and events[0].function_calls
        inner = [e for e in events if e.author == "research_agent"]
        assert inner, [e.author for e in events]
        assert inner[-1].text.endswith(summary)
        assert events[-1].function_responses and events[-1].actions.skip_summarization
        assert summary in str(events[-1].function_responses[0].response)
        assert events[-1].is_final_response()
    assert len(model.requests) == 4  # the coordinator is not asked to summarise
