"""Transfer in live runs (issue 21): the old connection closes, the target's opens on the history.

Emulated over ``ScriptedModel`` and native over ``FakeLiveProvider`` (Gemini Live and
OpenAI Realtime): a coordinator hands the user to billing on the first message,
billing answers over its own connection, events after the transfer are
billing's, and the session's next turn (live or not) goes to billing.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import pytest

from agents.helpers import assert_valid_history, content_texts
from headwater import Agent, Event, RunConfig, Runner, ToolContext, tool
from headwater.models import BaseLlm, LlmRequest, LlmResponse
from headwater.models.connection import EmulatedLlmConnection
from headwater.models.gemini_live import GeminiLiveModel
from headwater.models.openai_realtime import OpenAIRealtimeModel
from headwater.sessions.ledger import CallLedger
from headwater.testing import (
    FakeLiveProvider,
    LiveHarness,
    LiveSocketRecord,
    ScriptedCall,
    ScriptedModel,
    ScriptedTurn,
    wait_until,
)
from headwater.tools import approval_response
from headwater.types import Content

QUESTION = "Is my invoice paid?"
ROUTE = "Route the user."
BILLING = "You handle billing."
CONTEXT = [
    f"user: {QUESTION}",
    "user: For context: | [coordinator] called tool `transfer_to_agent` with parameters: "
    '{"agent_name": "billing"}',
    "user: For context: | [coordinator] `transfer_to_agent` tool returned result: "
    '{"result": null}',
]


def tree(coordinator: BaseLlm, billing: BaseLlm, *, billing_tools: list[Any] | None = None,
         coordinator_tools: list[Any] | None = None, **billing_kw: Any) -> Agent:
    return Agent(name="coordinator", model=coordinator, instruction=ROUTE,
                 description="Front desk.", tools=coordinator_tools or [], sub_agents=[
                     Agent(name="billing", model=billing, instruction=BILLING,
                           description="Invoices and payments.", tools=billing_tools or [],
                           **billing_kw)])


class Live(LiveHarness):
    """The harness over a tree, on a real clock, with an optional run config."""

    def __init__(self, runner: Runner, config: RunConfig | None = None) -> None:
        super().__init__(runner, close_timeout=10.0)
        self.config = config

    async def __aenter__(self) -> Live:
        async def consume() -> None:
            async with self.runner.run_live(user_id=self.user_id, session_id=self.session_id,
                                            live_request_queue=self.queue,
                                            run_config=self.config) as stream:
                async for event in stream:
                    self.events.append(event)

        self.task = asyncio.create_task(consume())
        return self

    def finals(self, author: str) -> list[Event]:
        return [e for e in self.events if not e.partial and e.author == author
                and e.turn_complete and e.content is not None and not e.function_calls]

    async def answered(self, author: str, count: int = 1) -> None:
        await wait_until(lambda: len(self.finals(author)) >= count, timeout=10,
                         message=f"{count} answer(s) of {author}")


async def stored(runner: Runner) -> list[Event]:
    session = await runner.session_service.get_session(app_name="app", user_id="u",
                                                       session_id="s")
    assert session is not None
    return session.events


def shape(events: list[Event]) -> list[tuple[str, str]]:
    return [(e.author, "delta" if e.partial else "call" if e.function_calls else
             "result" if e.function_responses else "error" if e.error_code else "message")
            for e in events]


# -- emulated ----------------------------------------------------------------------------------

async def test_emulated_transfer_closes_the_connection_and_billing_answers_over_its_own() -> None:
    coordinator = ScriptedModel().call("transfer_to_agent", {"agent_name": "billing"},
                                       call_id="t1")
    billing = ScriptedModel().reply("Your invoice ", "is paid.").reply("Anything else?")
    runner = Runner(agent=tree(coordinator, billing), app_name="app", auto_create_session=True)
    async with Live(runner) as live:
        await live.say(QUESTION)
        await live.answered("billing")
        # The coordinator's connection was closed; billing's opened with the history.
        (first,) = coordinator.connections
        assert isinstance(first, EmulatedLlmConnection) and first.closed
        (second,) = billing.connections
        assert isinstance(second, EmulatedLlmConnection) and not second.closed
        request = billing.requests[0]
        assert request.system_instruction == BILLING
        assert [t.name for t in request.tools] == ["transfer_to_agent"]  # back to the parent
        assert content_texts(request.contents) == CONTEXT
        # The client's queue goes on into billing's connection.
        await live.say("Thanks")
        await live.answered("billing", 2)
        assert len(coordinator.requests) == 1 and len(billing.requests) == 2
        assert content_texts(billing.requests[1].contents)[-2:] == [
            "model: Your invoice is paid.", "user: Thanks"]
    assert shape(live.events) == [
        ("user", "message"), ("coordinator", "call"), ("coordinator", "result"),
        ("billing", "delta"), ("billing", "delta"), ("billing", "message"),
        ("user", "message"), ("billing", "delta"), ("billing", "message")]
    assert live.events[2].actions.transfer_to_agent == "billing"
    assert second.closed  # the run's end closed billing's connection
    events = await stored(runner)
    assert [e for e in live.events if not e.partial] == events
    assert_valid_history(CallLedger.of(events).contents)

    # The next live run starts with billing, over a new connection of its model.
    billing.reply("Still here.")
    async with Live(runner) as again:
        await again.say("Hello?")
        await again.answered("billing")
    assert len(billing.connections) == 2 and len(coordinator.connections) == 1
    assert content_texts(billing.requests[-1].contents)[-1] == "user: Hello?"
    # And so does the next run_async turn.
    billing.reply("Yes.")
    async with runner.run_async(user_id="u", session_id="s", new_message="Sure?") as stream:
        answer = [e async for e in stream]
    assert [(e.author, e.text) for e in answer if not e.partial] == [("billing", "Yes.")]
    assert len(coordinator.requests) == 1
    assert_valid_history(billing.requests[-1].contents)


class HttpOnly(BaseLlm):
    """A model with no live connection (neither native nor emulated)."""

    async def generate_content(self, request: LlmRequest, stream: bool = False
                               ) -> AsyncGenerator[LlmResponse, None]:
        yield LlmResponse(content=Content.from_text("never", role="model"))


async def test_a_target_that_cannot_run_live_is_an_error_result_and_the_run_goes_on() -> None:
    coordinator = ScriptedModel().call("transfer_to_agent", {"agent_name": "billing"},
                                       call_id="t1").reply("I will help you myself.")
    runner = Runner(agent=tree(coordinator, HttpOnly("http-only")), app_name="app",
                    auto_create_session=True)
    async with Live(runner) as live:
        await live.say(QUESTION)
        await live.answered("coordinator")
    (result,) = [r.response for e in live.events for r in e.function_responses]
    assert result["code"] == "live_unsupported" and "'billing'" in result["error"]
    assert not any(e.actions.transfer_to_agent for e in live.events)
    assert live.finals("coordinator")[0].text == "I will help you myself."
    assert len(coordinator.connections) == 1  # the same connection throughout
    assert content_texts(coordinator.requests[1].contents)[-1] == "user: result transfer_to_agent"


async def test_the_old_agents_live_stream_stops_and_stop_streaming_stays_the_built_in() -> None:
    ended = asyncio.Event()

    @tool
    async def watch(topic: str, tool_context: ToolContext) -> AsyncIterator[str]:
        """Watch a topic until stopped."""
        try:
            yield f"{topic}: first"
            await asyncio.Event().wait()
        finally:
            ended.set()

    @tool
    async def follow(topic: str, tool_context: ToolContext) -> AsyncIterator[str]:
        """Billing's own live stream."""
        yield f"{topic}: one"
        await asyncio.Event().wait()

    def coordinator_turn(request: LlmRequest) -> ScriptedTurn:
        last = request.contents[-1]
        if last.text == "watch":
            return ScriptedTurn(calls=[ScriptedCall("watch", {"topic": "news"}, id="w1")])
        if last.text.startswith("Function watch returned"):
            return ScriptedTurn(calls=[ScriptedCall("transfer_to_agent",
                                                    {"agent_name": "billing"}, id="t1")])
        return ScriptedTurn(text=["ok"])

    def billing_turn(request: LlmRequest) -> ScriptedTurn:
        last = request.contents[-1]
        if last.text == "follow":
            return ScriptedTurn(calls=[ScriptedCall("follow", {"topic": "bills"}, id="f1")])
        if last.text == "stop":
            return ScriptedTurn(calls=[ScriptedCall("stop_streaming",
                                                    {"function_name": "follow"}, id="s1")])
        return ScriptedTurn(text=["billing: ", last.text[:20]])

    coordinator = ScriptedModel(responder=coordinator_turn)
    billing = ScriptedModel(responder=billing_turn)
    runner = Runner(agent=tree(coordinator, billing, coordinator_tools=[watch],
                               billing_tools=[follow]),
                    app_name="app", auto_create_session=True)
    async with Live(runner) as live:
        await live.say("watch")
        await live.answered("billing")
        await asyncio.wait_for(ended.wait(), 10)  # the coordinator's stream was stopped
        # Billing's connection declares its own tools and the built-in stop.
        assert [t.name for t in billing.requests[0].tools] == [
            "follow", "transfer_to_agent", "stop_streaming"]
        await live.say("follow")
        await wait_until(lambda: live.told("Function follow returned"), timeout=10)
        await live.say("stop")
        await wait_until(lambda: live.responses("stop_streaming"), timeout=10)
    assert live.responses("stop_streaming") == [
        {"result": "Successfully stopped streaming function follow", "stopped": 1}]
    told = live.told()
    assert told[0] == "Function watch returned: news: first"
    assert not any(t.startswith("Function watch") for t in told[1:])
    assert {e.author for e in live.events if e.branch == "coordinator/w1"} == {"coordinator"}
    assert_valid_history(CallLedger.of(await stored(runner)).contents)


