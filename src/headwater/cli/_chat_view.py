"""How ``headwater chat`` shows a run's frames in the terminal (with ``rich``).

The rule of the page's reducer holds here too, as ``headwater run`` writes it
(:mod:`._drafts`): ``delta`` text is written as it arrives, as its author's
draft (one draft per author and branch: when another agent's text or a tool
line comes between, the draft goes on in a new line labelled with its agent);
the ``message`` frame (the record) replaces the draft, so a message whose text
the deltas already showed is not written again. Because a terminal cannot take
back lines that have scrolled away, a record that differs from its draft (rare:
the contract makes them equal) is written below it, marked as the record. Every
message is labelled with its agent; an inner agent's activity (a frame whose
branch names a call, docs/frame-protocol.md) is indented under the call's line,
a level per call. Tool calls are lines (with the agent that made them), tool
progress is a bar per call, a transfer says where the conversation went (as the
page does: "<agent> handed the conversation to <agent>", and no result line for
the ``transfer_to_agent`` call it tells), approvals are collected for the chat to
ask, errors are words with their code, and ``done`` brings the run's token usage.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TaskID, TaskProgressColumn, TextColumn

from ..agents.transfer import TRANSFER_TO_AGENT
from ..core.errors import ERRORS
from ._drafts import Draft, Drafts, nesting
from ._gateway_client import WireFrame

NETWORK = "network"
"""The code ``headwater chat`` shows when the connection to the server is lost (the
client's own: no server sends it)."""

CLIENT_ERRORS: Final[Mapping[str, str]] = MappingProxyType({
    **{code: info.message for code, info in ERRORS.items()},
    NETWORK: "The connection to the server was lost.",
})
"""Words for every code a client meets: the registry's messages
(:data:`headwater.errors.ERRORS`), plus the client's own ``network``."""

_PERCENT = re.compile(r"(\d+(?:\.\d+)?)\s*%")
_RATIO = re.compile(r"(\d+)\s*/\s*(\d+)")


def error_words(code: str) -> str:
    """A sentence about an error code (the code is shown next to it)."""
    return CLIENT_ERRORS.get(code, "Something went wrong.")


def progress_of(delta: str) -> tuple[float, float] | None:
    """``(done, total)`` from a progress line such as ``"2/5 upload"`` or ``"40%"``;
    ``None`` when it holds no measure (the page's rule)."""
    if match := _PERCENT.search(delta):
        return min(float(match.group(1)), 100.0), 100.0
    if (match := _RATIO.search(delta)) and int(match.group(2)) > 0:
        return min(float(match.group(1)), float(match.group(2))), float(match.group(2))
    return None


def measure_of(data: dict[str, Any]) -> tuple[float, float | None] | None:  # frame JSON
    """``(done, total)`` of a ``tool_progress`` frame: its ``progress`` and ``total`` (``None``
    when the tool gave no total), else what its ``delta`` says (:func:`progress_of`)."""
    progress, total = _number(data.get("progress")), _number(data.get("total"))
    if progress is not None:
        return progress, total if total is not None and total > 0 else None
    return progress_of(str(data.get("delta") or ""))


def _number(value: Any) -> float | None:  # value: frame JSON
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


@dataclass(slots=True)
class Approval:
    """A call waiting for the user's yes or no."""

    call_id: str
    name: str
    args_sha256: str | None
    display: str  # what the approver is shown: the tool's summary, or the call's arguments

    @classmethod
    def of(cls, data: dict[str, Any]) -> Approval:  # JSON from the wire
        """The approval an ``approval_required`` frame (or a history item's
        ``approvals_requested`` entry) asks for."""
        name = str(data.get("name", ""))
        return cls(str(data.get("call_id", "")), name, data.get("args_sha256"),
                   str(data.get("display") or name))


class RunView:
    """Writes one run's frames to ``console``; one view per run.

    ``denied`` are the calls this run answers with a no: their ``error`` results
    show as denied, not failed. After the stream ends, :attr:`approvals` holds
    the calls to ask about, :attr:`error` the terminal error code (if any),
    :attr:`ended` whether a terminal frame came and :attr:`transfers` the agents the
    conversation was handed to, in order.
    """

    def __init__(self, console: Console, denied: Collection[str] = ()) -> None:
        self.console = console
        self.denied = frozenset(denied)  # call ids the user said no to: their results say so
        self.approvals: list[Approval] = []
        self.error: str | None = None
        self.ended = False
        self.transfers: list[str] = []
        self._drafts = Drafts()  # what each agent's deltas showed, whose line is open
        self._reasoning = False
        self._progress: Progress | None = None
        self._tasks: dict[str, TaskID] = {}

    # -- frames ----------------------------------------------------------------------------

    def show(self, frame: WireFrame) -> None:
        """Write one frame."""
        handler = getattr(self, f"_on_{frame.type}", None)
        if frame.type not in ("tool_progress", "tool_result"):
            self._stop_progress()
        if handler is not None:
            handler(frame.data)

    def _on_delta(self, data: dict[str, Any]) -> None:
        key, text = _draft(data), str(data.get("text", ""))
        if self._reasoning:
            self._end_line()
        if self._drafts.starts(key):
            self._end_draft()
            self.console.print(f"{_indent(data)}{_label(key[0])} ", end="")
        self._drafts.add(key, text)
        self._write(text)

    def _on_reasoning(self, data: dict[str, Any]) -> None:
        if not self._reasoning:
            self._end_draft()
            self.console.print(f"{_indent(data)}[dim](thinking)[/] ", end="")
            self._reasoning = True
        self._write(str(data.get("text", "")), style="dim italic")

    def _on_message(self, data: dict[str, Any]) -> None:
        key, text = _draft(data), str(data.get("text", ""))
        if self._reasoning:
            self._end_line()
        stopped = " [dim](stopped here)[/]" if data.get("interrupted") else ""
        indent = _indent(data)
        settled = self._drafts.settle(key, text)
        if settled == "ends":  # the deltas said it all, on the open line
            self.console.print(stopped)
            return
        if settled == "said":  # the deltas said it all, on a line since ended
            if stopped:
                self.console.print(f"{indent}{_label(key[0])}{stopped}")
            return
        self._end_draft()
        if settled == "record":  # the record differs from what was shown: show the record
            self.console.print(f"{indent}[dim]record:[/] {_label(key[0])} ", end="")
            self._write(text)
            self.console.print(stopped)
        elif text:
            self.console.print(f"{indent}{_label(key[0])} ", end="")
            self._write(text)
            self.console.print(stopped)

    def _on_tool_call(self, data: dict[str, Any]) -> None:
        self._end_draft()
        calls = data.get("calls") or [{"id": None, "name": n} for n in data.get("names", [])]
        by = f" [dim]· {escape(str(data['author']))}[/]" if data.get("author") else ""
        for call in calls:
            args = call.get("args")
            shown = "" if args is None else f"({_short(args)})"
            self.console.print(f"{_indent(data)}[yellow]→ calls[/] "
                               f"[bold]{escape(str(call.get('name')))}[/]{escape(shown)}{by}")

    def _on_agent_transfer(self, data: dict[str, Any]) -> None:
        self._end_draft()
        to = str(data.get("to", ""))
        self.transfers.append(to)
        self.console.print(f"{_indent(data)}[yellow]⇢ {escape(str(data.get('author', '')))} "
                           f"handed the conversation to[/] [bold cyan]{escape(to)}[/]")

    def _on_agent_error(self, data: dict[str, Any]) -> None:
        self._end_draft()
        code = str(data.get("code", "internal"))
        self._drafts.drop(_draft(data))
        self.console.print(f"{_indent(data)}[red]✗ {escape(str(data.get('author', '')))} "
                           f"failed:[/] {escape(error_words(code))} ({escape(code)})")

    def _on_tool_progress(self, data: dict[str, Any]) -> None:
        self._end_draft()
        call_id, name = str(data.get("call_id", "")), str(data.get("name", "tool"))
        delta = str(data.get("message") or data.get("delta") or "")
        if self._progress is None:
            self._progress = Progress(TextColumn("  [bold]{task.fields[name]}[/]"), BarColumn(),
                                      TaskProgressColumn(), TextColumn("{task.fields[line]}"),
                                      console=self.console, transient=False)
            self._progress.start()
        measure = measure_of(data)
        task = self._tasks.get(call_id)
        if task is None:
            total = measure[1] if measure else None
            task = self._progress.add_task(name, total=total,
                                           name=_indent(data) + escape(name), line="")
            self._tasks[call_id] = task
        if measure is not None:
            self._progress.update(task, completed=measure[0], total=measure[1],
                                  line=escape(delta))
        else:
            self._progress.update(task, advance=1 if delta else 0, line=escape(delta))
        self._progress.refresh()

    def _on_tool_result(self, data: dict[str, Any]) -> None:
        self._end_draft()
        for result in data.get("results", []):
            call_id = str(result.get("id", ""))
            task = self._tasks.pop(call_id, None)
            if task is not None and self._progress is not None:
                total = self._progress.tasks[task].total
                if result.get("status") == "ok":
                    self._progress.update(task, completed=total or 1, total=total or 1)
                self._progress.refresh()
        if not self._tasks:
            self._stop_progress()
        indent = _indent(data)
        for result in data.get("results", []):
            name = escape(str(result.get("name", "tool")))
            if result.get("name") == TRANSFER_TO_AGENT and result.get("status") == "ok":
                continue  # the agent_transfer frame that follows says it
            if result.get("status") == "pending":  # a live stream: its values follow
                self.console.print(f"{indent}[green]✓ {name} started[/] "
                                   "[dim](its values follow)[/]")
            elif result.get("status") == "error" and result.get("id") in self.denied:
                self.console.print(f"{indent}[yellow]✗ {name} denied[/]"
                                   + _response(result.get("response")))
            elif result.get("status") == "error":
                self.console.print(f"{indent}[red]✗ {name} failed[/]"
                                   + _response(result.get("response")))
            else:
                self.console.print(f"{indent}[green]✓ {name} answered[/]"
                                   + _response(result.get("response")))

    def _on_approval_required(self, data: dict[str, Any]) -> None:
        self._end_draft()
        approval = Approval.of(data)
        self.approvals.append(approval)
        self.console.print(f"{_indent(data)}[magenta]? {escape(approval.name)} needs your "
                           f"approval: {escape(approval.display)}[/]")

    def _on_error(self, data: dict[str, Any]) -> None:
        self._end_draft()
        self._drafts.clear()
        code = str(data.get("code", "internal"))
        self.error, self.ended = code, True
        label = "[yellow]stopped:[/]" if code == "cancelled" else "[bold red]error:[/]"
        self.console.print(f"{label} {escape(error_words(code))} ({escape(code)})")

    def _on_done(self, data: dict[str, Any]) -> None:
        self._end_draft()
        self._drafts.clear()
        self.ended = True
        usage = data.get("usage") or {}
        self.console.print(f"[dim]tokens: {usage.get('input_tokens', 0)} in, "
                           f"{usage.get('output_tokens', 0)} out[/]")

    def _on_tool_emission(self, data: dict[str, Any]) -> None:
        self._end_draft()
        self.console.print(f"[dim]  {escape(str(data.get('text', '')))}[/]")

    # -- notes and the end of a run that broke off ------------------------------------------

    def note(self, markup: str) -> None:
        """A line about the run (``stopping…``) between its frames; a draft in progress
        goes on below it."""
        self._end_draft()
        self.console.print(markup)

    def close(self) -> None:
        """End what is open (a draft line, progress bars) after the stream stops."""
        self._stop_progress()
        self._end_draft()

    # -- helpers ---------------------------------------------------------------------------

    def _write(self, text: str, style: str | None = None) -> None:
        self.console.print(text, end="", markup=False, highlight=False, style=style,
                           soft_wrap=True)
        self.console.file.flush()

    def _end_line(self) -> None:
        self.console.print()
        self._reasoning = False

    def _end_draft(self) -> None:
        """End the open line (a draft goes on in a new line at its next delta)."""
        if self._reasoning:
            self._end_line()
        if self._drafts.end_line():
            self.console.print()

    def _stop_progress(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
            self._tasks.clear()


def _draft(data: dict[str, Any]) -> Draft:
    return str(data.get("author", "")), data.get("branch")


def _label(author: str) -> str:
    return f"[bold cyan]{escape(author)}>[/]"


def _indent(data: dict[str, Any]) -> str:
    return nesting(data.get("branch"))


def _short(value: Any, limit: int = 80) -> str:  # JSON from the wire
    text = json.dumps(value, ensure_ascii=False)
    if isinstance(value, dict):
        text = text[1:-1]
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _response(value: Any) -> str:  # JSON from the wire
    return "" if value is None else f" [dim]{escape(_short(value))}[/]"
