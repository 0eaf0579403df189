"""Alembic's entry point for the session schema: see :func:`headwater.sessions.migrations.run_env`.

Loaded by Alembic (never imported by headwater): the stores hand it their
connection; the ``alembic`` command gives it a URL.
"""

from typing import cast

from alembic import context
from alembic.runtime.environment import EnvironmentContext

from headwater.sessions.migrations import run_env

run_env(cast(EnvironmentContext, context))  # the module proxies the running context
