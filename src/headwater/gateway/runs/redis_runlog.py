"""The run log in Redis Streams (:class:`RedisRunLog`), shared by the gateway's replicas.

A run's frames are the stream ``run:<id>:frames`` and its state the hash
``run:<id>:meta`` (the key table is in :mod:`.redis_backend`). The replica
that runs a run (its *writer*) keeps the run's frames in process, as
:class:`~.runlog.InMemoryRunLog` does, and its followers there read them in
process; Redis holds the copy that followers on other replicas read and resume
from. The writer sends its runs' frames to Redis in batches: one Lua script
call carries every frame its runs wrote within ``redis_batch_window_ms`` (and
while the previous call was on its way), each checked against the run's state
(open, not ended, the next id) and written once however often the batch is
sent. A run that is not resumable is sent to Redis only once a follower on
another replica asks for it (docs/frame-protocol.md, "Resumable runs across
replicas"). Built on :mod:`.redis_client` (the client, and the health that
tells an outage); it implements :class:`~.runlog.RunLog` and imports nothing
else of the gateway but the SSE frame.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncGenerator, Mapping
from typing import Any

from ...core.errors import RunLogClosed, RunLogFull, RunNotFound, RunStoreUnavailable, UserError
from ...core.settings import Settings
from ...core.tasks import TaskSet
from ..wire.sse import TERMINAL_TYPES, Frame, decode_frame, encode_frame
from .redis_client import ChannelListener, RedisHealth, connect, disconnect, ms
from .redis_writer import FrameWriter, WrittenRun
from .runlog import RunLog, check_after, follow_frames

logger = logging.getLogger("headwater.gateway")

# A frame appended by a replica that does not run the run (the terminal frame of a run
# whose replica died). KEYS: meta, frames. ARGV: id, type, bytes, terminal (0/1),
# max_frames, maxlen, running ttl, ended ttl. Returns {code, last id}: 1 stored (or already
# stored: the same frame sent again after its answer was lost); 0 the id is not the next
# one (the caller encodes again); -1 no such run; -2 ended; -3 full.
_APPEND = """
local meta = redis.call('HMGET', KEYS[1], 'n', 'end')
if not meta[1] then return {-1, 0} end
local n = tonumber(meta[1])
if n > 0 and tonumber(ARGV[1]) == n then
  local last = redis.call('XRANGE', KEYS[2], n .. '-0', n .. '-0')
  if last[1] and last[1][2][4] == ARGV[3] then return {1, n} end
