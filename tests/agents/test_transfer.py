"""Sub-agents and ``transfer_to_agent``: the tree's rules, the transfer, the next turn's agent."""

from __future__ import annotations

from pathlib import Path

import pytest

from headwater import Agent, Runner, SequentialAgent, tool
from headwater.errors import UserError
from headwater.sessions import SqlSessionService
from headwater.testing import ScriptedModel
from headwater.tools.approval import approval_response

from .helpers import NONE, collect, make, stored, texts, tool_names

ANSWER = ("Your invoice ", "is paid.")


def tree(billing_model: ScriptedModel, coordinator_model: ScriptedModel,
         **billing_kw: object) -> Agent:
    billing = Agent(name="billing", model=billing_model, instruction="You handle billing.",
                    description="Invoices and payments.", **billing_kw)  # type: ignore[arg-type]
    support = Agent(name="support", model=ScriptedModel(), description="Product help.")
    return Agent(name="coordinator", model=coordinator_model, instruction="Route the user.",
                 description="Front desk.", sub_agents=[billing, support])


async def test_coordinator_transfers_to_billing_and_the_next_turn_goes_to_billing() -> None:
    coordinator = ScriptedModel().call("transfer_to_agent", {"agent_name": "billing"},
                                       call_id="t1")
    billing = ScriptedModel().reply(*ANSWER).reply("Anything else?")
    runner, sid = await make(tree(billing, coordinator))

    events = await collect(runner, sid, "Is my invoice paid?")
    shape = [(e.author, "delta" if e.partial else
              "call" if e.function_calls else "result" if e.function_responses else "final")
             for e in events]
    assert shape == [("coordinator", "call"), ("coordinator", "result"),
                     ("billing", "delta"), ("billing", "delta"), ("billing", "final")]
    assert events[0].function_calls[0].name == "transfer_to_agent"
    assert events[1].actions.transfer_to_agent == "billing"
    assert events[-1].text == "".join(ANSWER) and events[-1].is_final_response()
    assert all(e.branch is None for e in events)

    # The coordinator was offered the tool, listing whom it may go to and what they do.
    first = coordinator.requests[0]
    assert first.system_instruction == "Route the user."
    (transfer,) = [t for t in first.tools if t.name == "transfer_to_agent"]
    assert "billing: Invoices and payments." in transfer.description
    assert "support: Product help." in transfer.description
    assert transfer.parameters["properties"]["agent_name"]["enum"] == ["billing", "support"]

    # Billing's request: its own instruction and tools; the coordinator's turn as context.
    request = billing.requests[0]
    assert request.system_instruction == "You handle billing."
    assert texts(request) == [
        "user: Is my invoice paid?",
        'user: For context: | [coordinator] called tool `transfer_to_agent` with parameters: '
        '{"agent_name": "billing"}',
        "user: For context: | [coordinator] `transfer_to_agent` tool returned result: "
        '{"result": null}',
    ]
    (back,) = [t for t in request.tools if t.name == "transfer_to_agent"]
    assert back.parameters["properties"]["agent_name"]["enum"] == ["coordinator", "support"]
    assert "coordinator (your parent): Front desk." in back.description

    # The next user turn goes to billing, not back to the root.
    events = await collect(runner, sid, "Thanks!")
    assert [e.author for e in events if not e.partial] == ["billing"]
    assert len(coordinator.requests) == 1 and len(billing.requests) == 2
    assert texts(billing.requests[1])[-2:] == ["model: Your invoice is paid.", "user: Thanks!"]


async def test_an_unknown_name_is_an_error_result_and_the_run_goes_on() -> None:
    coordinator = (ScriptedModel().call("transfer_to_agent", {"agent_name": "payroll"})
                   .reply("I can answer that myself."))
    runner, sid = await make(tree(ScriptedModel(), coordinator))
    events = await collect(runner, sid, "Pay me", config=NONE)
    result = events[1].function_responses[0].response
    assert result["code"] == "unknown_agent"
    assert "billing, support" in result["error"]
    assert events[1].actions.transfer_to_agent is None
    assert events[-1].author == "coordinator" and events[-1].text == "I can answer that myself."
    assert len(coordinator.requests) == 2


async def test_disallow_flags_narrow_the_targets_and_a_disallowed_name_is_refused() -> None:
    coordinator = ScriptedModel().call("transfer_to_agent", {"agent_name": "billing"})
    billing = (ScriptedModel().call("transfer_to_agent", {"agent_name": "support"})
               .reply("Staying here."))
    runner, sid = await make(tree(billing, coordinator, disallow_transfer_to_peers=True))
    events = await collect(runner, sid, "Help", config=NONE)
    (transfer,) = [t for t in billing.requests[0].tools if t.name == "transfer_to_agent"]
    assert transfer.parameters["properties"]["agent_name"]["enum"] == ["coordinator"]
    refused = events[3].function_responses[0].response
    assert events[3].author == "billing" and refused["code"] == "transfer_not_allowed"
    assert events[-1].author == "billing" and events[-1].text == "Staying here."

    # Neither parent nor peers: a leaf agent is offered no transfer at all.
    lone = ScriptedModel().reply("Done.")
    runner, sid = await make(tree(lone, ScriptedModel().call(
        "transfer_to_agent", {"agent_name": "billing"}),
        disallow_transfer_to_parent=True, disallow_transfer_to_peers=True))
    await collect(runner, sid, "Help", config=NONE)
    assert tool_names(lone.requests[0]) == []


