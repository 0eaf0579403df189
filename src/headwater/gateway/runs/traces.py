"""The run inspector's traces: the last ``Settings.inspect_runs`` runs of each session.

Every run the gateway starts records its spans into a
:class:`~headwater.core.trace_record.TraceRecord` (``telemetry.recording``
around its start, :meth:`Gateway.start_run <headwater.gateway.core.Gateway.start_run>`);
the store keeps it by run id with its owner, and ``GET /runs/{id}/trace``
answers it to that owner only (docs/inspector.md).

- :class:`TraceStore` keeps them in the process: the last ``inspect_runs`` of
  each session, for the ``inspect_sessions`` sessions used last. A run still
  going is answered as it stands (its open spans without an end).
- :class:`RedisTraceStore` (``Settings.redis_url``) also writes each ended
  run's trace to Redis (``trace:<id>``: the JSON, for ``inspect_ttl``;
  ``traces:<len>:<user>:<sid>``: the session's list of run ids, trimmed to
  ``inspect_runs``), so any replica answers any ended run; while a run goes
  on, a snapshot of its trace is written every ``inspect_live_interval`` when
  it changed (``trace:<id>:live``, short-lived), so another replica answers a
  running run too, as it stood at the last snapshot.

With ``inspect_runs`` 0 nothing is recorded: :meth:`TraceStore.new_record`
answers ``None`` and the run's spans cost nothing.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Any

from ...core.errors import RunStoreUnavailable
from ...core.settings import Settings
from ...core.tasks import TaskSet
from ...core.trace_record import TraceRecord

logger = logging.getLogger("headwater.gateway")

__all__ = ("RedisTraceStore", "TraceStore", "inspect_payloads", "trace_store")


def inspect_payloads(settings: Settings, *, dev_mode: bool) -> bool:
    """Whether the run inspector records payloads: ``Settings.inspect_payloads``, or when it
    is ``None``, whether the gateway is in dev mode (no authenticator)."""
    return dev_mode if settings.inspect_payloads is None else settings.inspect_payloads


def trace_store(settings: Settings, *, dev_mode: bool, health: Any = None) -> TraceStore:
    """The app's trace store: in Redis too with ``settings.redis_url`` (and traces on), in
    process otherwise; ``health``: the app's Redis health, shared with its run log."""
    payloads = inspect_payloads(settings, dev_mode=dev_mode)
    if settings.redis_url and settings.inspect_runs > 0:
        return RedisTraceStore(settings.redis_url, settings, payloads=payloads, health=health)
    return TraceStore(settings, payloads=payloads)


@dataclass(slots=True)
class _Kept:
    """One run's trace and whose it is."""

    user_id: str
    session_id: str
    record: TraceRecord


class TraceStore:
    """The traces of one gateway process, in memory (see the module docstring).

    Args:
        settings: ``inspect_runs``, ``inspect_sessions``, ``inspect_max_spans``.
        payloads: record what models are sent and answer (``inspect_payloads``,
            resolved for dev mode by the gateway).
    """

    def __init__(self, settings: Settings, *, payloads: bool) -> None:
        self.per_session = settings.inspect_runs
        self.max_sessions = settings.inspect_sessions
        self.max_spans = settings.inspect_max_spans
        self.payloads = payloads
        self._sessions: OrderedDict[tuple[str, str], deque[str]] = OrderedDict()
        self._traces: dict[str, _Kept] = {}

    def new_record(self) -> TraceRecord | None:
        """A record for the next run to start, or ``None`` when traces are off
        (``inspect_runs`` 0)."""
        if self.per_session <= 0:
            return None
        return TraceRecord(payloads=self.payloads, max_spans=self.max_spans)

    def keep(self, run_id: str, user_id: str, session_id: str, record: TraceRecord) -> None:
        """Keep ``record`` as the trace of ``run_id``; the session's oldest goes past
        ``inspect_runs``, the least recently used session past ``inspect_sessions``."""
        key = (user_id, session_id)
        runs = self._sessions.get(key)
        if runs is None:
            runs = self._sessions[key] = deque()
            while len(self._sessions) > self.max_sessions:
                _, gone = self._sessions.popitem(last=False)
                for old in gone:
                    self._traces.pop(old, None)
        else:
            self._sessions.move_to_end(key)
        runs.append(run_id)
        while len(runs) > self.per_session:
            self._traces.pop(runs.popleft(), None)
        self._traces[run_id] = _Kept(user_id, session_id, record)
        if record.ended:
            self._ended(run_id, self._traces[run_id])
        else:
            record.on_end = lambda _record: self._ended(run_id, self._traces.get(run_id))

    def _ended(self, run_id: str, kept: _Kept | None) -> None:
        """A kept run has ended (nothing to do in memory)."""

    async def get(self, run_id: str, user_id: str, *, payloads: bool = False
                  ) -> dict[str, Any] | None:
        """The trace of the user's run ``run_id`` as the route answers it, or ``None`` (no such
        run kept, or another user's). ``payloads``: with what was sent and answered, when
        it was recorded."""
        kept = self._traces.get(run_id)
        if kept is None or kept.user_id != user_id:
            return None
        return {"run_id": run_id, "session_id": kept.session_id,
                **kept.record.as_json(payloads=payloads)}

    async def aclose(self) -> None:
        """Forget every trace (the app's shutdown)."""
        self._sessions.clear()
        self._traces.clear()


