"""How an example runs on its own: its model, its arguments, and one run printed.

Request-response examples run turns with :func:`run_turns` (text deltas as
they arrive, tool progress, approvals); live examples print with
:func:`print_live`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import time
from collections.abc import Callable, Sequence
from typing import TextIO

from ..agents.agent import Agent
from ..agents.toolsets import open_toolsets
from ..core.events import ApprovalRequest, Event
from ..core.live_request_queue import LiveRequestQueue
from ..core.run_config import RunConfig, StreamingMode
from ..core.settings import get_settings
from ..core.tasks import TaskSet
from ..core.types import Content
from ..models.base import BaseLlm
from ..models.registry import get_model
from ..runner import Runner, RunStream
from ..tools.approval import approval_response
from .transcript import live_lines

USER = "you"

Approver = Callable[[ApprovalRequest], bool]
"""Decides a pending approval: ``True`` runs the call."""


def example_model() -> BaseLlm:
    """``HEADWATER_MODEL`` when set, else ``"demo"``, the offline demo model.

    Raises:
        UserError: an unknown provider, a malformed model string or a missing key.
    """
    return get_model(get_settings().model or "demo")


def step_pause() -> float:
    """Seconds one step of a demo tool takes: ten words' time (``Settings.demo_word_delay``)."""
    return get_settings().demo_word_delay * 10


def parse_args(prog: str, description: str, default: str, argv: Sequence[str] | None,
               extra: Callable[[argparse.ArgumentParser], None] | None = None
               ) -> argparse.Namespace:
    """The example's arguments: an optional message (``default`` when missing), plus ``extra``."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("message", nargs="?", default=default,
                        help=f"what to ask (default: {default!r})")
    if extra is not None:
        extra(parser)
    return parser.parse_args(argv)


async def run_turns(agent: Agent, message: str, out: TextIO,
                    approve: Approver | None = None) -> int:
    """Run ``message`` on ``agent`` (SSE mode, in memory) and print it; answer approvals.

    Text is printed as it streams, once. A run that stops for approval is
    resumed with ``approve``'s decisions (no ``approve``: denied).

    Returns:
        0, or 1 when the run ended in an error event.
    """
    async with Runner(agent=agent, app_name=agent.name) as runner:
        await open_toolsets(agent)  # an MCP server's tools, listed before the run needs them
        session = await runner.create_session(user_id=USER)
        out.write(f"you> {message}\n")
        new_message: str | Content = message
        while True:
            async with runner.run_async(user_id=USER, session_id=session.id,
                                        new_message=new_message,
                                        run_config=RunConfig(
                                            streaming_mode=StreamingMode.SSE)) as stream:
                failed, pending = await _print_run(stream, out)
            if failed:
                return 1
            if not pending:
                return 0
            parts = []
            for request in pending:
                approved = approve(request) if approve is not None else False
                out.write(f"[{'approved' if approved else 'denied'}] {request.tool_name}\n")
                parts += approval_response(request, approved).parts
            new_message = Content("user", parts)


async def _print_run(stream: RunStream, out: TextIO) -> tuple[bool, list[ApprovalRequest]]:
    drafting = False
    failed = False
    pending: list[ApprovalRequest] = []
    async for event in stream:
        if event.tool_progress is not None:
            progress = event.tool_progress
            if progress.event.line:
                out.write(f"[{progress.tool_name}] {progress.event.line}\n")
            continue
        if event.partial:
            if event.text and not drafting:
                out.write(f"{event.author}> ")
                drafting = True
            out.write(event.text)
            out.flush()
            continue
        if drafting and event.text:  # the aggregate: its text was shown as it streamed
            out.write("\n")
            drafting = False
        elif event.text and not event.function_calls:
            out.write(f"{event.author}> {event.text}\n")
        failed = _print_record(event, out) or failed
        pending += event.actions.requested_approvals
    return failed, pending


def _print_record(event: Event, out: TextIO) -> bool:
    for call in event.function_calls:
        out.write(f"[call] {call.name}({json.dumps(call.args)})\n")
    for response in event.function_responses:
        out.write(f"[result] {response.name} -> {json.dumps(response.response)}\n")
    for request in event.actions.requested_approvals:
        out.write(f"[approval required] {request.display}\n")
    if event.error_code is not None:
        out.write(f"[error] {event.error_code}: {event.error_message}\n")
        return True
    return False


class LiveSession:
    """A live run of ``runner``'s agent, printed as it goes: the script talks, then waits.

    Use it as ``async with LiveSession(runner, out) as live:``; leaving the
    block closes the input (the run answers what it was sent, then ends) and
    waits for the run.

    Args:
        runner: the runner of the agent.
        out: where the conversation is printed, one line per stored event.
        patience: seconds :meth:`answered` and :meth:`stop` wait for what they
            wait for (a real model may not call the tool at all).
    """

    def __init__(self, runner: Runner, out: TextIO, patience: float = 30.0) -> None:
        self.runner = runner
        self.patience = patience
        self.out = out
        self.queue = LiveRequestQueue()
        self.events: list[Event] = []
        self.errors = 0
        self._changed = asyncio.Event()
        self._start = time.monotonic()
        self._tasks = TaskSet("live session")
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> LiveSession:
        # Awaited by __aexit__, which raises its failure.
        self._task = self._tasks.spawn(self._consume(), name="live session", expected=Exception)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.queue.close()
        assert self._task is not None
        if exc[0] is not None:
            self._task.cancel()
        try:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        finally:
            await self._tasks.aclose()

    async def _consume(self) -> None:
        async with self.runner.run_live(user_id=USER, session_id="live",
                                        live_request_queue=self.queue) as stream:
            async for event in stream:
                stamp = f"[t={time.monotonic() - self._start:6.2f}s]"
                for line in live_lines(event, stamp):
                    self.out.write(line + "\n")
                self.out.flush()
                self.errors += event.error_code is not None and not event.partial
                self.events.append(event)
                self._changed.set()

    def say(self, text: str) -> None:
        """Send a user turn."""
        self.queue.send_content(Content.from_text(text))

    async def answered(self, name: str) -> bool:
        """Wait until a call of ``name`` made from now on has a stored result.

        Call it right after the message that asks for the call; ``False``
        (and a note printed) after ``patience`` seconds or when the run ended.
        """
        return await self._after(len(self.events), _result_of(name)) is not None

    async def stop(self, text: str) -> bool:
        """Say ``text`` (asking to stop a stream); wait for the stop's result and the reply."""
        start = len(self.events)
        self.say(text)
        stopped = await self._after(start, _result_of("stop_streaming"))
        if stopped is None:
            return False
        return await self._after(stopped + 1, _reply) is not None

    async def _after(self, start: int, wanted: Callable[[Event], bool]) -> int | None:
        """The index of the first stored event from ``start`` on that is ``wanted``."""
        try:
            async with asyncio.timeout(self.patience):
                while True:
                    for index in range(start, len(self.events)):
                        if wanted(self.events[index]):
                            return index
                    start = len(self.events)
                    if self._task is not None and self._task.done():
                        return None
                    self._changed.clear()
                    await self._changed.wait()
        except TimeoutError:
            self.out.write(f"(nothing came within {self.patience:g} s)\n")
            return None


def _result_of(name: str) -> Callable[[Event], bool]:
    return lambda event: not event.partial and any(
        r.name == name for r in event.function_responses)


def _reply(event: Event) -> bool:
    return (not event.partial and event.author != "user" and event.branch is None
            and bool(event.text))
