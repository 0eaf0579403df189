"""A session is held by one run at a time, across services and processes (docs/architecture.md)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import time
from typing import TYPE_CHECKING

import pytest

from headwater.errors import (
    LeaseLostError,
    PartialEventError,
    SessionBusyError,
    SessionNotFoundError,
)
from headwater.events import Event
from headwater.sessions import BaseSessionService, Lease
from headwater.types import Content, FunctionResponse, Part

if TYPE_CHECKING:
    from conftest import Store

APP = "shop"
SQL_STORES = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


def said(text: str, **delta: object) -> Event:
    event = Event(invocation_id="inv", author="user", content=Content.from_text(text))
    event.actions.state_delta.update(delta)
    return event


async def take(service: BaseSessionService, run_id: str, *, ttl: float = 60.0,
               owner: str | None = None, wait: float = 0.0) -> Lease:
    return await service.acquire_lease(app_name=APP, user_id="u1", session_id="s",
                                       owner=owner or f"runner-{run_id}", run_id=run_id,
                                       ttl=ttl, wait=wait)


async def expire(lease: Lease) -> None:
    """Wait until ``lease`` is past its expiry (a short TTL; no timing is asserted)."""
    await asyncio.sleep(max(lease.expires_at - time.time(), 0.0) + 0.02)
    assert time.time() > lease.expires_at


async def stored_texts(store: Store) -> list[str]:
    loaded = await store.reopen().get_session(app_name=APP, user_id="u1", session_id="s")
    assert loaded is not None
    return [e.text for e in loaded.events]


async def test_two_services_one_session_one_holder(store: Store) -> None:
    await store.service.create_session(app_name=APP, user_id="u1", session_id="s")
    first, second = store.reopen(), store.reopen()  # two runners (one service in memory)
    held = await take(first, "run-a")
    assert (held.owner, held.run_id, held.took_over) == ("runner-run-a", "run-a", None)
    with pytest.raises(SessionBusyError) as busy:
        await take(second, "run-b")
    assert not isinstance(busy.value, LeaseLostError) and busy.value.code == "session_busy"
    with pytest.raises(SessionBusyError):
        await take(second, "run-b", wait=0.1)  # still held after waiting

    again = await take(first, "run-a")  # the holder asking again extends its lease
    assert again.expires_at >= held.expires_at and again.took_over is None
    await first.release_lease(again)
    await first.release_lease(again)  # idempotent
    after = await take(second, "run-b")
    assert after.took_over is None  # released cleanly: nothing to repair


async def test_missing_session_has_no_lease(store: Store) -> None:
    with pytest.raises(SessionNotFoundError):
        await take(store.service, "run-a")
    await store.service.create_session(app_name=APP, user_id="u1", session_id="s")
    with pytest.raises(SessionNotFoundError):  # another user's session is a missing one
        await store.service.acquire_lease(app_name=APP, user_id="u2", session_id="s",
                                          owner="o", run_id="r", ttl=60)


async def test_expired_lease_is_taken_over_and_fences_the_old_run(store: Store) -> None:
    session = await store.service.create_session(app_name=APP, user_id="u1", session_id="s")
    old_service, new_service = store.reopen(), store.reopen()
    old = await take(old_service, "run-old", ttl=0.05)
    await old_service.append_event(session, said("before", n=1), lease=old)
    await expire(old)
    # Past expiry but not taken over: the old run's writes and renewal still count.
    await old_service.append_event(session, said("late but ours", n=2), lease=old)
    old = await old_service.renew_lease(old, 0.05)
    await expire(old)

    new = await take(new_service, "run-new")
    assert new.took_over == "run-old"
    with pytest.raises(LeaseLostError):
        await old_service.append_event(session, said("after takeover", n=3), lease=old)
    assert [e.text for e in session.events] == ["before", "late but ours"]
    assert session.state == {"n": 2}
    with pytest.raises(LeaseLostError):
        await old_service.renew_lease(old, 60)
    await old_service.release_lease(old)  # not ours any more: a no-op
    with pytest.raises(SessionBusyError):
        await take(old_service, "run-third")

    assert await stored_texts(store) == ["before", "late but ours"]
    loaded = await store.reopen().get_session(app_name=APP, user_id="u1", session_id="s")
    assert loaded is not None and loaded.state == {"n": 2}
    await new_service.append_event(session, said("new run", n=4), lease=new)
    renewed = await new_service.renew_lease(new, 60)
    assert renewed.took_over == "run-old"  # still says what it replaced
    assert await stored_texts(store) == ["before", "late but ours", "new run"]


async def test_waiting_acquire_gets_the_session_when_released(store: Store) -> None:
    await store.service.create_session(app_name=APP, user_id="u1", session_id="s")
    first, second = store.reopen(), store.reopen()
    held = await take(first, "run-a")

    async def release_soon() -> None:
        await asyncio.sleep(0.1)
        await first.release_lease(held)

    releasing = asyncio.create_task(release_soon())
    got = await take(second, "run-b", wait=30)
    await releasing
    assert got.run_id == "run-b" and got.took_over is None


async def test_released_lease_fences_its_writes(store: Store) -> None:
    session = await store.service.create_session(app_name=APP, user_id="u1", session_id="s")
    held = await take(store.service, "run-a")
    await store.service.release_lease(held)
    with pytest.raises(LeaseLostError):
        await store.service.append_event(session, said("unheld"), lease=held)
    assert session.events == [] and await stored_texts(store) == []


async def test_deleting_a_session_drops_its_lease(store: Store) -> None:
    await store.service.create_session(app_name=APP, user_id="u1", session_id="s")
    held = await take(store.service, "run-a")
    await store.service.delete_session(app_name=APP, user_id="u1", session_id="s")
    with pytest.raises(LeaseLostError):
        await store.service.renew_lease(held, 60)
    await store.service.create_session(app_name=APP, user_id="u1", session_id="s")
    assert (await take(store.reopen(), "run-b")).took_over is None


CONTENDER = textwrap.dedent("""
    import asyncio, sys
    from headwater.errors import SessionBusyError
    from headwater.sessions import SqlSessionService

    async def main(url, run_id):
        service = SqlSessionService(url)
        try:
            await service.get_session(app_name="shop", user_id="u1", session_id="s")
            print("ready", flush=True)
            sys.stdin.readline()  # both processes start their attempt together
            try:
                await service.acquire_lease(app_name="shop", user_id="u1", session_id="s",
                                            owner=f"process-{run_id}", run_id=run_id, ttl=60)
            except SessionBusyError:
                print("busy", flush=True)
            else:
                print("won", flush=True)
        finally:
            await service.close()

    asyncio.run(main(sys.argv[1], sys.argv[2]))
