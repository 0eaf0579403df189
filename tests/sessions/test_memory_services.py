"""Memory services (ADK's ``BaseMemoryService``) on each store: in memory, SQLite, PostgreSQL.

The SQL one keeps its rows in the session store's database (table ``hw_memory``,
migration 0003): remembered across a reopen, as another process would see them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from headwater.events import Event
from headwater.memory import BaseMemoryService, InMemoryMemoryService, SqlMemoryService
from headwater.sessions import SqlSessionService
from headwater.sessions.base import Session
from headwater.types import Content, FunctionCall, Part

if TYPE_CHECKING:
    from conftest import Store


def memory_of(store: Store) -> BaseMemoryService:
    if isinstance(store.service, SqlSessionService):
        return SqlMemoryService(store.service)
    return InMemoryMemoryService()


async def session_with(store: Store, user_id: str, *texts: tuple[str, str]) -> Session:
    session = await store.service.create_session(app_name="app", user_id=user_id)
    for author, text in texts:
        role = "user" if author == "user" else "model"
        await store.service.append_event(session, Event(
            invocation_id="inv", author=author,
            content=Content(role=role, parts=[Part(text=text)])))
    return session


async def test_a_query_word_finds_the_events_that_say_it(store: Store) -> None:
    memory = memory_of(store)
    session = await session_with(store, "u", ("user", "My cat is called Tom."),
                                 ("assistant", "Nice name, Tom!"), ("user", "Weather?"))
    await memory.add_session_to_memory(session)

    found = await memory.search_memory(app_name="app", user_id="u", query="What is TOM")
    assert [(m.author, m.content.parts[0].text) for m in found.memories] == [
        ("user", "My cat is called Tom."), ("assistant", "Nice name, Tom!")]
    assert all(m.timestamp and m.timestamp[4] == "-" for m in found.memories)  # ISO 8601
    # ADK's rule: the query is split at whitespace only, so "weather?" is no word of an event.
    assert (await memory.search_memory(app_name="app", user_id="u", query="weather?")
            ).memories == []
    assert len((await memory.search_memory(app_name="app", user_id="u", query="weather")
                ).memories) == 1


async def test_memory_is_scoped_to_the_app_and_user(store: Store) -> None:
    memory = memory_of(store)
    await memory.add_session_to_memory(await session_with(store, "u", ("user", "secret plan")))
    assert (await memory.search_memory(app_name="app", user_id="other", query="plan")
            ).memories == []
    assert (await memory.search_memory(app_name="other", user_id="u", query="plan")
            ).memories == []
    assert len((await memory.search_memory(app_name="app", user_id="u", query="plan")
                ).memories) == 1


async def test_adding_a_session_again_replaces_it_and_events_without_text_never_match(
        store: Store) -> None:
    memory = memory_of(store)
    session = await session_with(store, "u", ("user", "apples"))
    await memory.add_session_to_memory(session)
    await store.service.append_event(session, Event(
        invocation_id="inv", author="a",
        content=Content(role="model", parts=[Part(function_call=FunctionCall(
            id="c1", name="apples", args={"x": "apples"}))])))
    await store.service.append_event(session, Event(
        invocation_id="inv", author="a", content=Content(role="model", parts=[
            Part(text="more apples")])))
    await memory.add_session_to_memory(session)
    await memory.add_session_to_memory(session)

    found = await memory.search_memory(app_name="app", user_id="u", query="apples %")
    assert [m.content.parts[0].text for m in found.memories] == ["apples", "more apples"]


async def test_a_like_wildcard_in_the_query_matches_nothing(store: Store) -> None:
    memory = memory_of(store)
    await memory.add_session_to_memory(await session_with(store, "u", ("user", "anything")))
    for query in ("%", "_", "a%", "", "   "):
        found = await memory.search_memory(app_name="app", user_id="u", query=query)
        assert found.memories == [], query


async def test_sql_memory_is_in_the_database(store: Store) -> None:
    if store.url is None:
        pytest.skip("the in-memory store has no database")
    memory = SqlMemoryService(store.service)  # type: ignore[arg-type]
    await memory.add_session_to_memory(await session_with(store, "u", ("user", "kept here")))
    reopened = store.reopen()
    assert isinstance(reopened, SqlSessionService)
    found = await SqlMemoryService(reopened).search_memory(app_name="app", user_id="u",
                                                         query="kept")
    assert [m.content.parts[0].text for m in found.memories] == ["kept here"]


def test_sql_memory_needs_a_sql_session_store() -> None:
    from headwater.sessions import InMemorySessionService

    with pytest.raises(TypeError, match="InMemoryMemoryService"):
        SqlMemoryService(InMemorySessionService())  # type: ignore[arg-type]
