"""The run log in Redis Streams (:class:`RedisRunLog`), shared by the gateway's replicas.

A run's frames are the stream ``run:<id>:frames`` and its state the hash
``run:<id>:meta`` (the key table is in :mod:`.redis_backend`); each write is
one Lua script that checks the run is open, not ended and not full, so any
replica may append, read or follow any run. Built on :mod:`.redis_client`
(the client, and the health that tells an outage); it implements
:class:`~.runlog.RunLog` and imports nothing else of the gateway but the SSE
frame.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncGenerator, Mapping
from typing import Any

from ...core.errors import RunLogClosed, RunLogFull, RunNotFound, RunStoreUnavailable, UserError
from ...core.settings import Settings
from ..wire.sse import TERMINAL_TYPES, Frame, decode_frame, encode_frame
from .redis_client import RedisHealth, connect, disconnect, ms
from .runlog import RunLog, check_after

_OPEN = """
if redis.call('EXISTS', KEYS[1]) == 1 then
  if redis.call('HGET', KEYS[1], 'opener') == ARGV[2] then return 1 end
  return 0
end
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[1], 'n', 0, 'end', 0, 'opener', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1
"""

# KEYS: meta, frames. ARGV: id, type, bytes, terminal (0/1), max_frames, maxlen, running ttl,
# ended ttl. Returns {code, last id}: 1 stored (or already stored: the same frame sent again
# after its answer was lost); 0 the id is not the next one (the caller encodes again); -1 no
# such run; -2 ended; -3 full.
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
    is ``XREAD`` from ``n-0``), written by a script that checks the run is open,
    not ended and not full, and caps the stream with ``MAXLEN``
    (``max_frames`` plus the terminal frame). A follower replays and then waits
    with ``XREAD BLOCK`` (at most ``heartbeat_interval`` at a time, then checks
    the run still exists), holding one pooled connection while it waits; a
    cancelled follower's connection is closed. Any replica can follow, read or
    append to any run.

    :meth:`close` forgets the runs opened through this log that have not ended
    (their followers get ``RunNotFound``) and leaves ended ones to their TTL, so
    the other replicas can still replay them; afterwards this log knows no run.

    Redis unreachable: every method raises
    :class:`~headwater.errors.RunStoreUnavailable` (a follower too, mid-run),
    except :meth:`forget` and :meth:`close`, which leave the run to its TTL.

    Args:
        url: the Redis server (``redis://host:6379/0``).
        settings: ``run_log_max_frames``, ``heartbeat_interval``, the ``redis_*`` bounds.
        max_frames: overrides ``settings.run_log_max_frames``.
        read_batch: most entries one read returns.
        health: where outages are told (shared with the app's registry); its own
            by default.

    Raises:
        ImportError: redis-py is not installed.
        ValueError: ``max_frames`` or ``read_batch`` is below 1.
    """

    def __init__(self, url: str, *, settings: Settings, max_frames: int | None = None,
                 read_batch: int = 512, health: RedisHealth | None = None) -> None:
        max_frames = settings.run_log_max_frames if max_frames is None else max_frames
        if max_frames < 1:
            raise ValueError(f"max_frames must be at least 1, got {max_frames}")
        if read_batch < 1:
            raise ValueError(f"read_batch must be at least 1, got {read_batch}")
        self.max_frames = max_frames
        self.health = health if health is not None else RedisHealth(url)
        self._redis = connect(url, settings)
        self._blocking = connect(url, settings, blocking=True)  # followers' XREAD BLOCK
        self._prefix = settings.redis_key_prefix
        self._running_ttl = ms(settings.redis_run_ttl)
        self._ended_ttl = ms(settings.redis_ended_ttl)
        self._block = ms(settings.heartbeat_interval)
        self._batch = read_batch
        self._open = self._redis.register_script(_OPEN)
        self._append = self._redis.register_script(_APPEND)
        self._forget = self._redis.register_script(_FORGET)
        self._last: dict[str, int] = {}  # last id of runs appended to here: the next id's guess
        self._opened: set[str] = set()  # runs opened here and not ended: close() forgets them
        self._closed = False

    def _keys(self, run_id: str) -> tuple[str, str]:
        base = f"{self._prefix}run:{run_id}:"
        return base + "meta", base + "frames"

    def _check(self, run_id: str) -> None:
        if self._closed:
            raise RunNotFound(f"no run log for run {run_id!r} (the log is closed)")

    async def _state(self, run_id: str) -> tuple[int, bool]:
        """The run's last id and whether it ended."""
        self._check(run_id)
        with self.health.guard():
            n, end = await self._redis.hmget(self._keys(run_id)[0], "n", "end")
        if n is None:
            raise RunNotFound(f"no run log for run {run_id!r}")
        return int(n), end == b"1"

    async def open(self, run_id: str) -> None:
        if self._closed:
            raise UserError("the run log is closed; make a new one")
        with self.health.guard():
            # the opener's token: a call redis-py sends again (its connection closed before
            # the answer) finds the log it opened, not another's
            opened = await self._open(keys=self._keys(run_id),
                                      args=[self._running_ttl, uuid.uuid4().hex])
        if not opened:
            raise UserError(f"run {run_id!r} already has a log; run ids must be unique")
        self._opened.add(run_id)
        self._last[run_id] = 0

    async def append(self, run_id: str, type: str, data: Mapping[str, Any]) -> Frame:
        self._check(run_id)
        terminal = type in TERMINAL_TYPES
        guess = self._last.get(run_id, 0) + 1
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
                if terminal:
                    self._last.pop(run_id, None)
                    self._opened.discard(run_id)
                else:
                    self._last[run_id] = frame.id
                return frame
            if code == -1:
                raise RunNotFound(f"no run log for run {run_id!r}")
            if code == -2:
                raise RunLogClosed(f"run {run_id!r} already has its terminal frame")
            if code == -3:
                raise RunLogFull(f"run {run_id!r} wrote its {self.max_frames} frames")
            guess = int(last) + 1  # another writer appended meanwhile
        raise RuntimeError(f"run {run_id!r}: its frames are being written from several places")

    async def read_after(self, run_id: str, after: int) -> list[Frame]:
        check_after(after)
        self._check(run_id)
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
        return self._follow(run_id, after)

    async def _follow(self, run_id: str, after: int) -> AsyncGenerator[Frame, None]:
        last, ended = await self._state(run_id)
        if ended and last <= after:
            return
        frames_key = self._keys(run_id)[1]
        cursor = after
        while True:
            self._check(run_id)
            with self.health.guard():
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
        return (await self._state(run_id))[1]

    async def last_id(self, run_id: str) -> int:
        return (await self._state(run_id))[0]

    async def forget(self, run_id: str) -> None:
        if self._closed:
            return
        self._opened.discard(run_id)
        self._last.pop(run_id, None)
        with contextlib.suppress(RunStoreUnavailable), self.health.guard():
            await self._forget(keys=self._keys(run_id), args=[self._block])

    async def close(self) -> None:
        if self._closed:
            return
        try:
            for run_id in list(self._opened):
                await self.forget(run_id)
        finally:
            self._closed = True
            self._opened.clear()
            self._last.clear()
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