end
if meta[2] == '1' then return {-2, n} end
if ARGV[4] == '0' and n >= tonumber(ARGV[5]) then return {-3, n} end
if tonumber(ARGV[1]) ~= n + 1 then return {0, n} end
redis.call('XADD', KEYS[2], 'MAXLEN', ARGV[6], ARGV[1] .. '-0', 't', ARGV[2], 'f', ARGV[3])
redis.call('HSET', KEYS[1], 'n', n + 1, 'end', ARGV[4])
local ttl = ARGV[7]
if ARGV[4] == '1' then ttl = ARGV[8] end
redis.call('PEXPIRE', KEYS[1], ttl)
redis.call('PEXPIRE', KEYS[2], ttl)
return {1, n + 1}
"""

# KEYS: meta, frames. ARGV: how long the marker stays (ms). Wakes waiting followers.
_FORGET = """
local n = redis.call('HGET', KEYS[1], 'n')
if not n then return 0 end
redis.call('DEL', KEYS[1])
redis.call('XADD', KEYS[2], n .. '-1', 'gone', '1')
redis.call('PEXPIRE', KEYS[2], ARGV[1])
return 1
"""



class RedisRunLog(RunLog):
    """A :class:`~.runlog.RunLog` in Redis Streams, shared by the gateway's replicas.

    One stream per run; frame *n* is the entry ``n-0`` (so ``Last-Event-ID: n``
    is ``XREAD`` from ``n-0``). The runs opened through this log are *written*
    here: their frames are kept in process, and their followers here read them
    in process (no Redis call per frame). A task of the log sends them to Redis
    in batches: it waits ``redis_batch_window_ms`` (0: one event-loop turn)
    after the first frame of a batch, and while a call is on its way the next
    batch gathers; one script call carries every run's new frames (at most
    ``write_batch``; the rest go in the next call) and the logs opened meanwhile.

    A resumable run's frames all go: :meth:`append` returns once Redis has the
    frame (its followers here see it then too), so a frame any client has seen
    is one every replica can resume from. A run opened with ``resumable=False``
    goes to Redis only once a follower on another replica asks for it: that
    replica publishes the run id on this log's ``frames:<id>`` channel and waits
    (up to ``redis_timeout``) until this log has sent every frame so far; from
    then on the run goes as a resumable one. Until then its :meth:`append`
    returns at once and Redis holds only its ``meta`` (``lazy`` 1, the writer's
    log id).

    A follower of a run written elsewhere replays with ``XREAD`` and then waits
    with ``XREAD BLOCK`` (at most ``heartbeat_interval`` at a time, then checks
    the run still exists); each read returns every frame there is (up to
    ``read_batch``), and only a read that finds none blocks. It holds one pooled
    connection while it waits; a cancelled follower's connection is closed.

    :meth:`close` sends what is left, forgets the runs opened through this log
    that have not ended (their followers get ``RunNotFound``) and those Redis
    does not hold whole, and leaves the others to their TTL, so the other
    replicas can still replay them; afterwards this log knows no run.

    Redis unreachable: every method raises
    :class:`~headwater.errors.RunStoreUnavailable`, except :meth:`forget` and
    :meth:`close`, which leave the run to its TTL. The runs written here learn
    it from their next batch, or within ``heartbeat_interval`` from the log's
    check that Redis answers (a ``PING`` when nothing else was answered
    meanwhile): they *fail*. A failed run's followers here end with the error
    once they have every frame Redis holds (the gateway's follower then sends
    the terminal ``error`` ``run_store_unavailable``, numbered next, and stops
    the run); :meth:`append` refuses its further frames; its terminal frame is
    written to Redis, after the frames Redis holds, as soon as Redis takes it
    (tried every ``redis_timeout`` until the run is forgotten), so its followers
    on other replicas end too. A run whose frames Redis refused (a script error,
    a full memory: the frames before the refused one are written) fails alike;
    so does a run whose log Redis lost (restarted empty).

    Args:
        url: the Redis server (``redis://host:6379/0``).
        settings: ``run_log_max_frames``, ``heartbeat_interval``, the ``redis_*`` bounds.
        max_frames: overrides ``settings.run_log_max_frames``.
        read_batch: most entries one read returns.
        write_batch: most frames one call to Redis carries.
        health: where outages are told (shared with the app's registry); its own
            by default.
        keep_objects: the last frames of each run written here kept as
            :class:`Frame` objects (a live follower's; see ``InMemoryRunLog``).

    Raises:
        ImportError: redis-py is not installed.
        ValueError: ``max_frames``, ``read_batch``, ``write_batch`` or ``keep_objects``
            is below 1.
    """

    def __init__(self, url: str, *, settings: Settings, max_frames: int | None = None,
                 read_batch: int = 512, write_batch: int = 1024,
                 health: RedisHealth | None = None, keep_objects: int = 4) -> None:
        max_frames = settings.run_log_max_frames if max_frames is None else max_frames
        for name, value in (("max_frames", max_frames), ("read_batch", read_batch),
                            ("write_batch", write_batch), ("keep_objects", keep_objects)):
            if value < 1:
                raise ValueError(f"{name} must be at least 1, got {value}")
        self.max_frames = max_frames
        self.health = health if health is not None else RedisHealth(url)
        self.id = uuid.uuid4().hex  # this log among the replicas: its frames:<id> channel
        self._redis = connect(url, settings)
        self._blocking = connect(url, settings, blocking=True)  # followers' XREAD BLOCK
        self._prefix = settings.redis_key_prefix
        self._running_ttl = ms(settings.redis_run_ttl)
        self._ended_ttl = ms(settings.redis_ended_ttl)
        self._block = ms(settings.heartbeat_interval)
        self._timeout = settings.redis_timeout
        self._batch = read_batch
        self._keep = keep_objects
        self._append = self._redis.register_script(_APPEND)
        self._forget = self._redis.register_script(_FORGET)
        self._opens: dict[str, asyncio.Future[int]] = {}  # run ids being opened
        # The writer, the listener for other replicas' followers: closed in close().
        self._tasks = TaskSet("Redis run log", logger=logger)
        self._writer = FrameWriter(
            self._redis, self.health, settings, owner=self.id, keys=self._keys,
            max_frames=max_frames, write_batch=write_batch, tasks=self._tasks,
            write_terminal=self._write_terminal)
        self._listener = ChannelListener(self._redis, self.health, self._tasks,
                                         self._channel(self.id), self._requested,
                                         "followers elsewhere")
        self._closed = False

    @property
    def calls(self) -> int:
        """Write calls this log made (each carries a batch of frames and opens)."""
        return self._writer.calls

    @property
    def frames_sent(self) -> int:
        """Frames Redis took from this log's write calls."""
        return self._writer.frames_sent

    def _keys(self, run_id: str) -> tuple[str, str]:
        base = f"{self._prefix}run:{run_id}:"
        return base + "meta", base + "frames"

    def _channel(self, owner: str) -> str:
        return f"{self._prefix}frames:{owner}"

    def _check(self, run_id: str) -> None:
        if self._closed:
            raise RunNotFound(f"no run log for run {run_id!r} (the log is closed)")

    # -- opening and writing -------------------------------------------------------------

    async def open(self, run_id: str, *, resumable: bool = True) -> None:
        if self._closed:
            raise UserError("the run log is closed; make a new one")
        if run_id in self._writer.runs or run_id in self._opens:
            raise UserError(f"run {run_id!r} already has a log; run ids must be unique")
        done: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._opens[run_id] = done
        try:
            if not resumable:
                await self._listener.start()  # before another replica may ask for it
            # the opener's token: a call redis-py sends again (its connection closed before
            # the answer) finds the log it opened, not another's
            self._writer.open(run_id, uuid.uuid4().hex, not resumable, done)
            code = await asyncio.shield(done)
        finally:
            del self._opens[run_id]
            self._writer.cancel_open(run_id)
        if code != 1:
            raise UserError(f"run {run_id!r} already has a log; run ids must be unique")
        if self._closed:
            raise UserError("the run log is closed; make a new one")
        self._writer.runs[run_id] = WrittenRun(run_id, self._keep, sent=resumable)

    async def append(self, run_id: str, type: str, data: Mapping[str, Any]) -> Frame:
        run = self._writer.runs.get(run_id)
        if run is None:
            return await self._append_elsewhere(run_id, type, data)
        if run.ended or run.closed:
            raise RunLogClosed(f"run {run_id!r} already has its terminal frame")
        terminal = type in TERMINAL_TYPES
        if run.failure is not None and (run.sent or not terminal):
            if terminal:  # written to Redis as soon as Redis takes it
                encode_frame(1, type, data)  # refused now if it cannot be encoded
                run.closed = True
                run.terminal = (type, data)
            raise RunStoreUnavailable(str(run.failure))
        if not terminal and len(run.raws) >= self.max_frames:
            raise RunLogFull(f"run {run_id!r} wrote its {self.max_frames} frames")
        if not run.sent:  # Redis gets it if a follower elsewhere asks
            frame = run.add(type, data)
            run.types.append(type)
            return frame
        frame = run.add(type, data, hold=True)  # shown once Redis has it
        run.types.append(type)
        self._writer.send(run)
        try:
            await self._writer.written(run, frame)
        except RunStoreUnavailable:
            if terminal:  # written to Redis as soon as Redis takes it
                run.terminal = (type, data)
            raise
        if not terminal:
            _cancelled_meanwhile()
        return frame

    async def _write_terminal(self, run_id: str, type: str, data: Mapping[str, Any]) -> Frame:
        """A failed run's terminal frame, after the frames Redis holds."""
        return await self._append_elsewhere(run_id, type, data, ask=False)

    # -- requests from other replicas ----------------------------------------------------

    def _requested(self, run_id: str) -> None:
        """Another replica follows a run written here that Redis does not hold: send it."""
        run = self._writer.runs.get(run_id)
        if run is not None and run.lazy and run.failure is None:
            run.sent = True  # from now on, as a resumable run
            self._writer.send(run)

    # -- reading ---------------------------------------------------------------------------

    async def _meta(self, run_id: str) -> tuple[int, bool, bool, str]:
        """The run's last id in Redis, whether it ended, whether its frames are only on its
        writer's replica, and that writer's log id."""
        self._check(run_id)
        with self.health.guard():
            n, end, lazy, owner = await self._redis.hmget(self._keys(run_id)[0], "n", "end",
                                                          "lazy", "owner")
        if n is None:
            raise RunNotFound(f"no run log for run {run_id!r}")
        return int(n), end == b"1", lazy == b"1", (owner or b"").decode()

    async def _state(self, run_id: str, ask: bool = True) -> tuple[int, bool]:
        """The run's last id and whether it ended, in Redis; a run Redis does not hold yet
        is asked of its writer first (``ask``)."""
        n, ended, lazy, owner = await self._meta(run_id)
        if not lazy or not ask:
            return n, ended
        with self.health.guard():
            heard = int(await self._redis.publish(self._channel(owner), run_id))
        if not heard:
            raise RunStoreUnavailable(f"run {run_id!r}: the replica that runs it does not "
                                      "answer")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout
        pause = 0.001
        while True:
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.05)
            n, ended, lazy, _ = await self._meta(run_id)
            if not lazy:
                return n, ended
            if loop.time() > deadline:
                raise RunStoreUnavailable(f"run {run_id!r}: the replica that runs it did not "
                                          "send its frames within redis_timeout")

    async def read_after(self, run_id: str, after: int) -> list[Frame]:
        check_after(after)
        self._check(run_id)
        run = self._writer.runs.get(run_id)
        if run is not None:
            return [run.frame(i) for i in range(after + 1, run.shown + 1)]
        await self._state(run_id)
        meta, frames = self._keys(run_id)
        with self.health.guard():
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.exists(meta)
                pipe.xrange(frames, f"{after + 1}-0", "+")
                exists, entries = await pipe.execute()
        if not exists:
            raise RunNotFound(f"no run log for run {run_id!r}")
        return [_frame(entry_id, fields) for entry_id, fields in entries if b"gone" not in fields]

    def follow(self, run_id: str, after: int) -> AsyncGenerator[Frame, None]:
        check_after(after)
        if run_id in self._writer.runs:
            return follow_frames(self._writer.runs, run_id, after)
        return self._follow(run_id, after)

    async def _follow(self, run_id: str, after: int) -> AsyncGenerator[Frame, None]:
        last, ended = await self._state(run_id)
        if ended and last <= after:
            return
        frames_key = self._keys(run_id)[1]
        cursor = after
        while True:
            self._check(run_id)
            with self.health.guard():  # every frame there is; a blocking read only for none
                found = await self._redis.xread({frames_key: f"{cursor}-0"}, count=self._batch)
                if not found:
                    found = await self._blocking.xread({frames_key: f"{cursor}-0"},
                                                       count=self._batch, block=self._block)
            _cancelled_meanwhile()  # a follower never goes on once cancelled
            if not found:  # a quiet while: is the run still there?
                last, ended = await self._state(run_id)
                if ended and last <= cursor:
                    return  # its terminal frame is gone (trimmed or expired)
                continue
            # RESP2: [[key, entries]]; RESP3: {key: [entries]}
            entries = next(iter(found.values()))[0] if isinstance(found, dict) else found[0][1]
            for entry_id, fields in entries:
                if b"gone" in fields:
                    raise RunNotFound(
                        f"run {run_id!r} was forgotten before its terminal frame")
                frame = _frame(entry_id, fields)
                cursor = frame.id
                yield frame
                if frame.terminal:
                    return

    async def ended(self, run_id: str) -> bool:
        self._check(run_id)
        run = self._writer.runs.get(run_id)
        if run is not None:
            return run.ended and run.shown == len(run.raws)
        return (await self._state(run_id))[1]

    async def last_id(self, run_id: str) -> int:
        self._check(run_id)
        run = self._writer.runs.get(run_id)
        return run.shown if run is not None else (await self._state(run_id))[0]

    async def _append_elsewhere(self, run_id: str, type: str, data: Mapping[str, Any], *,
                                ask: bool = True) -> Frame:
        """Append straight to Redis, after the frames it holds: to a run another replica
        writes (the terminal frame of a run whose replica died), or a failed run's terminal
        frame (``ask`` False: what Redis holds, whatever the writer has)."""
        self._check(run_id)
        terminal = type in TERMINAL_TYPES
        guess = (await self._state(run_id, ask=ask))[0] + 1
        for _ in range(3):
            frame = encode_frame(guess, type, data)
            with self.health.guard():
                code, last = await self._append(
                    keys=self._keys(run_id),
                    args=[frame.id, type, frame.raw, int(terminal), self.max_frames,
                          self.max_frames + 1, self._running_ttl, self._ended_ttl])
            if code == 1:
                if not terminal:
                    _cancelled_meanwhile()
                return frame
            if code == -1:
                raise RunNotFound(f"no run log for run {run_id!r}")
            if code == -2:
                raise RunLogClosed(f"run {run_id!r} already has its terminal frame")
            if code == -3:
                raise RunLogFull(f"run {run_id!r} wrote its {self.max_frames} frames")
            guess = int(last) + 1  # another writer appended meanwhile
        raise RuntimeError(f"run {run_id!r}: its frames are being written from several places")

    # -- forgetting ------------------------------------------------------------------------

    # -- forgetting ------------------------------------------------------------------------

    async def forget(self, run_id: str) -> None:
        if self._closed:
            return
        self._writer.drop(run_id)
        with contextlib.suppress(RunStoreUnavailable), self.health.guard():
            await self._forget(keys=self._keys(run_id), args=[self._block])

    async def close(self) -> None:
        if self._closed:
            return
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._timeout):  # what is left goes, if it can
                    await self._writer.flush()
            gone = [run_id for run_id, run in self._writer.runs.items()
                    if not (run.ended and run.sent and not run.lazy and run.failure is None
                            and run.written == len(run.raws))]
            for run_id in gone:
                self._writer.drop(run_id)
            if gone:  # not in Redis whole: the other replicas cannot have them
                with contextlib.suppress(RunStoreUnavailable), self.health.guard():
                    async with self._redis.pipeline(transaction=False) as pipe:
                        for run_id in gone:
                            await self._forget(keys=self._keys(run_id), args=[self._block],
                                               client=pipe)  # queued
                        await pipe.execute(raise_on_error=False)
        finally:
            self._closed = True
            self._writer.close()
            for done in self._opens.values():
                if not done.done():
                    done.set_exception(UserError("the run log is closed"))
            try:
                await self._tasks.aclose()
                await self._listener.aclose()
            finally:
                try:
                    await disconnect(self._redis)
                finally:
                    await disconnect(self._blocking)


def _cancelled_meanwhile() -> None:
    """Raise the cancel of this task that a Redis command swallowed.

    On Python 3.11, ``asyncio.wait_for`` (which redis-py uses to connect)
    returns its result instead of raising when a cancel lands as its inner
    call completes; the task is then still marked as cancelling. A follower or
    a run's writer of non-terminal frames never goes on once cancelled.
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


def _frame(entry_id: bytes, fields: Mapping[bytes, bytes]) -> Frame:
    """The frame stored as the stream entry ``<id>-0``: its bytes, read back."""
    return decode_frame(fields[b"f"])