async def test_cancelling_during_the_switch_leaves_the_session_valid() -> None:
    entered, release = asyncio.Event(), asyncio.Event()

    async def slow_open(callback_context: Any, llm_request: LlmRequest) -> None:
        entered.set()
        await release.wait()  # the switch waits here until the run is cancelled

    coordinator = ScriptedModel().call("transfer_to_agent", {"agent_name": "billing"},
                                       call_id="t1")
    billing = ScriptedModel()
    runner = Runner(agent=tree(coordinator, billing, before_model_callback=slow_open),
                    app_name="app", auto_create_session=True)
    live = Live(runner)
    await live.__aenter__()
    await live.say(QUESTION)
    await asyncio.wait_for(entered.wait(), 10)
    assert live.task is not None
    live.task.cancel()
    await asyncio.wait([live.task], timeout=10)
    assert live.task.done()
    (first,) = coordinator.connections
    assert isinstance(first, EmulatedLlmConnection) and first.closed
    assert billing.connections == [] and billing.requests == []
    events = await stored(runner)
    assert [(e.author, e.actions.transfer_to_agent) for e in events if e.function_responses] \
        == [("coordinator", "billing")]
    assert_valid_history(CallLedger.of(events).contents)
    # The session is free and whole: the next turn runs (billing never spoke: the root).
    coordinator.reply("Back at the desk.")
    async with runner.run_async(user_id="u", session_id="s", new_message="hello?") as stream:
        assert [e.text async for e in stream if not e.partial] == ["Back at the desk."]
    assert_valid_history(coordinator.requests[-1].contents)


