"""What every ``headwater`` command shares: the demo's app and user, the bad-input error."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

DEMO_APP = "support"
"""The app of the demo's support agent: the gateway names an agent's sessions' app after
the agent."""

DEMO_APPS = ("support", "docs", "deploy", "market", "people")
"""The apps of the demo's agents, in their order: what ``headwater sessions`` reads
without ``--app``."""

DEMO_USER = "local"
"""The gateway's one user in dev mode (``headwater sessions --user``'s default)."""


class CommandError(Exception):
    """Bad input a command reports in one line (exit code 2)."""


def use_cors_origins(origins: Sequence[str] | None) -> None:
    """``--cors-origin``: the served gateway lists these origins (``HEADWATER_CORS_ORIGINS``,
    which ``--reload`` workers inherit; an app built with ``cors_origins=`` keeps its own).

    Raises:
        UserError: an entry that is not ``scheme://host[:port]``.
    """
    if not origins:
        return
    from ..gateway.origins import allowed_origins
    from ..settings import reload_settings

    allowed_origins(origins)  # a bad origin fails here, in words
    os.environ["HEADWATER_CORS_ORIGINS"] = json.dumps(list(origins))
    reload_settings()
