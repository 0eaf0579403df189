"""``RunStream``: what a caller holds of one run — its events, its spending, its stop.

``RunResult``: what :meth:`Runner.run_once <headwater.runner.Runner.run_once>`
returns, a whole run, finished.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from ..core.errors import UserError
from ..core.events import Event
from ..core.types import Usage
from .lifecycle import Run, RunState
from .recorder import SealReason


class RunStream:
    """The async iterator of one run's events; also its spending so far.

    Iterate it (``async for``) or close it with ``aclose()``; it is an async
    generator in all but name, so ``contextlib.aclosing`` works on it. Prefer
    ``async with runner.run_async(...) as stream:``: leaving the block (a
    ``break``, an exception, a cancel) closes the run at once. A stream that is
    only abandoned is closed when Python finalises it (garbage collection), which
    for an async generator may be much later, or never before the loop ends.

    Attributes:
        invocation_id: the run's id.
        stats: model calls, tool calls and usage totals of the run so far.
    """

    __slots__ = ("_agen", "_run", "invocation_id", "stats")

    def __init__(self, run: Run) -> None:
        self._run = run
        self._agen = run.events()
        self.invocation_id = run.invocation_id
        self.stats = run.stats

    async def start(self) -> None:
        """Take the session and store the message now, before the first event.

        A server calls this to answer a busy or missing session before it
        commits to a response; iterating afterwards goes on from there. A
        started stream dropped unread ends as a closed one does (when Python
        finalises it), giving the session back.

        Raises:
            SessionNotFoundError, SessionBusyError, ApprovalError, UserError:
                as iterating would; nothing is held afterwards.
            UserError: the run has already started (or was closed).
        """
        if self._run.state is not RunState.NEW:
            raise UserError("RunStream.start() must come before the first event, once")
        # The run's own generator runs the start phase and pauses right after it.
        self._agen = agen = self._run.events(announce=True)
        await agen.__anext__()

    @property
    def usage(self) -> Usage:
        """Token usage summed over the run's model aggregates."""
        return self.stats.usage

    def __aiter__(self) -> AsyncGenerator[Event, None]:
        # ``async for`` steps the run's generator itself: a Python ``__anext__`` here
        # would cost a call from C per event.
        return self._agen

    def __anext__(self) -> Any:  # for stepping by hand: the generator's own awaitable
        return self._agen.__anext__()

    @property
    def seal_reason(self) -> SealReason:
        """The result a stop (``aclose()``, a cancel) gives each call it leaves open.

        ``cancelled`` by default; a server that stops runs as it shuts down sets
        ``interrupted`` before it cancels them.
        """
        return self._run.reason

    @seal_reason.setter
    def seal_reason(self, reason: SealReason) -> None:
        if reason not in ("cancelled", "interrupted"):
            raise UserError(f"seal_reason is 'cancelled' or 'interrupted', not {reason!r}")
        self._run.reason = reason

    async def aclose(self, *, reason: SealReason | None = None) -> None:
        """Stop the run: close the model stream, cancel tools, seal history.

        Args:
            reason: sets :attr:`seal_reason` first.
        """
        if reason is not None:
            self.seal_reason = reason
        await self._agen.aclose()
        await self._run.close()  # never read: nothing more to start

    async def __aenter__(self) -> RunStream:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        """Close the run (model stream, tools, seal) whatever ended the block."""
        await self.aclose()

    async def athrow(self, exc: BaseException) -> Event:
        """Throw into the run (as for an async generator)."""
        return await self._agen.athrow(exc)

    async def text(self) -> AsyncGenerator[str, None]:
        """The model's answer text as it arrives, each piece once.

        In SSE mode the text deltas; in NONE mode (or for a model call that
        sent no deltas) the aggregate's text. The aggregate never repeats text
        its deltas already gave. Thoughts, tool progress and user content are
        left out. Closing this iterator closes the run.
        """
        streamed = False
        try:
            async for event in self:
                content = event.content
                if content is None or content.role != "model":
                    continue
                text = content.text
                if event.partial:
                    if text:
                        streamed = True
                        yield text
                    continue
                if text and not streamed:
                    yield text
                streamed = False
        finally:
            await self.aclose()


@dataclass(slots=True)
class RunResult:
    """What :meth:`Runner.run_once <headwater.runner.Runner.run_once>` returns: a whole run,
    finished.

    Attributes:
        text: the final response's text (``""`` when the run ended without one).
        final: the last final response event, or ``None``.
        events: every event of the run, partials included, in order.
        usage: token usage summed over the run's model calls.
        session_id: the session the run used (created when none was given).
        invocation_id: the run's id.
        error_code: the error code of the run's last event, if it ended in an error.
    """

    text: str
    final: Event | None
    events: list[Event] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    session_id: str = ""
    invocation_id: str = ""
    error_code: str | None = None
