"""``headwater chat``: an interactive terminal chat with a gateway's agents.

With ``--url`` it talks to a running gateway over HTTP; without, it serves the
app ``headwater demo`` serves (the example agents, SQLite under .headwater/,
the offline demo model or ``--model``) on a free loopback port in a background
thread and talks to that: one code path, the frame protocol, either way.

It drives runs as the page does (docs/frame-protocol.md, "The page"): a message
is ``POST /sessions/{sid}/runs``; an ``approval_required`` frame is asked as a
y/n question after the run pauses (its stream ends with ``done``) and answered
with a run whose body holds ``approvals``; Ctrl-C during a run is the page's
Stop, ``POST /runs/{id}/cancel`` (a second Ctrl-C closes the stream, which
stops the run too). Ctrl-C or Ctrl-D at the prompt, or ``/quit``, ends the chat.

A message the gateway refuses (too long, say) is told in the server's words with
its code; the session made for it, when it was the session's first, is deleted
again. Chat runs no live session: with an agent whose tools are live streams (the
page's ``live``), or when a run hands the conversation to one, it says where a
live session is opened (the page's Go live, ``WS /live/{session}``).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import signal
import sys
from collections.abc import Coroutine
from typing import Any
from urllib.parse import urlsplit

from rich.console import Console
from rich.markup import escape

from ..core.tasks import TaskSet
from ._chat_view import Approval, RunView, error_words
from ._common import CommandError
from ._drafts import nesting
from ._gateway_client import GatewayClient, GatewayError
from ._inspect import timeline_lines

STOP_TIMEOUT = 10.0
"""Seconds a stopped run has to end with its ``cancelled`` frame before the chat closes
the stream."""

HELP = """\
commands:
  /new           start a new session with the same agent
  /agent NAME    start a new session with agent NAME
  /agents        list the agents the gateway serves
  /session       show the session's id
  /inspect [ID]  the last run's timeline (or run ID's): one line per span
  /help          this text
  /quit          leave (Ctrl-D or Ctrl-C at the prompt too)
