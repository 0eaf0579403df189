"""The SQLite store's inline writes: a write runs whole on the caller's thread only when
that changes nothing but the time it takes (Settings.sqlite_inline_writes)."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from headwater.errors import SessionError
from headwater.events import Event
from headwater.sessions import Session, SqlSessionService
from headwater.settings import Settings
from headwater.types import Content

APP = "shop"
WRITER = "headwater-sqlite-writer"


class Traced:
    """A service whose statements are recorded with the thread that ran them."""

    def __init__(self, path: Path, settings: Settings | None = None, **kwargs: object) -> None:
        self.statements: list[tuple[str, str]] = []
        self.service = SqlSessionService(
            f"sqlite:///{path}", settings=settings or Settings(),
            trace=lambda sql: self.statements.append((threading.current_thread().name, sql)),
            **kwargs)  # type: ignore[arg-type]

    def begins(self) -> list[str]:
        """The threads that began write transactions, in order."""
        return [thread for thread, sql in self.statements if sql == "BEGIN IMMEDIATE"]


@pytest.fixture
async def traced(tmp_path: Path) -> AsyncIterator[Traced]:
    store = Traced(tmp_path / "sessions.db")
    yield store
    await store.service.close()


def said(text: str) -> Event:
    return Event(invocation_id="inv", author="user", content=Content.from_text(text))


async def new_session(traced: Traced, session_id: str = "s") -> Session:
    return await traced.service.create_session(app_name=APP, user_id="u", session_id=session_id)


async def stored_texts(service: SqlSessionService, session_id: str = "s") -> list[str]:
    page = await service.list_events(app_name=APP, user_id="u", session_id=session_id)
    return [event.content.parts[0].text or "" for event in page.events if event.content]


async def test_an_idle_writer_lets_the_caller_commit_at_once(traced: Traced) -> None:
    session = await new_session(traced)
    traced.statements.clear()
    await traced.service.append_event(session, said("hello"))
    assert traced.begins() == [threading.current_thread().name]
    assert await stored_texts(traced.service) == ["hello"]


@pytest.mark.parametrize("settings", [Settings(sqlite_inline_writes=False),
                                      Settings(sqlite_synchronous="FULL"),
                                      Settings(sqlite_checkpoint_every=0)],
                         ids=["turned-off", "synchronous-full", "sqlite-checkpoints"])
async def test_inline_writes_can_be_turned_off_and_never_sync_on_the_loop(
        tmp_path: Path, settings: Settings) -> None:
    traced = Traced(tmp_path / "sessions.db", settings)
    try:
        session = await new_session(traced)  # opening the store made its tables
        traced.statements.clear()
        await traced.service.append_event(session, said("hello"))
        await traced.service.create_session(app_name=APP, user_id="u")
        assert traced.begins() == [WRITER, WRITER]
    finally:
        await traced.service.close()


async def test_a_lock_held_elsewhere_is_waited_for_by_the_writer_thread(
        traced: Traced, tmp_path: Path) -> None:
    """Another process's write: the loop goes on; the write commits once the lock is free."""
    session = await new_session(traced)
    other = sqlite3.connect(tmp_path / "sessions.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    traced.statements.clear()
    write = asyncio.ensure_future(traced.service.append_event(session, said("first")))
    then = asyncio.ensure_future(traced.service.append_event(session, said("second")))
    lag = 0.0
    for _ in range(20):  # 1 s of a ticking loop while the lock is held
        before = time.monotonic()
        await asyncio.sleep(0.05)
        lag = max(lag, time.monotonic() - before - 0.05)
    assert not write.done() and not then.done()
    other.execute("COMMIT")
    other.close()
    await asyncio.wait_for(asyncio.gather(write, then), 5)
    assert lag < 0.5  # the caller's loop never waited for SQLite's lock (held 1 s)
    # The first write found the lock taken and went to the thread; the second, made
    # while the first was queued, followed it there: the order is kept.
    assert traced.begins()[-1] == WRITER
    assert await stored_texts(traced.service) == ["first", "second"]
    assert [e.content.parts[0].text for e in session.events if e.content] == ["first", "second"]


async def test_interleaved_sessions_are_committed_together_by_the_thread(traced: Traced) -> None:
    sessions = [await new_session(traced, f"s{i}") for i in range(20)]
    traced.statements.clear()

    async def turn(session: Session) -> None:
        for step in range(5):
            await traced.service.append_event(session, said(f"{session.id}-{step}"))
            await asyncio.sleep(0)

    await asyncio.gather(*(turn(session) for session in sessions))
    begins = traced.begins()
    assert WRITER in begins
    assert len(begins) < 100  # some of the 100 writes shared a transaction
    for session in sessions:
        assert await stored_texts(traced.service, session.id) == [
            f"{session.id}-{step}" for step in range(5)]


async def test_a_write_offered_while_the_store_closes_fails_at_once(traced: Traced) -> None:
    """Another loop's write that arrives as close() stops the writer is refused, not lost."""
    session = await new_session(traced)
    store = traced.service._store  # the SQLite store behind the service (white-box)
    opened = store._opened()  # type: ignore[attr-defined]
    opened.writer.stop()  # what close() does first
    refused = store.submit(  # type: ignore[attr-defined]
        (step for step in [("SELECT 1", {})]), opened)
    with pytest.raises(SessionError, match="closed before the write could run"):
        await asyncio.wait_for(refused, 1)
    opened.writer.join(5)
    assert not opened.writer.is_alive()
    assert session.events == []