async def test_an_agent_that_may_not_return_to_its_parent_gives_the_next_turn_to_the_root() -> None:
    coordinator = (ScriptedModel().call("transfer_to_agent", {"agent_name": "billing"})
                   .reply("Front desk again."))
    billing = ScriptedModel().reply("Paid.")
    runner, sid = await make(tree(billing, coordinator, disallow_transfer_to_parent=True))
    await collect(runner, sid, "Invoice?", config=NONE)
    events = await collect(runner, sid, "And now?", config=NONE)
    assert [e.author for e in events] == ["coordinator"]
    assert len(billing.requests) == 1


def test_names_are_unique_in_a_tree_and_an_agent_has_one_parent() -> None:
    a = Agent(name="a", model=ScriptedModel())
    with pytest.raises(UserError, match="two agents named 'a'"):
        Agent(name="root", model=ScriptedModel(),
              sub_agents=[SequentialAgent(name="s", sub_agents=[a]),
                          Agent(name="a", model=ScriptedModel())])
    b = Agent(name="b", model=ScriptedModel())
    with pytest.raises(UserError, match="two agents named 'b'"):
        Agent(name="b", model=ScriptedModel(), sub_agents=[Agent(name="x", model=ScriptedModel(),
                                                                 sub_agents=[b])])
    c = Agent(name="c", model=ScriptedModel())
    Agent(name="p1", model=ScriptedModel(), sub_agents=[c])
    with pytest.raises(UserError, match="already a sub-agent of 'p1'"):
        Agent(name="p2", model=ScriptedModel(), sub_agents=[c])


async def test_a_tool_of_its_own_named_transfer_to_agent_is_refused_in_a_tree() -> None:
    def transfer_to_agent(agent_name: str) -> str:
        """Mine."""
        return agent_name

    model = ScriptedModel().reply("never")
    root = Agent(name="r", model=model, tools=[transfer_to_agent],
                 sub_agents=[Agent(name="leaf", model=ScriptedModel())])
    runner, sid = await make(root)
    with pytest.raises(UserError, match="has a tool named 'transfer_to_agent'"):
        await collect(runner, sid)
    assert model.requests == []


async def test_a_tree_on_a_sqlite_file_survives_a_reload(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tree.db'}"
    coordinator = ScriptedModel().call("transfer_to_agent", {"agent_name": "billing"})
    billing = ScriptedModel().reply(*ANSWER)
    runner, sid = await make(tree(billing, coordinator), SqlSessionService(url))
    await collect(runner, sid, "Is my invoice paid?")
    await runner.aclose()

    # A new process: new models, a new runner and store on the same file.
    coordinator2, billing2 = ScriptedModel(), ScriptedModel().reply("You are welcome.")
    runner2 = Runner(agent=tree(billing2, coordinator2), app_name="shop",
                     session_service=SqlSessionService(url))
    try:
        history = await stored(runner2, sid)
        assert [(e.author, e.branch) for e in history] == [
            ("user", None), ("coordinator", None), ("coordinator", None), ("billing", None)]
        assert history[2].actions.transfer_to_agent == "billing"
        events = await collect(runner2, sid, "Thanks!")
        assert [e.author for e in events if not e.partial] == ["billing"]
        assert coordinator2.requests == []
        assert texts(billing2.requests[0]) == [
            "user: Is my invoice paid?",
            'user: For context: | [coordinator] called tool `transfer_to_agent` with '
            'parameters: {"agent_name": "billing"}',
            "user: For context: | [coordinator] `transfer_to_agent` tool returned result: "
            '{"result": null}',
            "model: Your invoice is paid.",
            "user: Thanks!",
        ]
    finally:
        await runner2.aclose()


async def test_an_approval_answer_goes_to_the_agent_that_made_the_call() -> None:
    refunded: list[str] = []

    @tool(requires_approval=True)
    def refund(invoice: str) -> str:
        """Refund an invoice."""
        refunded.append(invoice)
        return "refunded"

    coordinator = ScriptedModel().call("transfer_to_agent", {"agent_name": "billing"})
    billing = ScriptedModel().call("refund", {"invoice": "7"}).reply("Refunded.")
    root = Agent(name="coordinator", model=coordinator, sub_agents=[
        Agent(name="billing", model=billing, tools=[refund])])
    runner, sid = await make(root)
    events = await collect(runner, sid, "Refund invoice 7", config=NONE)
    (asked,) = events[-1].actions.requested_approvals
    assert events[-1].author == "billing" and refunded == []
    events = await collect(runner, sid, approval_response(asked, True), config=NONE)
    assert [(e.author, e.text) for e in events] == [("billing", ""), ("billing", "Refunded.")]
    assert refunded == ["7"] and len(coordinator.requests) == 1


async def test_a_transfer_to_a_workflow_agent_runs_it_then_the_next_turn_goes_to_the_root() -> None:
    coordinator = (ScriptedModel().call("transfer_to_agent", {"agent_name": "pipeline"})
                   .reply("Back at the desk."))
    steps = [Agent(name=f"step{n}", model=ScriptedModel().reply(f"step {n} done"))
             for n in (1, 2)]
    root = Agent(name="coordinator", model=coordinator, sub_agents=[
        SequentialAgent(name="pipeline", description="Runs the steps.", sub_agents=steps)])
    runner, sid = await make(root)
    events = await collect(runner, sid, "Run the steps", config=NONE)
    assert [e.author for e in events] == ["coordinator", "coordinator", "step1", "step2"]
    (transfer,) = [t for t in coordinator.requests[0].tools if t.name == "transfer_to_agent"]
    assert "pipeline: Runs the steps." in transfer.description
    assert [t.name for t in steps[0].model.requests[0].tools] == []  # type: ignore[attr-defined]
    events = await collect(runner, sid, "Thanks", config=NONE)
    assert [(e.author, e.text) for e in events] == [("coordinator", "Back at the desk.")]