""")


def contend(url: str) -> list[str]:
    """Two processes ask for the lease together; what each said ("won" or "busy")."""
    children = [subprocess.Popen([sys.executable, "-c", CONTENDER, url, f"run-{i}"],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                for i in range(2)]
    try:
        for child in children:
            assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        outcomes = [child.communicate(timeout=30)[0].strip() for child in children]
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait(10)
    assert [child.returncode for child in children] == [0, 0]
    return outcomes


@pytest.mark.slow
@pytest.mark.parametrize("store", SQL_STORES, indirect=True)
async def test_two_processes_one_session_one_holder(store: Store) -> None:
    assert store.url is not None
    await store.service.create_session(app_name=APP, user_id="u1", session_id="s")
    outcomes = await asyncio.to_thread(contend, store.url)
    assert sorted(outcomes) == ["busy", "won"]
    # The winner's process has ended without releasing: its lease is taken over at once.
    taken = await take(store.service, "run-parent")
    assert taken.took_over == f"run-{outcomes.index('won')}"


# -- the lease and the run's first event in one write ---------------------------------------


async def take_with(service: BaseSessionService, run_id: str, event: Event, after: str | None,
                    *, owner: str | None = None) -> tuple[Lease, bool]:
    return await service.acquire_lease_and_append(
        app_name=APP, user_id="u1", session_id="s", owner=owner or f"runner-{run_id}",
        run_id=run_id, ttl=60, event=event, after=after)


async def test_the_lease_takes_the_event_only_after_the_history_it_names(store: Store) -> None:
    service = store.service
    await service.create_session(app_name=APP, user_id="u1", session_id="s")
    first = said("hi", n=1)
    lease, stored = await take_with(service, "run-a", first, None)  # None: no event yet
    assert stored and lease.run_id == "run-a"
    session = await service.get_session(app_name=APP, user_id="u1", session_id="s")
    assert session is not None and [e.text for e in session.events] == ["hi"]
    assert session.state == {"n": 1}  # its state delta, as append_event applies it
    assert await stored_texts(store) == ["hi"]
    with pytest.raises(SessionBusyError):  # the lease is held
        await take(store.reopen(), "run-b")

    # The history no longer ends where the caller thinks: the lease alone.
    lease, stored = await take_with(service, "run-a", said("stale"), None)
    assert not stored and lease.run_id == "run-a"
    lease, stored = await take_with(service, "run-a", said("again"), first.id)
    assert stored
    await service.release_lease(lease)
    assert await stored_texts(store) == ["hi", "again"]

    # Busy: refused whole, nothing stored.
    other = await take(store.reopen(), "run-b")
    with pytest.raises(SessionBusyError):
        await take_with(service, "run-c", said("refused"), None)
    with pytest.raises(SessionBusyError):
        await take_with(service, "run-c", said("refused"), session.events[-1].id)
    await store.reopen().release_lease(other)
    assert await stored_texts(store) == ["hi", "again"]


async def test_the_first_event_is_checked_like_any_append(store: Store) -> None:
    await store.service.create_session(app_name=APP, user_id="u1", session_id="s")
    answer = Event(invocation_id="inv", author="user", content=Content(
        "user", [Part(function_response=FunctionResponse(id="c1", name="f", response={}))]))
    with pytest.raises(ValueError, match="append_event"):
        await take_with(store.service, "run-a", answer, None)
    with pytest.raises(PartialEventError):
        await take_with(store.service, "run-a", Event(author="bot", partial=True), None)
    with pytest.raises(SessionNotFoundError):
        await store.service.acquire_lease_and_append(
            app_name=APP, user_id="u2", session_id="s", owner="o", run_id="r", ttl=60,
            event=said("hi"), after=None)
    await take(store.reopen(), "run-b")  # nothing above took the lease


@pytest.mark.parametrize("store", SQL_STORES, indirect=True)
async def test_the_lease_and_the_event_are_one_transaction(store: Store) -> None:
    statements: list[str] = []
    service = store.reopen(trace=statements.append)
    await service.create_session(app_name=APP, user_id="u1", session_id="s")
    statements.clear()
    lease, stored = await take_with(service, "run-a", said("hi"), None)
    assert stored
    if store.kind == "sqlite":
        assert [s for s in statements if s.startswith("BEGIN")] == ["BEGIN IMMEDIATE"]
    inserts = [s for s in statements if s.startswith("INSERT INTO hw_events")]
    assert len(inserts) == 1
    statements.clear()
    session = await service.get_session(app_name=APP, user_id="u1", session_id="s")
    assert session is not None and [e.text for e in session.events] == ["hi"]
    assert statements == []  # served from what the write returned: nothing read
    await service.append_event(session, said("answer"), lease=lease, release=True)
    assert await stored_texts(store) == ["hi", "answer"]
