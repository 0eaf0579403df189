"""What every ``headwater`` command shares: the demo's app and user, the bad-input error,
the check that a port is free."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Sequence

DEMO_APP = "support"
"""The app of the demo's support agent: the gateway names an agent's sessions' app after
the agent."""

DEMO_APPS = ("coordinator", "market", "people", "support", "docs", "deploy", "indexer")
"""The apps of the demo's served agents (the coordinator, the live ones), then of the
examples run alone: what ``headwater sessions`` reads without ``--app``."""

DEMO_USER = "local"
"""The gateway's one user in dev mode (``headwater sessions --user``'s default)."""


class CommandError(Exception):
    """Bad input a command reports in one line (exit code 2)."""


def check_port(host: str, port: int) -> None:
    """Check ``host:port`` can be listened on, as the server will bind it.

    SO_REUSEADDR, as uvicorn binds: a port held only by connections of a server
    that just stopped (TIME_WAIT) is free to listen on; one another process
    listens on is not.

    Raises:
        CommandError: the host does not resolve, or an address of it cannot be bound.
    """
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                       flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise CommandError(f"cannot listen on {host}:{port} ({exc.strerror}); "
                           "pass another --host") from None
    for family, kind, proto, _, address in addresses:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:  # as asyncio binds: the IPv4 address is its own
                probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                probe.bind(address)
            except OSError as exc:
                raise CommandError(f"cannot listen on {host}:{port} ({exc.strerror}); "
                                   "pass another --port") from None


def use_cors_origins(origins: Sequence[str] | None) -> None:
    """``--cors-origin``: the served gateway lists these origins (``HEADWATER_CORS_ORIGINS``,
    which ``--reload`` workers inherit; an app built with ``cors_origins=`` keeps its own).

    Raises:
        UserError: an entry that is not ``scheme://host[:port]``.
    """
    if not origins:
        return
    from ..core.settings import reload_settings
    from ..gateway.http.origins import allowed_origins

    allowed_origins(origins)  # a bad origin fails here, in words
    os.environ["HEADWATER_CORS_ORIGINS"] = json.dumps(list(origins))
    reload_settings()
