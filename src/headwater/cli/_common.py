"""What every ``headwater`` command shares: the demo's app and user, the bad-input error."""

from __future__ import annotations

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
