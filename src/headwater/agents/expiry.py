"""Calls that will get no real result: long-running calls whose result never came (an
``expired`` result after a TTL), and calls a stopped run left open (sealed).

A long-running tool answers with a ticket and its real result comes later, as a
function response from the client. A client that never sends it would leave
the call pending forever (a ``pending`` placeholder in every model request).
At the start of each run, a ticket older than ``Settings.long_running_ttl`` gets
a final ``expired`` error result, so the model is told and the call is closed;
a result sent after that is refused like any answer to a closed call. The call
of an agent used as a tool that waited only for it gets an ``expired`` result
too (docs/multi-agent.md, "A pause inside a tree").

When a run stops (a cancel, a server stopping) or after a crash, every call left
without a result is sealed: one event gives each a ``cancelled`` or
``interrupted`` result (:func:`seal_event`), so the history stays valid.
"""

from __future__ import annotations

from typing import Any

from ..core.events import Event
from ..core.types import Content, FunctionResponse, Part
from ._execution import error_result
from .approvals import closed_waiting
from .invocation import InvocationContext


def expired_event(ctx: InvocationContext, author: str, now: float) -> Event | None:
    """One event giving every expired ticket of the session an ``expired`` result, or ``None``."""
    ttl = ctx.settings.long_running_ttl
    expired = ctx.ledger.expired_tickets(now, ttl)
    if not expired:
        return None
    message = (f"No result arrived within {ttl:g} s (long_running_ttl); the call expired. "
               "Start it again if it is still needed.")
    parts = [Part(function_response=FunctionResponse(
        id=call.id, name=call.name, response=error_result("expired", message)))
        for call in expired]
    parts += closed_waiting(ctx.ledger, [call.id for call in expired], "expired", (
        "Not finished: the agent this call ran was waiting for a long-running call whose "
        f"result did not arrive within {ttl:g} s (long_running_ttl). Start it again if it "
        "is still needed."))
    return Event(invocation_id=ctx.invocation_id, author=author, content=Content("user", parts))


SEAL_MESSAGES: dict[str, str] = {
    "cancelled": "The call was cancelled before it returned a result.",
    "interrupted": "The call was interrupted (the process stopped) before it returned a result.",
}


def seal_event(ctx: InvocationContext, author: str, reason: str,
               results: dict[str, dict[str, Any]] | None = None) -> Event | None:
    """One event giving every dangling call of the session a result, or ``None``.

    Calls in ``results`` get that result; the others a synthetic ``reason``
    error (``cancelled`` or ``interrupted``), whichever agent made them.
    """
    dangling = ctx.ledger.dangling()
    if not dangling:
        return None
    found = results or {}
    message = SEAL_MESSAGES[reason]
    parts = [Part(function_response=FunctionResponse(
        id=call.id, name=call.name,
        response=found.get(call.id) or error_result(reason, message)))
        for call in dangling]
    return Event(invocation_id=ctx.invocation_id, author=author, content=Content("user", parts),
                 interrupted=any(call.id not in found for call in dangling))
