"""Each call has exactly one stored final result: the first write wins (docs/architecture.md)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import pytest

from headwater.errors import CallAlreadyAnsweredError, SessionError
from headwater.events import Event
from headwater.sessions import BaseSessionService, Session
from headwater.types import Content, FunctionCall, FunctionResponse, Part

if TYPE_CHECKING:
    from conftest import Store

APP = "shop"


def call_event(*ids: str, long_running: tuple[str, ...] = ()) -> Event:
    parts = [Part(function_call=FunctionCall(id=i, name="lookup", args={})) for i in ids]
    return Event(invocation_id="inv", author="bot", content=Content("model", parts),
                 long_running_tool_ids=list(long_running))


def result_event(answers: dict[str, str], *, tickets: tuple[str, ...] = (),
                 **delta: object) -> Event:
    parts = [Part(function_response=FunctionResponse(id=i, name="lookup",
                                                     response={"result": value}))
             for i, value in answers.items()]
    event = Event(invocation_id="inv", author="bot", content=Content("user", parts),
                  long_running_tool_ids=list(tickets))
    event.actions.state_delta.update(delta)
    return event


def results(session: Session | None) -> list[tuple[str, object]]:
    assert session is not None
    return [(r.id, r.response["result"]) for e in session.events for r in e.function_responses]


async def reload(store: Store, session: Session) -> Session | None:
    return await store.reopen().get_session(app_name=APP, user_id="u1", session_id=session.id)


async def test_a_second_result_for_a_call_is_refused_and_the_first_stays(store: Store) -> None:
    service = store.service
    session = await service.create_session(app_name=APP, user_id="u1")
    await service.append_event(session, call_event("c1", "c2"))
    await service.append_event(session, result_event({"c1": "real"}, seen=1))

    sealed = result_event({"c1": "cancelled", "c2": "cancelled"}, seen=2)
    with pytest.raises(CallAlreadyAnsweredError) as refused:
        await service.append_event(session, sealed)
    assert refused.value.call_ids == ("c1",)
    assert isinstance(refused.value, SessionError)
    # Nothing of the refused event was stored, not even its answer for c2 or its delta.
    assert results(session) == [("c1", "real")] and session.state == {"seen": 1}
    loaded = await reload(store, session)
    assert results(loaded) == [("c1", "real")]
    assert loaded is not None and loaded.state == {"seen": 1}

    await service.append_event(session, result_event({"c2": "late"}))
    assert results(await reload(store, session)) == [("c1", "real"), ("c2", "late")]


async def test_a_long_running_ticket_is_not_the_final_result(store: Store) -> None:
    service = store.service
    session = await service.create_session(app_name=APP, user_id="u1")
    await service.append_event(session, call_event("job", long_running=("job",)))
    await service.append_event(session, result_event({"job": "ticket"}, tickets=("job",)))
    await service.append_event(session, result_event({"job": "done"}))
    with pytest.raises(CallAlreadyAnsweredError):
        await service.append_event(session, result_event({"job": "done again"}))
    assert results(await reload(store, session)) == [("job", "ticket"), ("job", "done")]


async def test_concurrent_results_for_one_call_exactly_one_wins(store: Store) -> None:
    session = await store.service.create_session(app_name=APP, user_id="u1")
    await store.service.append_event(session, call_event("c1"))
    services = [store.service, store.reopen()]  # two writers (two replicas for SQL)
    views = [session, await services[1].get_session(app_name=APP, user_id="u1",
                                                     session_id=session.id)]
    assert views[1] is not None

    async def answer(i: int) -> str:
        try:
            await services[i % 2].append_event(views[i % 2], result_event({"c1": f"r{i}"}))
        except CallAlreadyAnsweredError:
            return "refused"
        return "stored"

    outcomes = await asyncio.gather(*(answer(i) for i in range(20)))
    assert sorted(outcomes) == ["refused"] * 19 + ["stored"]
    stored = results(await reload(store, session))
    assert len(stored) == 1 and stored[0] == ("c1", f"r{outcomes.index('stored')}")


async def test_a_deleted_session_forgets_its_answers(service: BaseSessionService) -> None:
    session = await service.create_session(app_name=APP, user_id="u1", session_id="s")
    await service.append_event(session, result_event({"c1": "first life"}))
    await service.delete_session(app_name=APP, user_id="u1", session_id="s")
    again = await service.create_session(app_name=APP, user_id="u1", session_id="s")
    await service.append_event(again, result_event({"c1": "second life"}))
    loaded = await service.get_session(app_name=APP, user_id="u1", session_id="s")
    assert results(loaded) == [("c1", "second life")]
    # Call ids are per session: another session may answer its own "c1".
    other = await service.create_session(app_name=APP, user_id="u1")
    await service.append_event(other, result_event({"c1": "elsewhere"}))
