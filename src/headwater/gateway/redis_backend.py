"""Redis for a gateway of several replicas: the run log in Redis Streams, and the run registry.

Needs redis-py (``pip install "headwater[redis]"``), imported only here. Every
key and channel starts with ``Settings.redis_key_prefix`` (``headwater:``):

==============================  =================================================================
``run:<id>:meta``               hash: ``n`` (the last frame id), ``end`` (1 once the terminal
                                frame is in)
``run:<id>:frames``             stream: frame *n* is entry ``n-0``, fields ``t`` (its type) and
                                ``f`` (its SSE bytes); an entry ``n-1`` marks a forgotten run
``run:<id>:info``               hash: ``user``, ``session``, ``agent``, ``replica``, ``status``
``run:<id>:followers``          sorted set: the streams following the run, by expiry
``active:<len>:<user>:<sid>``   the id of the user's run going on in the session
``streams:<len>:<user>``        sorted set: the user's open streams on every replica, by expiry
``starts:<len>:<user>:<n>``     the user's run starts in the *n*-th ``run_rate_window``
``cancel:<replica>``            pub/sub channel: ids of the replica's runs to cancel
==============================  =================================================================

A run's frames and meta expire ``redis_run_ttl`` after its last frame while it
runs and ``redis_ended_ttl`` after its terminal frame. Its record, its
session's active key and the stream entries expire ``redis_liveness_ttl``
after their replica last renewed them (it renews every third of that), so a
dead replica's runs and streams age out. One Redis server (not a cluster).

Redis down, refusing or silent past ``redis_timeout``: every call raises
:class:`~headwater.errors.RunStoreUnavailable` (``run_store_unavailable``), and
:class:`RedisHealth` logs one line when the outage starts and one when Redis
answers again. Nothing is retried here and nothing needs a restart: each call
takes a connection from the pool, which connects again once Redis is back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncGenerator, Callable, Iterator, Mapping
from typing import Any, cast, get_args
from urllib.parse import urlsplit

from ..errors import RunLogClosed, RunLogFull, RunNotFound, RunStoreUnavailable, UserError
from ..settings import Settings
from ..tasks import TaskSet
from .registry import RunInfo, RunRegistry, RunStatus
from .runlog import RunLog, check_after
from .sse import TERMINAL_TYPES, Frame, decode_frame, encode_frame

logger = logging.getLogger("headwater.gateway")

_STATUSES = frozenset(get_args(RunStatus))


def connect(url: str, settings: Settings, *, blocking: bool = False) -> Any:
    """A redis-py asyncio client on ``url`` with a blocking pool of
    ``redis_max_connections`` (a command waits up to ``redis_pool_timeout`` for one).

    Connecting, and each answer, may take ``redis_timeout``; a client for
    ``blocking`` reads gives each answer ``heartbeat_interval`` more (a
    follower's ``XREAD BLOCK`` waits up to ``heartbeat_interval``). A command
    whose connection turns out closed is sent once more on a new one (a pooled
    connection outlives a Redis restart); a command Redis does not answer in
    time is not.

    Raises:
        ImportError: redis-py is not installed (the message names the extra).
    """
    try:
        import redis.asyncio as aioredis
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff
        from redis.exceptions import ConnectionError as RedisConnectionError
    except ImportError as exc:
        raise ImportError(
            'the gateway needs redis-py for Settings.redis_url: pip install "headwater[redis]"'
        ) from exc
    answer = settings.redis_timeout + (settings.heartbeat_interval if blocking else 0.0)
    pool = aioredis.BlockingConnectionPool.from_url(
        url, max_connections=settings.redis_max_connections,
        timeout=settings.redis_pool_timeout, socket_connect_timeout=settings.redis_timeout,
        socket_timeout=answer,
        retry=Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,)))
    return aioredis.Redis(connection_pool=pool)


async def disconnect(client: Any) -> None:
    """Close a client made by :func:`connect` and its pool."""
    await client.aclose()
    await client.connection_pool.disconnect()


class RedisHealth:
    """Whether Redis answers, as the calls of one replica find it: one log line per outage.

    Every call to Redis runs inside :meth:`guard`. The first that finds Redis
    unreachable (refused, reset, or silent past ``redis_timeout``) logs one
    WARNING; the calls that fail after it log nothing; the first that gets an
    answer again logs one INFO line. The run log and the run registry of an
    app share one.

    Args:
        url: the Redis server (named in the log without its credentials).
    """

    def __init__(self, url: str) -> None:
        self.where = _where(url)
        self.down = False
        self.busy = False  # the pool had no connection free for the last call
        self.outages = 0
        try:
            from redis.exceptions import ConnectionError as RedisConnectionError
            from redis.exceptions import TimeoutError as RedisTimeoutError
        except ImportError:  # no redis-py: no client either (connect() says so)
            self._errors: tuple[type[BaseException], ...] = (OSError,)
            self._refused: tuple[type[BaseException], ...] = ()
        else:
            self._errors = (RedisConnectionError, RedisTimeoutError, OSError)
            self._refused = (RedisConnectionError,)

    @contextlib.contextmanager
    def guard(self) -> Iterator[None]:
        """Run one call to Redis: an unreachable Redis becomes ``RunStoreUnavailable``.

        Raises:
            RunStoreUnavailable: Redis refused, dropped the connection or did not
                answer in time.
        """
        try:
            yield
        except self._errors as exc:
            if self._pool_exhausted(exc):  # Redis is fine: no connection of ours is free
                self.exhausted(exc)
                raise RunStoreUnavailable(f"every connection to Redis at {self.where} is in "
                                          "use (Settings.redis_max_connections)") from exc
            self.failed(exc)
            raise RunStoreUnavailable(f"Redis at {self.where} is unreachable "
                                      f"({type(exc).__name__})") from exc
        self.answered()

    def _pool_exhausted(self, exc: BaseException) -> bool:
        """Whether redis-py's error says its pool had no connection free in time (its
        ``BlockingConnectionPool`` raises ``ConnectionError`` from the wait's timeout)."""
        return isinstance(exc, self._refused) and isinstance(exc.__cause__, TimeoutError)

    def failed(self, exc: BaseException) -> None:
        """A call found Redis unreachable; logged once per outage."""
        if not self.down:
            self.down = True
            self.outages += 1
            logger.warning("Redis at %s is unreachable (%s: %s); requests that need it "
                           "answer 503 run_store_unavailable until it is back", self.where,
                           type(exc).__name__, exc)

    def answered(self) -> None:
        """A call got Redis's answer; ends an outage (and a spell of exhaustion)."""
        self.busy = False
        if self.down:
            self.down = False
            logger.info("Redis at %s answers again", self.where)

    def exhausted(self, exc: BaseException) -> None:
        """A call waited ``redis_pool_timeout`` for a connection of this replica's pool and
        got none: logged once until a call is answered again; not an outage."""
        if not self.busy:
            self.busy = True
            logger.warning("every connection of this replica to Redis at %s is in use "
                           "(Settings.redis_max_connections; waited redis_pool_timeout): "
                           "requests that need one answer 503 run_store_unavailable", self.where)


def _where(url: str) -> str:
    """``host:port/db`` of a Redis URL (never its user or password)."""
    parts = urlsplit(url)
    if parts.scheme == "unix":
        return parts.path
    try:
        port = parts.port
    except ValueError:
        port = None
    host = parts.hostname or "localhost"
    return f"{host}:{port or 6379}{parts.path or ''}"


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))


