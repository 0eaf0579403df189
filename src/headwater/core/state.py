"""Session state with change tracking.

Writes go to the live state at once (so later reads in the same run see them)
and into a delta that travels with the next persisted event, which the session
store applies atomically with that event.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from typing import Any

TEMP_PREFIX = "temp:"
"""Keys with this prefix live for one run and are never persisted."""


class State(MutableMapping[str, Any]):
    """A mutable view of session state that records what changed.

    Args:
        value: the session's state (mutated in place).
        delta: where changes are recorded (mutated in place).
    """

    __slots__ = ("_delta", "_value")

    def __init__(self, value: dict[str, Any], delta: dict[str, Any]) -> None:
        self._value = value
        self._delta = delta

    def __getitem__(self, key: str) -> Any:
        if key in self._delta:
            return self._delta[key]
        return self._value[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self._value[key] = value
        self._delta[key] = value

    def __delitem__(self, key: str) -> None:
        # Deletion is recorded as None, as ADK does: state deltas only add or overwrite.
        if key not in self._value and key not in self._delta:
            raise KeyError(key)
        self._value.pop(key, None)
        self._delta[key] = None

    def __iter__(self) -> Iterator[str]:
        return iter({**self._value, **self._delta})

    def __len__(self) -> int:
        return len({**self._value, **self._delta})

    @property
    def delta(self) -> dict[str, Any]:
        """The changes recorded so far."""
        return self._delta

    def has_delta(self) -> bool:
        """Whether anything changed."""
        return bool(self._delta)
