"""The record holds under load: cancels, many writers, many sessions (docs/architecture.md)."""

from __future__ import annotations

import asyncio
import random
import sqlite3
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from headwater.errors import CallAlreadyAnsweredError, SessionError
from headwater.events import Event
from headwater.sessions import BaseSessionService, Session, SqlSessionService
from headwater.settings import Settings
from headwater.types import Content, FunctionResponse, Part

if TYPE_CHECKING:
    from conftest import Store

APP = "shop"
SQL_STORES = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
sql_only = pytest.mark.parametrize("store", SQL_STORES, indirect=True)
sqlite_only = pytest.mark.parametrize("store", ["sqlite"], indirect=True)


def said(text: str, **delta: object) -> Event:
    event = Event(invocation_id="inv", author="user", content=Content.from_text(text))
    event.actions.state_delta.update(delta)
    return event


def sqlite_path(store: Store) -> Path:
    assert store.url is not None
    return Path(store.url.removeprefix("sqlite+aiosqlite:///"))


def writers() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("headwater-sqlite")}


async def loaded(service: BaseSessionService, session: Session) -> Session:
    found = await service.get_session(app_name=APP, user_id=session.user_id,
                                      session_id=session.id)
    assert found is not None
    return found


async def test_random_cancels_leave_the_session_object_matching_the_store(store: Store) -> None:
    """300 appends with state deltas, each cancelled at a random moment, some mid-commit."""
    await random_cancels(store, store.service)


@sqlite_only
async def test_random_cancels_during_the_writer_threads_commits_leave_no_lock(
        store: Store) -> None:
    """The same with every write queued for the writer thread (no inline writes), so the
    cancels land while the thread holds SQLite's write lock."""
    await random_cancels(store, store.reopen(settings=Settings(sqlite_inline_writes=False)))


async def random_cancels(store: Store, service: BaseSessionService) -> None:
    session = await service.create_session(app_name=APP, user_id="u1", state={"base": 0})
    other = await service.create_session(app_name=APP, user_id="u1")
    rng = random.Random(20240601)
    for round_ in range(30):
        tasks = [asyncio.create_task(service.append_event(
            session, said(f"m{round_}-{i}", **{f"k{round_}-{i}": i, "last": f"{round_}-{i}"})))
            for i in range(10)]
        for task in tasks[:3]:
            task.cancel()  # before it started: never written
        await asyncio.sleep(rng.random() * 0.003)
        for task in tasks[3:]:
            task.cancel()  # queued, committing or committed
            if rng.random() < 0.5:
                await asyncio.sleep(0)
        await asyncio.gather(*tasks, return_exceptions=True)

    # Queued behind everything above: once it is back, no earlier write is under way.
    await service.append_event(other, said("after the cancels", done=True))
    if store.kind == "sqlite":
        raw = sqlite3.connect(sqlite_path(store), timeout=0, isolation_level=None)
        try:
            raw.execute("BEGIN IMMEDIATE")  # no lock left behind: it is ours at once
            raw.execute("ROLLBACK")
        finally:
            raw.close()
        impatient = store.reopen(busy_timeout_ms=0)  # fails at once if the lock were held
        third = await impatient.create_session(app_name=APP, user_id="u1")
        await impatient.append_event(third, said("no waiting", x=1))

    await service.close()  # PostgreSQL: cancelled callers' writes may still be under way
    stored = await loaded(store.reopen(), session)
    assert [e.id for e in session.events] == [e.id for e in stored.events]
    assert session.state == stored.state
    assert 0 < len(stored.events) <= 210  # the ones cancelled before they started are not
    assert stored.state["base"] == 0 and len(stored.state) == len(stored.events) + 1 + (
        1 if stored.events else 0)


@sql_only
async def test_fifty_sessions_twenty_turns_at_once(store: Store) -> None:
    service = store.service
    sessions = [await service.create_session(app_name=APP, user_id="u1") for _ in range(50)]

    async def turns(session: Session) -> None:
        for turn in range(20):
            await service.append_event(session, said(f"t{turn}", turn=turn))

    outcomes = await asyncio.gather(*(turns(s) for s in sessions), return_exceptions=True)
    assert [o for o in outcomes if o is not None] == []
    fresh = store.reopen()
    for session in sessions:
        stored = await loaded(fresh, session)
        assert [e.text for e in stored.events] == [f"t{t}" for t in range(20)]
        assert stored.state == {"turn": 19} == session.state


@sqlite_only
async def test_five_hundred_concurrent_appenders_on_one_file(store: Store) -> None:
    services = [store.service, store.reopen(), store.reopen()]  # three writer threads
    sessions = [await store.service.create_session(app_name=APP, user_id="u1")
                for _ in range(10)]
    views = [[await loaded(s, session) for session in sessions] for s in services]

    async def append(i: int) -> None:
        which = i % len(services)
        await services[which].append_event(views[which][i % 10], said(f"a{i}", **{f"k{i}": i}))

    outcomes = await asyncio.gather(*(append(i) for i in range(500)), return_exceptions=True)
    assert [o for o in outcomes if o is not None] == []
    fresh = store.reopen()
    texts = set()
    for n, session in enumerate(sessions):
        stored = await loaded(fresh, session)
        texts.update(e.text for e in stored.events)
        assert stored.state == {f"k{i}": i for i in range(n, 500, 10)}
    assert texts == {f"a{i}" for i in range(500)}


