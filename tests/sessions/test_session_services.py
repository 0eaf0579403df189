"""Session stores behave alike: in memory, SQLite and PostgreSQL (docs/architecture.md).

Most tests take ``store``/``service`` and run on every store; the SQL-only and
SQLite-only ones narrow ``store`` by indirect parametrization.
"""

from __future__ import annotations

import asyncio
import sqlite3
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from headwater.core import settings as settings_module
from headwater.errors import PartialEventError, SessionError, SessionNotFoundError
from headwater.events import Event
from headwater.sessions import BaseSessionService, Session, SqlSessionService
from headwater.settings import get_settings
from headwater.types import Blob, Content, FunctionCall, FunctionResponse, Part, Usage

if TYPE_CHECKING:
    from conftest import Store

SQL_STORES = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
sql_only = pytest.mark.parametrize("store", SQL_STORES, indirect=True)
sqlite_only = pytest.mark.parametrize("store", ["sqlite"], indirect=True)

APP = "shop"


def text_event(text: str, *, author: str = "user", **delta: Any) -> Event:
    event = Event(invocation_id="inv-1", author=author,
                  content=Content.from_text(text, role="user" if author == "user" else "model"))
    event.actions.state_delta.update(delta)
    return event


def conversation() -> list[Event]:
    """A turn with everything an event can carry: text, calls, responses, usage, blobs."""
    call = FunctionCall(id="call-1", name="lookup_order",
                        args={"order_id": 1042, "fields": ["status", "eta"],
                              "filters": {"since": None, "weight": 2.5, "gift": True}})
    ask = text_event("Where is order 1042? ünïcødé ✓")
    calls = Event(
        invocation_id="inv-1", author="shop", branch="shop",
        content=Content(role="model", parts=[Part(text="Let me check."), Part(function_call=call)]),
        finish_reason="tool_calls", usage=Usage(input_tokens=12, output_tokens=7, total_tokens=19),
        long_running_tool_ids=["call-1"],
    )
    calls.actions.state_delta["last_order"] = 1042
    result = Event(
        invocation_id="inv-1", author="shop", branch="shop",
        content=Content(role="user", parts=[Part(function_response=FunctionResponse(
            id="call-1", name="lookup_order",
            response={"status": "shipped", "eta": "2024-06-01", "items": [1, 2]}))]),
    )
    answer = Event(
        invocation_id="inv-1", author="shop",
        content=Content(role="model", parts=[
            Part(text="weighing the options", thought=True),
            Part(text="It shipped on Monday."),
            Part(inline_data=Blob(mime_type="image/png", data=b"\x89PNG\r\n\x00\xff")),
        ]),
        finish_reason="stop", usage=Usage(input_tokens=30, output_tokens=9, total_tokens=39,
                                          cached_input_tokens=4, reasoning_tokens=3),
    )
    failed = Event(invocation_id="inv-2", author="shop", error_code="provider_truncated",
                   error_message="the model stream broke", interrupted=True)
    return [ask, calls, result, answer, failed]


async def all_pages(service: BaseSessionService, session_id: str, limit: int,
                    user_id: str = "u1") -> tuple[list[list[Event]], list[int | None]]:
    pages: list[list[Event]] = []
    cursors: list[int | None] = []
    cursor: int | None = None
    while True:
        page = await service.list_events(app_name=APP, user_id=user_id, session_id=session_id,
                                         after=cursor, limit=limit)
        pages.append(page.events)
        cursors.append(page.next_cursor)
        if page.next_cursor is None:
            return pages, cursors
        cursor = page.next_cursor


# -- every store ---------------------------------------------------------------------------