Ctrl-C during an answer stops it."""


def chat_command(args: Any) -> int:  # argparse.Namespace
    """Chat until the user leaves; returns the exit code (0)."""
    if args.url is not None:
        for option in ("model", "db"):
            if getattr(args, option) is not None:
                raise CommandError(f"--{option} configures the embedded server; a gateway at "
                                   "--url runs its own agents and store")
        return _chat(args, _checked_url(args.url), server=None)
    from ..gateway.background import BackgroundServer
    from ._demo import demo_app
    from ._models import describe_model, resolve_model
    from ._store import database_url, open_store, probe

    model = resolve_model(args.model)
    service, shown = open_store(args.db)
    asyncio.run(_probe_and_close(service, shown, probe))
    server = BackgroundServer(demo_app(database_url(args.db), model))
    url = server.start()
    try:
        return _chat(args, url, server=f"model {describe_model(model)}; sessions in {shown}")
    finally:
        server.stop()


async def _probe_and_close(service: Any, shown: str, probe: Any) -> None:
    try:
        await probe(service, shown)
    finally:
        await service.close()


def _checked_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise CommandError(f"--url must be an http:// or https:// URL, got {url!r}")
    return url


def _chat(args: Any, url: str, server: str | None) -> int:
    console = Console(highlight=False)
    loop = asyncio.new_event_loop()
    client = GatewayClient(url, args.token)
    try:
        chat = Chat(console, client, loop)
        loop.run_until_complete(chat.open(args.agent, args.session, embedded=server))
        return chat.repl()
    finally:
        try:
            loop.run_until_complete(client.aclose())
            # Close what is left the way asyncio.run does: an HTTP stream read up to its
            # terminal frame leaves async generators to finalize (else "Task was destroyed").
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()


class Chat:
    """One terminal chat: the prompt, the slash commands and the runs they start."""

    def __init__(self, console: Console, client: GatewayClient,
                 loop: asyncio.AbstractEventLoop) -> None:
        self.console = console
        self.client = client
        self.loop = loop
        self.agent: str | None = None
        self.agents: list[dict[str, Any]] = []  # [{name, model}] from the page's config
        self.session_id: str | None = None
        self.embedded = False  # the chat's own server (gone when it ends), not a gateway
        self._run_id: str | None = None
        self._last_run: str | None = None  # the last run this chat started (/inspect)
        self._pending: list[Approval] = []  # a resumed session's approvals still unanswered

    # -- opening ---------------------------------------------------------------------------

    async def open(self, agent: str | None, session_id: str | None, embedded: str | None
                   ) -> None:
        """Check the gateway, the agent and the session; print where the chat is.

        Raises:
            CommandError: the gateway cannot be reached or refuses the token, the
                agent is not served, or the session is missing.
        """
        try:
            config = await self.client.page_config()
            self.agents = [a for a in config.get("agents", []) if isinstance(a, dict)]
            names = [str(a.get("name")) for a in self.agents]
            if agent is not None and names and agent not in names:
                raise CommandError(f"no agent named {agent!r}; this gateway serves "
                                   + ", ".join(names))
            await self.client.check()  # reachable, and the token is taken
            history: list[dict[str, Any]] = []
            if session_id is not None:
                session = await self.client.get_session(session_id)
                if agent is not None and agent != session["agent"]:
                    raise CommandError(f"session {session_id} is agent "
                                       f"{session['agent']!r}'s, not {agent!r}'s")
                self.session_id, agent = session_id, str(session["agent"])
                history = await self.client.history(session_id)
        except GatewayError as exc:
            raise CommandError(_gateway_line(exc, self.client.base_url)) from None
        self.agent = agent or (names[0] if names else None)
        self.embedded = embedded is not None
        where = "embedded server" if embedded else "gateway"
        self.console.print(f"[bold]headwater chat[/] · {where} {escape(self.client.base_url)}")
        if embedded:
            self.console.print(f"  {escape(embedded)}")
        self.console.print(f"  agent [bold]{escape(self.agent or '?')}[/]{self._model_note()}"
                           + (f" · agents: {escape(', '.join(names))}" if len(names) > 1 else ""))
        self.console.print("  Ctrl-C stops an answer; Ctrl-D or /quit leaves; /help for more.")
        self._live_note(self.agent)
        if self.session_id:
            self._show_history(history)
            self._pending = _pending_approvals(history)  # asked first, by repl()

    def _live_note(self, agent: str | None) -> None:
        """Where ``agent`` can run, when its tools are live streams (chat opens no live
        session)."""
        if not any(a.get("name") == agent and a.get("live") for a in self.agents):
            return
        where = ("headwater demo serves a page that opens one (Go live)" if self.embedded
                 else f"the page at {self.client.base_url} opens one (Go live), and so does a "
                 f"WebSocket client of {self._live_url()}")
        self.console.print(f"[yellow]note:[/] {escape(str(agent))}'s tools are live streams: "
                           "they run only in a live session, which headwater chat does not "
                           f"open; {escape(where)}.")

    def _live_url(self) -> str:
        """``WS /live/{session}`` on the gateway (the session's id once there is one)."""
        base = self.client.base_url
        scheme = "wss" if base.startswith("https:") else "ws"
        return f"{scheme}:{base.split(':', 1)[1]}live/{self.session_id or '<session id>'}"

    def _model_note(self) -> str:
        model = next((a.get("model") for a in self.agents if a.get("name") == self.agent), None)
        return f" · model {escape(str(model))}" if model else ""

    def _show_history(self, items: list[dict[str, Any]]) -> None:
        shown = [i for i in items if i.get("text")][-10:]
        self.console.print(f"[dim]session {escape(str(self.session_id))}: {len(items)} events"
                           + (", the last messages:" if shown else "") + "[/]")
        for item in shown:
            indent = nesting(item.get("branch"))  # an agent used as a tool: under its call
            author = str(item.get("author"))
            if item.get("role") == "user":
                author = "request" if indent else "you"
            self.console.print(f"[dim]  {indent}{escape(author)}: "
                               f"{escape(str(item['text']))}[/]")

    # -- the prompt --------------------------------------------------------------------------

    def repl(self) -> int:
        """Ask a resumed session's pending approvals, then read messages and commands until
        the user leaves; returns 0."""
        pending, self._pending = self._pending, []
        if pending:  # outside open(): answering runs the loop open() is run on
            self._turn(None, pending)
        while True:
            try:
                line = self._input("[bold green]you>[/] ").strip()
            except (EOFError, KeyboardInterrupt):
                self.console.print()
                break
            if not line:
                continue
            if line.startswith("/"):
                if not self._command(line):
                    break
                continue
            self._turn({"message": line})
        if self.session_id:
            self.console.print(f"[dim]session {escape(self.session_id)} · resume with "
                               f"headwater chat --session {escape(self.session_id)}[/]")
        return 0

    def _input(self, markup: str) -> str:
        """A line from the user after a styled prompt.

        The prompt goes to ``input()`` (not printed before it, as ``Console.input``
        does), so readline draws it once the terminal is ready for editing: a key
        pressed as soon as the prompt shows is never lost.

        Raises:
            EOFError: Ctrl-D.
            KeyboardInterrupt: Ctrl-C.
        """
        with self.console.capture() as captured:
            self.console.print(markup, end="")
        prompt = captured.get()
        # readline counts the prompt's width without its escapes, marked \x01…\x02
        if sys.stdin.isatty() and sys.stdout.isatty() and _line_editing():
            prompt = _ESCAPE.sub("\x01\\g<0>\x02", prompt)
        return input(prompt)

    def _command(self, line: str) -> bool:
        """Do a slash command; ``False`` to leave."""
        name, _, rest = line.partition(" ")
        rest = rest.strip()
        if name in ("/quit", "/exit", "/q"):
            return False
        if name == "/help":
            self.console.print(escape(HELP))
        elif name == "/new":
            self.session_id = None
            self.console.print(f"[dim]a new session with {escape(self.agent or '?')} "
                               "starts with your next message[/]")
        elif name == "/agent" and rest:
            names = [str(a.get("name")) for a in self.agents]
            if names and rest not in names:
                self.console.print(f"[red]no agent named {escape(rest)!r}[/]; "
                                   f"agents: {escape(', '.join(names))}")
            else:
                self.agent, self.session_id = rest, None
                self.console.print(f"[dim]agent {escape(rest)}{self._model_note()}: a new "
                                   "session starts with your next message[/]")
                self._live_note(rest)
        elif name == "/agents":
            for agent in self.agents:
                mark = "*" if agent.get("name") == self.agent else " "
                self.console.print(f"{mark} {escape(str(agent.get('name')))} · model "
                                   f"{escape(str(agent.get('model')))}")
        elif name == "/session":
            self.console.print(self.session_id or "no session yet")
        elif name == "/inspect":
            self._inspect(rest or None)
        else:
            self.console.print(f"[red]unknown command {escape(line)!r}[/] (/help lists them)")
        return True

    def _inspect(self, run_id: str | None) -> None:
        """Print a run's timeline: ``run_id``'s, else the last run of this chat or session."""
        async def lines() -> list[str]:
            wanted = run_id or self._last_run
            if wanted is None and self.session_id is not None:
                runs = [i.get("invocation_id") for i in await self.client.history(
                    self.session_id)]
                wanted = next((str(r) for r in reversed(runs) if r), None)
            if wanted is None:
                return ["no run yet: /inspect shows the last run's timeline"]
            return [f"run {wanted}", *timeline_lines(await self.client.trace(wanted))]

        try:
            for line in self.loop.run_until_complete(lines()):
                self.console.print(escape(line), highlight=False)
        except GatewayError as exc:
            self.console.print(f"[red]{escape(_gateway_line(exc))}[/]")

    # -- runs ----------------------------------------------------------------------------------

    def _turn(self, body: dict[str, Any] | None, pending: list[Approval] | None = None) -> None:
        """Run ``body``, then ask each approval the run paused for and run the answers."""
        denied: set[str] = set()
        while True:
            if body is not None:
                view = RunView(self.console, denied)
                ran = self._interruptible(self._run(body, view), view)
                for agent in dict.fromkeys(view.transfers):  # each live agent it reached
                    self._live_note(agent)
                if not ran:
                    return
                if view.error is not None or not view.approvals:
                    return
                pending = view.approvals
            if not pending:
                return
            answers = [{"call_id": a.call_id, "approved": self._ask(a),
                        "args_sha256": a.args_sha256} for a in pending]
            denied = {str(a["call_id"]) for a in answers if not a["approved"]}
            body = {"approvals": answers}
            pending = None

    def _ask(self, approval: Approval) -> bool:
        question = f"[magenta]Approve {escape(approval.display)}? \\[y/n][/] "
        while True:
            try:
                answer = self._input(question).strip().lower()
            except (EOFError, KeyboardInterrupt):
                self.console.print("\n[dim]denied[/]")
                return False
            if answer in ("y", "yes"):
                return True
            if answer in ("n", "no"):
                return False

    async def _run(self, body: dict[str, Any], view: RunView) -> None:
        created: dict[str, Any] | None = None
        if self.session_id is None:
            created = await self.client.create_session(self.agent)
            self.session_id = str(created["id"])
        started = False
        try:
            async with self.client.run(self.session_id, body) as run:
                started = True
                if created is not None:
                    self.console.print(f"[dim]new session {escape(self.session_id)} "
                                       f"(agent {escape(str(created['agent']))})[/]")
                self._run_id = self._last_run = run.run_id
                async for frame in run.frames():
                    view.show(frame)
        except GatewayError as exc:
            # A run refused with an answer stored nothing: its new session goes again.
            if not started and created is not None and exc.code != "network":
                await self._unstore(str(created["id"]))
            raise

    async def _unstore(self, session_id: str) -> None:
        """Delete the session made for a first message the gateway refused (none is left
        empty); kept when even that fails."""
        with contextlib.suppress(GatewayError):
            await self.client.delete_session(session_id)
            self.session_id = None

    def _interruptible(self, run: Coroutine[Any, Any, None], view: RunView) -> bool:
        """Run ``run`` with Ctrl-C as Stop; ``False`` when it broke off or failed."""
        self._run_id = None
        try:
            self.loop.run_until_complete(self._stoppable(run, view))
        except asyncio.CancelledError:
            view.close()
            self.console.print("[yellow]stopped[/] [dim](the stream was closed)[/]")
            return False
        except GatewayError as exc:
            view.close()
            self.console.print(f"[bold red]error:[/] {escape(_gateway_line(exc))}")
            return False
        finally:
            self._run_id = None
        view.close()
        if not view.ended:
            self.console.print(f"[bold red]error:[/] {escape(error_words('network'))} (network)")
            return False
        return True

    async def _stoppable(self, run: Coroutine[Any, Any, None], view: RunView) -> None:
        """``run`` in a task; the first Ctrl-C asks the gateway to stop the run (:meth:`_stop`),
        the next closes the stream. Raises what ``run`` raises (``CancelledError`` once closed).
        """
        async with TaskSet("chat") as tasks:
            # Awaited below: its failure is this call's.
            task = tasks.spawn(run, name="chat run", expected=Exception)
            presses = 0

            def interrupted() -> None:
                nonlocal presses
                presses += 1
                if presses == 1 and self._run_id:
                    tasks.spawn(self._stop(self._run_id, task, view), name="chat stop")
                else:
                    task.cancel()

            with contextlib.suppress(NotImplementedError):  # no signal handlers on Windows loops
                self.loop.add_signal_handler(signal.SIGINT, interrupted)
            try:
                await task
            finally:
                with contextlib.suppress(NotImplementedError):
                    self.loop.remove_signal_handler(signal.SIGINT)

    async def _stop(self, run_id: str, task: asyncio.Task[None], view: RunView) -> None:
        """The page's Stop: cancel the run and let its stream end with ``cancelled``."""
        view.note("[yellow]stopping…[/] [dim](Ctrl-C again to close at once)[/]")
        try:
            await self.client.cancel(run_id)
        except GatewayError:
            task.cancel()  # the server cannot be told: closing the stream stops the run
            return
        deadline = self.loop.call_later(STOP_TIMEOUT, task.cancel)
        task.add_done_callback(lambda _: deadline.cancel())


_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")


def _line_editing() -> bool:
    """Load readline (line editing and history for ``input()``) where there is one."""
    try:
        import readline  # noqa: F401
    except ImportError:
        return False
    return True


def _pending_approvals(items: list[dict[str, Any]]) -> list[Approval]:
    """The calls of a session's history still waiting for an answer."""
    pending: dict[str, Approval] = {}
    for item in items:
        for asked in item.get("approvals_requested", []):
            pending[asked["call_id"]] = Approval.of(asked)
        for decided in item.get("approval_decisions", []):
            pending.pop(decided["call_id"], None)
        for result in item.get("results", []):
            pending.pop(result.get("id", ""), None)
    return list(pending.values())


def _gateway_line(exc: GatewayError, url: str | None = None) -> str:
    if exc.code == "network":
        return exc.message
    words = error_words(exc.code)
    detail = f": {exc.message}" if exc.message and exc.message != words else ""
    where = f" ({url})" if url else ""
    return f"{words} ({exc.code}){detail}{where}"