async def test_content_sent_during_the_switch_goes_to_the_target() -> None:
    entered, release = asyncio.Event(), asyncio.Event()

    async def slow_open(callback_context: Any, llm_request: LlmRequest) -> None:
        entered.set()
        await release.wait()

    coordinator = ScriptedModel().call("transfer_to_agent", {"agent_name": "billing"},
                                       call_id="t1")
    billing = ScriptedModel(responder=lambda r: ScriptedTurn(text=[f"re: {r.contents[-1].text}"]))
    runner = Runner(agent=tree(coordinator, billing, before_model_callback=slow_open),
                    app_name="app", auto_create_session=True)
    async with Live(runner) as live:
        await live.say(QUESTION)
        await asyncio.wait_for(entered.wait(), 10)
        await live.say("Hello, anyone?")  # waits for the switch
        assert [e.author for e in live.events if not e.partial][-1] == "coordinator"
        release.set()
        await wait_until(lambda: any(e.text == "re: Hello, anyone?"
                                     for e in live.finals("billing")), timeout=10)
    assert len(coordinator.requests) == 1
    stored_events = await stored(runner)
    users = [e for e in stored_events if e.author == "user"]
    transfer = next(e for e in stored_events if e.actions.transfer_to_agent)
    assert stored_events.index(users[1]) > stored_events.index(transfer)
    assert content_texts(billing.requests[-1].contents)[-1] == "user: Hello, anyone?"
    assert_valid_history(CallLedger.of(stored_events).contents)