async def test_create_get_list_delete(service: BaseSessionService) -> None:
    initial = {"cart": ["apple"], "n": 1}
    first = await service.create_session(app_name=APP, user_id="u1", state=initial)
    initial["cart"].append("pear")  # the caller's dict is not the stored state
    chosen = await service.create_session(app_name=APP, user_id="u1", session_id="chosen")
    assert first.id and first.id != "chosen" and chosen.id == "chosen"
    assert first.state == {"cart": ["apple"], "n": 1} and first.events == []

    got = await service.get_session(app_name=APP, user_id="u1", session_id=first.id)
    assert got is not None
    assert (got.id, got.app_name, got.user_id) == (first.id, APP, "u1")
    assert got.state == {"cart": ["apple"], "n": 1} and got.events == []
    assert got.create_time == first.create_time > 0  # kept by the store, not the read

    await service.append_event(chosen, text_event("hello"))
    listed = await service.list_sessions(app_name=APP, user_id="u1")
    assert sorted(s.id for s in listed) == sorted([first.id, "chosen"])
    assert {s.id: s.create_time for s in listed} == {first.id: first.create_time,
                                                      "chosen": chosen.create_time}
    assert all(s.events == [] for s in listed)  # listing never loads history

    await service.delete_session(app_name=APP, user_id="u1", session_id="chosen")
    assert await service.get_session(app_name=APP, user_id="u1", session_id="chosen") is None
    assert [s.id for s in await service.list_sessions(app_name=APP, user_id="u1")] == [first.id]
    with pytest.raises(SessionNotFoundError):
        await service.list_events(app_name=APP, user_id="u1", session_id="chosen")
    await service.delete_session(app_name=APP, user_id="u1", session_id="chosen")  # no-op

    again = await service.create_session(app_name=APP, user_id="u1", session_id="chosen")
    reloaded = await service.get_session(app_name=APP, user_id="u1", session_id=again.id)
    assert reloaded is not None and reloaded.events == []  # the old events went too


async def test_another_users_session_is_invisible(service: BaseSessionService) -> None:
    alice = await service.create_session(app_name=APP, user_id="alice", session_id="s1",
                                         state={"secret": 1})
    await service.append_event(alice, text_event("private"))

    assert await service.get_session(app_name=APP, user_id="mallory", session_id="s1") is None
    assert await service.get_session(app_name="other-app", user_id="alice",
                                     session_id="s1") is None
    with pytest.raises(SessionNotFoundError):
        await service.list_events(app_name=APP, user_id="mallory", session_id="s1")
    assert await service.list_sessions(app_name=APP, user_id="mallory") == []
    forged = Session(id="s1", app_name=APP, user_id="mallory")
    with pytest.raises(SessionNotFoundError):
        await service.append_event(forged, text_event("injected", secret=2))
    await service.delete_session(app_name=APP, user_id="mallory", session_id="s1")

    kept = await service.get_session(app_name=APP, user_id="alice", session_id="s1")
    assert kept is not None
    assert [e.text for e in kept.events] == ["private"] and kept.state == {"secret": 1}
    # Ids are per user: Mallory's own "s1" is a different, empty session.
    mine = await service.create_session(app_name=APP, user_id="mallory", session_id="s1")
    assert mine.state == {}
    page = await service.list_events(app_name=APP, user_id="mallory", session_id="s1")
    assert page.events == []


async def test_duplicate_session_id_is_refused(service: BaseSessionService) -> None:
    await service.create_session(app_name=APP, user_id="u1", session_id="s1", state={"v": 1})
    with pytest.raises(SessionError, match="already exists"):
        await service.create_session(app_name=APP, user_id="u1", session_id="s1", state={"v": 2})
    got = await service.get_session(app_name=APP, user_id="u1", session_id="s1")
    assert got is not None and got.state == {"v": 1}


async def test_appended_events_come_back_in_order_and_intact(store: Store) -> None:
    session = await store.service.create_session(app_name=APP, user_id="u1")
    events = conversation()
    for event in events:
        returned = await store.service.append_event(session, event)
        assert returned is event
    assert session.events == events  # the caller's object follows the commits

    fresh = store.reopen()  # SQL: a new service instance on the same database
    loaded = await fresh.get_session(app_name=APP, user_id="u1", session_id=session.id)
    assert loaded is not None
    assert [e.id for e in loaded.events] == [e.id for e in events]
    assert loaded.events == events
    ask, calls, result, answer, failed = loaded.events
    assert ask.text == "Where is order 1042? ünïcødé ✓"
    assert calls.function_calls == [FunctionCall(
        id="call-1", name="lookup_order",
        args={"order_id": 1042, "fields": ["status", "eta"],
              "filters": {"since": None, "weight": 2.5, "gift": True}})]
    assert calls.usage == Usage(input_tokens=12, output_tokens=7, total_tokens=19)
    assert calls.long_running_tool_ids == ["call-1"]
    assert calls.actions.state_delta == {"last_order": 1042}
    assert result.function_responses[0].response["status"] == "shipped"
    assert answer.text == "It shipped on Monday."
    assert answer.content is not None and answer.content.thought_text == "weighing the options"
    assert answer.content.parts[2].inline_data == Blob("image/png", b"\x89PNG\r\n\x00\xff")
    assert (failed.error_code, failed.content, failed.interrupted) == (
        "provider_truncated", None, True)
    assert loaded.state == {"last_order": 1042}
    page = await fresh.list_events(app_name=APP, user_id="u1", session_id=session.id)
    assert page.events == events and page.next_cursor is None


