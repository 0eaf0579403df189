"""Runs in flight: one task per run writes its frames to the run log; streams follow it.

A run belongs to the user who started it. Its task iterates the runner's
:class:`~headwater.runner.RunStream`, maps each event to frames
(:mod:`.frames`) and appends them to the :class:`~.runlog.RunLog`, ending with
exactly one terminal frame. HTTP responses only follow the log, so a run that
is ``resumable`` outlives its connection (for ``detached_ttl``) and any number
of clients can follow it from any frame; a run that is not is cancelled as soon
as its last follower leaves. Stopping a run cancels its task: the runner closes
the model stream, cancels tools and seals history before the terminal frame.

A run is known to the other replicas through the :class:`~.registry.RunRegistry`
(an in-process one by default): they follow it from the shared run log, count
its streams against its user's limit, and ask its replica to cancel it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final, Literal

from ...core.errors import ErrorCode, RunLogClosed, RunNotFound, RunStoreUnavailable, code_of
from ...core.events import Event
from ...core.settings import Settings
from ...core.tasks import TaskSet
from ...runner import RunStream
from ..wire.frames import FrameMapper, FramePayload, above, done_frame, error_frame
from ..wire.sse import Frame, encode_frame
from .registry import LocalRunRegistry, RunInfo, RunRegistry, RunStatus
from .runlog import RunLog

logger = logging.getLogger("headwater.gateway")

StopReason = Literal["cancelled", "disconnected", "detached_ttl", "server_shutdown",
                     "run_store_unavailable"]


_STOPPED: Final[Mapping[str, tuple[ErrorCode, RunStatus]]] = MappingProxyType({
    "server_shutdown": ("server_shutdown", "interrupted"),
    "run_store_unavailable": ("run_store_unavailable", "error"),
})
"""A stopped run's terminal code and status, by its stop reason (others: ``_CANCELLED``)."""
_CANCELLED: Final[tuple[ErrorCode, RunStatus]] = ("cancelled", "cancelled")


@dataclass(slots=True, eq=False)
class Run:
    """One run the gateway holds: who owns it, where its frames go, how it ends."""

    id: str
    user_id: str
    session_id: str
    agent: str
    resumable: bool
    request_id: str
    stream: RunStream
    started: float = field(default_factory=time.monotonic)
    status: RunStatus = "running"
    frames: int = 0
    followers: int = 0
    stop_reason: StopReason | None = None
    task: asyncio.Task[None] | None = None
    detached: asyncio.TimerHandle | None = None
    forget: asyncio.TimerHandle | None = None

    @property
    def ended(self) -> bool:
        """Whether the run's terminal frame has been written."""
        return self.status != "running"


