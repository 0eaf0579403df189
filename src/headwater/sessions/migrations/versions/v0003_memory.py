"""The memory of past sessions (``SqlMemoryService``): table ``hw_memory``.

Revision ID: 0003
Revises: 0002
Create Date: 2027-01-15
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "hw_memory",
        sa.Column("seq", sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
                  autoincrement=True, nullable=False),
        sa.Column("app_name", sa.String(), nullable=False),
        sa.Column("user_id", sa.String(), nullable=False),
        sa.Column("session_id", sa.String(), nullable=False),
        sa.Column("event_id", sa.String(), nullable=False),
        sa.Column("words", sa.Text(), nullable=False),
        sa.Column("data", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("seq"),
        sqlite_autoincrement=True,
    )
    with op.batch_alter_table("hw_memory", schema=None) as batch_op:
        batch_op.create_index("ix_hw_memory_session", ["app_name", "user_id", "session_id"],
                              unique=False)


def downgrade() -> None:
    with op.batch_alter_table("hw_memory", schema=None) as batch_op:
        batch_op.drop_index("ix_hw_memory_session")
    op.drop_table("hw_memory")
