"""A per-user request rate limit: one token bucket per user, across the whole app.

Every authenticated HTTP request and every WebSocket opening takes one token
from its user's bucket (:meth:`Gateway.user <.core.Gateway.user>` and the live
socket's opening); a user whose bucket is empty is answered 429
``rate_limited`` with ``Retry-After`` (a WebSocket: closed with 1013). A bucket
holds ``Settings.rate_limit_burst`` tokens and refills at
``Settings.rate_limit_per_minute``. Buckets that have refilled are dropped, so
memory follows the users active in the last burst's worth of time.
"""

from __future__ import annotations

import time
from typing import Final

_PRUNE_AT: Final = 4096  # buckets held before the full ones are dropped


class UserRateLimit:
    """Token buckets by user.

    Args:
        per_minute: tokens each bucket regains in a minute.
        burst: tokens a bucket holds (a user's first requests, at once).
    """

    __slots__ = ("_buckets", "_full_after", "_prune_at", "burst", "rate")

    def __init__(self, per_minute: float, burst: int) -> None:
        self.rate = per_minute / 60.0  # tokens per second
        self.burst = float(burst)
        self._full_after = self.burst / self.rate  # seconds an empty bucket takes to refill
        self._buckets: dict[str, tuple[float, float]] = {}  # user -> (tokens, when)
        self._prune_at = _PRUNE_AT

    def take(self, user: str) -> float | None:
        """Take one of ``user``'s tokens: ``None`` when there was one, else the seconds
        until there is."""
        now = time.monotonic()
        tokens, last = self._buckets.get(user, (self.burst, now))
        tokens = min(self.burst, tokens + (now - last) * self.rate)
        if tokens < 1.0:
            self._buckets[user] = (tokens, now)
            return (1.0 - tokens) / self.rate
        self._buckets[user] = (tokens - 1.0, now)
        if len(self._buckets) > self._prune_at:
            self._prune(now)
        return None

    def _prune(self, now: float) -> None:
        full_after = self._full_after
        self._buckets = {user: held for user, held in self._buckets.items()
                         if now - held[1] < full_after}
        self._prune_at = max(_PRUNE_AT, 2 * len(self._buckets))