# -- the run log ---------------------------------------------------------------------------------

# KEYS: meta, frames. ARGV: ttl (ms), the opener's token. 1: opened (or already opened by
# this token: the call sent again after its answer was lost); 0: another opened it.
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
        self._running_ttl = _ms(settings.redis_run_ttl)
        self._ended_ttl = _ms(settings.redis_ended_ttl)
        self._block = _ms(settings.heartbeat_interval)
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


# -- the registry --------------------------------------------------------------------------------

# KEYS: a sorted set of streams. Drops the expired ones; the count of the others.
_COUNT = """
local t = redis.call('TIME')
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', t[1] * 1000 + math.floor(t[2] / 1000))
return redis.call('ZCARD', KEYS[1])
"""

# KEYS: the user's streams, the run's followers. ARGV: the stream's token, ttl (ms).
_HOLD = """
local t = redis.call('TIME')
local expires = t[1] * 1000 + math.floor(t[2] / 1000) + tonumber(ARGV[2])
for _, key in ipairs(KEYS) do
  redis.call('ZADD', key, expires, ARGV[1])
  redis.call('PEXPIRE', key, ARGV[2])
end
return 1
"""

# KEYS: the user's run starts (the window's index is appended). ARGV: window (ms), the
# start's token, the limit. A start is kept as its token, up to the limit: the same call sent
# again (redis-py's retry after a closed connection) is counted once, and a user past the
# limit adds nothing. Returns {starts in the current window, this one included, ms left}.
_COUNT_RUN = """
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local window = tonumber(ARGV[1])
local index = math.floor(now / window)
local key = KEYS[1] .. ':' .. index
local left = (index + 1) * window - now
local n = redis.call('SCARD', key)
if redis.call('SISMEMBER', key, ARGV[2]) == 1 then return {n, left} end
if n >= tonumber(ARGV[3]) then return {n + 1, left} end
redis.call('SADD', key, ARGV[2])
if n == 0 then redis.call('PEXPIRE', key, window) end
return {n + 1, left}
"""

