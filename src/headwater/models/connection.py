"""Live (BIDI) connections: ``BaseLlmConnection`` and its emulation over any streaming model.

A live connection takes content in at any time and streams responses out. A
model with a native live API implements :class:`BaseLlmConnection` itself; a
model that only streams (OpenAI-compatible, Anthropic, scripted) gets
:class:`EmulatedLlmConnection`: each content sent starts a model turn over the
conversation so far; content sent with ``interrupt=True`` while the model is
answering cuts that answer short — its provider stream is closed and what was
said comes out as one final response marked ``interrupted``. Each call's stream
is checked with the stream contract (``StreamContract``, as ``run_async``
checks it): a call that breaks it ends as one ``model_protocol_violation``
error final and nothing of it joins the conversation.
"""

from __future__ import annotations

import asyncio
import logging
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from dataclasses import replace
from typing import Protocol

from ..core.errors import ModelError, public_message
from ..core.tasks import TaskSet
from ..core.types import Blob, Content, Part
from .contract import StreamContract
from .llm_request import LlmRequest
from .llm_response import LlmResponse

logger = logging.getLogger("headwater.models")


class StreamingModel(Protocol):
    """What an emulated connection needs of a model: its name and streamed calls.

    Every :class:`~headwater.models.base.BaseLlm` is one.
    """

    model: str

    def generate_content(
        self, request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]: ...


class BaseLlmConnection(ABC):
    """One live conversation with a model.

    Responses follow the stream contract per model turn: partials, then one
    final response with ``turn_complete`` (or ``interrupted``) set. A turn that
    fails yields a final response with ``error_code``. The connection holds
    provider resources until :meth:`close`.

    Attributes:
        queued: responses put into :meth:`receive`'s stream so far, for a
            connection that counts them (``None``: it does not). The live flow
            uses it to store an answer cut short before the content that cut it.
        before_turn: asked (through :meth:`admit_turn`) right before each model
            turn this connection starts, i.e. before the request that starts it
            leaves; ``False`` refuses the turn: nothing is sent and the content
            that would have started it is dropped. ``None``: every turn starts.
            The live flow sets it to keep ``max_llm_calls`` and the token budget.
    """

    queued: int | None = None
    before_turn: Callable[[], bool] | None = None

    def admit_turn(self) -> bool:
        """Whether the model turn about to start may start (:attr:`before_turn`)."""
        gate = self.before_turn
        return gate is None or gate()

    @abstractmethod
    async def send_history(self, contents: list[Content]) -> None:
        """Replace the conversation the next turn starts from."""

    @abstractmethod
    async def send_content(self, content: Content, *, interrupt: bool = True) -> None:
        """Add content and start a model turn.

        Args:
            content: user text, tool results or tool emissions.
            interrupt: cut short an answer in progress (a user speaking); with
                ``False`` the content waits for the answer to end (tool results).
        """

    @abstractmethod
    async def send_realtime(self, blob: Blob) -> None:
        """Send realtime media.

        Raises:
            NotImplementedError: the model takes no realtime input.
        """

    @abstractmethod
    def receive(self) -> AsyncGenerator[LlmResponse, None]:
        """Responses as they come, until :meth:`close`."""

    @abstractmethod
    async def close(self) -> None:
        """End the conversation: the turn in progress is cancelled, its stream closed."""


class QueuedConnection(BaseLlmConnection):
    """A connection whose responses go out through one queue, counted (``queued``).

    A subclass calls :meth:`deliver` for each response and :meth:`end_stream`
    once it is closed; :meth:`receive` yields what was delivered until then.
    """

    def __init__(self) -> None:
        self._responses: asyncio.Queue[LlmResponse | None] = asyncio.Queue()
        self._delivered = 0

    @property
    def queued(self) -> int:  # type: ignore[override]  # this connection always counts
        """Responses put into the receive stream so far."""
        return self._delivered

    def deliver(self, response: LlmResponse) -> None:
        """Put ``response`` into :meth:`receive`'s stream."""
        self._delivered += 1
        self._responses.put_nowait(response)

    def end_stream(self) -> None:
        """End :meth:`receive`'s stream after what was delivered."""
        self._responses.put_nowait(None)

    def before_receive(self) -> None:
        """Called when :meth:`receive` starts (a subclass may open its transport)."""

    async def receive(self) -> AsyncGenerator[LlmResponse, None]:
        self.before_receive()
        while True:
            response = await self._responses.get()
            if response is None:
                return
            yield response