class RedisTraceStore(TraceStore):
    """:class:`TraceStore` whose ended traces go to Redis too: any replica answers them.

    Args:
        url: the Redis server (``Settings.redis_url``).
        settings: as for :class:`TraceStore`, and ``inspect_ttl``,
            ``redis_key_prefix`` and the Redis client's bounds.
        payloads: as for :class:`TraceStore`.
        health: the app's Redis health (one log line per outage).
    """

    def __init__(self, url: str, settings: Settings, *, payloads: bool,
                 health: Any = None) -> None:
        super().__init__(settings, payloads=payloads)
        from .redis_client import RedisHealth, connect  # needs headwater[redis]

        self._client = connect(url, settings)
        self._health = health if health is not None else RedisHealth(url)
        self._prefix = settings.redis_key_prefix
        self._ttl = max(1, int(settings.inspect_ttl))
        self._writes = TaskSet("trace store", logger=logger)
        self._grace = settings.redis_timeout  # the last writes may finish; no longer
        self._interval = settings.inspect_live_interval
        self._running: dict[str, tuple[_Kept, tuple[int, int]]] = {}  # run -> (it, written)
        self._snapshots: asyncio.Task[None] | None = None

    def _key(self, run_id: str) -> str:
        return f"{self._prefix}trace:{run_id}"

    def _list(self, user_id: str, session_id: str) -> str:
        return f"{self._prefix}traces:{len(user_id)}:{user_id}:{session_id}"

    def _live(self, run_id: str) -> str:
        return f"{self._prefix}trace:{run_id}:live"

    def keep(self, run_id: str, user_id: str, session_id: str, record: TraceRecord) -> None:
        super().keep(run_id, user_id, session_id, record)
        kept = self._traces.get(run_id)
        if kept is None or record.ended or self._interval <= 0:
            return
        self._running[run_id] = (kept, (0, 0))
        if self._snapshots is None:  # one task for every running run of this replica
            self._snapshots = self._writes.spawn(self._snapshot_loop(), name="trace snapshots",
                                                 expected=(RunStoreUnavailable,))

    async def _snapshot_loop(self) -> None:
        """Every ``inspect_live_interval``, each running run whose trace changed is written
        to its ``:live`` key (short-lived; the ended trace's key wins over it), so any
        replica shows a run while it runs."""
        while True:
            await asyncio.sleep(self._interval)
            for run_id, (kept, written) in list(self._running.items()):
                spans = kept.record.spans
                now = (len(spans), sum(1 for span in spans if span.end is not None))
                if now == written or run_id not in self._running:
                    continue
                self._running[run_id] = (kept, now)
                body = {"user_id": kept.user_id, "session_id": kept.session_id,
                        **kept.record.as_json(payloads=True)}
                text = json.dumps(body, separators=(",", ":"))
                ttl = max(1, int(self._interval * 10))
                try:
                    with self._health.guard():
                        await self._client.set(self._live(run_id), text, ex=ttl)
                except RunStoreUnavailable:
                    continue  # an outage: the next round tries again

    def _ended(self, run_id: str, kept: _Kept | None) -> None:
        self._running.pop(run_id, None)
        if kept is None:
            return
        body = {"user_id": kept.user_id, "session_id": kept.session_id,
                **kept.record.as_json(payloads=True)}
        self._writes.spawn(self._write(run_id, kept.user_id, kept.session_id, body),
                           name=f"trace {run_id}", expected=(RunStoreUnavailable,))

    async def _write(self, run_id: str, user_id: str, session_id: str,
                     body: dict[str, Any]) -> None:
        """Store one ended run's trace and trim its session's list to ``inspect_runs``."""
        text = json.dumps(body, separators=(",", ":"))
        listing = self._list(user_id, session_id)
        with self._health.guard():
            async with self._client.pipeline(transaction=True) as pipe:
                pipe.set(self._key(run_id), text, ex=self._ttl)
                pipe.delete(self._live(run_id))
                pipe.rpush(listing, run_id)
                pipe.lrange(listing, 0, -self.per_session - 1)
                pipe.ltrim(listing, -self.per_session, -1)
                pipe.expire(listing, self._ttl)
                answers = await pipe.execute()
            gone = answers[3]
            if gone:
                await self._client.delete(*(self._key(_text(old)) for old in gone))

    async def get(self, run_id: str, user_id: str, *, payloads: bool = False
                  ) -> dict[str, Any] | None:
        here = await super().get(run_id, user_id, payloads=payloads)
        if here is not None:
            return here
        with self._health.guard():
            text = await self._client.get(self._key(run_id))
            if text is None:  # still running on another replica: its latest snapshot
                text = await self._client.get(self._live(run_id))
        if text is None:
            return None
        body: dict[str, Any] = json.loads(text)
        if body.pop("user_id", None) != user_id:
            return None
        if not payloads:
            for span in body.get("spans", ()):
                span.pop("payload", None)
        return {"run_id": run_id, **body}

    async def aclose(self) -> None:
        from .redis_client import disconnect

        if self._snapshots is not None:
            self._snapshots.cancel()  # (awaited with the other writes below)
        self._running.clear()
        await self._writes.aclose(grace=self._grace)
        await super().aclose()
        await disconnect(self._client)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