async def test_partial_event_is_refused_and_nothing_is_stored(store: Store) -> None:
    service = store.service
    session = await service.create_session(app_name=APP, user_id="u1")
    partial = Event(author="shop", partial=True, content=Content.from_text("Wh", role="model"))
    partial.actions.state_delta["seen"] = True
    with pytest.raises(PartialEventError):
        await service.append_event(session, partial)
    assert session.events == [] and session.state == {}

    loaded = await store.reopen().get_session(app_name=APP, user_id="u1", session_id=session.id)
    assert loaded is not None and loaded.events == [] and loaded.state == {}
    page = await service.list_events(app_name=APP, user_id="u1", session_id=session.id)
    assert page.events == []


async def test_state_delta_lands_with_its_event_and_temp_keys_do_not(store: Store) -> None:
    service = store.service
    session = await service.create_session(app_name=APP, user_id="u1",
                                           state={"a": 1, "keep": "x"})
    await service.append_event(session, text_event(
        "hi", a=2, profile={"tags": ["vip"], "score": 0.5}, **{"temp:scratch": "y"}))
    await service.append_event(session, text_event("no delta"))
    expected = {"a": 2, "keep": "x", "profile": {"tags": ["vip"], "score": 0.5}}
    assert session.state == expected

    loaded = await store.reopen().get_session(app_name=APP, user_id="u1", session_id=session.id)
    assert loaded is not None and loaded.state == expected
    assert [s.state for s in await service.list_sessions(app_name=APP, user_id="u1")] == [expected]


async def test_append_to_a_deleted_session_fails_and_stores_nothing(
    service: BaseSessionService,
) -> None:
    session = await service.create_session(app_name=APP, user_id="u1", session_id="gone")
    await service.delete_session(app_name=APP, user_id="u1", session_id="gone")
    with pytest.raises(SessionNotFoundError):
        await service.append_event(session, text_event("late", x=1))
    assert session.events == [] and session.state == {}
    await service.create_session(app_name=APP, user_id="u1", session_id="gone")
    page = await service.list_events(app_name=APP, user_id="u1", session_id="gone")
    assert page.events == []  # no orphan event was left behind


@pytest.mark.parametrize(("count", "sizes"), [(250, [100, 100, 50]), (200, [100, 100]), (0, [0])])
async def test_list_events_pages_in_commit_order(
    store: Store, count: int, sizes: list[int]
) -> None:
    service = store.service
    session = await service.create_session(app_name=APP, user_id="u1")
    events = [text_event(f"m{i}") for i in range(count)]
    for event in events:
        await service.append_event(session, event)

    pages, cursors = await all_pages(service, session.id, limit=100)
    assert [len(p) for p in pages] == sizes
    assert [e.id for p in pages for e in p] == [e.id for e in events]
    assert cursors[-1] is None
    middle = [c for c in cursors[:-1] if c is not None]
    assert len(middle) == len(sizes) - 1 and middle == sorted(set(middle))
    if count == 250:  # a cursor stays valid for another instance (a reconnecting client)
        page = await store.reopen().list_events(app_name=APP, user_id="u1",
                                                session_id=session.id, after=cursors[0])
        assert [e.id for e in page.events] == [e.id for e in pages[1]]
        assert page.next_cursor == cursors[1]


async def test_list_events_of_a_missing_session_raises(service: BaseSessionService) -> None:
    with pytest.raises(SessionNotFoundError):
        await service.list_events(app_name=APP, user_id="u1", session_id="nope")


async def test_list_sessions_most_recently_updated_first(service: BaseSessionService) -> None:
    a = await service.create_session(app_name=APP, user_id="u1", session_id="a")
    b = await service.create_session(app_name=APP, user_id="u1", session_id="b")
    await service.create_session(app_name=APP, user_id="u1", session_id="c")
    await service.create_session(app_name=APP, user_id="u2", session_id="theirs")
    later = text_event("b first")
    later.timestamp += 60
    latest = text_event("a last")
    latest.timestamp += 120
    await service.append_event(b, later)
    await service.append_event(a, latest)

    listed = await service.list_sessions(app_name=APP, user_id="u1")
    assert [s.id for s in listed] == ["a", "b", "c"]
    assert listed[0].last_update_time == pytest.approx(latest.timestamp)