class EmulatedLlmConnection(QueuedConnection):
    """A live connection over ``generate_content(stream=True)``.

    Args:
        model: the streaming model.
        request: system instruction, tools, config and the starting history.
    """

    def __init__(self, model: StreamingModel, request: LlmRequest) -> None:
        super().__init__()
        self._model = model
        self._request = request
        self._contents: list[Content] = list(request.contents)
        self._pending: list[Content] = []
        self._wake = asyncio.Event()
        self._turn: asyncio.Task[None] | None = None
        self._driver: asyncio.Task[None] | None = None
        self._tasks = TaskSet("emulated live connection", logger=logger)  # closed in close()
        self._closed = False

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    async def send_history(self, contents: list[Content]) -> None:
        self._contents = list(contents)

    async def send_content(self, content: Content, *, interrupt: bool = True) -> None:
        """Queue content for the next turn; an interrupt waits until the cut answer is out.

        When this returns after an interrupt, the interrupted final response is
        already in :meth:`receive`'s stream, ahead of anything the new content causes.
        """
        if self._closed:
            raise ModelError("the live connection is closed")
        turn = self._turn
        if interrupt and turn is not None and not turn.done():
            turn.cancel()
            await asyncio.wait([turn])
        self._pending.append(content)
        if self._driver is None:
            self._driver = self._tasks.spawn(self._drive(), name="live driver")
        self._wake.set()

    async def send_realtime(self, blob: Blob) -> None:
        raise NotImplementedError(
            f"model {self._model.model!r} takes no realtime input in an emulated live session")

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._tasks.aclose()
        self.end_stream()

    async def _drive(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._pending:
                if not self.admit_turn():
                    logger.info("live turn of %s refused (before_turn); %d content(s) dropped",
                                self._model.model, len(self._pending))
                    self._pending.clear()
                    break
                self._contents.extend(self._pending)
                self._pending.clear()
                self._turn = self._tasks.spawn(self._run_turn(), name="live turn")
                await asyncio.wait([self._turn])

    async def _run_turn(self) -> None:
        request = replace(self._request, contents=list(self._contents),
                          tools=list(self._request.tools), config=dict(self._request.config))
        contract = StreamContract()
        try:
            async with aclosing(self._model.generate_content(request, stream=True)) as stream:
                async for response in stream:
                    contract.check(response)
                    if response.partial:
                        self.deliver(response)
            final = contract.finish()  # held until the call's stream has ended
        except asyncio.CancelledError:
            text = contract.shown_text()
            content = Content("model", [Part(text=text)]) if text else None
            if content is not None:
                self._contents.append(content)
            self.deliver(LlmResponse(content=content, interrupted=True, turn_complete=True))
            if self._closed:
                raise
        except ModelError as exc:
            logger.info("live turn of %s failed: %s", self._model.model, exc)
            self.deliver(LlmResponse(error_code=exc.code, error_message=public_message(exc),
                                  turn_complete=True))
        except Exception as exc:  # an adapter bug must not leave the live run waiting forever
            logger.error("live turn of %s failed", self._model.model, exc_info=exc)
            self.deliver(LlmResponse(error_code="internal", error_message=type(exc).__name__,
                                  turn_complete=True))
        else:
            if final.content is not None and final.content.parts:
                self._contents.append(final.content)
            final.turn_complete = True
            self.deliver(final)
