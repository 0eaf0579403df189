"""``headwater db upgrade|current [--db URL]``: the session database's schema revision."""

from __future__ import annotations

import asyncio
import sys
from typing import TYPE_CHECKING, Any, TextIO

from ._store import answered, open_store

if TYPE_CHECKING:
    from ..sessions.migrations import SchemaRevision



def db_command(args: Any) -> int:  # argparse.Namespace
    """``upgrade``: bring the store of ``--db`` to the schema's head (idempotent) and say
    which revision it reached; ``current``: say where it stands. Returns the exit code."""
    return asyncio.run(_db(args.action, args.db, sys.stdout))


async def _db(action: str, db: str | None, out: TextIO) -> int:
    service, shown = open_store(db)
    try:
        # The first query answers within the probe's time, so an unreachable store fails
        # in words; the upgrade itself takes the time it needs.
        found = await answered(service.schema_revision(), shown)
        if action == "current":
            out.write(f"{shown}: {describe_revision(found)}\n")
            return 0
        before = await service.upgrade_schema()
        if before.at_head:
            out.write(f"{shown}: at revision {before.head} (head), nothing to upgrade\n")
        else:
            out.write(f"{shown}: upgraded from {_start(before)} to revision {before.head} "
                      "(head)\n")
        return 0
    finally:
        await service.close()


def describe_revision(found: SchemaRevision) -> str:
    """Where a database stands, in words, with what ``headwater db upgrade`` would do."""
    if found.at_head:
        return f"revision {found.head} (head)"
    if found.current is not None:
        return f"revision {found.current}; head is {found.head} (run `headwater db upgrade`)"
    if found.unversioned is not None:
        return (f"no version table, tables of revision {found.unversioned} (made before "
                f"migrations); head is {found.head} (`headwater db upgrade` stamps and "
                "upgrades it)")
    return f"no session tables; head is {found.head} (`headwater db upgrade` creates them)"


def _start(before: SchemaRevision) -> str:
    if before.current is not None:
        return f"revision {before.current}"
    if before.unversioned is not None:
        return f"unversioned tables of revision {before.unversioned}"
    return "an empty database"