async def test_concurrent_appends_all_land_in_one_order(store: Store) -> None:
    service = store.service
    session = await service.create_session(app_name=APP, user_id="u1", state={"base": 0})
    events = [text_event(f"m{i}", **{f"k{i}": i}) for i in range(50)]
    await asyncio.gather(*(service.append_event(session, e) for e in events))

    pages, cursors = await all_pages(service, session.id, limit=1)
    committed = [p[0].id for p in pages if p]
    assert sorted(committed) == sorted(e.id for e in events)
    steps = [c for c in cursors if c is not None]
    assert len(steps) == 49 and steps == sorted(set(steps))  # distinct, increasing
    loaded = await store.reopen().get_session(app_name=APP, user_id="u1", session_id=session.id)
    assert loaded is not None
    assert [e.id for e in loaded.events] == committed
    assert loaded.state == {"base": 0, **{f"k{i}": i for i in range(50)}}


# -- SQL stores ----------------------------------------------------------------------------


@sql_only
async def test_failed_event_insert_leaves_state_unchanged(store: Store) -> None:
    service = store.service
    session = await service.create_session(app_name=APP, user_id="u1")
    first = text_event("one", n=1)
    await service.append_event(session, first)

    clash = text_event("two", n=2, other=True)
    clash.id = first.id  # the insert fails after the state update in the same transaction
    with pytest.raises(SessionError):
        await service.append_event(session, clash)
    assert session.state == {"n": 1} and session.events == [first]

    loaded = await store.reopen().get_session(app_name=APP, user_id="u1", session_id=session.id)
    assert loaded is not None
    assert loaded.state == {"n": 1} and [e.text for e in loaded.events] == ["one"]


@sql_only
async def test_appends_from_two_instances_keep_state_consistent(store: Store) -> None:
    created = await store.service.create_session(app_name=APP, user_id="u1")
    other = store.reopen()  # its own pool: another replica's connections
    views = [created, await other.get_session(app_name=APP, user_id="u1", session_id=created.id)]
    assert views[1] is not None
    services = [store.service, other]
    writes = [services[i % 2].append_event(views[i % 2], text_event(f"m{i}", **{f"k{i}": i}))
              for i in range(40)]
    await asyncio.gather(*writes)

    loaded = await store.reopen().get_session(app_name=APP, user_id="u1", session_id=created.id)
    assert loaded is not None
    assert len(loaded.events) == 40 and len({e.id for e in loaded.events}) == 40
    assert loaded.state == {f"k{i}": i for i in range(40)}


def test_postgres_url_needs_asyncpg(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "asyncpg", None)
    with pytest.raises(ImportError, match=r'pip install "headwater\[postgres\]"'):
        SqlSessionService("postgresql+asyncpg://u@127.0.0.1:5432/db")


def test_plain_postgres_url_gets_asyncpg_and_repr_hides_password() -> None:
    shown = repr(SqlSessionService("postgresql://app:s3cret@127.0.0.1:5432/db"))
    assert "postgresql+asyncpg://app:***@127.0.0.1:5432/db" in shown
    assert "s3cret" not in shown


# -- SQLite --------------------------------------------------------------------------------


def sqlite_path(store: Store) -> Path:
    assert store.url is not None
    return Path(store.url.removeprefix("sqlite+aiosqlite:///"))


async def pragma(service: SqlSessionService, name: str) -> Any:
    return (await service.pragmas())[name]  # the writer connection's settings


@sqlite_only
async def test_sqlite_pragmas_are_in_effect(store: Store) -> None:
    default = store.service
    assert isinstance(default, SqlSessionService)
    await default.create_session(app_name=APP, user_id="u1")
    raw = sqlite3.connect(sqlite_path(store))
    try:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        raw.close()
    levels = {"OFF": 0, "NORMAL": 1, "FULL": 2, "EXTRA": 3}
    assert await pragma(default, "synchronous") == levels[get_settings().sqlite_synchronous]
    assert await pragma(default, "busy_timeout") == get_settings().sqlite_busy_timeout_ms
    assert await pragma(default, "foreign_keys") == 1
    assert await pragma(default, "journal_mode") == "wal"

    normal = store.reopen(synchronous="NORMAL", busy_timeout_ms=1234)
    full = store.reopen(synchronous="FULL")
    assert isinstance(normal, SqlSessionService) and isinstance(full, SqlSessionService)
    assert await pragma(normal, "synchronous") == 1
    assert await pragma(normal, "busy_timeout") == 1234
    assert await pragma(full, "synchronous") == 2


