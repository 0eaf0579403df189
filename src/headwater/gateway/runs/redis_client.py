"""The Redis client of the gateway's Redis pieces, and the one place that tells an outage.

:func:`connect` builds the redis-py client with every bound of the settings
(its pool, its timeouts, one resend of a command whose pooled connection
turned out closed); :class:`RedisHealth` runs each call, turns an unreachable
Redis into :class:`~headwater.errors.RunStoreUnavailable` and logs one line
when an outage starts and one when it ends. redis-py (``pip install
"headwater[redis]"``) is imported here only, when a client is made.
:class:`ChannelListener` is the one way those pieces listen on a pub/sub channel.
Used by :mod:`.redis_runlog` and :mod:`.redis_registry`; imports only the
settings, the errors and the task set.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

from ...core.errors import RunStoreUnavailable
from ...core.settings import Settings
from ...core.tasks import TaskSet

logger = logging.getLogger("headwater.gateway")


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


def ms(seconds: float) -> int:
    """``seconds`` in the whole milliseconds Redis takes (at least 1)."""
    return max(1, round(seconds * 1000))


class ChannelListener:
    """One pub/sub channel a Redis piece listens on (a replica's cancels, a run log's
    requests from followers elsewhere).

    :meth:`start` subscribes once (again after a failed attempt; a cancelled caller does
    not stop it, the next caller gets its failure); every message then goes to
    ``on_message`` as text. A failure to read is retried every second, an outage logged
    once by ``health``. Its tasks are the owner's (``tasks``, closed by the owner);
    :meth:`aclose` closes the subscription after them.

    Args:
        redis: the redis-py client.
        health: the owner's :class:`RedisHealth`.
        tasks: the owner's task set.
        channel: the channel's name.
        on_message: called with each message's text.
        what: what it listens for, in log lines ("cancels").
    """

    __slots__ = ("_channel", "_health", "_on_message", "_pubsub", "_redis", "_subscribed",
                 "_tasks", "_what")

    def __init__(self, redis: Any, health: RedisHealth, tasks: TaskSet, channel: str,
                 on_message: Callable[[str], None], what: str) -> None:
        self._redis = redis
        self._health = health
        self._tasks = tasks
        self._channel = channel
        self._on_message = on_message
        self._what = what
        self._subscribed: asyncio.Task[None] | None = None
        self._pubsub: Any = None

    async def start(self) -> None:
        """Listening from now on (subscribed once; again after a failed attempt).

        Raises:
            RunStoreUnavailable: Redis could not be reached.
        """
        if self._subscribed is None or (self._subscribed.done()
                                        and self._subscribed.exception() is not None):
            self._subscribed = self._tasks.spawn(self._subscribe(), name="subscribe",
                                                 expected=Exception)
        await asyncio.shield(self._subscribed)

    async def _subscribe(self) -> None:
        pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
        with self._health.guard():
            await pubsub.subscribe(self._channel)
        self._pubsub = pubsub
        self._tasks.spawn(self._listen(pubsub), name=f"listen for {self._what}")

    async def _listen(self, pubsub: Any) -> None:
        while True:
            try:
                with self._health.guard():
                    message = await pubsub.get_message(ignore_subscribe_messages=True,
                                                       timeout=None)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if not isinstance(exc, RunStoreUnavailable):  # an outage is logged once
                    logger.warning("listening for %s failed (%s); again in 1 s", self._what,
                                   type(exc).__name__)
                await asyncio.sleep(1.0)
                continue
            if message is None or message.get("type") != "message":
                continue
            data = message["data"]
            self._on_message(data.decode() if isinstance(data, bytes) else str(data))

    async def aclose(self) -> None:
        """Close the subscription (after the owner closed its tasks); quiet on failure."""
        if self._pubsub is not None:
            with contextlib.suppress(Exception):
                await self._pubsub.aclose()
