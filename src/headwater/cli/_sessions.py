"""``headwater sessions [list|show ID|delete ID]``: the session store from the terminal."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any, TextIO

from ..core.events import Event
from ._common import DEMO_APPS, CommandError
from ._store import open_store, probe


def sessions_command(args: Any) -> int:  # argparse.Namespace
    """List, show or delete sessions of ``--app`` (default: the demo's agents) and
    ``--user``; returns the exit code."""
    if args.action != "list" and not args.session_id:
        raise CommandError(f"sessions {args.action} needs a session ID "
                           "(see `headwater sessions list`)")
    return asyncio.run(_sessions(args, sys.stdout))


async def _sessions(args: Any, out: TextIO) -> int:
    service, shown = open_store(args.db)
    apps: list[str] = list(dict.fromkeys(args.app or DEMO_APPS))
    try:
        await probe(service, shown)
        if args.action == "list":
            found = [(app, session) for app in apps
                     for session in await service.list_sessions(app_name=app,
                                                                 user_id=args.user)]
            write_table(sorted(found, key=lambda pair: pair[1].last_update_time), out)
            return 0
        for app in apps:
            session = await service.get_session(app_name=app, user_id=args.user,
                                                session_id=args.session_id)
            if session is not None:
                break
        else:
            raise CommandError(f"no session {args.session_id} for app "
                               f"{' or '.join(map(repr, apps))}, user {args.user!r}")
        if args.action == "show":
            out.write(f"session {session.id} of {app} ({len(session.events)} events)\n")
            for event in session.events:
                out.write(f"{_when(event.timestamp)}  {summary(event)}\n")
            return 0
        await service.delete_session(app_name=app, user_id=args.user, session_id=session.id)
        out.write(f"deleted session {session.id}\n")
        return 0
    finally:
        await service.close()


def write_table(sessions: list[tuple[str, Any]], out: TextIO) -> None:
    """One line per ``(app, session)``: id, app, creation and last update (local time)."""
    if not sessions:
        out.write("no sessions\n")
        return
    width = max(len("APP"), *(len(app) for app, _ in sessions))
    out.write(f"{'ID':<34}  {'APP':<{width}}  {'CREATED':<19}  {'UPDATED':<19}\n")
    for app, session in sessions:
        out.write(f"{session.id:<34}  {app:<{width}}  {_when(session.create_time):<19}  "
                  f"{_when(session.last_update_time):<19}\n")


def _when(timestamp: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(timestamp)) if timestamp else "-"


def summary(event: Event) -> str:
    """One line about a stored event: who, and what (text, calls, results, errors)."""
    parts: list[str] = []
    if event.error_code:
        parts.append(f"error {event.error_code}")
    parts += [f"calls {call.name}({_short(json.dumps(call.args))})"
              for call in event.function_calls]
    parts += [f"result of {response.name}: "
              f"{'error' if 'error' in response.response else 'ok'}"
              for response in event.function_responses]
    if event.text:
        parts.append(_short(event.text.replace("\n", " "), 100))
    return f"{event.author}: " + ("; ".join(parts) or "(no content)")


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
