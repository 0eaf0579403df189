"""One schema for both SQL stores: what ``headwater.sessions.schema.metadata`` says.

The SQLite file a store creates (through the migrations) has exactly the
schema SQLAlchemy creates from the MetaData itself, beside the version table;
tests/sessions/test_migrations.py checks both engines with Alembic's
comparison, and that databases of the previous release are upgraded.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine
from sqlalchemy.pool import NullPool

from headwater.sessions import SqlSessionService, migrations, schema

HOLDER_COLUMNS = ("holder_host", "holder_pid", "holder_start")

TABLES = ("hw_sessions", "hw_events", "hw_call_results", "hw_leases")


def sqlite_schema(path: Path) -> dict[str, Any]:
    """Everything SQLite says about the file's tables: columns, keys, indexes, objects."""
    raw = sqlite3.connect(path)
    try:
        found: dict[str, Any] = {"objects": sorted(raw.execute(
            "SELECT type, name, tbl_name FROM sqlite_master WHERE tbl_name != ?",
            (migrations.VERSION_TABLE,)).fetchall())}
        for table in TABLES:
            found[table] = {
                "columns": raw.execute(f"PRAGMA table_xinfo({table})").fetchall(),
                "foreign_keys": raw.execute(f"PRAGMA foreign_key_list({table})").fetchall(),
                "indexes": sorted(
                    (name, unique, origin, partial,
                     raw.execute(f"PRAGMA index_xinfo({name})").fetchall())
                    for _, name, unique, origin, partial in raw.execute(
                        f"PRAGMA index_list({table})")),
                "autoincrement": "AUTOINCREMENT" in raw.execute(
                    "SELECT sql FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0],
            }
        return found
    finally:
        raw.close()


def metadata_schema(tmp_path: Path) -> dict[str, Any]:
    """The same, for a file SQLAlchemy creates from the MetaData itself."""
    path = tmp_path / "from_metadata.db"
    engine = create_engine(f"sqlite:///{path}", poolclass=NullPool)
    try:
        schema.metadata.create_all(engine)
    finally:
        engine.dispose()
    return sqlite_schema(path)


async def test_the_sqlite_file_has_the_schema_of_the_metadata(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    service = SqlSessionService(f"sqlite:///{path}")
    try:
        await service.create_session(app_name="app", user_id="u", session_id="s")
    finally:
        await service.close()
    created = sqlite_schema(path)
    assert created == metadata_schema(tmp_path)
    assert [c[1] for c in created["hw_leases"]["columns"]][-3:] == list(HOLDER_COLUMNS)
    assert created["hw_events"]["autoincrement"]  # seq is never reused
    raw = sqlite3.connect(path)
    try:
        assert raw.execute(f"SELECT version_num FROM {migrations.VERSION_TABLE}").fetchall() == [
            (migrations.head(),)]
    finally:
        raw.close()
