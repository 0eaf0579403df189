"""What every ``headwater`` command shares: the demo's app and user, the bad-input error."""

from __future__ import annotations

DEMO_APP = "demo"
"""The app name of the demo's sessions (``headwater sessions --app``'s default)."""

DEMO_USER = "demo-user"
"""The one local user of the demo (``headwater sessions --user``'s default)."""


class CommandError(Exception):
    """Bad input a command reports in one line (exit code 2)."""