class RunManager:
    """The runs of one gateway process: start, follow, stop, limits, shutdown.

    Args:
        log: where frames go (in process by default; shared by the replicas).
        settings: ``detached_ttl``, ``run_retention``, ``max_streams_per_user``.
        registry: where the other replicas learn of this one's runs (default:
            none, one process).
    """

    def __init__(self, log: RunLog, settings: Settings,
                 registry: RunRegistry | None = None) -> None:
        self.log = log
        self.settings = settings
        self.registry = registry if registry is not None else LocalRunRegistry()
        self.registry.on_cancel(self._cancel_requested)
        self.runs: dict[str, Run] = {}
        self.closing = False
        # Each run's task, and the steps a run starts in the background (forgetting it,
        # watching another replica's run, checking a detached one): closed in aclose().
        self.tasks = TaskSet("run manager", logger=logger)

    # -- starting ------------------------------------------------------------------------------

    async def over_rate(self, user_id: str) -> float | None:
        """Count a run start of the user; the seconds until they may start another when
        this one is past ``max_runs_per_user`` (over every replica), else ``None``."""
        limit = self.settings.max_runs_per_user
        if limit <= 0:
            return None
        count, left = await self.registry.count_run(user_id, self.settings.run_rate_window,
                                                   limit)
        return left if count > limit else None

    async def has_room(self, user_id: str) -> bool:
        """Whether the user may open one more stream (counted over every replica)."""
        return await self.registry.open_streams(user_id) < self.settings.max_streams_per_user

    async def start(self, stream: RunStream, *, user_id: str, session_id: str, agent: str,
                    resumable: bool, request_id: str, mapper: FrameMapper) -> Run:
        """Adopt a started run (``stream.start()`` done) and begin writing its frames."""
        run = Run(id=stream.invocation_id, user_id=user_id, session_id=session_id, agent=agent,
                  resumable=resumable, request_id=request_id, stream=stream)
        opened = False
        try:
            await self.log.open(run.id, resumable=resumable)
            opened = True
            await self.registry.register(RunInfo(
                id=run.id, user_id=user_id, session_id=session_id, agent=agent,
                replica=self.registry.replica))
            run.task = self.tasks.spawn(self._drive(run, mapper), name=f"run {run.id}")
        except BaseException:
            with contextlib.suppress(Exception):
                await stream.aclose()  # gives the session back
            if opened:
                with contextlib.suppress(Exception):
                    await self.log.forget(run.id)
            raise
        self.runs[run.id] = run
        return run

    async def get(self, run_id: str, user_id: str) -> Run | RunInfo | None:
        """The user's run of that id, here (a :class:`Run`) or on another replica (a
        :class:`RunInfo`); ``None`` for a missing run or another user's."""
        run: Run | RunInfo | None = self.runs.get(run_id)
        if run is None:
            run = await self.registry.lookup(run_id)
        return run if run is not None and run.user_id == user_id else None

    async def active(self, user_id: str, session_id: str) -> str | None:
        """The id of the user's run still going on that session, on any replica (at most
        one: a second is refused)."""
        local = next((run.id for run in self.runs.values() if run.session_id == session_id
                      and run.user_id == user_id and not run.ended), None)
        return local if local is not None else await self.registry.active(user_id, session_id)

    # -- following -----------------------------------------------------------------------------

    def follow(self, run: Run | RunInfo,
               after: int) -> tuple[AsyncGenerator[Frame, None], Callable[[bool], None]]:
        """The frames after ``after`` and the callback for when the follower ends.

        ``run`` is this replica's or another's (followed from the shared log).
        The follower counts against its user's stream limit until the callback.
        A log that becomes unreachable (``RunStoreUnavailable``) ends the frames
        with a terminal ``error`` ``run_store_unavailable`` of the next id, which
        is not in the log (:func:`_until_unreachable`), and stops this replica's
        run (it could store no more frames): its record in the session store is
        sealed as for a cancel.
        """
        slot = self.registry.stream_opened(run.user_id, run.id)
        frames = self.log.follow(run.id, after)
        if isinstance(run, RunInfo):
            registry = self.registry
            frames = _until_unreachable(self._watched(run, frames), after, "", None)
            return frames, lambda gone: registry.stream_closed(slot)
        local = run
        frames = _until_unreachable(frames, after, run.request_id,
                                    lambda: self.stop(local, "run_store_unavailable"))
        run.followers += 1
        if run.detached is not None:
            run.detached.cancel()
            run.detached = None
        ended = False

        def on_end(gone: bool) -> None:
            nonlocal ended
            if ended:
                return
            ended = True
            run.followers -= 1
            self.registry.stream_closed(slot)
            if run.ended or run.followers > 0:
                return
            if not run.resumable:
                if gone:  # the one reader left: nobody will see the rest
                    self.stop(run, "disconnected")
                return
            self._detach(run)

        return frames, on_end

    async def _watched(self, info: RunInfo,
                       frames: AsyncGenerator[Frame, None]) -> AsyncGenerator[Frame, None]:
        """``frames`` of another replica's run, watched for that replica's death.

        A replica renews its runs in the registry while it lives. While the follower
        follows, a task asks the registry every third of ``redis_liveness_ttl``; once
        the run has aged out of it before its terminal frame (its replica died), the
        task writes ``error`` ``server_shutdown`` to the run's log, which ends this
        follower and every other (the next run on the session repairs what the dead
        run left, as after any crash).
        """
        watch = self.tasks.spawn(self._watch(info), name=f"watch run {info.id}")
        try:
            async with contextlib.aclosing(frames):
                async for frame in frames:
                    yield frame
        finally:
            watch.cancel()

    async def _watch(self, info: RunInfo) -> None:
        every = max(self.settings.redis_liveness_ttl / 3, 0.1)
        while True:
            await asyncio.sleep(every)
            try:
                if await self.registry.lookup(info.id) is not None:
                    continue
            except RunStoreUnavailable:  # logged once per outage; its follower ends too
                continue
            except Exception:  # the registry is unreachable: nothing can be told, go on
                logger.warning("run %s: asking the registry failed", info.id, exc_info=True)
                continue
            await self._orphaned(info)
            return

    async def _orphaned(self, info: RunInfo) -> None:
        """End a run whose replica died: its terminal frame, written from here."""
        logger.warning("run %s: its replica %s stopped renewing it; ending it "
                       "server_shutdown", info.id, info.replica, extra={"run": info.id})
        try:
            await self.log.append(info.id, *error_frame("server_shutdown", ""))
        except (RunLogClosed, RunNotFound):
            pass  # it ended meanwhile, or is gone: the log tells its followers
        except Exception:
            logger.warning("run %s: writing its terminal frame failed", info.id, exc_info=True)

    def _detach(self, run: Run) -> None:
        run.detached = asyncio.get_running_loop().call_later(
            self.settings.detached_ttl, self._detached_expired, run)

    def _detached_expired(self, run: Run) -> None:
        """Nobody followed the run here for ``detached_ttl``: stop it, unless another
        replica's client follows it."""
        run.detached = None

        async def check() -> None:
            try:
                followed = await self.registry.followers(run.id) > 0
            except RunStoreUnavailable:  # logged once per outage
                followed = False
            except Exception:
                logger.warning("run %s: counting its followers failed", run.id, exc_info=True)
                followed = False
            if run.ended or run.followers > 0 or run.detached is not None:
                return
            if followed:
                self._detach(run)
            else:
                self.stop(run, "detached_ttl")

        self.tasks.spawn(check(), name=f"check detached run {run.id}",
                         expected=RunStoreUnavailable)  # logged once per outage

    # -- stopping ------------------------------------------------------------------------------

    def stop(self, run: Run, reason: StopReason) -> None:
        """Cancel a run's task (idempotent); its frames end with ``error``."""
        if run.ended or run.task is None or run.stop_reason is not None:
            return
        run.stop_reason = reason
        if reason == "server_shutdown":
            run.stream.seal_reason = "interrupted"
        run.task.cancel()

    async def cancel(self, run: Run | RunInfo) -> RunStatus:
        """Stop a run, here or on its replica, and wait for its terminal frame (bounded
        by ``shutdown_grace``); its status then."""
        grace = max(self.settings.shutdown_grace, 1.0)
        if isinstance(run, RunInfo):
            return await self._cancel_elsewhere(run, grace)
        self.stop(run, "cancelled")
        if run.task is not None:
            # asyncio.wait: the run's own end (even cancelled) is not an error here, and a
            # cancel of the caller still reaches the caller.
            await asyncio.wait({run.task}, timeout=grace)
        return run.status

    async def _cancel_elsewhere(self, info: RunInfo, grace: float) -> RunStatus:
        if info.ended:
            return info.status
        if not await self.registry.request_cancel(info):
            logger.warning("run %s: its replica %s did not hear the cancel", info.id,
                           info.replica)
        try:
            async with asyncio.timeout(grace):
                after = await self.log.last_id(info.id)
                async with contextlib.aclosing(self.log.follow(info.id, after)) as frames:
                    async for _ in frames:
                        pass  # until the terminal frame
        except (TimeoutError, RunNotFound):
            pass
        now = await self.registry.lookup(info.id)
        return now.status if now is not None else info.status

    def _cancel_requested(self, run_id: str) -> None:
        """Another replica asks to cancel one of this replica's runs."""
        run = self.runs.get(run_id)
        if run is not None:
            self.stop(run, "cancelled")

    def begin_shutdown(self) -> None:
        """Refuse new runs and stop every run now (SIGTERM): streams end with
        ``server_shutdown``."""
        if not self.closing:
            logger.info("shutting down: stopping %d runs", len(self.runs))
        self.closing = True
        for run in list(self.runs.values()):
            self.stop(run, "server_shutdown")

    async def shutdown(self, grace: float) -> None:
        """Stop every run as interrupted; wait up to ``grace`` for their terminal frames."""
        tasks = [run.task for run in self.runs.values() if run.task is not None and not run.ended]
        self.begin_shutdown()
        if tasks:
            await asyncio.wait(tasks, timeout=max(grace, 0.1))

    async def aclose(self) -> None:
        """Stop everything and drop the log (after :meth:`shutdown`)."""
        await self.shutdown(self.settings.shutdown_grace)
        for run in self.runs.values():
            if run.forget is not None:
                run.forget.cancel()
        self.runs.clear()
        # What is left: runs past the grace, forgets, watches; then the stores they use go.
        await self.tasks.aclose(grace=max(self.settings.shutdown_grace, 0.1))
        try:
            await self.registry.close()
        finally:
            await self.log.close()

    # -- the run's task ------------------------------------------------------------------------

    async def _drive(self, run: Run, mapper: FrameMapper) -> None:
        terminal: FramePayload | None = None
        failed: Event | None = None  # a branch's error that no agent above it went on from
        try:
            async for event in run.stream:
                if terminal is not None:
                    continue  # the run ends right after its error event: let it finish
                if failed is not None and not event.partial and above(event.branch,
                                                                       failed.branch):
                    failed = None  # an agent above the failed branch went on
                # A partial error (a live run refusing one input) is the caller's notice only.
                if event.error_code is not None and not event.partial:
                    if event.branch:  # one branch ended in an error; the others go on
                        await self._append(run, mapper.branch_error(event))
                        failed = failed or event
                        continue
                    terminal = error_frame(event.error_code, run.request_id)
                    continue
                for payload in mapper.frames(event):
                    await self._append(run, payload)
            if terminal is None and failed is not None:  # the run ends with that error
                terminal = error_frame(failed.error_code or "internal", run.request_id)
            if terminal is None:
                terminal = done_frame(run.stream.usage)
        except asyncio.CancelledError:
            stop_code, run.status = _STOPPED.get(run.stop_reason or "cancelled", _CANCELLED)
            terminal = error_frame(stop_code, run.request_id)
        except Exception as exc:
            code = code_of(exc)  # RunLogFull: budget_exceeded; LeaseLostError: session_busy
            # The client gets the code only; the log says what happened (for `internal`, a
            # bug of ours: with its traceback, at ERROR; an unreachable run store is told
            # once per outage, by the store).
            level = {"internal": logging.ERROR,
                     "run_store_unavailable": logging.DEBUG}.get(code, logging.WARNING)
            logger.log(level, "run %s failed (%s): %s: %s", run.id, code, type(exc).__name__,
                       exc, exc_info=exc if code == "internal" else None,
                       extra={"run": run.id, "request_id": run.request_id})
            terminal = error_frame(code, run.request_id)
        finally:
            with contextlib.suppress(Exception):
                await run.stream.aclose()
            if terminal is None:
                terminal = error_frame("internal", run.request_id)
            if run.status == "running":
                run.status = "done" if terminal[0] == "done" else "error"
            await self._end(run, terminal)

    async def _end(self, run: Run, terminal: FramePayload) -> None:
        """Record the run's end, then write its terminal frame; quiet on failure."""
        try:  # before the terminal frame: who sees it sees the run's status
            await self.registry.ended(run.id, run.status)
        except RunStoreUnavailable:
            pass  # logged once per outage; the record ages out (redis_liveness_ttl)
        except Exception:
            logger.warning("run %s: recording its end failed", run.id, exc_info=True)
        try:
            await self._append(run, terminal)
        except RunStoreUnavailable:
            pass  # its followers end with run_store_unavailable themselves
        except Exception:
            logger.exception("run %s: writing its terminal frame failed", run.id)
        self._ended(run)

    async def _append(self, run: Run, payload: FramePayload) -> None:
        await self.log.append(run.id, payload[0], payload[1])
        run.frames += 1

    def _ended(self, run: Run) -> None:
        if run.detached is not None:
            run.detached.cancel()
            run.detached = None
        logger.info(
            "run %s %s", run.id, run.status,
            extra={"user": run.user_id, "session": run.session_id, "run": run.id,
                   "agent": run.agent, "status": run.status, "stop_reason": run.stop_reason,
                   "duration_ms": round((time.monotonic() - run.started) * 1000, 1),
                   "frames": run.frames, "request_id": run.request_id})
        retention = self.settings.run_retention
        if self.closing:
            # The log's close drops it (a shared log keeps it for the other replicas).
            if self.runs.get(run.id) is run:
                del self.runs[run.id]
        elif retention <= 0:
            self._forget(run)
        else:
            run.forget = asyncio.get_running_loop().call_later(retention, self._forget, run)

    def _forget(self, run: Run) -> None:
        if self.runs.get(run.id) is run:
            del self.runs[run.id]
        if not self.tasks.closed:  # else closing the log and the registry drops it
            self.tasks.spawn(self._forget_stored(run.id), name=f"forget run {run.id}",
                             expected=RunStoreUnavailable)  # logged once per outage

    async def _forget_stored(self, run_id: str) -> None:
        """Drop the run from the log and the registry, both tried whatever the other does."""
        try:
            await self.log.forget(run_id)
        finally:
            await self.registry.forget(run_id)


async def _until_unreachable(frames: AsyncGenerator[Frame, None], after: int,
                             request_id: str, unreachable: Callable[[], None] | None,
                             ) -> AsyncGenerator[Frame, None]:
    """``frames`` (after ``after``); when the run log becomes unreachable, ``unreachable()``
    and a terminal ``error`` ``run_store_unavailable`` frame, numbered after the last one
    sent, in place of the rest. The follower's client learns the run is over and may
    retry; the run's record is whole in the session store."""
    last = after
    try:
        async with contextlib.aclosing(frames):
            async for frame in frames:
                last = frame.id
                yield frame
    except RunStoreUnavailable as exc:
        if unreachable is not None:
            unreachable()
        yield encode_frame(last + 1, *error_frame(exc.code, request_id))

