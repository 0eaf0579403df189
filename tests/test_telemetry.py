"""OpenTelemetry traces of a run (headwater.telemetry): the GenAI spans, nested, and no
payload text unless capture is on. Spans go to the SDK's in-memory exporter through a
provider given to headwater alone (the global provider is never set here)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from headwater import Agent, RunConfig, Runner, SequentialAgent, StreamingMode
from headwater.agents.base import BaseAgent
from headwater.core import telemetry
from headwater.errors import ProviderTimeout, SessionBusyError
from headwater.models import LlmRequest
from headwater.sessions import InMemorySessionService
from headwater.settings import Settings
from headwater.testing import LiveHarness, ScriptedCall, ScriptedModel, ScriptedTurn, wait_until
from headwater.types import Usage

QUESTION = "Where is my parcel 7731?"
ARGS_TEXT = "parcel-7731-Zanzibar"
RESULT_TEXT = "left the Quillport depot"
ANSWER = ("Your parcel ", "left the depot ", "this morning.")
SYSTEM = "You are the courier's helper."
SECRETS = (QUESTION, ARGS_TEXT, RESULT_TEXT, "this morning", SYSTEM)
USAGE = (Usage(input_tokens=40, output_tokens=9, total_tokens=49),
         Usage(input_tokens=71, output_tokens=14, total_tokens=85))


seen_in_tool: list[Any] = []


def track_parcel(parcel: str) -> dict[str, str]:
    """Where a parcel is.

    Args:
        parcel: the parcel's reference.
    """
    seen_in_tool.append(trace.get_current_span())
    return {"where": RESULT_TEXT, "parcel": parcel}


def courier(model: ScriptedModel) -> Agent:
    return Agent(name="courier", model=model, tools=[track_parcel], instruction=SYSTEM)


def parcel_model() -> ScriptedModel:
    return (ScriptedModel(model="scripted-courier")
            .call("track_parcel", {"parcel": ARGS_TEXT}, call_id="call-7", usage=USAGE[0],
                  finish_reason="tool_calls")
            .reply(*ANSWER, usage=USAGE[1]))


async def run(agent: BaseAgent, settings: Settings | None = None,
              mode: StreamingMode = StreamingMode.SSE) -> Any:
    runner = Runner(agent=agent, app_name="post", session_service=InMemorySessionService(),
                    settings=settings or Settings(), auto_create_session=True)
    return await runner.run_once(user_id="u1", new_message=QUESTION,
                                 run_config=RunConfig(streaming_mode=mode))


def by_operation(spans: Sequence[ReadableSpan]) -> dict[str, list[ReadableSpan]]:
    found: dict[str, list[ReadableSpan]] = {}
    for span in sorted(spans, key=lambda s: s.start_time or 0):
        assert span.attributes is not None
        found.setdefault(str(span.attributes["gen_ai.operation.name"]), []).append(span)
    return found


def texts_of(spans: Sequence[ReadableSpan]) -> str:
    """Every attribute and event value of every span, as one text to search."""
    values: list[str] = []
    for span in spans:
        values += [span.name, *(str(v) for v in (span.attributes or {}).values())]
        for event in span.events:
            values += [event.name, *(str(v) for v in (event.attributes or {}).values())]
    return "\n".join(values)


async def test_a_run_with_a_tool_call_is_one_agent_span_over_chat_and_tool_spans(
        exporter: InMemorySpanExporter) -> None:
    seen_in_tool.clear()
    result = await run(courier(parcel_model()))
    assert result.text == "".join(ANSWER)
    spans = exporter.get_finished_spans()
    ops = by_operation(spans)
    assert sorted((op, len(found)) for op, found in ops.items()) == [
        ("chat", 2), ("execute_tool", 1), ("invoke_agent", 1)]
    (agent,), (tool,), chats = ops["invoke_agent"], ops["execute_tool"], ops["chat"]

    # nested: the run is the root; model calls and the tool call are its children, in order
    assert agent.parent is None and agent.context is not None
    for child in (*chats, tool):
        assert child.parent is not None and child.context is not None
        assert child.parent.span_id == agent.context.span_id
        assert child.context.trace_id == agent.context.trace_id
    assert [s.name for s in sorted(spans, key=lambda s: s.start_time or 0)] == [
        "invoke_agent courier", "chat scripted-courier", "execute_tool track_parcel",
        "chat scripted-courier"]
    assert agent.kind is trace.SpanKind.INTERNAL and chats[0].kind is trace.SpanKind.CLIENT
    # the tool ran with its span current (its own instrumented calls nest there)
    assert [s.get_span_context() for s in seen_in_tool] == [tool.context]
    assert trace.get_current_span() is trace.INVALID_SPAN  # nothing leaked to the caller

    assert agent.attributes == {
        "gen_ai.operation.name": "invoke_agent", "gen_ai.provider.name": "_OTHER",
        "gen_ai.agent.name": "courier", "gen_ai.conversation.id": result.session_id,
        "gen_ai.request.model": "scripted-courier",
        "headwater.invocation_id": result.invocation_id,
        "gen_ai.usage.input_tokens": result.usage.input_tokens,
        "gen_ai.usage.output_tokens": result.usage.output_tokens}
    assert (result.usage.input_tokens, result.usage.output_tokens) == (111, 23)
    for chat, usage, reason in zip(chats, USAGE, ("tool_calls", "stop"), strict=True):
        attributes = dict(chat.attributes or {})
        ttfc = attributes.pop("gen_ai.response.time_to_first_chunk")
        assert isinstance(ttfc, float) and ttfc >= 0
        assert attributes == {
            "gen_ai.operation.name": "chat", "gen_ai.provider.name": "_OTHER",
            "gen_ai.agent.name": "courier",
            "gen_ai.request.model": "scripted-courier", "gen_ai.request.stream": True,
            "gen_ai.response.model": "scripted-courier",
            "gen_ai.response.finish_reasons": (reason,),
            "gen_ai.usage.input_tokens": usage.input_tokens,
            "gen_ai.usage.output_tokens": usage.output_tokens}
    assert tool.attributes == {
        "gen_ai.operation.name": "execute_tool", "gen_ai.agent.name": "courier",
        "gen_ai.tool.name": "track_parcel", "gen_ai.tool.call.id": "call-7",
        "gen_ai.tool.type": "function"}
    assert all(s.status.status_code is StatusCode.UNSET for s in spans)

    # no payload: not the question, the instruction, the arguments, the result, the answer
    text = texts_of(spans)
    assert [secret for secret in SECRETS if secret in text] == []


async def test_with_capture_on_the_spans_hold_the_payloads(
        exporter: InMemorySpanExporter) -> None:
    await run(courier(parcel_model()), Settings(otel_capture_content=True))
    ops = by_operation(exporter.get_finished_spans())
    (tool,), (first, second) = ops["execute_tool"], ops["chat"]
    assert first.attributes is not None and second.attributes is not None
    assert json.loads(str(first.attributes["gen_ai.system_instructions"])) == [
        {"type": "text", "content": SYSTEM}]
    assert json.loads(str(first.attributes["gen_ai.input.messages"])) == [
        {"role": "user", "parts": [{"type": "text", "content": QUESTION}]}]
    assert json.loads(str(first.attributes["gen_ai.output.messages"])) == [
        {"role": "assistant", "finish_reason": "tool_calls", "parts": [
            {"type": "tool_call", "id": "call-7", "name": "track_parcel",
             "arguments": {"parcel": ARGS_TEXT}}]}]
    asked = json.loads(str(second.attributes["gen_ai.input.messages"]))
    assert [m["role"] for m in asked] == ["user", "assistant", "tool"]
    assert asked[2]["parts"] == [{"type": "tool_call_response", "id": "call-7",
                                  "response": {"where": RESULT_TEXT, "parcel": ARGS_TEXT}}]
    assert json.loads(str(second.attributes["gen_ai.output.messages"])) == [
        {"role": "assistant", "finish_reason": "stop",
         "parts": [{"type": "text", "content": "".join(ANSWER)}]}]
    assert tool.attributes is not None
    assert json.loads(str(tool.attributes["gen_ai.tool.call.arguments"])) == {"parcel": ARGS_TEXT}
    assert json.loads(str(tool.attributes["gen_ai.tool.call.result"])) == {
        "where": RESULT_TEXT, "parcel": ARGS_TEXT}


async def test_a_failed_model_call_marks_its_span_and_the_run_failed(
        exporter: InMemorySpanExporter) -> None:
    model = ScriptedModel().add(ScriptedTurn(text=("Your par",), raise_after=1,
                                             raise_error=ProviderTimeout("no data for 30 s")))
    result = await run(courier(model))
    assert result.error_code == "provider_timeout"
    ops = by_operation(exporter.get_finished_spans())
    (agent,), (chat,) = ops["invoke_agent"], ops["chat"]
    for span in (agent, chat):
        assert span.status.status_code is StatusCode.ERROR
        assert span.attributes is not None
        assert span.attributes["error.type"] == "provider_timeout"
    assert chat.parent is not None and agent.context is not None
    assert chat.parent.span_id == agent.context.span_id
    assert "no data for 30 s" not in texts_of([agent, chat])  # the provider's words stay out


async def test_a_tool_error_result_marks_the_tool_span_failed(
        exporter: InMemorySpanExporter) -> None:
    def broken(parcel: str) -> str:
        """Always fails.

        Args:
            parcel: a parcel.
        """
        raise RuntimeError(f"depot offline for {parcel}")

    model = ScriptedModel().call("broken", {"parcel": ARGS_TEXT}).reply("Sorry.")
    result = await run(Agent(name="courier", model=model, tools=[broken]))
    assert result.text == "Sorry."
    ops = by_operation(exporter.get_finished_spans())
    (tool,), (agent,) = ops["execute_tool"], ops["invoke_agent"]
    assert tool.status.status_code is StatusCode.ERROR
    assert tool.attributes is not None and tool.attributes["error.type"] == "tool_error"
    assert agent.status.status_code is StatusCode.UNSET  # the model saw the error; the run went on
    assert "depot offline" not in texts_of([tool])


async def test_a_call_without_streaming_records_its_first_chunk_too(
        exporter: InMemorySpanExporter) -> None:
    await run(courier(ScriptedModel().reply("Hello.")), mode=StreamingMode.NONE)
    (chat,) = by_operation(exporter.get_finished_spans())["chat"]
    assert chat.attributes is not None
    assert chat.attributes["gen_ai.request.stream"] is False
    assert isinstance(chat.attributes["gen_ai.response.time_to_first_chunk"], float)


async def test_without_a_provider_of_ours_or_a_global_one_nothing_is_recorded() -> None:
    # The API's no-op tracer: the run works and its hooks cost a no-op object each.
    result = await run(courier(parcel_model()))
    assert result.text == "".join(ANSWER)


def test_a_global_provider_set_after_the_first_run_traces_the_next() -> None:
    """A run before any provider is set spends nothing on spans; one set afterwards with
    the API's own ``set_tracer_provider`` (once per process: a child) gets the runs that
    start ``PROVIDER_RECHECK`` after the last question (a run at once may go untraced)."""
    script = textwrap.dedent("""
        import asyncio
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
            InMemorySpanExporter)
        from headwater import Agent, Runner, telemetry
        from headwater.testing import ScriptedModel

        async def main():
            model = ScriptedModel().reply("one").reply("two")
            runner = Runner(agent=Agent(name="a", model=model), app_name="t",
                            auto_create_session=True)
            first = await runner.run_once(user_id="u", new_message="hi")
            exporter = InMemorySpanExporter()
            provider = TracerProvider()
            provider.add_span_processor(SimpleSpanProcessor(exporter))
            trace.set_tracer_provider(provider)
            await asyncio.sleep(telemetry.PROVIDER_RECHECK + 0.1)
            second = await runner.run_once(user_id="u", new_message="hi")
            print(first.text, second.text, sorted(s.name for s in exporter.get_finished_spans()))

        asyncio.run(main())
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "one two ['chat scripted', 'invoke_agent a']"


