"""Streamed function-call arguments by JSON path (Gemini's ``partialArgs``), sans-I/O.

Gemini can stream a call's arguments as ``{"jsonPath": "$.recipe.items[0].name",
"stringValue": "Lasa"}`` pieces: each piece sets one leaf, and a string that
arrives in several pieces (``willContinue``) is appended to. :class:`ArgsBuilder`
applies the pieces to one JSON object; nothing is parsed from text, so a call
whose pieces stop early is simply missing keys, never half a JSON document.
"""

from __future__ import annotations

import re
from typing import Any

from ..core.errors import MalformedChunk

_SEGMENT = re.compile(
    r"\.(?P<key>[^.\[\]]+)"  # .name
    r"|\[(?P<index>\d+)\]"  # [0]
    r"|\['(?P<single>(?:[^'\\]|\\.)*)'\]"  # ['a.b']
    r'|\["(?P<double>(?:[^"\\]|\\.)*)"\]'  # ["a.b"]
)
_MAX_INDEX = 10_000  # a path is the provider's text: never let it allocate a huge list

Path = tuple[str | int, ...]


def parse_path(path: str) -> Path:
    """``"$.a[0]['b.c']"`` → ``("a", 0, "b.c")``.

    Raises:
        MalformedChunk: not a JSON path below the root ``$``.
    """
    if not path.startswith("$"):
        raise MalformedChunk("gemini: a partialArgs jsonPath does not start at '$'")
    segments: list[str | int] = []
    at = 1
    while at < len(path):
        match = _SEGMENT.match(path, at)
        if match is None:
            raise MalformedChunk("gemini: a partialArgs jsonPath is not a path")
        if match["index"] is not None:
            index = int(match["index"])
            if index > _MAX_INDEX:
                raise MalformedChunk("gemini: a partialArgs jsonPath index is too large")
            segments.append(index)
        else:
            key = match["key"] or match["single"] or match["double"] or ""
            segments.append(re.sub(r"\\(.)", r"\1", key) if match["key"] is None else key)
        at = match.end()
    if not segments:
        raise MalformedChunk("gemini: a partialArgs jsonPath names the root")
    return tuple(segments)


class ArgsBuilder:
    """One call's arguments, built from path-addressed pieces."""

    __slots__ = ("args",)

    def __init__(self, args: dict[str, Any] | None = None) -> None:  # raw JSON object
        self.args: dict[str, Any] = dict(args or {})

    def set(self, path: str, value: Any, *, append: bool = False) -> None:  # raw JSON
        """Set the leaf at ``path``; with ``append``, a string there is extended.

        Raises:
            MalformedChunk: the path crosses a value of another kind (a key into
                a list, an index into an object or into a scalar).
        """
        segments = parse_path(path)
        *parents, leaf = segments
        container: Any = self.args  # raw JSON
        for segment, following in zip(parents, segments[1:], strict=False):
            container = _child(container, segment, {} if isinstance(following, str) else [])
        existing = _get(container, leaf)
        if append and isinstance(existing, str) and isinstance(value, str):
            value = existing + value
        _put(container, leaf, value)


def _get(container: Any, segment: str | int) -> Any:  # raw JSON
    if isinstance(segment, int):
        _check(container, list)
        return container[segment] if segment < len(container) else None
    _check(container, dict)
    return container.get(segment)


def _put(container: Any, segment: str | int, value: Any) -> None:  # raw JSON
    if isinstance(segment, int):
        _check(container, list)
        container.extend([None] * (segment + 1 - len(container)))
        container[segment] = value
    else:
        _check(container, dict)
        container[segment] = value


def _child(container: Any, segment: str | int, empty: Any) -> Any:  # raw JSON
    child = _get(container, segment)
    if child is None:
        _put(container, segment, empty)
        return empty
    return child


def _check(container: Any, kind: type) -> None:
    if not isinstance(container, kind):
        raise MalformedChunk("gemini: a partialArgs jsonPath crosses a value of another kind")
