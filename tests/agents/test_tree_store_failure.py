"""A tree's run whose store fails mid-run ends in one ``store_unavailable`` event, as a
lone agent's does (tests/test_concurrency.py, tests/test_run_lifecycle.py): the run's one
lifecycle (``headwater.run.Run``) turns the failure into that event, whatever made the
events. Nothing raises, the error is the last event, and the next run on a healthy store
is valid."""

from __future__ import annotations

from headwater import Agent, Event
from headwater.errors import SessionError
from headwater.sessions import InMemorySessionService
from headwater.sessions.base import Lease, Session
from headwater.testing import ScriptedModel

from .helpers import collect, make, stored


class FailingAt(InMemorySessionService):
    """``append_event`` raises ``SessionError`` at the ``fail_at``-th append (0: never)."""

    fail_at = 0
    appends = 0

    async def append_event(self, session: Session, event: Event, *,
                           lease: Lease | None = None, release: bool = False) -> Event:
        self.appends += 1
        if self.appends == self.fail_at:
            raise SessionError("session store failed: disk I/O error")
        return await super().append_event(session, event, lease=lease, release=release)


def tree(coordinator: ScriptedModel, billing: ScriptedModel) -> Agent:
    billing_agent = Agent(name="billing", model=billing, description="Invoices.")
    return Agent(name="coordinator", model=coordinator, sub_agents=[billing_agent])


async def test_a_trees_store_failing_mid_run_ends_the_run_with_one_error_event() -> None:
    coordinator = (ScriptedModel().call("transfer_to_agent", {"agent_name": "billing"})
                   .reply("Glad to help."))
    billing = ScriptedModel().reply("Your ", "invoice.")
    service = FailingAt()
    runner, sid = await make(tree(coordinator, billing), service)
    # The message goes in with the lease; the appends are the transfer call (1), its
    # result (2), billing's answer (3): billing's answer is refused.
    service.fail_at = 3
    events = await collect(runner, sid, "my invoice")
    assert [e.error_code for e in events if e.error_code] == ["store_unavailable"]
    assert events[-1].error_code == "store_unavailable" and not events[-1].partial
    assert "disk" not in (events[-1].error_message or "")
    assert [e.text for e in events if e.partial and e.author == "billing"] == ["Your ",
                                                                               "invoice."]
    history = await stored(runner, sid)
    assert events[-1].id not in {e.id for e in history}
    assert not any(e.author == "billing" and e.text for e in history)  # refused
    # The store is healthy again: billing never spoke, so the next turn is the
    # coordinator's (the last agent that spoke), on a valid history.
    service.fail_at = 0
    again = await collect(runner, sid, "thanks")
    assert [e.error_code for e in again if e.error_code] == []
    assert again[-1].author == "coordinator" and again[-1].text == "Glad to help."