def test_telemetry_reads_only_the_public_api_of_opentelemetry() -> None:
    """Whether a provider is set is asked of the API's public ``get_tracer_provider()``:
    telemetry.py names no private attribute of an OpenTelemetry module (``_otel`` and
    ``_otel_context`` hold them), directly or through ``getattr``."""
    source = Path(telemetry.__file__).read_text(encoding="utf-8")
    handles = {"_otel", "_otel_context"}
    private = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in handles and node.attr.startswith("_")):
            private.append(f"line {node.lineno}: {node.value.id}.{node.attr}")
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr", "setattr") and node.args
                and isinstance(node.args[0], ast.Name) and node.args[0].id in handles):
            private.append(f"line {node.lineno}: {node.func.id}({node.args[0].id}, ...)")
    assert "get_tracer_provider" in source and "ProxyTracerProvider" in source
    assert not private, private


def test_without_the_api_installed_nothing_is_imported_and_runs_work() -> None:
    script = textwrap.dedent("""
        import asyncio, sys
        sys.modules["opentelemetry"] = None  # as if the extra were not installed
        from headwater import Agent, Runner, telemetry
        from headwater.testing import ScriptedModel

        async def main():
            model = ScriptedModel().call("echo", {"x": 1}).reply("done")
            def echo(x: int) -> int:
                '''Echo.

                Args:
                    x: a number.
                '''
                return x
            runner = Runner(agent=Agent(name="a", model=model, tools=[echo]), app_name="t",
                            auto_create_session=True)
            result = await runner.run_once(user_id="u", new_message="hi")
            assert result.text == "done", result
            with telemetry.remote_parent([(b"traceparent", b"00-" + b"1" * 32 + b"-"
                                           + b"2" * 16 + b"-01")]):
                pass
            print("ok", [m for m in sys.modules if m.startswith("opentelemetry.")])

        asyncio.run(main())
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok []"


async def test_a_live_run_traces_each_model_turn_and_tool_call(
        exporter: InMemorySpanExporter) -> None:
    def respond(request: LlmRequest) -> ScriptedTurn:
        if request.contents[-1].function_responses:
            return ScriptedTurn(text=["It ", "left."], usage=USAGE[1])
        return ScriptedTurn(calls=[ScriptedCall("track_parcel", {"parcel": ARGS_TEXT},
                                                id="call-7")], usage=USAGE[0])

    model = ScriptedModel(model="scripted-courier", responder=respond)
    runner = Runner(agent=courier(model), app_name="post", auto_create_session=True)
    async with LiveHarness(runner) as live:
        await live.say(QUESTION)
        await wait_until(lambda: live.texts()[-1:] == ["It left."])
    await wait_until(lambda: len(by_operation(exporter.get_finished_spans())) == 3)
    spans = exporter.get_finished_spans()
    ops = by_operation(spans)
    (agent,), (tool,), chats = ops["invoke_agent"], ops["execute_tool"], ops["chat"]
    assert len(chats) == 2 and agent.context is not None
    for child in (*chats, tool):
        assert child.parent is not None and child.parent.span_id == agent.context.span_id
    for chat, usage in zip(chats, USAGE, strict=True):
        assert chat.attributes is not None
        assert chat.attributes["gen_ai.usage.input_tokens"] == usage.input_tokens
        assert "gen_ai.response.time_to_first_chunk" not in chat.attributes  # no request
    assert agent.attributes is not None
    assert agent.attributes["gen_ai.usage.input_tokens"] == 111
    assert [secret for secret in SECRETS if secret in texts_of(spans)] == []


async def test_a_refused_run_and_a_stopped_one_end_their_spans_with_the_reason(
        exporter: InMemorySpanExporter) -> None:
    runner = Runner(agent=courier(ScriptedModel().reply("Your ", "parcel ", "is late.")),
                    app_name="post", settings=Settings(session_lock_timeout=0))
    session = await runner.create_session(user_id="u1")
    sse = RunConfig(streaming_mode=StreamingMode.SSE)
    async with runner.run_async(user_id="u1", session_id=session.id, new_message=QUESTION,
                                run_config=sse) as first:
        shown = await anext(aiter(first))
        assert shown.partial and shown.text == "Your "  # the model call is under way
        with pytest.raises(SessionBusyError):
            await runner.run_async(user_id="u1", session_id=session.id,
                                   new_message="and now?", run_config=sse).start()
    ops = by_operation(exporter.get_finished_spans())
    refused, stopped = ops["invoke_agent"][1], ops["invoke_agent"][0]
    (chat,) = ops["chat"]
    assert refused.attributes is not None and stopped.attributes is not None
    assert refused.attributes["error.type"] == "session_busy"
    assert stopped.attributes["error.type"] == "cancelled"
    assert chat.attributes is not None and chat.attributes["error.type"] == "cancelled"
    assert chat.parent is not None and stopped.context is not None
    assert chat.parent.span_id == stopped.context.span_id
    assert {s.status.status_code for s in (refused, stopped, chat)} == {StatusCode.ERROR}


async def test_a_tree_of_agents_is_one_run_span_whose_children_name_their_agent(
        exporter: InMemorySpanExporter) -> None:
    desk = ScriptedModel(model="desk-model").call("transfer_to_agent",
                                                  {"agent_name": "courier"}, call_id="t1")
    courier_model = ScriptedModel(model="courier-model").reply(*ANSWER)
    root = Agent(name="desk", model=desk, description="Front desk.", sub_agents=[
        Agent(name="courier", model=courier_model, description="Parcels.")])
    result = await run(root)
    assert result.text == "".join(ANSWER)
    spans = sorted(exporter.get_finished_spans(), key=lambda s: s.start_time or 0)
    assert [(s.name, (s.attributes or {}).get("gen_ai.agent.name")) for s in spans] == [
        ("invoke_agent desk", "desk"), ("chat desk-model", "desk"),
        ("execute_tool transfer_to_agent", "desk"), ("chat courier-model", "courier")]
    run_span = spans[0]
    assert run_span.context is not None and run_span.attributes is not None
    assert all(s.parent is not None and s.parent.span_id == run_span.context.span_id
               for s in spans[1:])
    assert run_span.attributes["gen_ai.request.model"] == "desk-model"  # the root's model


async def test_a_workflow_root_has_no_model_of_its_own(exporter: InMemorySpanExporter) -> None:
    steps = [Agent(name="first", model=ScriptedModel(model="m1").reply("One.")),
             Agent(name="second", model=ScriptedModel(model="m2").reply("Two."))]
    await run(SequentialAgent(name="pipeline", sub_agents=steps))
    ops = by_operation(exporter.get_finished_spans())
    (agent,) = ops["invoke_agent"]
    assert agent.name == "invoke_agent pipeline" and agent.attributes is not None
    assert "gen_ai.request.model" not in agent.attributes
    assert [(c.attributes or {}).get("gen_ai.agent.name") for c in ops["chat"]] == [
        "first", "second"]


async def test_the_same_hooks_record_the_inspector_s_trace_beside_the_spans(
        exporter: InMemorySpanExporter) -> None:
    """One place records both: a run inside ``recording`` has its OpenTelemetry spans and the
    run inspector's record (docs/inspector.md), the same calls in the same order."""
    from headwater.core.trace_record import TraceRecord

    seen_in_tool.clear()
    record = TraceRecord()
    runner = Runner(agent=courier(parcel_model()), app_name="post",
                    session_service=InMemorySessionService(), auto_create_session=True)
    stream = runner.run_async(user_id="u1", session_id="s1", new_message=QUESTION,
                              run_config=RunConfig(streaming_mode=StreamingMode.SSE))
    with telemetry.recording(record):
        await stream.start()
    async for _ in stream:
        pass
    spans = sorted(exporter.get_finished_spans(), key=lambda s: s.start_time or 0)
    assert [s.name for s in spans] == ["invoke_agent courier", "chat scripted-courier",
                                       "execute_tool track_parcel", "chat scripted-courier"]
    recorded = record.as_json()["spans"]
    assert [(s["kind"], s["name"]) for s in recorded] == [
        ("agent", "courier"), ("model", "scripted-courier"), ("tool", "track_parcel"),
        ("model", "scripted-courier")]
    assert [s["attributes"].get("input_tokens") for s in recorded[1::2]] == [40, 71]
    tool_span = next(s for s in spans if s.name.startswith("execute_tool"))
    assert [c.get_span_context() for c in seen_in_tool] == [tool_span.context]  # still current
    assert record.ended and len(exporter.get_finished_spans()) == 4