@sqlite_only
async def test_sqlite_writes_begin_immediate_and_reads_do_not(store: Store) -> None:
    statements: list[str] = []
    service = store.reopen(trace=statements.append)
    assert isinstance(service, SqlSessionService)
    session = await service.create_session(app_name=APP, user_id="u1", session_id="s")

    async def first_statement(operation: Any) -> str:
        statements.clear()
        await operation
        # A write run at once on the caller's thread asks SQLite not to wait for the
        # lock around its BEGIN (sqlite_inline_writes); the transaction is the same.
        return next(s for s in statements if not s.startswith("PRAGMA busy_timeout"))

    assert await first_statement(service.create_session(app_name=APP, user_id="u1")) \
        == "BEGIN IMMEDIATE"
    assert await first_statement(service.append_event(session, text_event("x", a=1))) \
        == "BEGIN IMMEDIATE"
    assert await first_statement(service.delete_session(app_name=APP, user_id="u1",
                                                        session_id="none")) == "BEGIN IMMEDIATE"
    assert await first_statement(service.get_session(app_name=APP, user_id="u1",
                                                     session_id="s")) == "BEGIN"
    assert await first_statement(service.list_sessions(app_name=APP, user_id="u1")) == "BEGIN"
    assert await first_statement(service.list_events(app_name=APP, user_id="u1",
                                                     session_id="s")) == "BEGIN"


@sqlite_only
async def test_sqlite_writer_waits_for_the_lock_and_loses_no_update(store: Store) -> None:
    """Another process writes the same session while we append.

    With a deferred BEGIN, our append would read the state, then fail at its
    first write once the other commit made that read stale (SQLITE_BUSY, no
    waiting). BEGIN IMMEDIATE waits for the lock, then reads the fresh state.
    """
    service = store.service
    session = await service.create_session(app_name=APP, user_id="u1", session_id="s")
    other = sqlite3.connect(sqlite_path(store), isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        other.execute("UPDATE hw_sessions SET state = ? WHERE id = 's'", ('{"other": 1}',))
        # Reads are not blocked by a writer (WAL).
        assert await service.get_session(app_name=APP, user_id="u1", session_id="s") is not None
        asyncio.get_running_loop().call_later(0.3, other.execute, "COMMIT")
        await service.append_event(session, text_event("mine", mine=2))
    finally:
        other.close()
    loaded = await store.reopen().get_session(app_name=APP, user_id="u1", session_id="s")
    assert loaded is not None and loaded.state == {"other": 1, "mine": 2}
    assert [e.text for e in loaded.events] == ["mine"]


@sqlite_only
async def test_sqlite_writer_gives_up_after_busy_timeout(store: Store) -> None:
    impatient = store.reopen(busy_timeout_ms=100)
    session = await impatient.create_session(app_name=APP, user_id="u1", session_id="s")
    other = sqlite3.connect(sqlite_path(store), isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        with pytest.raises(SessionError, match="locked"):
            await impatient.append_event(session, text_event("blocked", x=1))
        other.execute("ROLLBACK")
    finally:
        other.close()
    assert session.events == [] and session.state == {}
    loaded = await impatient.get_session(app_name=APP, user_id="u1", session_id="s")
    assert loaded is not None and loaded.events == [] and loaded.state == {}


async def test_default_url_is_a_sqlite_file_under_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HEADWATER_DATABASE_URL", raising=False)
    monkeypatch.setattr(settings_module, "_settings", None)  # re-read the environment
    service = SqlSessionService()
    try:
        created = await service.create_session(app_name=APP, user_id="u1")
    finally:
        await service.close()
    database = tmp_path / ".headwater" / "sessions.db"
    assert database.is_file()
    raw = sqlite3.connect(database)
    try:
        ids = raw.execute("SELECT id FROM hw_sessions").fetchall()
    finally:
        raw.close()
    assert ids == [(created.id,)]


def test_sqlite_service_follows_a_new_event_loop(tmp_path: Path) -> None:
    """Used from a second loop (a second ``asyncio.run``), the service reconnects cleanly."""
    service = SqlSessionService(f"sqlite+aiosqlite:///{tmp_path / 'loops.db'}")

    async def first() -> None:
        session = await service.create_session(app_name=APP, user_id="u1", session_id="s")
        await service.append_event(session, text_event("from loop one", n=1))

    async def second() -> Session | None:
        try:
            return await service.get_session(app_name=APP, user_id="u1", session_id="s")
        finally:
            await service.close()

    asyncio.run(first())
    loaded = asyncio.run(second())
    assert loaded is not None and loaded.state == {"n": 1}
    assert [e.text for e in loaded.events] == ["from loop one"]