# KEYS: info[, active]. ARGV: status, ttl (ms), run id.
_ENDED = """
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('HSET', KEYS[1], 'status', ARGV[1])
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
if KEYS[2] and redis.call('GET', KEYS[2]) == ARGV[3] then redis.call('DEL', KEYS[2]) end
return 1
"""


class _Stream:
    """One stream open on this replica, as the user's count and the run's followers see it."""

    __slots__ = ("closed", "held", "run_id", "token", "user_id")

    def __init__(self, user_id: str, run_id: str) -> None:
        self.user_id = user_id
        self.run_id = run_id
        self.token = uuid.uuid4().hex
        self.closed = False
        self.held: asyncio.Task[None] | None = None


class RedisRunRegistry(RunRegistry):
    """A :class:`~.registry.RunRegistry` in Redis: the runs and streams of every replica.

    This replica (``replica``, a random id) subscribes to its ``cancel:<replica>``
    channel when it registers its first run, and renews its runs' records and
    its streams every third of ``redis_liveness_ttl``; a replica that dies
    stops renewing them, so they age out.

    Redis unreachable: every method that answers raises
    :class:`~headwater.errors.RunStoreUnavailable`; the steps in the background
    (holding and releasing streams, renewing, listening for cancels) fail
    quietly and try again on their next turn.

    Args:
        url: the Redis server.
        settings: the ``redis_*`` bounds.
        health: where outages are told (shared with the app's run log); its own
            by default.

    Raises:
        ImportError: redis-py is not installed.
    """

    def __init__(self, url: str, *, settings: Settings,
                 health: RedisHealth | None = None) -> None:
        self.replica = uuid.uuid4().hex
        self.health = health if health is not None else RedisHealth(url)
        self._redis = connect(url, settings)
        self._prefix = settings.redis_key_prefix
        self._live_seconds = settings.redis_liveness_ttl
        self._live = _ms(settings.redis_liveness_ttl)
        self._ended_ttl = _ms(settings.redis_ended_ttl)
        self._count = self._redis.register_script(_COUNT)
        self._hold = self._redis.register_script(_HOLD)
        self._ended = self._redis.register_script(_ENDED)
        self._count_run = self._redis.register_script(_COUNT_RUN)
        self._runs: dict[str, RunInfo] = {}  # this replica's running runs: renewed
        self._streams: dict[str, set[_Stream]] = {}  # this replica's open streams, by user
        self._callback: Callable[[str], None] | None = None
        self._subscribed: asyncio.Task[None] | None = None
        self._pubsub: Any = None
        self._renewer: asyncio.Task[None] | None = None
        # The listener, the renewer and each stream's hold and release: closed in close().
        self._tasks = TaskSet("Redis run registry", logger=logger)
        self._closed = False

    # keys

    def _run_key(self, run_id: str, part: str) -> str:
        return f"{self._prefix}run:{run_id}:{part}"

    def _active_key(self, user_id: str, session_id: str) -> str:
        return f"{self._prefix}active:{len(user_id)}:{user_id}:{session_id}"

    def _streams_key(self, user_id: str) -> str:
        return f"{self._prefix}streams:{len(user_id)}:{user_id}"

    def _channel(self, replica: str) -> str:
        return f"{self._prefix}cancel:{replica}"

    # runs

    async def register(self, info: RunInfo) -> None:
        await self._subscribe()
        self._renew_in_background()
        with self.health.guard():
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.hset(self._run_key(info.id, "info"), mapping={
                    "user": info.user_id, "session": info.session_id, "agent": info.agent,
                    "replica": info.replica, "status": info.status})
                pipe.pexpire(self._run_key(info.id, "info"), self._live)
                pipe.set(self._active_key(info.user_id, info.session_id), info.id,
                         px=self._live)
                await pipe.execute()
        self._runs[info.id] = info

    async def ended(self, run_id: str, status: RunStatus) -> None:
        info = self._runs.pop(run_id, None)
        keys = [self._run_key(run_id, "info")]
        if info is not None:
            keys.append(self._active_key(info.user_id, info.session_id))
        with self.health.guard():
            await self._ended(keys=keys, args=[status, self._ended_ttl, run_id])

    async def forget(self, run_id: str) -> None:
        self._runs.pop(run_id, None)
        if not self._closed:
            with self.health.guard():
                await self._redis.delete(self._run_key(run_id, "info"),
                                         self._run_key(run_id, "followers"))

    async def lookup(self, run_id: str) -> RunInfo | None:
        with self.health.guard():
            found = await self._redis.hgetall(self._run_key(run_id, "info"))
        try:
            status = found[b"status"].decode()
            info = RunInfo(id=run_id, user_id=found[b"user"].decode(),
                           session_id=found[b"session"].decode(),
                           agent=found[b"agent"].decode(), replica=found[b"replica"].decode(),
                           status=cast(RunStatus, status))
        except KeyError:
            return None  # unknown, or expired while read
        return info if status in _STATUSES else None

    async def active(self, user_id: str, session_id: str) -> str | None:
        with self.health.guard():
            found = await self._redis.get(self._active_key(user_id, session_id))
        return found.decode() if found is not None else None

    # streams

    async def open_streams(self, user_id: str) -> int:
        pending = [s.held for s in self._streams.get(user_id, ()) if s.held is not None
                   and not s.held.done()]
        if pending:  # this replica's newest streams are counted before the answer
            await asyncio.wait(pending)
        with self.health.guard():
            return int(await self._count(keys=[self._streams_key(user_id)]))

    async def count_run(self, user_id: str, window: float, limit: int) -> tuple[int, float]:
        with self.health.guard():
            count, left = await self._count_run(
                keys=[f"{self._prefix}starts:{len(user_id)}:{user_id}"],
                args=[_ms(window), uuid.uuid4().hex, limit])
        return int(count), int(left) / 1000

    def stream_opened(self, user_id: str, run_id: str) -> object:
        stream = _Stream(user_id, run_id)
        self._streams.setdefault(user_id, set()).add(stream)
        if not self._closed:
            stream.held = self._tasks.spawn(self._hold_stream(stream), name="hold a stream",
                                            expected=RunStoreUnavailable)  # told per outage
            self._renew_in_background()
        return stream

    def stream_closed(self, token: object) -> None:
        if not isinstance(token, _Stream) or token.closed:
            return
        token.closed = True
        streams = self._streams.get(token.user_id)
        if streams is not None:
            streams.discard(token)
            if not streams:
                del self._streams[token.user_id]
        if not self._closed:
            self._tasks.spawn(self._release(token), name="release a stream",
                              expected=RunStoreUnavailable)  # told once per outage

    async def _hold_stream(self, stream: _Stream) -> None:
        with self.health.guard():
            await self._hold(keys=[self._streams_key(stream.user_id),
                                   self._run_key(stream.run_id, "followers")],
                             args=[stream.token, self._live])

    async def _release(self, stream: _Stream) -> None:
        if stream.held is not None:
            with contextlib.suppress(Exception):
                await stream.held
        if self._closed:
            return
        with self.health.guard():
            async with self._redis.pipeline(transaction=False) as pipe:
                pipe.zrem(self._streams_key(stream.user_id), stream.token)
                pipe.zrem(self._run_key(stream.run_id, "followers"), stream.token)
                await pipe.execute()

    async def followers(self, run_id: str) -> int:
        with self.health.guard():
            return int(await self._count(keys=[self._run_key(run_id, "followers")]))

    # cancel

    async def request_cancel(self, info: RunInfo) -> bool:
        with self.health.guard():
            return int(await self._redis.publish(self._channel(info.replica), info.id)) > 0

    def on_cancel(self, callback: Callable[[str], None]) -> None:
        self._callback = callback

    async def _subscribe(self) -> None:
        """Listen to this replica's cancel channel (once; again after a failed attempt)."""
        if self._subscribed is None or (self._subscribed.done()
                                        and self._subscribed.exception() is not None):
            # Its callers await it (and get its failure); a cancelled caller does not stop it.
            self._subscribed = self._tasks.spawn(self._start_listening(), name="subscribe",
                                                 expected=Exception)
        await asyncio.shield(self._subscribed)

    async def _start_listening(self) -> None:
        pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
        with self.health.guard():
            await pubsub.subscribe(self._channel(self.replica))
        self._pubsub = pubsub
        self._tasks.spawn(self._listen(pubsub), name="listen for cancels")

    async def _listen(self, pubsub: Any) -> None:
        while True:
            try:
                with self.health.guard():
                    message = await pubsub.get_message(ignore_subscribe_messages=True,
                                                       timeout=None)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if not isinstance(exc, RunStoreUnavailable):  # an outage is logged once
                    logger.warning("listening for cancels failed (%s); again in 1 s",
                                   type(exc).__name__)
                await asyncio.sleep(1.0)
                continue
            if message is None or message.get("type") != "message":
                continue
            data = message["data"]
            run_id = data.decode() if isinstance(data, bytes) else str(data)
            if self._callback is not None:
                try:
                    self._callback(run_id)
                except Exception:
                    logger.exception("cancelling run %s failed", run_id)

    # renewal

    def _renew_in_background(self) -> None:
        if not self._closed and self._renewer is None:
            self._renewer = self._tasks.spawn(self._renew_forever(), name="renew runs")

    async def _renew_forever(self) -> None:
        while True:
            await asyncio.sleep(self._live_seconds / 3)
            try:
                await self._renew()
            except asyncio.CancelledError:
                raise
            except RunStoreUnavailable:
                pass  # logged once per outage; the next turn tries again
            except Exception as exc:
                logger.warning("renewing this replica's runs in Redis failed: %s",
                               type(exc).__name__)

    async def _renew(self) -> None:
        """Push back the expiry of this replica's running runs and open streams."""
        runs = list(self._runs.values())
        streams = [s for group in self._streams.values() for s in group]
        if not runs and not streams:
            return
        with self.health.guard():
            async with self._redis.pipeline(transaction=False) as pipe:
                for info in runs:
                    pipe.pexpire(self._run_key(info.id, "info"), self._live)
                    pipe.pexpire(self._active_key(info.user_id, info.session_id), self._live)
                for stream in streams:
                    if not stream.closed:
                        await self._hold(keys=[self._streams_key(stream.user_id),
                                               self._run_key(stream.run_id, "followers")],
                                         args=[stream.token, self._live],
                                         client=pipe)  # queued
                await pipe.execute()

    async def ping(self) -> None:
        with self.health.guard():
            await self._redis.ping()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._tasks.aclose()  # their end, whatever it was; a cancel of ours still raises
        try:
            if self._pubsub is not None:
                await self._pubsub.aclose()
        finally:
            await disconnect(self._redis)