@sql_only
async def test_one_failing_write_in_a_group_commit_fails_alone(store: Store) -> None:
    service = store.service
    session = await service.create_session(app_name=APP, user_id="u1")
    first = said("first", n=0)
    await service.append_event(session, first)
    answered = Event(invocation_id="inv", author="bot", content=Content("user", [
        Part(function_response=FunctionResponse(id="c1", name="f", response={}))]))
    await service.append_event(session, answered)

    clash = said("clash", clash=True)
    clash.id = first.id  # its insert fails after its state update
    again = Event(invocation_id="inv", author="bot", content=answered.content)
    good = [said(f"g{i}", **{f"g{i}": i}) for i in range(30)]
    writes = [service.append_event(session, e) for e in [*good[:15], clash, again, *good[15:]]]
    outcomes = await asyncio.gather(*writes, return_exceptions=True)

    assert isinstance(outcomes[15], SessionError)
    assert not isinstance(outcomes[15], CallAlreadyAnsweredError)
    assert isinstance(outcomes[16], CallAlreadyAnsweredError)
    assert [o for i, o in enumerate(outcomes) if i not in (15, 16)] == [*good[:15], *good[15:]]
    stored = await loaded(store.reopen(), session)
    assert sorted(e.text for e in stored.events[2:]) == sorted(e.text for e in good)
    assert stored.state == {"n": 0, **{f"g{i}": i for i in range(30)}} == session.state


@sqlite_only
async def test_a_full_write_queue_waits_for_room(store: Store) -> None:
    service = store.reopen(settings=Settings(sqlite_write_queue_size=1,
                                             sqlite_write_batch_size=1))
    session = await service.create_session(app_name=APP, user_id="u1")
    await asyncio.gather(*(service.append_event(session, said(f"q{i}", **{f"q{i}": i}))
                           for i in range(50)))
    stored = await loaded(store.reopen(), session)
    assert len(stored.events) == 50 and stored.state == {f"q{i}": i for i in range(50)}


@sqlite_only
async def test_a_write_queue_that_stays_full_refuses_with_store_unavailable(
    store: Store,
) -> None:
    service = store.reopen(busy_timeout_ms=60_000, settings=Settings(
        sqlite_write_queue_size=1, sqlite_queue_timeout=0))
    session = await service.create_session(app_name=APP, user_id="u1")
    blocker = sqlite3.connect(sqlite_path(store), isolation_level=None)
    try:
        blocker.execute("BEGIN IMMEDIATE")  # the writer thread waits behind this lock
        writes = [asyncio.ensure_future(service.append_event(session, said(f"w{i}")))
                  for i in range(5)]
        await asyncio.wait(writes, return_when=asyncio.FIRST_EXCEPTION)
        blocker.execute("ROLLBACK")
    finally:
        blocker.close()
    outcomes = await asyncio.gather(*writes, return_exceptions=True)
    refused = [o for o in outcomes if isinstance(o, SessionError)]
    assert refused and all(o.code == "store_unavailable" for o in refused)
    assert all(isinstance(o, Event) for o in outcomes if not isinstance(o, SessionError))
    stored = await loaded(store.reopen(), session)
    assert [e.text for e in stored.events] == [e.text for e in session.events]
    assert len(stored.events) == len(outcomes) - len(refused)


@sql_only
async def test_get_session_sees_what_another_instance_appended(store: Store) -> None:
    reader, writer = store.service, store.reopen()
    created = await writer.create_session(app_name=APP, user_id="u1", session_id="s")
    await writer.append_event(created, said("one", n=1))
    first = await loaded(reader, created)
    assert [e.text for e in first.events] == ["one"]

    for text in ("two", "three"):
        await writer.append_event(created, said(text, n=text))
    second = await loaded(reader, created)
    assert [e.text for e in second.events] == ["one", "two", "three"]
    assert second.state == {"n": "three"}
    assert [e.text for e in first.events] == ["one"]  # earlier snapshots stay as they were
    second.events.clear()  # a caller's list is its own
    assert [e.text for e in (await loaded(reader, created)).events] == ["one", "two", "three"]

    # Deleted and created again elsewhere: the reader sees the new session, not the old one.
    await writer.delete_session(app_name=APP, user_id="u1", session_id="s")
    assert await reader.get_session(app_name=APP, user_id="u1", session_id="s") is None
    reborn = await writer.create_session(app_name=APP, user_id="u1", session_id="s")
    await writer.append_event(reborn, said("new life"))
    assert [e.text for e in (await loaded(reader, created)).events] == ["new life"]
    await writer.delete_session(app_name=APP, user_id="u1", session_id="s")
    reborn = await writer.create_session(app_name=APP, user_id="u1", session_id="s")
    assert (await loaded(reader, created)).events == []


@sql_only
async def test_a_small_session_cache_stays_correct(store: Store) -> None:
    reader, writer = store.reopen(settings=Settings(session_cache_size=1)), store.reopen()
    sessions = [await writer.create_session(app_name=APP, user_id="u1") for _ in range(3)]
    for turn in range(3):
        for n, session in enumerate(sessions):
            await writer.append_event(session, said(f"s{n}t{turn}"))
            got = await loaded(reader, session)
            assert [e.text for e in got.events] == [f"s{n}t{t}" for t in range(turn + 1)]


@sqlite_only
async def test_close_ends_the_threads_and_leaves_no_wal(store: Store, tmp_path: Path) -> None:
    before = writers()
    url = f"sqlite+aiosqlite:///{tmp_path / 'closing.db'}"
    service = SqlSessionService(url)
    session = await service.create_session(app_name=APP, user_id="u1")
    await service.append_event(session, said("x", a=1))
    await loaded(service, session)
    assert writers() - before  # the writer and a reader run
    assert (tmp_path / "closing.db-wal").exists()
    await service.close()
    assert writers() == before
    assert not (tmp_path / "closing.db-wal").exists()
    # A call after close opens everything again.
    assert (await loaded(service, session)).state == {"a": 1}
    await service.close()
    assert writers() == before
