"""Baseline: the session tables of headwater 0.1.0 (before the lease recorded its holder).

Revision ID: 0001
Revises:
Create Date: 2026-12-01

A database made by 0.1.0 has these tables and no version table: it is
stamped here, not created again. Frozen: later changes are later revisions.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | None = None
depends_on: str | None = None


def _session_fk() -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        ["app_name", "user_id", "session_id"],
        ["hw_sessions.app_name", "hw_sessions.user_id", "hw_sessions.id"], ondelete="CASCADE")


def upgrade() -> None:
    op.create_table(
        "hw_sessions",
        sa.Column("app_name", sa.String(), nullable=False),
        sa.Column("user_id", sa.String(), nullable=False),
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("create_time", sa.Double(), nullable=False),
        sa.Column("update_time", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("app_name", "user_id", "id"),
    )
    op.create_table(
        "hw_events",
        # SQLite: INTEGER PRIMARY KEY AUTOINCREMENT is the rowid, never reused.
        sa.Column("seq", sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
                  autoincrement=True, nullable=False),
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("app_name", sa.String(), nullable=False),
        sa.Column("user_id", sa.String(), nullable=False),
        sa.Column("session_id", sa.String(), nullable=False),
        sa.Column("invocation_id", sa.String(), nullable=False),
        sa.Column("author", sa.String(), nullable=False),
        sa.Column("timestamp", sa.Double(), nullable=False),
        sa.Column("data", sa.Text(), nullable=False),
        _session_fk(),
        sa.PrimaryKeyConstraint("seq"),
        sa.UniqueConstraint("id"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_hw_events_session_seq", "hw_events",
                    ["app_name", "user_id", "session_id", "seq"], unique=False)
    op.create_table(
        "hw_call_results",
        sa.Column("app_name", sa.String(), nullable=False),
        sa.Column("user_id", sa.String(), nullable=False),
        sa.Column("session_id", sa.String(), nullable=False),
        sa.Column("call_id", sa.String(), nullable=False),
        sa.Column("event_id", sa.String(), nullable=False),
        _session_fk(),
        sa.PrimaryKeyConstraint("app_name", "user_id", "session_id", "call_id"),
    )
    op.create_table(
        "hw_leases",
        sa.Column("app_name", sa.String(), nullable=False),
        sa.Column("user_id", sa.String(), nullable=False),
        sa.Column("session_id", sa.String(), nullable=False),
        sa.Column("owner", sa.String(), nullable=False),
        sa.Column("run_id", sa.String(), nullable=False),
        sa.Column("expires_at", sa.Double(), nullable=False),
        sa.Column("took_over", sa.String(), nullable=True),
        _session_fk(),
        sa.PrimaryKeyConstraint("app_name", "user_id", "session_id"),
    )


def downgrade() -> None:
    op.drop_table("hw_leases")
    op.drop_table("hw_call_results")
    op.drop_index("ix_hw_events_session_seq", table_name="hw_events")
    op.drop_table("hw_events")
    op.drop_table("hw_sessions")
