"""The frame log of runs (docs/frame-protocol.md): append once, replay and follow many times.

A resumable run writes every frame it sends to a :class:`RunLog`; a client that
reconnects with ``Last-Event-ID: n`` gets exactly the frames after ``n`` from
it, then the new ones as they are written, until the terminal frame. The log
assigns the ids (from 1, contiguous), so "the frames after n" is exact.

:class:`RunLog` is the interface the gateway uses; it assumes nothing that only
holds inside one process (ids are ints, frames are plain data, every query is
async), so a Redis Streams backend can implement it. :class:`InMemoryRunLog`
keeps each run's frames in a list in this process.

Lifetime: :meth:`RunLog.open` makes a run's log; its terminal frame (``error``
or ``done``) closes it to appends; it stays readable until
:meth:`RunLog.forget`. Keeping ended runs for ``Settings.run_retention`` and
then forgetting them is the gateway's job, not the log's.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncGenerator, Mapping
from typing import Any, Protocol

from ...core.errors import RunLogClosed, RunLogFull, RunNotFound, UserError
from ...core.settings import Settings, settings_or_default
from ..wire.sse import TERMINAL_TYPES, Frame, decode_frame, encode_frame


class RunLog(Protocol):
    """Where resumable runs' frames are kept, by run id.

    Every method raises :class:`~headwater.errors.RunNotFound` (a ``KeyError``)
    for a run id that was never opened, was forgotten, or when the log is
    closed; :meth:`follow` raises it on its first iteration, so check a run with
    :meth:`last_id` before starting a response.
    """

    async def open(self, run_id: str, *, resumable: bool = True) -> None:
        """Make a new, empty log for ``run_id``.

        ``resumable`` says whether the run may be resumed after its client left: a
        backend shared by replicas keeps a run that is not in the writer's process
        until a follower elsewhere asks for it (:class:`~.redis_runlog.RedisRunLog`);
        what the log answers is the same either way.

        Raises:
            UserError: ``run_id`` already has a log, or the log is closed.
        """
        ...

    async def append(self, run_id: str, type: str, data: Mapping[str, Any]) -> Frame:
        """Encode and store the run's next frame; its id is the last id plus one.

        A terminal frame (``error``, ``done``) ends the run: it is the last one
        the log accepts for it. Followers see the frame as soon as this returns.

        Args:
            run_id: an open run.
            type: a frame type (``headwater.gateway.sse.FRAME_TYPES``).
            data: the frame's payload (wire JSON); not copied, do not mutate it.

        Returns:
            The stored frame, with its id and bytes.

        Raises:
            RunNotFound: no such run.
            RunLogClosed: the run already has its terminal frame.
            RunLogFull: the run has written ``max_frames`` frames; the terminal
                frame is still accepted, so the run can end with
                ``budget_exceeded``.
            ValueError: an unknown frame type (and what ``encode_frame`` refuses).
        """
        ...

    async def read_after(self, run_id: str, after: int) -> list[Frame]:
        """The run's frames with an id greater than ``after``, oldest first (may be empty).

        Raises:
            RunNotFound: no such run.
            ValueError: ``after`` is negative.
        """
        ...

    def follow(self, run_id: str, after: int) -> AsyncGenerator[Frame, None]:
        """Replay the frames after ``after``, then yield new ones as they are appended.

        Ends after the terminal frame (at once if the run has ended and its
        terminal frame is at or before ``after``). Any number of followers may
        follow one run; each gets every frame, and a slow one never holds up
        :meth:`append` nor misses a frame. Closing or cancelling a follower at
        any point leaves the log as it was. It is an async generator: consume
        it under ``contextlib.aclosing`` (Starlette does not close a body
        iterator; a Redis backend's follower holds a connection).

        Raises:
            ValueError: ``after`` is negative (at the call).
            RunNotFound: on the first iteration, no such run; later, the run
                was forgotten (or the log closed) before its terminal frame.
        """
        ...

    async def ended(self, run_id: str) -> bool:
        """Whether the run has its terminal frame.

        Raises:
            RunNotFound: no such run.
        """
        ...

    async def last_id(self, run_id: str) -> int:
        """The id of the run's last frame; 0 before the first.

        Raises:
            RunNotFound: no such run.
        """
        ...

    async def forget(self, run_id: str) -> None:
        """Drop the run's frames; a no-op for an unknown run id.

        Followers still waiting for its frames raise ``RunNotFound``.
        """
        ...

    async def close(self) -> None:
        """Forget every run and release the log's resources; idempotent.

        Afterwards every run id is unknown and :meth:`open` is refused.
        """
        ...


class RunFrames:
    """One run's frames in this process and the futures of the followers waiting for more.

    Every frame is kept as its bytes; only the last few are kept as
    :class:`Frame` objects too (what a live follower takes), older ones are
    decoded again when a replay asks for them. A kept frame is a few objects
    the garbage collector would walk on every pass while the run is retained;
    bytes are not (see benchmarks/README.md, "Gateway load").

    :class:`InMemoryRunLog` keeps each run as one; the Redis log keeps the runs
    its replica writes as one too, so their followers there read in process.
    Followers see the frames up to ``shown``: all of them, unless the log holds
    the newest back (the Redis log, until Redis has them). ``failure`` is an
    error its followers raise once they have every frame shown (the Redis log's:
    its copy in Redis could not be written).
    """

    __slots__ = ("ended", "failure", "gone", "raws", "recent", "shown", "waiters")

    def __init__(self, keep: int) -> None:
        self.raws: list[bytes] = []
        self.recent: deque[Frame] = deque(maxlen=keep)  # the last frames, as objects
        self.shown = 0  # the frames followers may see
        self.ended = False  # the terminal frame was added (shown or not)
        self.gone = False  # forgotten: followers that catch up raise RunNotFound
        self.failure: Exception | None = None
        self.waiters: list[asyncio.Future[None]] = []  # one per waiting follower

    def add(self, type: str, data: Mapping[str, Any], *, hold: bool = False) -> Frame:
        """Encode and keep the next frame; the frame. Shown to the followers (and they
        are woken) unless ``hold``: then :meth:`show` does it.

        Raises:
            ValueError: an unknown frame type (and what ``encode_frame`` refuses).
        """
        frame = encode_frame(len(self.raws) + 1, type, data)
        self.raws.append(frame.raw)
        self.recent.append(frame)
        self.ended = frame.terminal
        if not hold:
            self.shown = len(self.raws)
            self.wake()
        return frame

    def show(self, upto: int) -> None:
        """Show the followers the frames up to id ``upto`` (held by :meth:`add`)."""
        if upto > self.shown:
            self.shown = min(upto, len(self.raws))
            self.wake()

    def fail(self, failure: Exception) -> None:
        """Make the followers raise ``failure`` once they have every frame (the first
        failure stays)."""
        if self.failure is None:
            self.failure = failure
        self.wake()

    def frame(self, id: int) -> Frame:
        """Frame ``id`` (1 ≤ id ≤ the last id)."""
        first_recent = len(self.raws) - len(self.recent) + 1
        if id >= first_recent:
            return self.recent[id - first_recent]
        return decode_frame(self.raws[id - 1])

    def wake(self) -> None:
        waiters = self.waiters
        if waiters:
            for waiter in waiters:  # set_result only schedules the waiter: no re-entry here
                if not waiter.done():  # a cancelled follower's
                    waiter.set_result(None)
            waiters.clear()

    async def changed(self) -> None:
        waiter = asyncio.get_running_loop().create_future()
        self.waiters.append(waiter)
        await waiter


class InMemoryRunLog(RunLog):
    """A :class:`RunLog` in this process's memory: for one gateway process, and tests.

    An append is O(1) and starts no task; followers wait on a future each
    (no polling), which an append resolves only when someone waits. Use it
    from one event loop.

    Args:
        max_frames: the non-terminal frames one run may write (``RunLogFull``
            past it); ``settings.run_log_max_frames`` by default.
        settings: where that default comes from (the process-wide settings
            when omitted; ``create_app`` passes its own).
        keep_objects: the last frames of each run kept as :class:`Frame`
            objects (a live follower's); the others are kept as bytes and
            decoded for a replay.

    Raises:
        ValueError: ``max_frames`` or ``keep_objects`` is below 1.
    """

    def __init__(self, max_frames: int | None = None, *,
                 settings: Settings | None = None, keep_objects: int = 4) -> None:
        if max_frames is None:
            max_frames = settings_or_default(settings).run_log_max_frames
        if max_frames < 1:
            raise ValueError(f"max_frames must be at least 1, got {max_frames}")
        if keep_objects < 1:
            raise ValueError(f"keep_objects must be at least 1, got {keep_objects}")
        self.max_frames = max_frames
        self.keep_objects = keep_objects
        self._runs: dict[str, RunFrames] = {}
        self._closed = False

    def _run(self, run_id: str) -> RunFrames:
        try:
            return self._runs[run_id]
        except KeyError:
            raise RunNotFound(f"no run log for run {run_id!r}") from None

    async def open(self, run_id: str, *, resumable: bool = True) -> None:
        if self._closed:
            raise UserError("the run log is closed; make a new one")
        if run_id in self._runs:
            raise UserError(f"run {run_id!r} already has a log; run ids must be unique")
        self._runs[run_id] = RunFrames(self.keep_objects)

    async def append(self, run_id: str, type: str, data: Mapping[str, Any]) -> Frame:
        run = self._run(run_id)
        if run.ended:
            raise RunLogClosed(f"run {run_id!r} already has its terminal frame")
        if type not in TERMINAL_TYPES and len(run.raws) >= self.max_frames:
            raise RunLogFull(f"run {run_id!r} wrote its {self.max_frames} frames")
        return run.add(type, data)

    async def read_after(self, run_id: str, after: int) -> list[Frame]:
        check_after(after)
        run = self._run(run_id)
        return [run.frame(i) for i in range(after + 1, len(run.raws) + 1)]

    def follow(self, run_id: str, after: int) -> AsyncGenerator[Frame, None]:
        check_after(after)
        return follow_frames(self._runs, run_id, after)


    async def ended(self, run_id: str) -> bool:
        return self._run(run_id).ended

    async def last_id(self, run_id: str) -> int:
        return self._run(run_id).shown

    async def forget(self, run_id: str) -> None:
        run = self._runs.pop(run_id, None)
        if run is not None:
            run.gone = True
            run.wake()

    async def close(self) -> None:
        self._closed = True
        for run_id in list(self._runs):
            await self.forget(run_id)


async def follow_frames(runs: Mapping[str, RunFrames], run_id: str,
                        after: int) -> AsyncGenerator[Frame, None]:
    """The frames of ``runs[run_id]`` after ``after``, then each new one, until the
    terminal frame (:meth:`RunLog.follow` of a run kept in this process).

    Raises:
        RunNotFound: on the first iteration, no such run; later, the run was
            forgotten before its terminal frame.
        Exception: the run's ``failure``, once every frame is yielded (unless the
            terminal frame is among them).
    """
    run = runs.get(run_id)
    if run is None:
        raise RunNotFound(f"no run log for run {run_id!r}")
    cursor = after
    while True:
        while cursor < run.shown:
            cursor += 1
            frame = run.frame(cursor)
            yield frame
            if frame.type in TERMINAL_TYPES:
                return
        if run.ended and cursor >= len(run.raws):
            return  # the terminal frame is at or before ``after``
        if run.gone:
            raise RunNotFound(f"run {run_id!r} was forgotten before its terminal frame")
        if run.failure is not None:
            failure = run.failure
            raise type(failure)(*failure.args)  # a new one per follower: its own traceback
        await run.changed()


def check_after(after: int) -> None:
    """Refuse a negative ``after`` (every backend's ``read_after`` and ``follow``)."""
    if after < 0:
        raise ValueError(f"'after' is a frame id (0 for all frames), got {after}")
