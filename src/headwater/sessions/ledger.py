"""``CallLedger``: the one answer to "which calls are pending", kept with a session.

Every function call a session's history holds is in the ledger with its state:

- ``open``: no result yet and nobody is waiting for one on purpose. During a
  run that is a call being executed; at the start of a run (or after one ends)
  it is *dangling* and gets a synthetic result (crash repair, cancel).
- ``awaiting_approval``: the call needs a human's answer before it runs.
- ``long_running``: the call answered with a ticket; its real result comes later
  as a function response with the same id and name.
- ``answered``: a final result is stored. Each call has exactly one.

A function response is a *ticket* when the event carrying it lists the call in
``long_running_tool_ids``; otherwise it is the call's final result. An approval
request is recorded by ``actions.requested_approvals``, its answer by
``actions.approval_decisions``; an answered approval is ``open`` again until
its result is stored.

The ledger also keeps the conversation a model sees (:attr:`contents`), built
incrementally: each call's latest result right after the model turn that made
it (a long-running result replaces its ticket; a ``pending`` placeholder while
none exists). Events without content (errors, control, approval records) are
left out. So building a model request does not re-read the whole history.

The ledger is updated by :meth:`observe` with each committed event, in commit
order; :meth:`catch_up` brings it level with a session's events.

Call ids are unique within a session: :meth:`unique_calls` gives a model's
aggregate a fresh id for each call whose id the session already holds (a model
that numbers its calls per response reuses ``call_1``), before it is stored and
before its calls run, so the results, the stored history and every later
request name the call by its fresh id.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from ..events import ApprovalRequest, Event, new_id
from ..types import Content, FunctionCall, FunctionResponse, Part

CallStatus = Literal["open", "awaiting_approval", "long_running", "answered"]

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
    """

    call: FunctionCall
    status: CallStatus = "open"
    response: FunctionResponse | None = None
    approval: ApprovalRequest | None = None
    ticket_at: float | None = None


class CallLedger:
    """The calls of one session and the model-facing conversation.

    Build one with :meth:`of` (from a session's events) and keep it level with
    :meth:`observe` after each commit.
    """

    __slots__ = ("_calls", "_contents", "_last_id", "_observed", "_slots", "_unmatched")

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._calls: dict[str, CallRecord] = {}
        self._contents: list[Content] = []
        # call id -> (index in _contents of the results content, index of its part)
        self._slots: dict[str, tuple[int, int]] = {}
        self._unmatched: set[str] = set()  # ids of responses to no call (the store holds them)
        self._observed = 0
        self._last_id: str | None = None

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
        if responses:
            if rest:
                self._contents.append(Content(content.role, rest))
            return
        self._contents.append(content)
        if calls:
            index = len(self._contents)
            parts: list[Part] = []
            for n, call in enumerate(calls):
                record = self._calls.get(call.id)
                if record is None:
                    record = self._calls[call.id] = CallRecord(call)
                self._slots[call.id] = (index, n)
                parts.append(Part(function_response=record.response or pending_response(call)))
            self._contents.append(Content("user", parts))

    def _record_response(self, response: FunctionResponse, tickets: Sequence[str],
                         at: float) -> None:
        record = self._calls.get(response.id)
        if record is None:  # a response to no call of this session: not part of the conversation
            self._unmatched.add(response.id)  # but its id is taken: the store holds a result
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
            self._contents[index] = Content(old.role, parts)

    # -- the one id per call rule ----------------------------------------------------------

    def unique_calls(self, content: Content) -> Content:
        """``content`` with a fresh id for each call whose id is already taken.

        An id is taken by a call (or a result) of the session, or by an earlier
        call of ``content`` itself. Calls keep their order, so a replaced one is
        found by position. ``content`` itself is never changed: a new one is
        returned when any id is replaced (a live connection that keeps the
        model's response keeps the ids the model gave), else ``content`` itself.
        """
        parts = content.parts
        if not any(part.function_call is not None for part in parts):
            return content
        calls, unmatched = self._calls, self._unmatched
        seen: set[str] = set()
        kept: list[Part] | None = None
        for n, part in enumerate(parts):
            call = part.function_call
            if call is None:
                continue
            if call.id in seen or call.id in calls or call.id in unmatched:
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
    def last_event_id(self) -> str | None:
        """The id of the last event observed (``None`` before the first)."""
        return self._last_id

    @property
    def contents(self) -> list[Content]:
        """The conversation for the next model request (a new list; do not mutate its items)."""
        return list(self._contents)

    def record(self, call_id: str) -> CallRecord | None:
        """The record of one call, or ``None`` when the session has no such call."""
        return self._calls.get(call_id)

    def dangling(self) -> list[FunctionCall]:
        """Calls without a result that nobody is waiting for on purpose, in call order."""
        return [r.call for r in self._calls.values() if r.status == "open"]

    def expired_tickets(self, now: float, ttl: float) -> list[FunctionCall]:
        """Long-running calls whose ticket is ``ttl`` seconds old or more at ``now``."""
        return [r.call for r in self._calls.values() if r.status == "long_running"
                and r.ticket_at is not None and now - r.ticket_at >= ttl]

    def awaiting_approval(self, call_id: str) -> ApprovalRequest | None:
        """The pending approval request of this call, if it has one."""
        record = self._calls.get(call_id)
        return record.approval if record is not None else None


def pending_response(call: FunctionCall) -> FunctionResponse:
    """The placeholder a model sees for a call that has no result yet."""
    return FunctionResponse(id=call.id, name=call.name,
                            response={"status": "pending", "detail": PENDING_DETAIL})

