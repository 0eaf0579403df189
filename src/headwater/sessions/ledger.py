"""``CallLedger``: the one answer to "which calls are pending", kept with a session.

Every function call a session's history holds is in the ledger with its state:

- ``open``: no result yet and nobody is waiting for one on purpose. During a
  run that is a call being executed; at the start of a run (or after one ends)
  it is *dangling* and gets a synthetic result (crash repair, cancel).
- ``awaiting_approval``: the call needs a human's answer before it runs.
- ``long_running``: the call answered with a ticket; its real result comes later
  as a function response with the same id and name.
- ``waiting``: a call to an agent used as a tool whose inner run paused (a
  call under it awaits approval or a long-running result): its result comes
  when that agent finishes (docs/multi-agent.md, "A pause inside a tree").
- ``answered``: a final result is stored. Each call has exactly one.

A function response is a *ticket* when the event carrying it lists the call in
``long_running_tool_ids``; otherwise it is the call's final result. An approval
request is recorded by ``actions.requested_approvals``, its answer by
``actions.approval_decisions``; an answered approval is ``open`` again until
its result is stored. A call an event lists in ``long_running_tool_ids`` with
no response and no approval request in it (and that it does not make) is
``waiting``. A waiting call with nothing pending under it any more (no call on
its branch that awaits approval, holds a ticket or waits itself) counts as
dangling: the inner run that would have answered it is gone.

The ledger also keeps the conversation a model sees (:attr:`contents`), built
incrementally: each call's latest result right after the model turn that made
it (a long-running result replaces its ticket; a ``pending`` placeholder while
none exists). Events without content (errors, control, approval records) are
left out. So building a model request does not re-read the whole history.

Several agents, one session (docs/multi-agent.md): each content entry
remembers its author and branch. While a session has one agent author and the
asking agent is on no branch, :meth:`contents_for` is :attr:`contents` itself
(the single-agent path, unchanged). Otherwise each (agent, branch) asking gets
its own view, built once and then kept level with every entry and every result
that lands in a slot: other agents' messages re-cast as user-role context
(``For context: [billing] said: …``, as ADK does) and other branches' entries
left out (:func:`visible`; a call's branch, where an agent used as a tool
runs, is seen only from inside it). The ledger also keeps who last spoke as a
model (:meth:`speakers`), which routes the next user turn.

The ledger is updated by :meth:`observe` with each committed event, in commit
order; :meth:`catch_up` brings it level with a session's events.

Call ids are unique within a session: :meth:`unique_calls` gives a model's
aggregate a fresh id for each call whose id the session already holds (a model
that numbers its calls per response reuses ``call_1``), before it is stored and
before its calls run, so the results, the stored history and every later
request name the call by its fresh id.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from ..core.events import ApprovalRequest, Event, new_id
from ..core.types import Content, FunctionCall, FunctionResponse, Part

CallStatus = Literal["open", "awaiting_approval", "long_running", "waiting", "answered"]

PENDING_DETAIL = "No result yet: the call awaits a human's approval or is still running."


@dataclass(slots=True)
class CallRecord:
    """One call and what became of it.

    Attributes:
        call: the function call as the model made it.
        status: see the module docstring.
        response: the latest response (a ticket or the final result), if any.
        approval: the pending approval request (``awaiting_approval`` only).
        ticket_at: when the ticket was stored (``long_running`` only), seconds
            since the epoch.
        author: the agent that made the call.
        branch: the branch that agent ran on.
    """

    call: FunctionCall
    status: CallStatus = "open"
    response: FunctionResponse | None = None
    approval: ApprovalRequest | None = None
    ticket_at: float | None = None
    author: str = ""
    branch: str | None = None


Origin = tuple[str, str | None]
"""The author and branch of a content entry."""


_NO_IDS: frozenset[str] = frozenset()

CALL_MARK = ":"
"""Marks the branch of an agent driven by a call (an ``AgentTool``): ``"<agent>:<call id>"``.
An agent name never holds it (names are identifiers)."""


def call_branch(branch: str | None, agent: str, call_id: str) -> str:
    """The branch an agent used as a tool runs on, for ``agent``'s call ``call_id`` made on
    ``branch``: ``"<agent>:<call id>"``, under ``branch`` when there is one
    (``"p.a.a:call_1"``)."""
    own = f"{agent}{CALL_MARK}{call_id}"
    return f"{branch}.{own}" if branch else own


def calls_above(branch: str | None) -> list[str]:
    """The ids of the calls ``branch`` lies under, outermost first: one per segment
    ``<agent>:<call id>`` (an agent used as a tool; nested ones one under another). The
    id runs from the ``:`` to the next ``.`` (docs/multi-agent.md, "Branches")."""
    if not branch or CALL_MARK not in branch:
        return []
    return [segment[segment.index(CALL_MARK) + 1:] for segment in branch.split(".")
            if CALL_MARK in segment]


def inside(branch: str | None, prefix: str) -> bool:
    """Whether ``branch`` is ``prefix`` or a branch under it (``"p.a"`` is under ``"p"``,
    ``"p.ab"`` is not)."""
    return branch is not None and (branch == prefix or branch.startswith(prefix + "."))


def in_call(branch: str | None) -> bool:
    """Whether ``branch`` is (or is under) the branch of an agent driven by a call."""
    return branch is not None and CALL_MARK in branch


def visible(viewer_branch: str | None, branch: str | None) -> bool:
    """Whether an entry on ``branch`` is in the history of an agent on ``viewer_branch``.

    ADK's rule: from no branch, every branch; from a branch, the entries of no
    branch, of that branch, and of the branches it descends from (``p.a`` sees
    ``p``, not ``p.b``; ``p.a`` does not match ``p.ab``). One more: a call's
    branch (``"<agent>:<call id>"``, an agent used as a tool) is a world of its
    own. Its entries are seen only from it and from the branches under it, and
    an agent on it sees only those entries (none of the main line's or of the
    branches above the call).
    """
    if viewer_branch is None:
        return branch is None or CALL_MARK not in branch
    if branch is None:
        return CALL_MARK not in viewer_branch
    if not (viewer_branch == branch or viewer_branch.startswith(branch + ".")):
        return False
    return len(branch) > viewer_branch.rfind(CALL_MARK)  # the entry is inside the viewer's call


def as_seen_by(viewer: str, author: str, content: Content) -> Content | None:
    """``content`` as ``viewer`` sees it: its own and the user's as they are, another
    agent's re-cast as user-role context (ADK's); ``None`` when nothing is left."""
    if author == viewer or author == "user":
        return content
    parts = [Part(text="For context:")]
    for part in content.parts:
        if part.thought:
            continue
        if part.text is not None:
            parts.append(Part(text=f"[{author}] said: {part.text}"))
        elif part.function_call is not None:
            call = part.function_call
            parts.append(Part(text=f"[{author}] called tool `{call.name}` with parameters: "
                                   f"{_json(call.args)}"))
        elif part.function_response is not None:
            response = part.function_response
            parts.append(Part(text=f"[{author}] `{response.name}` tool returned result: "
                                   f"{_json(response.response)}"))
        else:
            parts.append(part)
    return Content("user", parts) if len(parts) > 1 else None


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=repr)


class _View:
    """One (agent, branch)'s conversation, kept level with the ledger's entries."""

    __slots__ = ("at", "branch", "contents", "viewer")

    def __init__(self, viewer: str, branch: str | None) -> None:
        self.viewer = viewer
        self.branch = branch
        self.contents: list[Content] = []
        self.at: dict[int, int] = {}  # ledger entry index -> index in contents

    def add(self, index: int, content: Content, origin: Origin) -> None:
        if not visible(self.branch, origin[1]):
            return
        seen = as_seen_by(self.viewer, origin[0], content)
        if seen is not None:
            self.at[index] = len(self.contents)
            self.contents.append(seen)

    def replace(self, index: int, content: Content, origin: Origin) -> None:
        at = self.at.get(index)
        if at is not None:
            seen = as_seen_by(self.viewer, origin[0], content)
            if seen is not None:
                self.contents[at] = seen


class CallLedger:
    """The calls of one session and the model-facing conversation.

    Build one with :meth:`of` (from a session's events) and keep it level with
    :meth:`observe` after each commit.
    """

    __slots__ = ("_author", "_calls", "_contents", "_in_calls", "_last_id", "_observed",
                 "_origins", "_several", "_slots", "_speaker", "_speakers", "_unmatched",
                 "_views")

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._calls: dict[str, CallRecord] = {}
        self._contents: list[Content] = []
        # call id -> (index in _contents of the results content, index of its part)
        self._slots: dict[str, tuple[int, int]] = {}
        # ids of responses to no call (the store holds them); made at the first
        self._unmatched: set[str] | None = None
        self._observed = 0
        self._last_id: str | None = None
        # The author and branch of each entry of _contents: the author alone when on no
        # branch (no tuple kept per entry on the single-agent path; :meth:`_origin`).
        self._origins: list[str | Origin] = []
        self._author: str | None = None  # the first agent that authored an entry
        self._several = False  # another agent authored one too
        self._views: dict[Origin, _View] | None = None  # (agent, branch) -> its conversation
        self._speaker: str | None = None  # the agent that last spoke as a model
        # every agent that did, latest last, once a second one has
        self._speakers: dict[str, None] | None = None
        self._in_calls = False  # an entry lies on a call's branch (an agent used as a tool)

    @classmethod
    def of(cls, events: Sequence[Event]) -> CallLedger:
        """A ledger of these events (a session's history, in commit order)."""
        ledger = cls()
        for event in events:
            ledger.observe(event)
        return ledger

    # -- keeping level ----------------------------------------------------------------------

    def follows(self, events: Sequence[Event]) -> bool:
        """Whether ``events`` start with exactly the events observed so far."""
        n = self._observed
        if n == 0:
            return True
        return len(events) >= n and events[n - 1].id == self._last_id

    def catch_up(self, events: Sequence[Event]) -> None:
        """Observe the events past those already seen (all of them if history diverged)."""
        if not self.follows(events):
            self._reset()  # start over, in place: holders keep this ledger
        for event in events[self._observed:]:
            self.observe(event)

    def observe(self, event: Event) -> None:
        """Record a committed (non-partial) event."""
        self._observed += 1
        self._last_id = event.id
        actions = event.actions
        for decision in actions.approval_decisions:
            record = self._calls.get(decision.call_id)
            if record is not None and record.status == "awaiting_approval":
                record.status, record.approval = "open", None
        content = event.content
        if content is not None and content.parts:
            self._observe_content(event, content)
        for asked in actions.requested_approvals:
            record = self._calls.get(asked.call_id)
            if record is not None and record.status == "open":
                record.status, record.approval = "awaiting_approval", asked
        if event.long_running_tool_ids and (content is None or content.role != "model"):
            for call_id in event.long_running_tool_ids:  # no result, no approval: it waits
                record = self._calls.get(call_id)
                if record is not None and record.status == "open":
                    record.status = "waiting"

    def _observe_content(self, event: Event, content: Content) -> None:
        calls: list[FunctionCall] = []
        rest: list[Part] = []
        responses = False
        for part in content.parts:
            if part.function_response is not None:
                responses = True
                self._record_response(part.function_response, event.long_running_tool_ids,
                                      event.timestamp)
            else:
                if part.function_call is not None:
                    calls.append(part.function_call)
                rest.append(part)
        branch = event.branch
        origin = (event.author, branch)
        if content.role == "model" and (branch is None or CALL_MARK not in branch):
            self._spoke(event.author)
        if responses:
            if rest:
                self._append(Content(content.role, rest), origin)
            return
        self._append(content, origin)
        if calls:
            index = len(self._contents)
            parts: list[Part] = []
            for n, call in enumerate(calls):
                record = self._calls.get(call.id)
                if record is None:
                    record = self._calls[call.id] = CallRecord(
                        call, author=event.author, branch=event.branch)
                self._slots[call.id] = (index, n)
                parts.append(Part(function_response=record.response or pending_response(call)))
            self._append(Content("user", parts), origin)

    def _append(self, content: Content, origin: Origin) -> None:
        index = len(self._contents)
        self._contents.append(content)
        author, branch = origin
        if branch is None:
            self._origins.append(author)
        else:
            self._origins.append(origin)
            if not self._in_calls and CALL_MARK in branch:
                self._in_calls = True
        if author != "user" and not self._several:
            if self._author is None:
                self._author = author
            elif author != self._author:
                self._several = True
        if self._views is not None:  # built once another agent or a branch asked
            for view in self._views.values():
                view.add(index, content, origin)

    def _origin(self, index: int) -> Origin:
        """The author and branch of entry ``index``."""
        origin = self._origins[index]
        return (origin, None) if isinstance(origin, str) else origin

    def _spoke(self, author: str) -> None:
        """``author`` spoke as a model, last (:meth:`speakers`)."""
        speakers = self._speakers
        if speakers is None:
            if self._speaker is None or self._speaker == author:
                self._speaker = author
                return
            speakers = self._speakers = {self._speaker: None}
        speakers.pop(author, None)
        speakers[author] = None
        self._speaker = author

    def _record_response(self, response: FunctionResponse, tickets: Sequence[str],
                         at: float) -> None:
        record = self._calls.get(response.id)
        if record is None:  # a response to no call of this session: not part of the conversation
            if self._unmatched is None:  # but its id is taken: the store holds a result
                self._unmatched = set()
            self._unmatched.add(response.id)
            return
        record.response = response
        record.approval = None
        ticket = response.id in tickets
        record.status = "long_running" if ticket else "answered"
        record.ticket_at = at if ticket else None
        slot = self._slots.get(response.id)
        if slot is not None:
            index, n = slot
            old = self._contents[index]
            parts = list(old.parts)  # a new Content: requests already built keep theirs
            parts[n] = Part(function_response=response)
            new = self._contents[index] = Content(old.role, parts)
            if self._views is not None:
                for view in self._views.values():
                    view.replace(index, new, self._origin(index))

    # -- the one id per call rule ----------------------------------------------------------

    def unique_calls(self, content: Content) -> Content:
        """``content`` with a fresh id for each call whose id is already taken (or empty:
        a call built without one, ``Part.from_function_call(...)``).

        An id is taken by a call (or a result) of the session, or by an earlier
        call of ``content`` itself. Calls keep their order, so a replaced one is
        found by position. ``content`` itself is never changed: a new one is
        returned when any id is replaced (a live connection that keeps the
        model's response keeps the ids the model gave), else ``content`` itself.
        """
        parts = content.parts
        for part in parts:
            if part.function_call is not None:
                break
        else:  # no call: the common case of an answer
            return content
        calls, unmatched = self._calls, self._unmatched or _NO_IDS
        seen: set[str] = set()
        kept: list[Part] | None = None
        for n, part in enumerate(parts):
            call = part.function_call
            if call is None:
                continue
            if not call.id or call.id in seen or call.id in calls or call.id in unmatched:
                fresh = new_id("call")  # a random per-process prefix, then a counter
                while fresh in calls or fresh in unmatched or fresh in seen:
                    fresh = new_id("call")
                if kept is None:
                    kept = list(parts)
                kept[n] = replace(part, function_call=FunctionCall(fresh, call.name, call.args))
                seen.add(fresh)
            else:
                seen.add(call.id)
        return content if kept is None else Content(content.role, kept)

    # -- questions --------------------------------------------------------------------------

    @property
    def in_calls(self) -> bool:
        """Whether an entry lies on a call's branch (an agent used as a tool ran here)."""
        return self._in_calls

    @property
    def last_event_id(self) -> str | None:
        """The id of the last event observed (``None`` before the first)."""
        return self._last_id

    @property
    def contents(self) -> list[Content]:
        """The conversation for the next model request (a new list; do not mutate its items)."""
        return list(self._contents)

    def contents_for(self, agent: str, branch: str | None = None) -> list[Content]:
        """The conversation for ``agent``'s next request, on ``branch`` (a new list).

        :attr:`contents` itself while ``agent`` is the session's only agent
        author, runs on no branch and no entry lies on a call's branch;
        otherwise its view (see the module docstring), built on first use and
        kept level from then on.
        """
        if (branch is None and not self._in_calls and not self._several
                and (self._author is None or self._author == agent)):
            return list(self._contents)
        key = (agent, branch)
        views = self._views
        if views is None:
            views = self._views = {}
        view = views.get(key)
        if view is None:
            view = views[key] = _View(agent, branch)
            for index, content in enumerate(self._contents):
                view.add(index, content, self._origin(index))
        return list(view.contents)

    def speakers(self) -> list[str]:
        """The agents that spoke as a model in this session, the latest first (an agent
        used as a tool, on its call's branch, does not count: it answered the call)."""
        if self._speakers is None:
            return [] if self._speaker is None else [self._speaker]
        return list(reversed(self._speakers))

    def record(self, call_id: str) -> CallRecord | None:
        """The record of one call, or ``None`` when the session has no such call."""
        return self._calls.get(call_id)

    def dangling(self) -> list[FunctionCall]:
        """Calls without a result that nobody is waiting for on purpose, in call order: the
        open ones, and the waiting ones with nothing pending under them any more."""
        calls = [r.call for r in self._calls.values()
                 if r.status == "open" or (r.status == "waiting" and not self._held(r, ()))]
        return calls

    def waiting(self, author: str, branch: str | None) -> list[CallRecord]:
        """The calls ``author`` made on ``branch`` that wait for an agent used as a tool."""
        return [r for r in self._calls.values()
                if r.status == "waiting" and r.author == author and r.branch == branch]

    def holds(self, author: str, branch: str | None) -> bool:
        """Whether ``author`` has calls on ``branch`` that wait for a human or for an agent
        it called (awaiting approval, or waiting): its turn cannot be over."""
        for r in self._calls.values():
            if r.status in ("awaiting_approval", "waiting") and r.author == author \
                    and r.branch == branch:
                return True
        return False

    def pending_under(self, branch: str) -> bool:
        """Whether a call made on ``branch`` or under it still waits for its result (an
        approval, a ticket's result, an agent it called)."""
        return any(r.status in ("awaiting_approval", "long_running", "waiting")
                   and inside(r.branch, branch) for r in self._calls.values())

    def orphaned_by(self, closing: Sequence[str]) -> list[CallRecord]:
        """The waiting calls left with nothing pending under them once the calls
        ``closing`` get results (a supersede, an expiry, a seal): they get one too."""
        closed = set(closing)
        found: list[CallRecord] = []
        changed = True
        while changed:  # a waiting call closed makes the one above it an orphan too
            changed = False
            for record in self._calls.values():
                if (record.status == "waiting" and record.call.id not in closed
                        and not self._held(record, closed)):
                    closed.add(record.call.id)
                    found.append(record)
                    changed = True
        return found

    def _held(self, record: CallRecord, closed: Collection[str]) -> bool:
        """Whether something under waiting ``record``'s branch still waits for a result
        (leaving out the calls in ``closed``)."""
        under = call_branch(record.branch, record.author, record.call.id)
        for other in self._calls.values():
            if other.call.id in closed or not inside(other.branch, under):
                continue
            if other.status in ("awaiting_approval", "long_running"):
                return True
            if other.status == "waiting" and self._held(other, closed):
                return True
        return False

    def expired_tickets(self, now: float, ttl: float) -> list[FunctionCall]:
        """Long-running calls whose ticket is ``ttl`` seconds old or more at ``now``."""
        return [r.call for r in self._calls.values() if r.status == "long_running"
                and r.ticket_at is not None and now - r.ticket_at >= ttl]

    def awaiting(self) -> list[CallRecord]:
        """The calls waiting for a human's approval, in call order."""
        return [r for r in self._calls.values() if r.status == "awaiting_approval"]

    def awaiting_approval(self, call_id: str) -> ApprovalRequest | None:
        """The pending approval request of this call, if it has one."""
        record = self._calls.get(call_id)
        return record.approval if record is not None else None


def pending_response(call: FunctionCall) -> FunctionResponse:
    """The placeholder a model sees for a call that has no result yet."""
    return FunctionResponse(id=call.id, name=call.name,
                            response={"status": "pending", "detail": PENDING_DETAIL})

