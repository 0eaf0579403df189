"""``LiveModel``: the model side of a live run — the current agent's connection and its turns.

One connection at a time, opened for the agent that has the run (a transfer
closes it and opens the target's, :meth:`LiveModel.switch`). A task of the
run's group pumps its responses, each handled before the next:

- a turn is admitted and counted against the run's model-call budget before
  its request leaves (the connection's ``before_turn``, :meth:`Flow.admit
  <headwater.agents.flow.Flow.admit>`); a turn the server starts on its own
  (speech) is admitted when its first response arrives;
- each turn is one :class:`~headwater.agents.turn.ModelTurn`: its partials are
  checked and shown as they come, its aggregate checked against them, then
  run through the after-model callbacks and committed; its calls go to the
  run's tools;
- content the input sends can wait until every response already put out has
  been handled (:meth:`LiveModel.caught_up`), so what it stores goes in between.

A connection keeps its own conversation in the call ids its model gave. A call
stored under a fresh id (``CallLedger.unique_calls``: the id was taken) is
still answered on the connection under the id the model gave
(:meth:`LiveModel.send`); the stored history, the events and the next run's
requests use the fresh one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from contextlib import aclosing
from dataclasses import replace
from typing import Any

from ..core.errors import ERROR_MESSAGES, ModelProtocolViolation, OutputTooLong, public_message
from ..core.types import Blob, Content, FunctionCall, FunctionResponse
from ..models.base import LlmResponse
from ..models.connection import BaseLlmConnection
from .flow import Flow
from .live_out import LiveOut
from .live_streams import stop_declared
from .turn import ModelTurn

logger = logging.getLogger("headwater.live")

OnCalls = Callable[[Flow, list[FunctionCall]], None]
"""Hands the calls of a committed model aggregate of ``flow``'s agent to the run's tools."""


class _Backlog:
    """The responses of one connection the pump has handled, and a hold on the next ones."""

    __slots__ = ("_handled", "_hold_at", "_progress", "_unhold")

    def __init__(self) -> None:
        self._handled = 0
        self._progress = asyncio.Event()
        self._hold_at: int | None = None  # the pump handles no response past this count
        self._unhold = asyncio.Event()  # ... until this is set

    async def wait_turn(self) -> None:
        """Until the next response may be handled (no hold covers it)."""
        while self._hold_at is not None and self._handled >= self._hold_at:
            self._unhold.clear()
            await self._unhold.wait()

    def handled(self) -> None:
        """One more response was handled."""
        self._handled += 1
        self._progress.set()

    @contextlib.asynccontextmanager
    async def caught_up(self, queued: int) -> AsyncIterator[None]:
        """Enter once ``queued`` responses have been handled; hold the next until left."""
        self._hold_at = queued
        try:
            while self._handled < queued:
                self._progress.clear()
                await self._progress.wait()
            yield
        finally:
            self._hold_at = None
            self._unhold.set()


class LiveModel:
    """The connection of the agent that has a live run, and the model turn in progress.

    Args:
        flow: the step engine of the agent the run starts with.
        out: the run's output.
        spawn: starts a task in the run's task group.
        on_calls: hands a committed aggregate's calls to the run's tools (:data:`OnCalls`).

    Attributes:
        flow: the step engine of the agent whose connection this is.
    """

    __slots__ = ("_admitted", "_backlog", "_conn", "_given", "_on_calls", "_out", "_pump",
                 "_realtime", "_spawn", "_turn", "flow")

    def __init__(self, flow: Flow, out: LiveOut,
                 spawn: Callable[[Coroutine[Any, Any, None]], asyncio.Task[None]],
                 on_calls: OnCalls) -> None:
        self.flow = flow
        self._out = out
        self._spawn = spawn
        self._on_calls = on_calls
        self._conn: BaseLlmConnection | None = None
        self._pump: asyncio.Task[None] | None = None
        self._turn: ModelTurn | None = None  # the model turn in progress
        self._admitted = 0  # turns counted when admitted, whose first response is still due
        self._backlog = _Backlog()
        self._given: dict[str, str] = {}  # stored call id -> the id the connection gave
        self._realtime = True  # the model takes realtime media

    @property
    def given(self) -> Mapping[str, str]:
        """Stored call id -> the id the connection gave, for calls stored under a fresh one."""
        return self._given

    # -- the connection -----------------------------------------------------------------------

    async def open(self, *, answer: bool = False) -> Content | None:
        """Open the current agent's connection on the session's history as it sees it.

        With ``answer`` (after a transfer), a history ending in user-role content
        is opened without that content, which is returned: sent, it starts the
        agent's first turn. ``None`` when there is nothing to answer, or when a
        before-model callback answered instead of the model.
        """
        flow = self.flow
        agent = flow.agent
        callback_context = flow.ctx.callback_context(agent.name)
        request = await flow.request(callback_context)
        request.tools = stop_declared(request.tools,
                                      any(t.options.kind == "live" for t in agent.tools))
        replaced = await flow.before_model(callback_context, request)
        if replaced is not None:
            replaced.turn_complete = True
            await self._out.emit(flow.model_event(replaced, callback_context.actions))
        opening = None
        contents = request.contents
        if answer and replaced is None and contents and contents[-1].role == "user":
            request.contents, opening = contents[:-1], contents[-1]
        self._conn = agent.model.connect(request)
        self._conn.before_turn = self._admit
        self._realtime = True
        return opening

    def start(self) -> None:
        """Start pumping the open connection's responses (a task of the run's group)."""
        assert self._conn is not None
        self._pump = self._spawn(self._pump_responses(self.flow, self._conn))

    async def send(self, content: Content, *, interrupt: bool) -> None:
        """Send content on the connection (each result of a renamed call under the id the
        connection gave)."""
        assert self._conn is not None
        await self._conn.send_content(self._as_given(content), interrupt=interrupt)

    async def send_realtime(self, blob: Blob) -> None:
        """Send realtime media, unless the model takes none (then only tools get it)."""
        if not self._realtime:
            return
        assert self._conn is not None
        try:
            await self._conn.send_realtime(blob)
        except NotImplementedError:
            self._realtime = False  # this model takes no media: tools only

    def caught_up(self) -> contextlib.AbstractAsyncContextManager[None]:
        """Enter once every response the connection has put out so far has been handled;
        the pump handles no later one until the block is left.

        What the block stores goes in between: after an answer the content cut short,
        before the answer to that content (a fast model's, or one the store's write let
        through).
        """
        assert self._conn is not None
        queued = self._conn.queued
        if queued is None:
            return contextlib.nullcontext()
        return self._backlog.caught_up(queued)

    async def switch(self, flow: Flow) -> None:
        """Close the current connection (what it still delivers is handled: an answer cut
        short is stored) and make ``flow``'s agent the one to open next (:meth:`open`)."""
        timeout = flow.ctx.settings.live_stop_timeout
        conn, pump = self._conn, self._pump
        assert conn is not None
        await _close(conn, timeout)
        if pump is not None:
            done, _ = await asyncio.wait([pump], timeout=timeout)
            if not done:
                pump.cancel()
                await asyncio.wait([pump])
        turn, self._turn = self._turn, None
        if turn is not None:  # a turn of the old connection left open (its pump was stopped)
            turn.fail("cancelled")
        self.flow = flow
        self._given.clear()
        self._admitted, self._backlog = 0, _Backlog()

    async def close(self) -> None:
        """The run's end (its tasks are over): a turn cut off keeps what it had shown; the
        connection closes (bounded by ``live_stop_timeout``)."""
        turn, self._turn = self._turn, None
        if turn is not None:
            await self.flow.model_stopped(turn)
        if self._conn is not None:
            await _close(self._conn, self.flow.ctx.settings.live_stop_timeout)

    # -- the turns ----------------------------------------------------------------------------

    def _admit(self) -> bool:
        """The connection's ``before_turn``: the turn about to start is admitted (and
        counted) against the run's model-call budget, before its request leaves."""
        spent = self.flow.admit()
        if spent is not None:
            with contextlib.suppress(RuntimeError):  # the task group is already ending
                self._spawn(self._out.over_budget(spent))
            return False
        self._admitted += 1
        return True

    async def _pump_responses(self, flow: Flow, conn: BaseLlmConnection) -> None:
        """Handle ``conn``'s responses as ``flow``'s agent's, until the connection closes."""
        backlog = self._backlog
        async with aclosing(conn.receive()) as responses:
            async for response in responses:
                await backlog.wait_turn()
                await self._handle(flow, response)
                backlog.handled()

    async def _handle(self, flow: Flow, response: LlmResponse) -> None:
        turn = self._turn
        if turn is None:  # a new model turn
            if self._admitted:
                self._admitted -= 1  # admitted and counted when the connection started it
            else:  # started by the server (speech), or by a connection without before_turn
                spent = flow.admit()
                if spent is not None:
                    await self._out.over_budget(spent)
                    return
            turn = self._turn = ModelTurn(flow.ctx, flow.agent.name, flow.agent.model, None)
        try:
            if response.partial:
                self._out.show(turn.partial(response))
                return
            self._turn = None
            if response.error_code == "model_protocol_violation":  # the connection checked it
                turn.end(response)
                await self._out.end_with(flow.error_event(
                    "model_protocol_violation", response.error_message
                    or ERROR_MESSAGES["model_protocol_violation"]))
            if response.error_code is None or response.content is not None:
                turn.final(response)
            turn.end(response)
        except (ModelProtocolViolation, OutputTooLong) as exc:
            self._turn = None  # a broken call keeps nothing, not even what it had shown
            turn.fail(exc.code)
            await self._out.end_with(flow.error_event(exc.code, public_message(exc)))
        await self._aggregate(flow, response)

    async def _aggregate(self, flow: Flow, response: LlmResponse) -> None:
        """A turn's aggregate: the after-model callbacks, committed, its calls to the tools."""
        callback_context = flow.ctx.callback_context(flow.agent.name)
        response = await flow.after_model(callback_context, response)
        event = flow.model_event(response, callback_context.actions)
        if response.content is not None and event.function_calls:
            # Calls keep their order: a replaced id is told apart by position.
            for made, stored in zip(response.content.function_calls, event.function_calls,
                                    strict=True):
                if made.id != stored.id:
                    self._given[stored.id] = made.id
        await self._out.emit(event)
        if event.function_calls and event.error_code is None:
            self._on_calls(flow, event.function_calls)

    def _as_given(self, content: Content) -> Content:
        """``content`` with each result of a renamed call under the id the connection gave."""
        given = self._given
        if not given or not any(p.function_response is not None and p.function_response.id
                                in given for p in content.parts):
            return content
        parts = [replace(p, function_response=FunctionResponse(given[r.id], r.name, r.response))
                 if (r := p.function_response) is not None and r.id in given else p
                 for p in content.parts]
        return Content(content.role, parts)


async def _close(conn: BaseLlmConnection, bound: float) -> None:
    """Close a connection, within ``bound`` seconds; quiet on failure."""
    with contextlib.suppress(Exception):  # TimeoutError included: the close is bounded
        # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancel that
        # lands as the close completes.
        async with asyncio.timeout(bound):
            await conn.close()