async def test_an_approval_answered_after_the_transfer_runs_the_callers_tool() -> None:
    ran: list[str] = []

    @tool(requires_approval=True)
    def refund(amount: int) -> str:
        """Refunds an amount."""
        ran.append(f"refund {amount}")
        return "refunded"

    def desk(request: LlmRequest) -> ScriptedTurn:
        if request.contents[-1].text == "refund 5":
            return ScriptedTurn(calls=[ScriptedCall("refund", {"amount": 5}, id="r1")])
        return ScriptedTurn(calls=[ScriptedCall("transfer_to_agent", {"agent_name": "billing"},
                                                id="t1")])

    coordinator = ScriptedModel(responder=desk)
    billing = ScriptedModel(responder=lambda r: ScriptedTurn(text=[f"noted {len(r.contents)}"]))
    runner = Runner(agent=tree(coordinator, billing, coordinator_tools=[refund]),
                    app_name="app", auto_create_session=True)
    async with Live(runner) as live:
        await live.say("refund 5")
        await wait_until(lambda: any(e.actions.requested_approvals for e in live.events),
                         timeout=10)
        await live.say("billing please")
        await live.answered("billing")
        asked = next(e for e in live.events if e.actions.requested_approvals)
        await live.send(approval_response(asked.actions.requested_approvals[0], True))
        await live.answered("billing", 2)
    assert ran == ["refund 5"]
    (result,) = [e for e in live.events for r in e.function_responses if r.name == "refund"]
    assert result.author == "coordinator"  # its call, run with its tools
    assert content_texts(billing.requests[-1].contents)[-1] == (
        'user: For context: | [coordinator] `refund` tool returned result: '
        '{"result": "refunded"}')
    assert len(coordinator.requests) == 2 and len(coordinator.connections) == 1
    assert_valid_history(CallLedger.of(await stored(runner)).contents)


# -- native ------------------------------------------------------------------------------------

PROTOCOLS = ("gemini", "openai")


def native(protocol: str, fake: FakeLiveProvider) -> BaseLlm:
    if protocol == "gemini":
        return GeminiLiveModel("gemini-live-test", base_url=fake.gemini_base_url,
                               api_key="test-key")
    return OpenAIRealtimeModel("gpt-realtime-test", base_url=fake.openai_base_url,
                               api_key="test-key")


def provider_side(request: LlmRequest) -> ScriptedTurn:
    """The fake's model: the coordinator routes, billing answers what it was asked last."""
    if request.system_instruction == ROUTE:
        return ScriptedTurn(calls=[ScriptedCall("transfer_to_agent",
                                                {"agent_name": "billing"}, id="t1")])
    users = [c.text for c in request.contents if c.role == "user" and c.text
             and not c.text.startswith("For context:")]
    return ScriptedTurn(text=["Billing: ", f"about {users[-1]!r}"])


def sent_texts(record: LiveSocketRecord) -> list[str]:
    """Every text the client sent on a socket (history and turns)."""
    out: list[str] = []
    for message in record.received:
        if record.protocol == "gemini":
            for turn in message.get("clientContent", {}).get("turns", []):
                out += [p["text"] for p in turn.get("parts", []) if "text" in p]
        elif message.get("type") == "conversation.item.create":
            out += [c["text"] for c in message["item"].get("content", []) if "text" in c]
    return out


def setup_of(record: LiveSocketRecord) -> tuple[str, list[str]]:
    """The instruction and tool names a socket's session was set up with."""
    if record.protocol == "gemini":
        setup = record.received[0]["setup"]
        return (setup["systemInstruction"]["parts"][0]["text"],
                [d["name"] for d in setup["tools"][0]["functionDeclarations"]])
    session = record.of_kind("session.update")[0]["session"]
    return session["instructions"], [t["name"] for t in session["tools"]]


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_native_transfer_closes_the_socket_and_opens_billings_with_the_history(
        protocol: str) -> None:
    async with FakeLiveProvider(responder=provider_side) as fake:
        runner = Runner(agent=tree(native(protocol, fake), native(protocol, fake)),
                        app_name="app", auto_create_session=True)
        async with Live(runner) as live:
            await live.say(QUESTION)
            await live.answered("billing")
            await wait_until(lambda: len(fake.sessions) == 2 and fake.sessions[0].closed.is_set(),
                             timeout=10)
            first, second = fake.sessions
            assert setup_of(first) == (ROUTE, ["transfer_to_agent"])
            assert setup_of(second) == (BILLING, ["transfer_to_agent"])
            # The new session carries the earlier turns as billing sees them.
            sent = sent_texts(second)
            assert sent[0] == QUESTION
            assert sent[1:] == ["For context:", CONTEXT[1].split(" | ")[1],
                                "For context:", CONTEXT[2].split(" | ")[1]]
            assert content_texts(fake.requests[-1].contents) == CONTEXT
            await live.say("And the next one?")
            await live.answered("billing", 2)
            assert len(fake.sessions) == 2  # the same socket goes on
        assert [e.text for e in live.finals("billing")] == [
            f"Billing: about {QUESTION!r}", "Billing: about 'And the next one?'"]
        after = live.events[[e.actions.transfer_to_agent for e in live.events].index("billing"):]
        assert {e.author for e in after[1:] if e.author != "user"} == {"billing"}
        assert first.close_code == 1000 and second.closed.is_set()
        events = await stored(runner)
        assert_valid_history(CallLedger.of(events).contents)
        # The next live run opens billing's socket.
        async with Live(runner) as again:
            await again.say("Hello?")
            await again.answered("billing")
        assert len(fake.sessions) == 3 and setup_of(fake.sessions[2])[0] == BILLING


