"""How a terminal shows several agents' text: the one rule ``headwater chat`` (frames) and
``headwater run`` / ``headwater demo --terminal`` (events) both write by.

The page's reducer's rule (docs/frame-protocol.md): one draft per author and
branch. A delta goes on its author's line while that line is open; when
another agent's text or any other line came between, it starts a new line
labelled with its agent. A record (the whole message) replaces its draft: when
it says what the deltas said it is not written again, and when it differs (rare:
the contract makes them equal) it is written below, marked as the record. An
inner agent's activity (an agent used as a tool runs on its call's branch) is
indented under the call, a level per call. A lone agent's run is one line per
answer, labelled with its agent, as before several agents spoke.
"""

from __future__ import annotations

from typing import Any, Literal

from ..sessions.ledger import CALL_MARK

Draft = tuple[str, str | None]
"""Whose draft: an author and its branch."""

Settled = Literal["ends", "said", "record", "new"]
"""What a record asks of the writer (:meth:`Drafts.settle`)."""


class Drafts:
    """What each agent's deltas showed so far, and whose draft the open line holds.

    It writes nothing: the writer asks it, then writes in its own style.
    """

    __slots__ = ("_texts", "line")

    def __init__(self) -> None:
        self._texts: dict[Draft, str] = {}
        self.line: Draft | None = None  # whose draft the open line holds; None: none is open

    def starts(self, key: Draft) -> bool:
        """Whether a delta of ``key`` starts a new labelled line (end the open one first)."""
        return self.line != key

    def add(self, key: Draft, text: str) -> None:
        """``text`` of a delta of ``key``, written on its line (now the open line)."""
        self._texts[key] = self._texts.get(key, "") + text
        self.line = key

    def end_line(self) -> bool:
        """Close the open line; whether one was open (the writer ends it)."""
        was_open = self.line is not None
        self.line = None
        return was_open

    def settle(self, key: Draft, text: str) -> Settled:
        """The record ``text`` of ``key`` replaces its draft.

        Returns:
            ``"ends"``: the deltas said it on the open line: end that line.
            ``"said"``: the deltas said it on a line since ended: nothing to write.
            ``"record"``: it differs from what the deltas showed: end the open line,
            write it marked as the record. ``"new"``: no delta showed it: end the open
            line, write it labelled.
        """
        draft = self._texts.pop(key, None)
        if draft is not None and (text == draft or not text):
            if self.line == key:
                self.line = None
                return "ends"
            return "said"
        return "new" if draft is None else "record"

    def drop(self, key: Draft) -> None:
        """Forget ``key``'s draft (its agent failed)."""
        self._texts.pop(key, None)

    def clear(self) -> None:
        """Forget every draft (the run ended)."""
        self._texts.clear()


def nesting(branch: Any) -> str:  # a frame's or history item's branch, from the wire
    """Two spaces per call a branch nests under (its ``<agent>:<call id>`` segments,
    docs/frame-protocol.md): an inner agent's activity goes under its call."""
    return "  " * branch.count(CALL_MARK) if isinstance(branch, str) else ""
