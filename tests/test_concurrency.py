"""A record you can trust under load: the runner's guarantees with several runs at once.

Two runners, or two processes, on one session: one run holds it, the other is
refused, and history never interleaves. A cancel at any point around a commit,
a store that fails mid-run, a lease taken over mid-run: each call still has
exactly one stored result and the next run builds a valid model request. And
many sessions at once through the runner on one SQLite file: no errors.

Everything goes through the public API, on real SQLite files under ``tmp_path``
and on real PostgreSQL (skipped locally without ``HEADWATER_TEST_POSTGRES_URL``,
failing in CI without it).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import subprocess
import sys
import textwrap
from collections import Counter
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

import pytest

from headwater import Agent, Event, RunConfig, Runner, StreamingMode, tool
from headwater.errors import SessionBusyError, SessionError
from headwater.models import LlmRequest
from headwater.sessions import (
    BaseSessionService,
    InMemorySessionService,
    Lease,
    Session,
    SqlSessionService,
)
from headwater.settings import Settings
from headwater.testing import ScriptedCall, ScriptedModel
from headwater.testing import ScriptedTurn as Turn
from headwater.types import Content, FunctionCall, Part


def _sessions_conftest() -> ModuleType:
    """tests/sessions/conftest.py, for its store helpers (it is not a package)."""
    path = Path(__file__).parent / "sessions" / "conftest.py"
    spec = importlib.util.spec_from_file_location("headwater_sessions_conftest", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while decorating
    spec.loader.exec_module(module)
    return module


open_store = _sessions_conftest().open_store

APP = "app"
USER = "u"
SSE = RunConfig(streaming_mode=StreamingMode.SSE)
SQL = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture
async def sql_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    """A SQL store (SQLite file or a fresh PostgreSQL database); ``reopen()`` for more services."""
    async with open_store(request.param, request, tmp_path) as opened:
        yield opened


# -- what a trustworthy record looks like --------------------------------------------------


def final_results(events: Sequence[Event]) -> Counter[str]:
    """How many final results each call id has in stored history (tickets excluded)."""
    found: Counter[str] = Counter()
    for event in events:
        for response in event.function_responses:
            if response.id not in event.long_running_tool_ids:
                found[response.id] += 1
    return found


def calls_of(events: Sequence[Event]) -> list[FunctionCall]:
    return [call for event in events for call in event.function_calls]


def assert_one_result_per_call(events: Sequence[Event]) -> None:
    """Every call has exactly one final result (a result or a seal, never both)."""
    assert not any(e.partial for e in events)
    calls = [c.id for c in calls_of(events)]
    assert len(calls) == len(set(calls)), f"a call id made twice: {calls}"
    results = final_results(events)
    assert results == Counter(calls), f"calls {calls} vs results {dict(results)}"


def assert_valid_request(request: LlmRequest) -> None:
    """Each call is followed, before anything else, by exactly its one result."""
    open_calls: list[str] = []
    for content in request.contents:
        responses = [r.id for r in content.function_responses]
        if responses:
            assert sorted(responses) == sorted(open_calls), (responses, open_calls)
            assert not any(r.response.get("status") == "pending"
                           for r in content.function_responses)
            open_calls = []
            continue
        assert not open_calls, f"calls without results: {open_calls}"
        open_calls = [c.id for c in content.function_calls]
    assert not open_calls, f"calls without results at the end: {open_calls}"


async def stored(service: BaseSessionService, session_id: str) -> list[Event]:
    session = await service.get_session(app_name=APP, user_id=USER, session_id=session_id)
    assert session is not None
    return session.events


def run(runner: Runner, session_id: str, message: str = "go") -> Any:
    return runner.run_async(user_id=USER, session_id=session_id, new_message=message,
                            run_config=SSE)


async def consume(runner: Runner, session_id: str, message: str = "go") -> list[Event]:
    return [event async for event in run(runner, session_id, message)]


def tool_then_answer(request: LlmRequest) -> Turn:
    """A model that calls ``work`` once per user message, then answers in a few chunks."""
    last = request.contents[-1]
    if last.function_responses:
        return Turn(text=("all ", "done ", "here"))
    if last.role == "user" and last.text == "go":
        return Turn(calls=[_call("work")])
    return Turn(text=("next ", "turn"))


def _call(name: str, **args: Any) -> ScriptedCall:
    return ScriptedCall(name, args)


# -- 1. two runners on one session ---------------------------------------------------------


@pytest.mark.parametrize("sql_store", SQL, indirect=True)
@pytest.mark.parametrize("idempotent", [False, True], ids=["plain", "idempotent"])
async def test_two_runners_one_session_one_proceeds(sql_store: Any, idempotent: bool) -> None:
    started, release = asyncio.Event(), asyncio.Event()
    executed: list[str] = []

    @tool(idempotent=idempotent)
    async def hold(who: str) -> str:
        """Block until released."""
        executed.append(who)
        started.set()
        await release.wait()
        return f"held by {who}"

    settings = Settings(session_lock_timeout=0)
    models = {who: ScriptedModel().call("hold", {"who": who}, call_id=f"{who}-1")
              .reply("done ", who) for who in ("a", "b")}
    runners = {who: Runner(agent=Agent(name="bot", model=model, tools=[hold]), app_name=APP,
                           session_service=sql_store.reopen(), settings=settings)
               for who, model in models.items()}
    await sql_store.service.create_session(app_name=APP, user_id=USER, session_id="s")

    streams = {who: run(runner, "s") for who, runner in runners.items()}
    tasks = {who: asyncio.create_task(_collect(stream)) for who, stream in streams.items()}
    await asyncio.wait_for(started.wait(), 10)
    done, _ = await asyncio.wait(tasks.values(), timeout=10,
                                 return_when=asyncio.FIRST_COMPLETED)
    assert len(done) == 1
    [loser] = [who for who, task in tasks.items() if task in done]
    [winner] = [who for who in tasks if who != loser]
    with pytest.raises(SessionBusyError):
        tasks[loser].result()
    # Still held mid-tool: a third try is refused too, and repairs nothing.
    with pytest.raises(SessionBusyError):
        await consume(runners[loser], "s", "again")
    release.set()
    events = await asyncio.wait_for(tasks[winner], 10)

    assert executed == [winner]  # exactly once; the refused runs never ran (or re-ran) it
    assert models[loser].requests == []
    assert events[-1].text == f"done {winner}"
    history = await stored(sql_store.reopen(), "s")
    assert {e.invocation_id for e in history} == {streams[winner].invocation_id}
    assert history[0].text == "go"  # the user's message, then exactly what the winner yielded
    assert [e.id for e in history[1:]] == [e.id for e in events if not e.partial]
    assert_one_result_per_call(history)
    assert [r.response for r in history[2].function_responses] == [
        {"result": f"held by {winner}"}]


async def _collect(stream: Any) -> list[Event]:
    return [event async for event in stream]


# -- 2. two OS processes on one session ----------------------------------------------------

CHILD = textwrap.dedent("""
    import asyncio, json, sys
    from headwater import Agent, RunConfig, Runner, StreamingMode
    from headwater.sessions import SqlSessionService
    from headwater.testing import ScriptedModel

    executions = 0

    async def hold() -> str:
        "Block until the parent says go (on stdin)."
        global executions
        executions += 1
        print(json.dumps({"tool_started": executions}), flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        return "child held it"

    async def main(url):
        model = ScriptedModel().call("hold", call_id="child-1").reply("child ", "done")
        runner = Runner(agent=Agent(name="bot", model=model, tools=[hold]), app_name="app",
                        session_service=SqlSessionService(url))
        async with runner:
            async for event in runner.run_async(
                    user_id="u", session_id="s", new_message="go",
                    run_config=RunConfig(streaming_mode=StreamingMode.SSE)):
                if not event.partial:
                    print(json.dumps({"id": event.id, "error": event.error_code}), flush=True)
        print(json.dumps({"executions": executions}), flush=True)

    asyncio.run(main(sys.argv[1]))
""")


@pytest.mark.slow
@pytest.mark.parametrize("sql_store", SQL, indirect=True)
async def test_two_processes_one_session(sql_store: Any, child_env: dict[str, str]) -> None:
    service = sql_store.service
    await service.create_session(app_name=APP, user_id=USER, session_id="s")
    parent_model = ScriptedModel().reply("parent ", "turn")
    runner = Runner(agent=Agent(name="bot", model=parent_model), app_name=APP,
                    session_service=sql_store.reopen(), settings=Settings(session_lock_timeout=0))

    with await asyncio.to_thread(_spawn_child, sql_store.url, child_env) as child:
        assert child.stdin is not None and child.stdout is not None
        try:
            first = json.loads(await asyncio.to_thread(_line_after_events, child.stdout))
            assert first == {"tool_started": 1}
            with pytest.raises(SessionBusyError):  # the child holds it mid-tool
                await consume(runner, "s", "me too")
            assert parent_model.requests == []
            child.stdin.write("go\n")
            child.stdin.flush()
            rest, _ = await asyncio.to_thread(child.communicate, timeout=30)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait(10)
    assert child.returncode == 0
    lines = [json.loads(line) for line in rest.splitlines()]
    assert lines[-1] == {"executions": 1}
    assert all(line.get("error") is None for line in lines[:-1])

    events = await consume(runner, "s", "me too")  # the child finished: the parent proceeds
    assert events[-1].text == "parent turn"
    history = await stored(sql_store.reopen(), "s")
    assert_one_result_per_call(history)
    assert [r.response for e in history for r in e.function_responses] == [
        {"result": "child held it"}]
    assert_valid_request(parent_model.requests[0])
    assert len({e.invocation_id for e in history}) == 2


def _spawn_child(url: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", CHILD, url], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=env)


def _line_after_events(stdout: Any) -> str:
    """The child's first line that is not an event record (its tool starting)."""
    for line in stdout:
        if "tool_started" in line:
            return str(line)
    raise AssertionError("the child ended before its tool started")


# -- 3. a cancel at every point around a commit --------------------------------------------


T = TypeVar("T")


class CancelAround:
    """A session service that cancels ``victim`` (the consuming task) around its ``at``-th append.

    The run's first write, its lease with the user's message, counts as an append.

    ``before``: the cancel lands before the write starts (nothing stored);
    ``during``: while the write is under way (it still commits whole);
    ``after``: right after the write returned (committed, the caller cancelled).
    """

    at: int = 0
    where: str = "after"
    appends: int = 0
    victim: asyncio.Task[Any] | None = None

    async def append_event(self, session: Session, event: Event, *,
                           lease: Lease | None = None, release: bool = False) -> Event:
        return await self._around(super().append_event(  # type: ignore[misc]
            session, event, lease=lease, release=release))

    async def acquire_lease_and_append(self, **kwargs: Any) -> tuple[Lease, bool]:
        """The run's first write: its lease with the user's message."""
        return await self._around(super().acquire_lease_and_append(**kwargs))  # type: ignore[misc]

    async def _around(self, write: Coroutine[Any, Any, T]) -> T:
        self.appends += 1
        if self.appends != self.at:
            return await write
        assert self.victim is not None
        if self.where == "before":
            write.close()
            self.victim.cancel()
            raise asyncio.CancelledError  # the write never starts
        if self.where == "during":
            self.victim.cancel()
        result = await write
        if self.where == "after":
            self.victim.cancel()
        return result


class CancellingMemory(CancelAround, InMemorySessionService):
    pass


class CancellingSql(CancelAround, SqlSessionService):
    pass


def _cancelling_service(kind: str, tmp_path: Path) -> Any:
    """``sqlite``: the defaults, where an idle writer lets the caller commit at once;
    ``sqlite-queued``: every write goes through the writer thread, so a cancel can
    land while the thread runs it."""
    if kind == "memory":
        return CancellingMemory()
    return CancellingSql(f"sqlite+aiosqlite:///{tmp_path / 'cancel.db'}",
                         settings=Settings(sqlite_inline_writes=kind == "sqlite"))


def _tool_turn_runner(service: Any) -> tuple[Runner, ScriptedModel, list[int]]:
    """A runner whose model calls ``work`` then answers; ``executed`` counts the calls."""
    executed, work = _work_counter()
    model = ScriptedModel(responder=tool_then_answer)
    runner = Runner(agent=Agent(name="bot", model=model, tools=[work]), app_name=APP,
                    session_service=service, settings=Settings(session_lock_timeout=5))
    return runner, model, executed


def _work_counter() -> tuple[list[int], Callable[..., Any]]:
    executed: list[int] = []

    async def work() -> str:
        """Do a little work."""
        executed.append(1)
        await asyncio.sleep(0)
        return "worked"

    return executed, work


async def _check_after_cancel(runner: Runner, model: ScriptedModel, session_id: str,
                              executed: list[int], *, sealed: bool = True) -> list[Event]:
    """The cancelled run left one result per call, and the next run builds a valid request.

    ``sealed=False``: the store stayed down, so the run could not seal its calls;
    the next run repairs them.
    """
    service = runner.session_service
    history = await stored(service, session_id)
    if sealed:
        assert_one_result_per_call(history)
    assert len(executed) <= len(calls_of(history))  # never re-run
    seen = len(model.requests)
    events = await consume(runner, session_id, "again")
    assert events[-1].error_code is None and events[-1].text == "next turn"
    assert len(model.requests) == seen + 1
    assert_valid_request(model.requests[-1])
    history = await stored(service, session_id)
    assert_one_result_per_call(history)
    return history


@pytest.mark.parametrize("kind", ["memory", "sqlite", "sqlite-queued"])
@pytest.mark.parametrize("where", ["before", "during", "after"])
async def test_cancel_around_each_commit_leaves_one_result_per_call(
        kind: str, where: str, tmp_path: Path) -> None:
    service = _cancelling_service(kind, tmp_path)
    runner, model, executed = _tool_turn_runner(service)
    outcomes: list[str] = []
    try:
        # A tool turn commits: the user's message, the call, its result, the answer.
        for at in range(1, 6):
            session_id = f"s{at}"
            await service.create_session(app_name=APP, user_id=USER, session_id=session_id)
            service.at, service.where, service.appends = at, where, 0
            executed.clear()
            task = service.victim = asyncio.create_task(consume(runner, session_id))
            await asyncio.gather(task, return_exceptions=True)
            outcomes.append("cancelled" if task.cancelled() else "finished")
            service.at = 0
            history = await _check_after_cancel(runner, model, session_id, executed)
            results = [r.response for e in history for r in e.function_responses]
            if at == 3 and where != "before":  # the result committed: it stands, never sealed
                assert results == [{"result": "worked"}]
            if at == 3 and where == "before":  # cancelled before the result: sealed instead
                assert [r.get("code") for r in results] == ["cancelled"]
    finally:
        await service.close()
    assert outcomes == ["cancelled"] * 4 + ["finished"]  # the 5th append is the next run's


@pytest.mark.parametrize("kind", ["memory", "sqlite", "sqlite-queued"])
async def test_cancel_after_k_loop_turns_leaves_one_result_per_call(
        kind: str, tmp_path: Path) -> None:
    service = _cancelling_service(kind, tmp_path)
    runner, model, executed = _tool_turn_runner(service)
    reached: Counter[str] = Counter()
    try:
        for k in range(0, 120, 1 if kind == "memory" else 3):
            session_id = f"s{k}"
            await service.create_session(app_name=APP, user_id=USER, session_id=session_id)
            seen: list[Event] = []
            executed.clear()

            async def consume_into(sid: str = session_id, into: list[Event] = seen) -> None:
                async for event in run(runner, sid):
                    into.append(event)

            task = asyncio.create_task(consume_into())
            for _ in range(k):
                await asyncio.sleep(0)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            reached[_stage(seen, task.cancelled())] += 1
            await _check_after_cancel(runner, model, session_id, executed)
    finally:
        await service.close()
    # The range reaches from before the first write to past the run's end, and stops
    # the run in between (how many stages lie on loop turns depends on the store; every
    # write point is covered by test_cancel_around_each_commit_leaves_one_result_per_call).
    # On SQLite the writes happen in another thread: loop turns say nothing of where
    # the cancel lands there, so only the in-memory run's coverage is checked.
    if kind == "memory":
        assert {"nothing", "finished"} <= set(reached) and len(reached) >= 3, reached


def _stage(seen: Sequence[Event], cancelled: bool) -> str:
    """How far the consumer got before the cancel."""
    if not cancelled:
        return "finished"
    records = [e for e in seen if not e.partial]
    if not records:
        return "nothing"
    last = records[-1]
    if last.function_calls:
        return "call"
    if last.function_responses:
        return "result"
    return "answer" if last.author == "bot" else "message"


@pytest.mark.parametrize("kind", ["memory", "sqlite", "sqlite-queued"])
async def test_aclose_after_each_event_leaves_one_result_per_call(
        kind: str, tmp_path: Path) -> None:
    service = _cancelling_service(kind, tmp_path)
    runner, model, executed = _tool_turn_runner(service)
    try:
        for k in range(1, 9):  # a tool turn yields 7 events (3 of them partial)
            session_id = f"s{k}"
            await service.create_session(app_name=APP, user_id=USER, session_id=session_id)
            stream = run(runner, session_id)
            executed.clear()
            for _ in range(k):
                try:
                    await stream.__anext__()
                except StopAsyncIteration:
                    break
            await stream.aclose()
            await _check_after_cancel(runner, model, session_id, executed)
    finally:
        await service.close()


# -- 4. load: many sessions and streams at once through the runner -------------------------


async def echo(value: int) -> dict[str, int]:
    """Return the value unchanged."""
    await asyncio.sleep(0)
    return {"value": value}


def echo_then_answer(request: LlmRequest) -> Turn:
    if request.contents[-1].function_responses:
        return Turn(text=("one ", "two ", "three"))
    return Turn(calls=[_call("echo", value=1)])


class Tracker:
    """Counts errors and how many runs were streaming at once."""

    def __init__(self) -> None:
        self.errors: list[BaseException] = []
        self.open = 0
        self.peak = 0

    async def turn(self, runner: Runner, session_id: str) -> None:
        try:
            self.open += 1
            self.peak = max(self.peak, self.open)
            events = [e async for e in run(runner, session_id, "hi")]
            records = [e for e in events if not e.partial]
            assert [len(e.function_calls) for e in records] == [1, 0, 0], records
            assert records[-1].text == "one two three" and records[-1].error_code is None
        except Exception as exc:  # counted, then reported at once
            self.errors.append(exc)
        finally:
            self.open -= 1


async def _load(tmp_path: Path, sessions: int, turns: int) -> None:
    service = SqlSessionService(f"sqlite+aiosqlite:///{tmp_path / 'load.db'}")
    runner = Runner(agent=Agent(name="bot", model=ScriptedModel(responder=echo_then_answer),
                                tools=[echo]), app_name=APP, session_service=service)
    tracker = Tracker()

    async def session_turns(session_id: str) -> None:
        for _ in range(turns):
            await tracker.turn(runner, session_id)

    async with runner:
        ids = [(await runner.create_session(user_id=USER)).id for _ in range(sessions)]
        await asyncio.gather(*(session_turns(sid) for sid in ids))
        assert tracker.errors == [], f"{len(tracker.errors)} errors, first: {tracker.errors[0]!r}"
        assert tracker.peak == sessions  # they really ran at once
        reader = SqlSessionService(service_url(tmp_path))
        try:
            for sid in ids:
                history = await stored(reader, sid)
                assert len(history) == 4 * turns
                assert_one_result_per_call(history)
        finally:
            await reader.close()


def service_url(tmp_path: Path) -> str:
    return f"sqlite+aiosqlite:///{tmp_path / 'load.db'}"


@pytest.mark.slow
async def test_50_sessions_20_turns_at_once_on_one_sqlite_file(tmp_path: Path) -> None:
    await _load(tmp_path, sessions=50, turns=20)


@pytest.mark.slow
async def test_500_concurrent_streams_on_one_sqlite_file(tmp_path: Path) -> None:
    await _load(tmp_path, sessions=500, turns=1)


# -- 5. the store fails mid-run ------------------------------------------------------------


class FailingStore:
    """A session service whose ``fail_at``-th ``append_event`` raises ``SessionError``.

    The run's first write, its lease with the user's message, counts as an append.

    ``down``: every append from the ``fail_at``-th on fails (the store stays down).
    """

    fail_at: int = 0
    down: bool = False
    appends: int = 0

    async def append_event(self, session: Session, event: Event, *,
                           lease: Lease | None = None, release: bool = False) -> Event:
        self._fail()
        appended: Event = await super().append_event(  # type: ignore[misc]
            session, event, lease=lease, release=release)
        return appended

    async def acquire_lease_and_append(self, **kwargs: Any) -> tuple[Lease, bool]:
        """The run's first write (its lease with the user's message) counts as an append."""
        self._fail()
        taken: tuple[Lease, bool] = await super().acquire_lease_and_append(  # type: ignore[misc]
            **kwargs)
        return taken

    def _fail(self) -> None:
        self.appends += 1
        if self.fail_at and (self.appends == self.fail_at
                             or (self.down and self.appends > self.fail_at)):
            raise SessionError("session store failed: disk I/O error")


class FailingMemory(FailingStore, InMemorySessionService):
    pass


class FailingSql(FailingStore, SqlSessionService):
    pass


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@pytest.mark.parametrize("down", [False, True], ids=["once", "down"])
async def test_store_failure_mid_run_ends_in_one_error_event(
        kind: str, down: bool, tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'failing.db'}"
    service = FailingMemory() if kind == "memory" else FailingSql(url)
    runner, model, executed = _tool_turn_runner(service)
    try:
        for at in range(1, 5):  # the user's message, the call, its result, the answer
            session_id = f"s{at}"
            await service.create_session(app_name=APP, user_id=USER, session_id=session_id)
            service.fail_at, service.down, service.appends = at, down, 0
            executed.clear()
            events = await consume(runner, session_id)  # never raises
            errors = [e for e in events if e.error_code is not None]
            if at == 1 and not down:
                # The lease's write with the message failed once: the lease is taken alone
                # and the message stored on its own, as before; the run goes on.
                assert errors == [] and events[-1].text == "all done here"
                assert len(executed) == 1
                continue
            assert [e.error_code for e in errors] == ["store_unavailable"]
            assert events[-1] is errors[0]
            assert "disk" not in (errors[0].error_message or "")
            service.fail_at = 0
            history = await stored(service, session_id)
            assert errors[0].id not in {e.id for e in history}
            assert len(executed) <= len(calls_of(history))  # never re-run
            # The next run, on a healthy store (a fresh service on SQLite), is valid.
            healthy = service if kind == "memory" else SqlSessionService(url)
            again = Runner(agent=runner.agent, app_name=APP,
                           session_service=healthy, settings=Settings(session_lock_timeout=5))
            try:
                history = await _check_after_cancel(again, model, session_id, executed,
                                                    sealed=not down)
            finally:
                if healthy is not service:
                    await healthy.close()
            codes = [r.response.get("code") for e in history for r in e.function_responses]
            if at == 3:  # the result was lost: sealed at once, or repaired by the next run
                assert codes == ["interrupted" if down else "cancelled"]
    finally:
        await service.close()


# -- 6. the lease is lost mid-run ----------------------------------------------------------


class PausedHeartbeat:
    """A session service whose lease renewals wait for ``resume`` (a stalled heartbeat)."""

    resume: asyncio.Event

    async def renew_lease(self, lease: Lease, ttl: float) -> Lease:
        await self.resume.wait()
        renewed: Lease = await super().renew_lease(lease, ttl)  # type: ignore[misc]
        return renewed


class PausedSql(PausedHeartbeat, SqlSessionService):
    pass


@pytest.mark.parametrize("sql_store", SQL, indirect=True)
async def test_lease_lost_mid_run_refuses_the_old_runs_writes(sql_store: Any) -> None:
    started, release = asyncio.Event(), asyncio.Event()
    executed: list[str] = []

    async def hold() -> str:
        """Block until released."""
        executed.append("hold")
        started.set()
        await release.wait()
        return "too late"

    first_service = PausedSql(sql_store.url)
    first_service.resume = asyncio.Event()
    sql_store.opened.append(first_service)
    ttl = 0.3
    model = ScriptedModel().call("hold", call_id="held-1").reply("never stored")
    first = Runner(agent=Agent(name="bot", model=model, tools=[hold]), app_name=APP,
                   session_service=first_service, settings=Settings(session_lease_ttl=ttl))
    await sql_store.service.create_session(app_name=APP, user_id=USER, session_id="s")

    stream = run(first, "s")
    task = asyncio.create_task(_collect(stream))
    await asyncio.wait_for(started.wait(), 10)
    await asyncio.sleep(ttl + 0.1)  # the heartbeat is stalled: the lease expires
    taker = sql_store.reopen()
    lease = await taker.acquire_lease(app_name=APP, user_id=USER, session_id="s",
                                      owner="another-runner", run_id="taker", ttl=60)
    assert lease.took_over == stream.invocation_id
    before = [e.id for e in await stored(sql_store.reopen(), "s")]
    release.set()
    events = await asyncio.wait_for(task, 10)

    errors = [e for e in events if e.error_code is not None]
    assert [e.error_code for e in errors] == ["session_busy"]
    assert events[-1] is errors[0]
    assert not any(e.function_responses for e in events)  # the result was refused
    assert [e.id for e in await stored(sql_store.reopen(), "s")] == before
    assert len(model.requests) == 1

    # Once the taker lets go, the next run repairs the refused call, once.
    await taker.release_lease(lease)
    next_model = ScriptedModel().reply("back")
    second = Runner(agent=Agent(name="bot", model=next_model, tools=[hold]), app_name=APP,
                    session_service=sql_store.reopen(), settings=Settings(session_lock_timeout=0))
    again = await consume(second, "s", "hello?")
    assert again[-1].text == "back"
    assert executed == ["hold"]
    history = await stored(sql_store.reopen(), "s")
    assert_one_result_per_call(history)
    assert [r.response.get("code") for e in history for r in e.function_responses] == [
        "interrupted"]
    assert_valid_request(next_model.requests[0])


# -- 7. the user's message goes in with the lease ------------------------------------------


@pytest.fixture
async def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    """Each store (memory, SQLite file, PostgreSQL); ``reopen()`` for more services."""
    async with open_store(request.param, request, tmp_path) as opened:
        yield opened


class Spying:
    """Records whether each ``acquire_lease_and_append`` stored the event with the lease."""

    took: list[bool]

    async def acquire_lease_and_append(self, **kwargs: Any) -> tuple[Lease, bool]:
        taken: tuple[Lease, bool] = await super().acquire_lease_and_append(  # type: ignore[misc]
            **kwargs)
        self.took.append(taken[1])
        return taken


class SpyingMemory(Spying, InMemorySessionService):
    pass


class SpyingSql(Spying, SqlSessionService):
    pass


def _spying_service(kind: str, tmp_path: Path, **kwargs: Any) -> Any:
    service = SpyingMemory() if kind == "memory" else SpyingSql(
        f"sqlite+aiosqlite:///{tmp_path / 'spy.db'}", **kwargs)
    service.took = []
    return service


def _texts(history: Sequence[Event], author: str = "user") -> list[str]:
    return [e.text for e in history if e.author == author]


async def test_a_sqlite_tool_turn_is_four_writes(tmp_path: Path) -> None:
    statements: list[str] = []
    service = _spying_service("sqlite", tmp_path, trace=statements.append)
    runner, _, executed = _tool_turn_runner(service)
    try:
        await service.create_session(app_name=APP, user_id=USER, session_id="s")
        for turn in (1, 2):  # a new session, then one whose ledger the runner keeps
            statements.clear()
            events = await consume(runner, "s")
            assert events[-1].text == "all done here" and len(executed) == turn
            # The lease with the message, the call, its result, the answer with the release.
            assert statements.count("BEGIN IMMEDIATE") == 4
        assert service.took == [True, True]
        history = await stored(service, "s")
        assert _texts(history) == ["go", "go"]
        assert_one_result_per_call(history)
    finally:
        await service.close()


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_call_left_dangling_elsewhere_is_repaired_before_the_message(
        kind: str, tmp_path: Path) -> None:
    service = _spying_service(kind, tmp_path)
    runner, model, executed = _tool_turn_runner(service)
    try:
        await service.create_session(app_name=APP, user_id=USER, session_id="s")
        await consume(runner, "s")
        # Another process's run stored a call and died: the runner's ledger does not know it.
        other = service if kind == "memory" else SqlSessionService(service._url)
        session = await other.get_session(app_name=APP, user_id=USER, session_id="s")
        lost = Event(invocation_id="crashed", author="bot", content=Content(
            "model", [Part(function_call=FunctionCall(id="lost-1", name="work", args={}))]))
        await other.append_event(session, lost)
        if other is not service:
            await other.close()

        events = await consume(runner, "s", "again")
        assert events[-1].text == "next turn"
        assert service.took == [True, False]  # the store saw the history had moved on
        history = await stored(service, "s")
        ids = [e.id for e in history]
        repair = ids.index(lost.id) + 1
        assert [r.response.get("code") for r in history[repair].function_responses] == [
            "interrupted"]
        assert history[repair + 1].text == "again" and history[repair + 1].author == "user"
        assert_one_result_per_call(history)
        assert_valid_request(model.requests[-1])
        assert len(executed) == 1  # never re-run (work is not idempotent)
    finally:
        await service.close()


async def test_an_expired_ticket_is_closed_before_the_message() -> None:
    @tool(long_running=True)
    def start_export(table: str) -> dict[str, str]:
        """Starts an export job."""
        return {"ticket": f"job-{table}"}

    service = _spying_service("memory", Path())
    model = (ScriptedModel().call("start_export", {"table": "t"}, call_id="x1")
             .reply("waiting").reply("expired, sorry"))
    runner = Runner(agent=Agent(name="bot", model=model, tools=[start_export]), app_name=APP,
                    session_service=service, settings=Settings(long_running_ttl=0.01))
    await service.create_session(app_name=APP, user_id=USER, session_id="s")
    await consume(runner, "s", "export")
    await asyncio.sleep(0.02)
    await consume(runner, "s", "news?")
    assert service.took == [True]  # the second run's ledger had an expired ticket
    history = await stored(service, "s")
    codes = [(e.author, [r.response.get("code") for r in e.function_responses])
             for e in history if e.function_responses]
    assert codes == [("bot", [None]), ("bot", ["expired"])]
    expired = next(i for i, e in enumerate(history) if e.function_responses
                   and e.function_responses[0].response.get("code") == "expired")
    assert history[expired + 1].text == "news?"


@pytest.mark.parametrize("kind", ["memory", "sqlite", "sqlite-queued"])
@pytest.mark.parametrize("where", ["before", "during", "after"])
async def test_a_cancel_during_the_lease_with_the_message_leaves_the_session_free(
        kind: str, where: str, tmp_path: Path) -> None:
    service = _cancelling_service(kind, tmp_path)
    runner, _, _ = _tool_turn_runner(service)
    try:
        await service.create_session(app_name=APP, user_id=USER, session_id="s")
        service.at, service.where, service.appends = 1, where, 0
        task = service.victim = asyncio.create_task(consume(runner, "s"))
        await asyncio.gather(task, return_exceptions=True)
        assert task.cancelled()
        service.at = 0
        # Free at once: another run takes the session without waiting.
        probe = await service.acquire_lease(app_name=APP, user_id=USER, session_id="s",
                                            owner="probe", run_id="probe", ttl=60)
        await service.release_lease(probe)
        history = await stored(service, "s")
        messages = [e for e in history if e.author == "user"]
        if where == "before":
            assert history == []
        else:  # stored whole, with the content sent
            assert [m.content for m in messages] == [Content.from_text("go")]
        if kind == "sqlite-queued" and where == "during":
            assert history == messages  # the cancel landed in the write: nothing after it
        assert_one_result_per_call(history)
        events = await consume(runner, "s", "again")
        assert events[-1].text == "next turn"
        assert _texts(await stored(service, "s"))[-1:] == ["again"]
    finally:
        await service.close()


@pytest.mark.parametrize("any_store", ["memory", *SQL], indirect=True)
async def test_two_runners_start_at_once_one_is_busy(any_store: Any) -> None:
    await any_store.service.create_session(app_name=APP, user_id=USER, session_id="s")
    runners = [Runner(agent=Agent(name="bot", model=ScriptedModel().reply("hi ", who)),
                      app_name=APP, session_service=any_store.reopen(),
                      settings=Settings(session_lock_timeout=0))
               for who in ("a", "b")]
    streams = [run(runner, "s", f"from {i}") for i, runner in enumerate(runners)]
    outcomes = await asyncio.gather(*(s.start() for s in streams), return_exceptions=True)
    busy = [o for o in outcomes if isinstance(o, BaseException)]
    assert len(busy) == 1 and isinstance(busy[0], SessionBusyError)
    [winner] = [s for s, o in zip(streams, outcomes, strict=True) if o is None]
    events = await _collect(winner)
    history = await stored(any_store.reopen(), "s")
    assert len(_texts(history)) == 1  # the loser stored nothing
    assert [e.id for e in history[1:]] == [e.id for e in events if not e.partial]
    for stream in streams:
        await stream.aclose()


class CommitsThenFails:
    """The lease's write with the message commits, but its caller is told it failed."""

    async def acquire_lease_and_append(self, **kwargs: Any) -> tuple[Lease, bool]:
        await super().acquire_lease_and_append(**kwargs)  # type: ignore[misc]
        raise SessionError("session store failed: connection reset")


class CommitsThenFailsMemory(CommitsThenFails, InMemorySessionService):
    pass


class CommitsThenFailsSql(CommitsThenFails, SqlSessionService):
    pass


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_message_stored_by_a_write_that_seemed_to_fail_is_not_stored_twice(
        kind: str, tmp_path: Path) -> None:
    service = (CommitsThenFailsMemory() if kind == "memory"
               else CommitsThenFailsSql(f"sqlite+aiosqlite:///{tmp_path / 'unsure.db'}"))
    runner, _, executed = _tool_turn_runner(service)
    try:
        await service.create_session(app_name=APP, user_id=USER, session_id="s")
        events = await consume(runner, "s")
        assert events[-1].text == "all done here" and len(executed) == 1
        history = await stored(service, "s")
        assert _texts(history) == ["go"]
        assert_one_result_per_call(history)
    finally:
        await service.close()