# -- budgets across the switch ------------------------------------------------------------------

@pytest.mark.parametrize("wire", ["emulated", *PROTOCOLS])
@pytest.mark.parametrize("limit", [1, 2])
async def test_max_llm_calls_counts_both_agents_requests_across_a_transfer(
        wire: str, limit: int) -> None:
    async with FakeLiveProvider(responder=provider_side) as fake:
        if wire == "emulated":
            coordinator: BaseLlm = ScriptedModel(responder=provider_side)
            billing: BaseLlm = ScriptedModel(responder=provider_side)
        else:
            coordinator, billing = native(wire, fake), native(wire, fake)
        runner = Runner(agent=tree(coordinator, billing), app_name="app",
                        auto_create_session=True)
        config = RunConfig(max_llm_calls=limit)
        async with Live(runner, config) as live:
            await live.say(QUESTION)
            if limit == 2:
                await live.answered("billing")
                await live.say("And the next one?")
            await asyncio.wait_for(live.task, 10)  # the budget ended the run
        if wire == "emulated":
            assert isinstance(coordinator, ScriptedModel) and isinstance(billing, ScriptedModel)
            made = len(coordinator.requests) + len(billing.requests)
        else:
            made = len(fake.requests)
        assert made == limit
        (spent,) = [e for e in live.events if e.error_code is not None]
        assert spent.error_code == "budget_exceeded" and spent.author == "billing"
        assert live.events[-1] is spent
        assert_valid_history(CallLedger.of(await stored(runner)).contents)


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_realtime_agent_hands_off_to_a_text_agent_and_back(protocol: str) -> None:
    """openai-agents-python#1525: a native (realtime) agent transfers to an emulated one."""

    def desk(request: LlmRequest) -> ScriptedTurn:
        if request.contents[-1].text.startswith("For context:") and any(
                "[billing]" in c.text for c in request.contents):
            return ScriptedTurn(text=["Desk again."])
        return ScriptedTurn(calls=[ScriptedCall("transfer_to_agent",
                                                {"agent_name": "billing"}, id="t1")])

    billing = ScriptedModel().reply("Paid.").call("transfer_to_agent",
                                                  {"agent_name": "coordinator"}, call_id="t2")
    async with FakeLiveProvider(responder=desk) as fake:
        runner = Runner(agent=tree(native(protocol, fake), billing), app_name="app",
                        auto_create_session=True)
        async with Live(runner) as live:
            await live.say(QUESTION)
            await live.answered("billing")
            await live.say("Back to the desk, please.")
            await live.answered("coordinator")
            await wait_until(lambda: len(fake.sessions) == 2, timeout=10)
        first, second = fake.sessions
        assert first.closed.is_set() and first.close_code == 1000
        assert setup_of(second)[0] == ROUTE
        # The coordinator's new session holds its own turn as it was and billing's as context.
        assert content_texts(fake.requests[-1].contents) == [
            *CONTEXT[:1], "model: call transfer_to_agent", "user: result transfer_to_agent",
            "user: For context: | [billing] said: Paid.", "user: Back to the desk, please.",
            "user: For context: | [billing] called tool `transfer_to_agent` with parameters: "
            '{"agent_name": "coordinator"}',
            "user: For context: | [billing] `transfer_to_agent` tool returned result: "
            '{"result": null}']
    (connection,) = billing.connections
    assert isinstance(connection, EmulatedLlmConnection) and connection.closed
    assert [e.text for e in live.finals("billing")] == ["Paid."]
    assert [e.text for e in live.finals("coordinator")] == ["Desk again."]
    assert_valid_history(CallLedger.of(await stored(runner)).contents)
