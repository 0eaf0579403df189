"""The run registry in Redis (:class:`RedisRunRegistry`): the runs and streams of every replica.

Each replica records its running runs (``run:<id>:info``, the session's
``active`` key) and its open streams (the user's ``streams`` set, the run's
``followers``), renews them while it lives so a dead replica's age out, counts
run starts per user and window, and listens on its ``cancel:<replica>``
channel (the key table is in :mod:`.redis_backend`). Its background steps
(holding and releasing streams, renewing, listening) are tasks of the
registry's own :class:`~headwater.tasks.TaskSet`, ended by :meth:`close`.
Built on :mod:`.redis_client`; it implements :class:`~.registry.RunRegistry`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable
from typing import cast, get_args

from ...core.errors import RunStoreUnavailable
from ...core.settings import Settings
from ...core.tasks import TaskSet
from .redis_client import ChannelListener, RedisHealth, connect, disconnect, ms
from .registry import RunInfo, RunRegistry, RunStatus

logger = logging.getLogger("headwater.gateway")

_STATUSES = frozenset(get_args(RunStatus))

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
        self._live = ms(settings.redis_liveness_ttl)
        self._ended_ttl = ms(settings.redis_ended_ttl)
        self._count = self._redis.register_script(_COUNT)
        self._hold = self._redis.register_script(_HOLD)
        self._ended = self._redis.register_script(_ENDED)
        self._count_run = self._redis.register_script(_COUNT_RUN)
        self._runs: dict[str, RunInfo] = {}  # this replica's running runs: renewed
        self._streams: dict[str, set[_Stream]] = {}  # this replica's open streams, by user
        self._callback: Callable[[str], None] | None = None
        self._renewer: asyncio.Task[None] | None = None
        # The listener, the renewer and each stream's hold and release: closed in close().
        self._tasks = TaskSet("Redis run registry", logger=logger)
        self._closed = False
        self._listener = ChannelListener(self._redis, self.health, self._tasks,
                                         self._channel(self.replica), self._cancel_asked,
                                         "cancels")

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
        await self._listener.start()
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
                args=[ms(window), uuid.uuid4().hex, limit])
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

    def _cancel_asked(self, run_id: str) -> None:
        """Another replica asks this one to cancel ``run_id``."""
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
            await self._listener.aclose()
        finally:
            await disconnect(self._redis)
