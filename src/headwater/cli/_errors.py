"""Bad input in words: the one line ``headwater`` prints instead of a traceback."""

from __future__ import annotations

import sqlite3
from typing import Any


def describe(exc: BaseException) -> str | None:
    """One line saying what is wrong, or ``None`` for a bug (which keeps its traceback)."""
    from ..core.errors import HeadwaterError
    from ._common import CommandError

    if isinstance(exc, CommandError | HeadwaterError):
        return str(exc)
    if _is_validation_error(exc):
        return bad_settings(exc)
    if isinstance(exc, ImportError):
        return str(exc)  # a missing optional driver: the message names the extra
    if isinstance(exc, sqlite3.DatabaseError):
        return f"the session store failed: {exc}"
    if isinstance(exc, OSError):
        return f"{exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else "")
    module = type(exc).__module__
    if module.startswith("sqlalchemy"):
        return store_failure(exc)
    return None


def _is_validation_error(exc: BaseException) -> bool:
    return type(exc).__name__ == "ValidationError" and type(exc).__module__.startswith(
        ("pydantic", "pydantic_core"))


def bad_settings(exc: BaseException) -> str:
    """``HEADWATER_X: why (got 'value')`` for each bad setting of a ValidationError."""
    errors: list[dict[str, Any]] = getattr(exc, "errors", list)()  # pydantic error dicts
    parts = []
    for error in errors:
        name = "HEADWATER_" + "_".join(str(p) for p in error.get("loc", ())).upper()
        parts.append(f"{name}: {error.get('msg', 'invalid')} (got {error.get('input')!r})")
    return "bad setting " + "; ".join(parts) if parts else f"bad settings: {exc}"


def store_failure(exc: BaseException) -> str:
    """The first line of a database driver's complaint (never the URL, never a password)."""
    cause = getattr(exc, "orig", None) or exc.__cause__ or exc
    text = str(cause).strip().splitlines()
    return f"the session store failed: {text[0] if text else type(cause).__name__}"
