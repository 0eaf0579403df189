"""``Recorder``: the one place a run's events are persisted — the session store, then the ledger.

The step engine (``headwater.agents``) hands every non-partial event to the
run's recorder, which appends it to the session (with its ``state_delta``,
atomically, fenced by the run's lease) and brings the call ledger level; only
then is the event yielded (persist, then yield). The recorder also writes the
run's own records: the seal of calls a stop left without a result, and the
stop itself. See docs/architecture.md, "One flow, one persistence point".
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Literal

from ..agents.invocation import InvocationContext
from ..agents.tree import TreeRun
from ..core.errors import ERROR_MESSAGES, CallAlreadyAnsweredError, ErrorCode, SessionError
from ..core.events import Event
from ..core.types import Content, Part
from ..sessions.base import BaseSessionService, Session
from .hold import SessionHold

logger = logging.getLogger("headwater.runner")

SealReason = Literal["cancelled", "interrupted"]
"""The result a stop gives each call it leaves open: ``cancelled`` (a reader closed or
cancelled the run), or ``interrupted`` (the server stopped it as it shut down)."""


class Recorder:
    """Persists one run's events on its session, every write fenced by the run's lease.

    Once another run has taken the session over, nothing more of this run is
    stored (``LeaseLostError``).

    Args:
        service: the session store.
        ctx: the run: its session and ledger follow every commit.
        hold: the run's lease (a renewal replaces it; a last write releases it).
    """

    __slots__ = ("_ctx", "_hold", "_service")

    def __init__(self, service: BaseSessionService, ctx: InvocationContext,
                 hold: SessionHold) -> None:
        self._service = service
        self._ctx = ctx
        self._hold = hold

    async def commit(self, event: Event, *, last: bool = False) -> None:
        """Persist one event; the session and its ledger follow once it is committed.

        The ledger follows the session even when the caller is cancelled while
        the store commits (the store updates the session once the write is in).
        The run's last event releases the lease in the same write, unless a
        call would be left without a result (the seal still has to write).

        Raises:
            SessionError: the store refused or failed; nothing of the event is stored.
        """
        ctx, hold = self._ctx, self._hold
        release = last and not event.function_calls and not (
            {c.id for c in ctx.ledger.dangling()} - {r.id for r in event.function_responses})
        try:
            await self._service.append_event(ctx.session, event, lease=hold.lease,
                                             release=release)
            if release:
                hold.released = True
        except asyncio.CancelledError:
            # The write goes on: wait for its outcome, so that the seal sees what it stored.
            await self._service.wait_for_writes(ctx.session)
            raise
        finally:
            ctx.ledger.catch_up(ctx.session.events)

    async def blobs_as_artifacts(self, message: Content) -> Content:
        """The user's message, its inline blobs saved as artifacts when the run asks for it.

        With ``RunConfig(save_input_blobs_as_artifacts=True)`` and an artifact
        service, each ``inline_data`` part ``i`` is saved as the artifact
        ``artifact_{invocation_id}_{i}`` and replaced by the text ``Uploaded file:
        artifact_{invocation_id}_{i}. It is saved into artifacts`` (ADK's runner
        does the same); otherwise the message as it is.

        Raises:
            UserError: the artifact store refused a blob (too large, no MIME type).
        """
        ctx = self._ctx
        service = ctx.artifact_service
        if service is None or not ctx.run_config.save_input_blobs_as_artifacts or all(
                p.inline_data is None for p in message.parts):
            return message
        parts = list(message.parts)
        for i, part in enumerate(parts):
            if part.inline_data is None:
                continue
            filename = f"artifact_{ctx.invocation_id}_{i}"
            await service.save_artifact(app_name=ctx.app_name, user_id=ctx.user_id,
                                        session_id=ctx.session.id, filename=filename,
                                        artifact=part)
            parts[i] = Part(text=f"Uploaded file: {filename}. It is saved into artifacts")
        return Content(role=message.role, parts=parts)

    async def record_stop(self, reason: SealReason, author: str) -> None:
        """Store that the run was stopped: an error record (``cancelled``, or
        ``server_shutdown`` when the server stopped it); quiet on failure."""
        code: ErrorCode = "cancelled" if reason == "cancelled" else "server_shutdown"
        ctx = self._ctx
        record = Event(invocation_id=ctx.invocation_id, author=author,
                       error_code=code, error_message=ERROR_MESSAGES[code])
        try:
            await self.commit(record, last=True)
        except SessionError as exc:
            logger.warning("could not record the stop of run %s (%s)", ctx.invocation_id,
                           type(exc).__name__)

    async def seal(self, tree: TreeRun, reason: SealReason,
                   reload: Callable[[], Awaitable[Session | None]]) -> None:
        """Give every call left without a result a ``reason`` one; quiet on failure.

        Storing a result and sealing are one conditional write in the store: a
        result that got in first wins, and the seal is recomputed without it.
        """
        for _ in range(2):
            sealed = tree.seal(reason)
            if sealed is None:
                return
            try:
                await self.commit(sealed)
                return
            except CallAlreadyAnsweredError:
                fresh = await reload()
                if fresh is None:
                    return
                self._ctx.session.events[:] = fresh.events
                self._ctx.ledger.catch_up(fresh.events)
            except SessionError as exc:  # the next run repairs what could not be sealed
                logger.warning("could not seal the run's calls (%s); the next run will",
                               type(exc).__name__)
                return
