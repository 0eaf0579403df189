"""The session store of a command: ``--db`` checked before anything uses it."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from ._common import DEMO_APP, DEMO_USER, CommandError

if TYPE_CHECKING:
    from ..sessions.sql import SqlSessionService

T = TypeVar("T")

PROBE_TIMEOUT = 10.0
"""Seconds a command waits for the session store to answer its first query."""

_SQLITE_HEADER = b"SQLite format 3\x00"


def database_url(db: str | None) -> str:
    """``--db``, else ``HEADWATER_DATABASE_URL``, else the embedded SQLite file."""
    from ..core.settings import get_settings

    return db or get_settings().database_url


def check_url(url: str) -> str:
    """Check ``url`` names a usable store; returns it shown without its password.

    Raises:
        CommandError: unparsable, an unsupported backend, or a SQLite path that
            cannot be created or written, or is not a database.
    """
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        raise CommandError(
            "--db is not a database URL; expected sqlite:///path.db or "
            "postgresql://user@host/db") from None
    shown = parsed.render_as_string(hide_password=True)
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        _check_sqlite_path(parsed.database)
    elif backend != "postgresql":
        raise CommandError(f"unsupported database {backend!r} in {shown}: use sqlite or "
                           "postgresql")
    return shown


def _check_sqlite_path(database: str | None) -> None:
    if not database or database == ":memory:" or "mode=memory" in database:
        raise CommandError("--db names no SQLite file (the store is a file several "
                           "connections share); give a path, e.g. sqlite:///sessions.db")
    if database.startswith("file:"):
        return
    path = Path(database)
    if path.is_dir():
        raise CommandError(f"{path} is a directory, not a database file")
    if path.exists():
        with path.open("rb") as file:
            header = file.read(len(_SQLITE_HEADER))
        if header and header != _SQLITE_HEADER:
            raise CommandError(f"{path} is not a SQLite database")
        if not os.access(path, os.W_OK):
            raise CommandError(f"cannot write to {path}")
        return
    parent = path.parent
    blocking = next((p for p in (parent, *parent.parents) if p.exists()), None)
    if blocking is not None and not blocking.is_dir():
        raise CommandError(f"cannot create {path}: {blocking} is not a directory")
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CommandError(f"cannot create {parent}: {exc.strerror or exc}") from None
    if not os.access(parent, os.W_OK):
        raise CommandError(f"cannot write to {parent}")


def open_store(db: str | None) -> tuple[SqlSessionService, str]:
    """The checked store of ``--db`` (not yet connected) and its URL without password.

    Raises:
        CommandError: as :func:`check_url`.
        ImportError: a PostgreSQL URL without asyncpg (the message names the extra).
        pydantic.ValidationError: a bad ``HEADWATER_*`` setting.
    """
    from ..sessions.sql import SqlSessionService

    url = database_url(db)
    shown = check_url(url)
    return SqlSessionService(url), shown


async def probe(service: SqlSessionService, shown: str) -> None:
    """One query, so an unreachable store fails here in words, not later in a traceback.

    Raises:
        CommandError: the store did not answer, or failed.
    """
    await answered(service.list_sessions(app_name=DEMO_APP, user_id=DEMO_USER), shown)


async def answered(pending: Awaitable[T], shown: str,
                   within: float | None = PROBE_TIMEOUT) -> T:
    """What ``pending`` (a call to the store ``shown``) returns, within ``within`` seconds
    (``None``: as long as it takes).

    Raises:
        CommandError: the store did not answer in time, or failed in a way
            ``describe`` puts in words.
    """
    from ._errors import describe

    try:
        return await asyncio.wait_for(pending, within)
    except TimeoutError:
        raise CommandError(f"the session store {shown} did not answer within "
                           f"{within:g} s") from None
    except Exception as exc:
        line = describe(exc)
        if line is None:
            raise
        raise CommandError(f"cannot use the session store {shown}: {line}") from None
