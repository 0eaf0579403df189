"""The writer of a Redis run log: its runs' frames sent to Redis in batches.

:class:`FrameWriter` is the part of :class:`~.redis_runlog.RedisRunLog` that
writes (docs/frame-protocol.md, "Resumable runs across replicas"): the runs
written on this replica are :class:`WrittenRun` (their frames in process, how
much of them Redis holds), and one task sends what they wrote in one Lua script
call per batch (``WRITE``, below), opens their logs in Redis the same way,
fails them when Redis does not take their frames, and writes a failed run's
terminal frame once Redis takes it. Built on :mod:`.redis_client`; used by
:mod:`.redis_runlog` only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from ...core.errors import RunLogClosed, RunLogFull, RunNotFound, RunStoreUnavailable
from ...core.settings import Settings
from ...core.tasks import TaskSet
from ..wire.sse import Frame
from .redis_client import RedisHealth, ms
from .runlog import RunFrames

logger = logging.getLogger("headwater.gateway")

# One call of a writer: its runs' opens and frames. KEYS: meta, frames of each op's run.
# ARGV: maxlen, running ttl, ended ttl, then each op's arguments:
#   'o', opener, lazy (0/1), owner: open the run's log (the same opener again finds it open);
#   'w', count, clear lazy (0/1), then count × (id, type, bytes): append the frames whose id
#       is past the run's last one (those at or before it were written by an earlier send of
#       the same batch), renew its keys, and with clear, mark it sent (lazy 0).
# Each op answers {code, last id[, error]}: 1 done; 0 refused (another opener; or an id that
# is not the next); -1 no such run; -2 it has its terminal frame; -4 Redis refused a write
# (the frames before it are written). A refusal is caught (pcall): the other runs' ops go on.
WRITE = """
local maxlen, running, ended = ARGV[1], ARGV[2], ARGV[3]
local out = {}
local a = 4
local function failed(r) return type(r) == 'table' and r.err end
for k = 1, #KEYS, 2 do
  local meta, frames = KEYS[k], KEYS[k + 1]
  if ARGV[a] == 'o' then
    local code = 1
    local opener = redis.pcall('HGET', meta, 'opener')
    if failed(opener) then code = -4
    elseif opener then
      if opener ~= ARGV[a + 1] then code = 0 end
    else
      redis.pcall('DEL', frames)
      local r = redis.pcall('HSET', meta, 'n', 0, 'end', 0, 'opener', ARGV[a + 1],
                            'lazy', ARGV[a + 2], 'owner', ARGV[a + 3])
      if failed(r) then code = -4 else redis.call('PEXPIRE', meta, running) end
    end
    out[#out + 1] = {code, 0}
    a = a + 4
  else
    local count, clear = tonumber(ARGV[a + 1]), ARGV[a + 2]
    local first = a + 3
    a = first + 3 * count
    local state = redis.pcall('HMGET', meta, 'n', 'end')
    if failed(state) then out[#out + 1] = {-4, 0, state.err}
    elseif not state[1] then out[#out + 1] = {-1, 0}
    else
      local n, done = tonumber(state[1]), state[2]
      local code, err = 1, nil
      for i = first, a - 1, 3 do
        local id = tonumber(ARGV[i])
        if id > n then
          if done == '1' then code = -2; break end
          if id ~= n + 1 then code = 0; break end
          local r = redis.pcall('XADD', frames, 'MAXLEN', maxlen, id .. '-0',
                                't', ARGV[i + 1], 'f', ARGV[i + 2])
          if failed(r) then
            local top = redis.pcall('XREVRANGE', frames, '+', '-', 'COUNT', 1)
            if failed(top) or not top[1] or top[1][1] ~= id .. '-0' then
              code, err = -4, r.err
              break
            end
          end
          n = id
          if ARGV[i + 1] == 'error' or ARGV[i + 1] == 'done' then done = '1' end
        end
      end
      if code == 1 and clear == '1' then
        redis.call('HSET', meta, 'n', n, 'end', done, 'lazy', 0)
      else
        redis.call('HSET', meta, 'n', n, 'end', done)
      end
      local ttl = running
      if done == '1' then ttl = ended end
      redis.call('PEXPIRE', meta, ttl)
      redis.call('PEXPIRE', frames, ttl)
      out[#out + 1] = {code, n, err}
    end
  end
end
return out
"""

# A frame appended by a replica that does not run the run (the terminal frame of a run
# whose replica died). KEYS: meta, frames. ARGV: id, type, bytes, terminal (0/1),
# max_frames, maxlen, running ttl, ended ttl. Returns {code, last id}: 1 stored (or already
# stored: the same frame sent again after its answer was lost); 0 the id is not the next
# one (the caller encodes again); -1 no such run; -2 ended; -3 full.

class WrittenRun(RunFrames):
    """A run a :class:`FrameWriter` writes: its frames in process, and how much Redis holds."""

    __slots__ = ("closed", "id", "lazy", "renewed", "sent", "terminal", "types", "written")

    def __init__(self, run_id: str, keep: int, sent: bool) -> None:
        super().__init__(keep)
        self.id = run_id
        self.types: list[str] = []  # each frame's type (the stream entry's ``t``)
        self.sent = sent  # its frames go to Redis: resumable, or a follower elsewhere asked
        self.lazy = not sent  # Redis's meta says its frames are here only (``lazy`` 1)
        self.written = 0  # the frames Redis is known to hold
        self.closed = False  # failed and given its terminal frame: no more appends
        self.terminal: tuple[str, Mapping[str, Any]] | None = None  # to write once Redis can
        self.renewed = time.monotonic()  # its keys' expiry was last pushed back



class FrameWriter:
    """Sends the frames of the runs written on this replica to Redis, in batches.

    It waits ``redis_batch_window_ms`` (0: one event-loop turn) after the first
    frame of a batch, and while a call is on its way the next batch gathers; one
    ``WRITE`` call carries every run's new frames (at most ``write_batch``; the
    rest go in the next call) and the logs opened meanwhile. Once per
    ``heartbeat_interval`` it renews the keys of runs quiet for a third of
    ``redis_run_ttl`` and, when Redis answered nothing meanwhile and runs go on,
    sends a ``PING``: a Redis that does not answer fails every run going on.

    Args:
        redis: the log's client.
        health: where outages are told.
        settings: ``heartbeat_interval`` and the ``redis_*`` bounds.
        owner: the log's id (a run's ``owner`` in Redis).
        keys: a run id's meta and frames keys.
        max_frames: the non-terminal frames one run may write.
        write_batch: most frames one call carries.
        tasks: where the writer's task is started (the log's, closed by it).
        write_terminal: appends a frame straight to Redis after the frames it
            holds (a failed run's terminal frame).
    """

    def __init__(self, redis: Any, health: RedisHealth, settings: Settings, *, owner: str,
                 keys: Callable[[str], tuple[str, str]], max_frames: int, write_batch: int,
                 tasks: TaskSet,
                 write_terminal: Callable[[str, str, Mapping[str, Any]], Awaitable[Frame]],
                 ) -> None:
        self.health = health
        self.runs: dict[str, WrittenRun] = {}  # the runs written here, until forgotten
        self.calls = 0  # write calls made (each carries a batch); for tests and benchmarks
        self.frames_sent = 0  # frames Redis took from those calls
        self._redis = redis
        self._write = redis.register_script(WRITE)
        self._owner = owner
        self._keys = keys
        self._max_frames = max_frames
        self._write_batch = write_batch
        self._tasks = tasks
        self._write_terminal = write_terminal
        self._running_ttl = ms(settings.redis_run_ttl)
        self._renew_every = settings.redis_run_ttl / 3
        self._ended_ttl = ms(settings.redis_ended_ttl)
        self._beat = settings.heartbeat_interval
        self._timeout = settings.redis_timeout
        self._window = settings.redis_batch_window_ms / 1000
        self._dirty: dict[str, WrittenRun] = {}  # runs with something to send
        self._opening: dict[str, tuple[str, bool, asyncio.Future[int]]] = {}  # to send
        self._failed: dict[str, WrittenRun] = {}  # failed runs whose terminal Redis lacks
        self._sent: asyncio.Future[None] | None = None  # resolved when the next call is done
        self._wake = asyncio.Event()
        self._answered = 0.0  # when a call of the writer last got Redis's answer
        self._tried = 0.0  # when failed runs' terminal frames were last tried
        self._refusing = False  # Redis refused the last write call (logged once)
        self._writer: asyncio.Task[None] | None = None

    def open(self, run_id: str, token: str, lazy: bool, done: asyncio.Future[int]) -> None:
        """Open the run's log in Redis with the next call; ``done`` gets its answer (1
        opened, 0 another opener's) or its failure."""
        self._opening[run_id] = (token, lazy, done)
        self.kick()

    def cancel_open(self, run_id: str) -> None:
        """The opener no longer waits (its open may still be sent)."""
        self._opening.pop(run_id, None)

    def send(self, run: WrittenRun) -> None:
        """The run has frames Redis lacks (or asks to be sent): send them soon."""
        self._dirty[run.id] = run
        self.kick()

    async def written(self, run: WrittenRun, frame: Frame) -> None:
        """Return once Redis has ``frame`` of ``run`` (the caller marked it to send).

        Raises:
            RunStoreUnavailable: the run failed first.
            RunNotFound: the run was forgotten first.
        """
        while run.written < frame.id:
            if run.failure is not None:
                raise RunStoreUnavailable(str(run.failure))
            if run.gone:
                raise RunNotFound(f"run {run.id!r} was forgotten")
            if self._sent is None:
                self._sent = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._sent)  # a cancelled run's frame is still sent

    def drop(self, run_id: str) -> None:
        """Forget the run in this process: its followers here raise ``RunNotFound``."""
        run = self.runs.pop(run_id, None)
        if run is not None:
            run.gone = True
            run.wake()
            self._dirty.pop(run_id, None)
            self._failed.pop(run_id, None)

    async def flush(self) -> None:
        """Send what is left and the failed runs' terminal frames (the log's close)."""
        for _ in range(3):
            if not (self._opening or self._dirty):
                break
            await self._send()
        if self._failed:
            await self._write_terminals()

    def close(self) -> None:
        """Forget every run; the callers waiting for a call are let go."""
        for run_id in list(self.runs):
            self.drop(run_id)
        self._dirty.clear()
        self._failed.clear()
        if self._sent is not None and not self._sent.done():
            self._sent.set_result(None)  # its waiters find their run gone

    def kick(self) -> None:
        """Something is to be sent: start the writer, or wake it."""
        if self._writer is None and not self._tasks.closed:
            self._writer = self._tasks.spawn(self._write_forever(), name="write runs' frames")
        self._wake.set()

    async def _write_forever(self) -> None:
        """Send what the runs wrote, call after call; write failed runs' terminal frames;
        renew quiet runs' keys and check that Redis answers, once per heartbeat."""
        loop = asyncio.get_running_loop()
        looked = loop.time()
        while True:
            if not self._wake.is_set():
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._timeout if self._failed else self._beat):
                        await self._wake.wait()
            self._wake.clear()
            await asyncio.sleep(self._window)  # 0: this turn's other frames join the batch
            while self._opening or self._dirty:
                await self._send()
            now = loop.time()
            if self._failed and now - self._tried >= self._timeout:
                self._tried = now
                await self._write_terminals()
            if now - looked >= self._beat:
                looked = now
                self._renew_quiet()
                if now - self._answered >= self._beat:
                    await self._check_alive()

    def _renew_quiet(self) -> None:
        """Push back the expiry of runs that wrote nothing for a third of ``redis_run_ttl``
        (their keys' expiry is renewed by every batch that carries their frames)."""
        now = time.monotonic()
        for run_id, run in self.runs.items():
            if not run.ended and not run.closed and now - run.renewed > self._renew_every:
                self._dirty.setdefault(run_id, run)
                self._wake.set()

    async def _send(self) -> None:
        """One call: the logs to open and the runs' new frames (at most ``write_batch``
        frames; what does not fit stays for the next call)."""
        sent, self._sent = self._sent, None
        keys: list[str] = []
        args: list[Any] = [self._max_frames + 1, self._running_ttl, self._ended_ttl]
        opens: list[asyncio.Future[int]] = []
        for run_id, (token, lazy, done) in self._opening.items():
            keys += self._keys(run_id)
            args += ("o", token, int(lazy), self._owner)
            opens.append(done)
        self._opening = {}
        writes: list[tuple[WrittenRun, bool]] = []  # each run, and whether its lazy is cleared
        room = self._write_batch
        dirty, self._dirty = self._dirty, {}
        now = time.monotonic()
        for run_id, run in dirty.items():
            if self.runs.get(run_id) is not run or run.failure is not None:
                continue  # forgotten, or failed: only its terminal frame goes, later
            if room <= 0:
                self._dirty[run_id] = run
                continue
            first = run.written + 1
            last = min(len(run.raws), run.written + room)
            room -= last - first + 1
            clear = run.lazy and last == len(run.raws)
            keys += self._keys(run_id)
            args += ("w", last - first + 1, int(clear))
            types, raws = run.types, run.raws
            for id in range(first, last + 1):
                args += (id, types[id - 1], raws[id - 1])
            writes.append((run, clear))
            run.renewed = now
        try:
            if keys:
                self.calls += 1
                try:
                    with self.health.guard():
                        results = await self._write(keys=keys, args=args)
                except Exception as exc:  # unreachable, or refused: each op of it failed
                    self._call_failed(exc, opens, [run for run, _ in writes])
                    return
                self._answered = asyncio.get_running_loop().time()
                self._refusing = False
                for done, result in zip(opens, results, strict=False):
                    if done.done():
                        continue
                    if int(result[0]) == -4:
                        done.set_exception(RunStoreUnavailable(
                            f"Redis at {self.health.where} refused to open the run's log "
                            f"({text(result)})"))
                    else:
                        done.set_result(int(result[0]))
                for (run, clear), result in zip(writes, results[len(opens):], strict=False):
                    self._took(run, clear, result)
        finally:
            if sent is not None and not sent.done():
                sent.set_result(None)

    def _took(self, run: WrittenRun, clear: bool, result: list[Any]) -> None:
        """One run's answer in a write call."""
        code, n = int(result[0]), int(result[1])
        if code == 1 or (code == 0 and n < len(run.raws)):
            self.frames_sent += max(0, n - run.written)
            run.written = n
            if code == 1 and clear:
                run.lazy = False
            if run.sent and not run.lazy:
                run.show(n)
            if code == 0 or n < len(run.raws):  # more to send (Redis had fewer than thought)
                self._dirty[run.id] = run
                self._wake.set()
            return
        run.written = min(n, len(run.raws))
        if run.sent and not run.lazy:
            run.show(run.written)
        why = {-1: "its log is gone from Redis", -2: "its log in Redis has ended already",
               0: "Redis holds frames this replica did not write"}.get(
                   code, f"Redis refused its frames ({text(result)})")
        self._fail(run, RunStoreUnavailable(f"run {run.id!r}: {why}"),
                   write_terminal=code == -4)
        logger.warning("run %s: %s; it ends with run_store_unavailable", run.id, why,
                       extra={"run": run.id})

    def _call_failed(self, exc: Exception, opens: list[asyncio.Future[int]],
                     runs: list[WrittenRun]) -> None:
        """A write call failed whole: its opens fail; its runs fail, and every run going
        on here when Redis is unreachable."""
        if isinstance(exc, RunStoreUnavailable):
            failure = exc
        else:
            failure = RunStoreUnavailable(f"Redis at {self.health.where} refused the runs' "
                                          f"frames ({type(exc).__name__}: {exc})")
            if not self._refusing:  # once until a call succeeds again
                self._refusing = True
                logger.warning("%s; their runs end with run_store_unavailable", failure)
        for done in opens:
            if not done.done():
                done.set_exception(RunStoreUnavailable(str(failure)))
        for run in runs:
            self._fail(run, failure)
        if isinstance(exc, RunStoreUnavailable):
            self._fail_all(failure)

    def _fail(self, run: WrittenRun, failure: RunStoreUnavailable, *,
              write_terminal: bool = True) -> None:
        """The run's frames cannot go to Redis: it fails (see the class)."""
        if self.runs.get(run.id) is not run or run.failure is not None:
            return
        if run.sent and not run.lazy and write_terminal:
            self._failed[run.id] = run  # its terminal frame goes once it has one
        run.fail(RunStoreUnavailable(str(failure)))

    def _fail_all(self, failure: RunStoreUnavailable) -> None:
        """Redis is unreachable: every run going on here fails (docs/deployment.md, "When
        Redis goes away")."""
        for run in list(self.runs.values()):
            if not run.ended and not run.closed:
                self._fail(run, failure)

    async def _write_terminals(self) -> None:
        """Write each failed run's terminal frame after the frames Redis holds (straight, one
        call each), once Redis takes it: its followers on other replicas end too."""
        for run_id, run in list(self._failed.items()):
            if run.terminal is None:
                continue  # the run has not ended yet
            if self.runs.get(run_id) is not run:
                del self._failed[run_id]
                continue
            try:
                await self._write_terminal(run_id, *run.terminal)
            except (RunNotFound, RunLogClosed, RunLogFull):
                pass  # gone, or ended there: nothing to write
            except Exception:  # unreachable or refused still: again in redis_timeout
                continue
            self._failed.pop(run_id, None)

    async def _check_alive(self) -> None:
        """Runs go on here and Redis said nothing for ``heartbeat_interval``: ``PING``."""
        if not any(not run.ended and not run.closed for run in self.runs.values()):
            return
        try:
            with self.health.guard():
                await self._redis.ping()
        except RunStoreUnavailable as exc:
            self._fail_all(exc)
            return
        self._answered = asyncio.get_running_loop().time()


def text(result: list[Any]) -> str:
    """The error Redis gave for a refused write (the third element of its answer)."""
    if len(result) > 2:
        error = result[2]
        return error.decode(errors="replace") if isinstance(error, bytes) else str(error)
    return "no reason given"
